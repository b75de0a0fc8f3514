-- tasks_left counts a running delivery's unfinished tasks. The batch that
-- finishes a task decrements it in the batch's own transaction, and the one
-- that takes it to zero completes the delivery: a task finishes without a
-- transaction of its own and without reading its siblings' rows. Running
-- deliveries get their count from their tasks; apply this with every process
-- of older versions stopped (workers finish tasks and API servers restart
-- them on delete, without touching the count). The ALTER commits on its
-- own: if the UPDATE fails, drop the column before running this again.
-- +goose Up
ALTER TABLE deliveries ADD COLUMN tasks_left INT NOT NULL DEFAULT 0;

UPDATE deliveries SET tasks_left = (SELECT COUNT(*) FROM fanout_tasks t WHERE t.content_id = deliveries.content_id AND t.done = 0)
WHERE state = 1;

-- +goose Down
ALTER TABLE deliveries DROP COLUMN tasks_left;

-- Copies user_state into the inbox header rows, and marks pulls for every
-- user with a pull bit (a user loaded without a user_state row included).
-- Both statements are upserts, so a rerun after a failure is harmless.
-- +goose Up
INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, last_read_at, active_since, floor_time, floor_id)
SELECT user_id, 9223372036854775807, 18446744073709551615, 0, '', last_read_at, active_since, floor_time, floor_id
FROM user_state
ON DUPLICATE KEY UPDATE last_read_at = VALUES(last_read_at), active_since = VALUES(active_since),
    floor_time = VALUES(floor_time), floor_id = VALUES(floor_id);

INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, pulls)
SELECT DISTINCT user_id, 9223372036854775807, 18446744073709551615, 0, '', 1
FROM following WHERE pull > 0
ON DUPLICATE KEY UPDATE pulls = 1;

-- +goose Down
INSERT INTO user_state (user_id, last_read_at, active_since, floor_time, floor_id)
SELECT user_id, COALESCE(last_read_at, 0), COALESCE(active_since, 0), floor_time, floor_id
FROM inbox WHERE publish_time = 9223372036854775807 AND content_id = 18446744073709551615
ON DUPLICATE KEY UPDATE last_read_at = VALUES(last_read_at), active_since = VALUES(active_since),
    floor_time = VALUES(floor_time), floor_id = VALUES(floor_id);

DELETE FROM inbox WHERE publish_time = 9223372036854775807 AND content_id = 18446744073709551615;

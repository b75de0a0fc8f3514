-- Per-follow history: how far back a follow shows its author's posts
-- (PUT following ?copy_limit=), and the pairs whose unfollow kept the
-- author's posts in the inbox (DELETE following ?keep_history=true), which
-- a retraction must still reach.
--
-- MySQL 8.0 has no ADD COLUMN IF NOT EXISTS, so the ALTER runs only when
-- the column is missing (a prepared statement chosen from
-- information_schema): run again after a failure, the file completes the
-- schema. The ALTER is one statement, so its columns come together. The
-- bound joins idx_following_pull, which the page's pull authors and deep
-- scroll's followee list read alone: a NULL costs an entry a bit.
-- +goose NO TRANSACTION
-- +goose Up
SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'following' AND column_name = 'history_time') = 0,
  'ALTER TABLE following
    ADD COLUMN history_time BIGINT NULL COMMENT ''publish_time of the oldest key of the author the user may see: the follow was made with copy_limit N, and the author had more than N posts then; NULL: no bound (the whole history)'',
    ADD COLUMN history_id BIGINT UNSIGNED NULL COMMENT ''content_id of that key; NULL with history_time'',
    DROP INDEX idx_following_pull,
    ADD INDEX idx_following_pull (user_id, pull, muted, author_id, history_time, history_id)',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

CREATE TABLE IF NOT EXISTS kept_history (
    author_id BIGINT UNSIGNED NOT NULL COMMENT 'the author unfollowed',
    user_id   BIGINT UNSIGNED NOT NULL,
    kept_at   BIGINT          NOT NULL COMMENT 'Unix ms of the unfollow that kept the posts',
    PRIMARY KEY (author_id, user_id)
) ENGINE = InnoDB
  COMMENT 'user-keyed: pairs whose unfollow kept the author''s posts in the user''s inbox. Retractions join it as they join following, so a deleted post leaves those inboxes too; a purge of the author''s posts (a plain unfollow, a mute) deletes the row';

-- +goose Down
DROP TABLE IF EXISTS kept_history;
SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'following' AND column_name = 'history_time') = 1,
  'ALTER TABLE following DROP INDEX idx_following_pull, DROP COLUMN history_time, DROP COLUMN history_id,
    ADD INDEX idx_following_pull (user_id, pull, muted, author_id)',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

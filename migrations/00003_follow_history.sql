-- Per-follow history: how far back a follow shows its author's posts
-- (PUT following ?copy_limit=), and the pairs whose unfollow kept the
-- author's posts in the inbox (DELETE following ?keep_history=true), which
-- a retraction must still reach.
--
-- The bound joins the index the user's reads use alone (the page's pull
-- authors, deep scroll's followee list): idx_following_reads replaces
-- idx_following_pull with the bound's columns after its own; a NULL costs
-- an entry a bit.
--
-- MySQL 8.0 has no ADD COLUMN IF NOT EXISTS, so each ALTER runs only when
-- its change is missing (a prepared statement chosen from
-- information_schema): run again after a failure, the file completes the
-- schema. Each ALTER changes one object kind, which TiDB's multi-schema
-- changes take too.
-- +goose NO TRANSACTION
-- +goose Up
SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'following' AND column_name = 'history_time') = 0,
  'ALTER TABLE following
    ADD COLUMN history_time BIGINT NULL COMMENT ''publish_time of the oldest key of the author the user may see: the follow was made with copy_limit N, and the author had more than N posts then; NULL: no bound (the whole history)'',
    ADD COLUMN history_id BIGINT UNSIGNED NULL COMMENT ''content_id of that key; NULL with history_time''',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'following' AND index_name = 'idx_following_reads') = 0,
  'ALTER TABLE following ADD INDEX idx_following_reads (user_id, pull, muted, author_id, history_time, history_id)',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'following' AND index_name = 'idx_following_pull') > 0,
  'ALTER TABLE following DROP INDEX idx_following_pull',
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
  COMMENT 'user-keyed: pairs whose unfollow kept the author''s posts in the user''s inbox. Retractions join it as they join following, so a deleted post leaves those inboxes too; a purge of the author''s posts (a plain unfollow, a mute or hide) deletes the row';

-- +goose Down
DROP TABLE IF EXISTS kept_history;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'following' AND index_name = 'idx_following_pull') = 0,
  'ALTER TABLE following ADD INDEX idx_following_pull (user_id, pull, muted, author_id)',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'following' AND index_name = 'idx_following_reads') > 0,
  'ALTER TABLE following DROP INDEX idx_following_reads',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'following' AND column_name = 'history_time') > 0,
  'ALTER TABLE following DROP COLUMN history_time, DROP COLUMN history_id',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

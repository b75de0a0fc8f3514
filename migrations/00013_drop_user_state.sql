-- user_state now lives in the inbox header rows (00011, 00012).
-- +goose Up
DROP TABLE user_state;

-- +goose Down
CREATE TABLE user_state (
    user_id      BIGINT UNSIGNED NOT NULL,
    last_read_at BIGINT          NOT NULL DEFAULT 0,
    active_since BIGINT          NOT NULL DEFAULT 0,
    floor_time   BIGINT          NULL,
    floor_id     BIGINT UNSIGNED NULL,
    PRIMARY KEY (user_id)
) ENGINE = InnoDB;

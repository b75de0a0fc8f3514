-- user_state is per-user read state (user shard): last_read_at marks the
-- user active for selective push; active_since is when the current active
-- spell began, so posts of pull authors older than it are merged at read
-- time; floor_time/floor_id is the oldest key below which the inbox is no
-- longer complete (trimmed, or a backfill that hit the inbox limit).
-- +goose Up
CREATE TABLE user_state (
    user_id      BIGINT UNSIGNED NOT NULL,
    last_read_at BIGINT          NOT NULL DEFAULT 0,
    active_since BIGINT          NOT NULL DEFAULT 0,
    floor_time   BIGINT          NULL,
    floor_id     BIGINT UNSIGNED NULL,
    PRIMARY KEY (user_id)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE user_state;

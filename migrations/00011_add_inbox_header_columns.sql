-- Each user's inbox range ends in a header row at the key
-- (9223372036854775807, 18446744073709551615), above every post, holding
-- what user_state held (last_read_at, active_since, the floor) and pulls,
-- 1 if some following row of the user has pull bits. A feed page is then one
-- backward range scan that meets the header first. The columns are NULL in
-- post rows, which costs each row one null-bitmap byte; adding nullable
-- columns at the end is instant on MariaDB 10.3+ and MySQL 8.0.12+.
-- +goose Up
ALTER TABLE inbox
    ADD COLUMN last_read_at BIGINT          NULL,
    ADD COLUMN active_since BIGINT          NULL,
    ADD COLUMN floor_time   BIGINT          NULL,
    ADD COLUMN floor_id     BIGINT UNSIGNED NULL,
    ADD COLUMN pulls        TINYINT         NULL;

-- +goose Down
ALTER TABLE inbox
    DROP COLUMN last_read_at,
    DROP COLUMN active_since,
    DROP COLUMN floor_time,
    DROP COLUMN floor_id,
    DROP COLUMN pulls;

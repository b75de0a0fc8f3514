-- The console_sessions table: an operator's signed-in console session, one
-- row per session on the shard of its random id. The cookie carries the id
-- and a secret whose hash the row holds; the row holds the MAC of the token
-- it was signed in with, so a changed token ends every session, and an
-- expiry. Signing out deletes the row; expired rows are deleted a few at a
-- time as sessions are created.
-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS console_sessions (
    session_id   BIGINT UNSIGNED NOT NULL COMMENT 'random id, the cookie''s first part; places the row',
    secret_hash  BINARY(32)      NOT NULL COMMENT 'SHA-256 of the cookie''s secret part',
    token_mac    BINARY(32)      NOT NULL COMMENT 'HMAC of the token the session signed in with: another token ends it',
    created_at   BIGINT          NOT NULL COMMENT 'Unix ms of the sign-in',
    expires_at   BIGINT          NOT NULL COMMENT 'Unix ms after which the session no longer opens the console',
    PRIMARY KEY (session_id),
    KEY idx_console_sessions_expiry (expires_at)
) ENGINE = InnoDB
  COMMENT 'session-keyed: console sign-ins';

-- +goose Down
DROP TABLE IF EXISTS console_sessions;

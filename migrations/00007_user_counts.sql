-- The user_counts table: how many authors a user follows and mutes, what the
-- caps (max-following, max-muted) are checked against, so that a follow or
-- a mute costs the same at its user's thousandth as at the first. Kept in
-- the transactions that change the user's following and mutes rows, under
-- the user's header row; a column is NULL, or the row absent, until a
-- capped write counts the rows once. Writes that change the rows in bulk
-- (an import's settling, an account move) set the counts NULL instead.
-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS user_counts (
    user_id         BIGINT UNSIGNED NOT NULL,
    following_count INT             NULL COMMENT 'rows of following of the user; NULL: not counted yet',
    muted_count     INT             NULL COMMENT 'mutes rows of the user with muted_at set; NULL: not counted yet',
    PRIMARY KEY (user_id)
) ENGINE = InnoDB
  COMMENT 'user-keyed: the counts the follow and mute caps are checked against';

-- +goose Down
DROP TABLE IF EXISTS user_counts;

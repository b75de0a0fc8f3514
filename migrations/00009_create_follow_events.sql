-- follow_events is the outbox of follow and unfollow (user shard), one row
-- per (user, author) pair: repeated operations bump version instead of
-- queueing, so they collapse to the last one. A worker reconciles the
-- author's followers row and the backfill with the following row, then
-- deletes the event only if version is unchanged.
-- +goose Up
CREATE TABLE follow_events (
    user_id       BIGINT UNSIGNED NOT NULL,
    author_id     BIGINT UNSIGNED NOT NULL,
    version       BIGINT          NOT NULL DEFAULT 1,
    claim_token   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    claimed_until BIGINT          NOT NULL DEFAULT 0,
    attempts      INT             NOT NULL DEFAULT 0,
    created_at    BIGINT          NOT NULL,
    PRIMARY KEY (user_id, author_id),
    KEY idx_follow_events_claim (claimed_until)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE follow_events;

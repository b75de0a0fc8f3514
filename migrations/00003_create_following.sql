-- following is the authoritative follow edge, keyed by user_id (user shard).
-- Every inbox write joins it, so a post only lands in the inbox of a user who
-- follows its author at that instant. pull says how reads treat the author:
-- 0 the inbox holds its posts, 1 it is a pull author (merge its outbox below
-- the reader's active_since), 2 backfill pending (merge its whole outbox).
-- +goose Up
CREATE TABLE following (
    user_id     BIGINT UNSIGNED NOT NULL,
    author_id   BIGINT UNSIGNED NOT NULL,
    followed_at BIGINT          NOT NULL,
    pull        TINYINT         NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, author_id),
    KEY idx_following_pull (user_id, pull)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE following;

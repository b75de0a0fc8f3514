-- The moves table: account moves (POST /v1/users/{user_id}/move), one row
-- per moved id on that id's shard, claimed by the move workers like the
-- other queues (claim_token, claimed_until) and resumed from its phase and
-- progress mark after any crash. The row stays once done: it answers the
-- move's progress and makes a repeated request idempotent.
-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS moves (
    user_id          BIGINT UNSIGNED NOT NULL COMMENT 'the id moved from: its follows, mutes, marker, hides and followers move',
    to_id            BIGINT UNSIGNED NOT NULL COMMENT 'the id they move to',
    state            TINYINT         NOT NULL DEFAULT 0 COMMENT '0 pending, 1 running, 2 done (store/states.go)',
    phase            TINYINT         NOT NULL DEFAULT 0 COMMENT 'the part under way: 0 mutes, 1 follows, 2 marker, 3 hides, 4 followers (store/states.go)',
    after_id         BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'progress mark of the phase: the last author (mutes, follows) or user (hides, followers) handled in the current pass',
    pass_rows        BIGINT          NOT NULL DEFAULT 0 COMMENT 'hides and followers: rows the current pass found; a pass that finds none ends the phase (the lists trail follow events)',
    follows_moved    BIGINT          NOT NULL DEFAULT 0 COMMENT 'authors the new id follows instead of the old one',
    follows_skipped  BIGINT          NOT NULL DEFAULT 0 COMMENT 'authors left with the old id: the new id was at max-following',
    follows_total    BIGINT          NOT NULL DEFAULT 0 COMMENT 'authors the old id followed when the move started, or more seen since',
    mutes_moved      BIGINT          NOT NULL DEFAULT 0 COMMENT 'mutes rows of the old id (its mutes, and hides of it) moved to the new id',
    mutes_skipped    BIGINT          NOT NULL DEFAULT 0 COMMENT 'mutes rows left with the old id: the new id was at max-muted',
    mutes_total      BIGINT          NOT NULL DEFAULT 0 COMMENT 'mutes rows of the old id when the move started, or more seen since',
    hides_moved      BIGINT          NOT NULL DEFAULT 0 COMMENT 'readers the old id hid from whom the new id now hides from',
    hides_total      BIGINT          NOT NULL DEFAULT 0 COMMENT 'rows of the old id''s hidden_from list when the move started, or more seen since',
    marker_moved     BIGINT          NOT NULL DEFAULT 0 COMMENT '1 once the old id''s read marker moved',
    marker_total     BIGINT          NOT NULL DEFAULT 0 COMMENT '1 if the old id had a read marker',
    followers_moved  BIGINT          NOT NULL DEFAULT 0 COMMENT 'followers of the old id re-pointed to follow the new id',
    followers_total  BIGINT          NOT NULL DEFAULT 0 COMMENT 'the old id''s follower count when the move started, or more seen since',
    claim_token      BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'random token of the worker holding the lease, 0 if none',
    claimed_until    BIGINT          NOT NULL DEFAULT 0 COMMENT 'Unix ms when the lease ends (or, between passes, when the next pass may start)',
    attempts         INT             NOT NULL DEFAULT 0 COMMENT 'times the move was claimed',
    created_at       BIGINT          NOT NULL COMMENT 'Unix ms of the request',
    updated_at       BIGINT          NOT NULL COMMENT 'Unix ms of the last progress',
    PRIMARY KEY (user_id),
    KEY idx_moves_claim (state, claimed_until)
) ENGINE = InnoDB
  COMMENT 'user-keyed: account moves, a resumable job per moved id';

-- +goose Down
DROP TABLE IF EXISTS moves;

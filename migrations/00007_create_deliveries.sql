-- deliveries is the transactional outbox: publish inserts a row in the same
-- transaction as the post (author shard). A planner claims it, walks the
-- followers and splits them into fanout_tasks. retract = 1 after a delete:
-- the tasks then remove the post instead of adding it.
-- state: 0 pending (to plan), 1 running (tasks exist), 2 done.
-- +goose Up
CREATE TABLE deliveries (
    content_id    BIGINT UNSIGNED NOT NULL,
    author_id     BIGINT UNSIGNED NOT NULL,
    publish_time  BIGINT          NOT NULL,
    kind          VARCHAR(32)     NOT NULL,
    state         TINYINT         NOT NULL DEFAULT 0,
    mode          TINYINT         NOT NULL DEFAULT 0,
    retract       TINYINT         NOT NULL DEFAULT 0,
    recipients    BIGINT          NOT NULL DEFAULT 0,
    delivered     BIGINT          NOT NULL DEFAULT 0,
    claim_token   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    claimed_until BIGINT          NOT NULL DEFAULT 0,
    attempts      INT             NOT NULL DEFAULT 0,
    created_at    BIGINT          NOT NULL,
    PRIMARY KEY (content_id),
    KEY idx_deliveries_claim (state, claimed_until)
) ENGINE = InnoDB DEFAULT CHARSET = ascii;

-- +goose Down
DROP TABLE deliveries;

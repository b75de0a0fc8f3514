-- fanout_tasks splits one delivery into resumable sub-tasks over follower
-- ranges (lo, hi] of user_id. last_user is the progress mark, written in the
-- same transaction as the inbox rows it covers; delivered counts followers
-- processed. Rows are deleted once the whole delivery is done.
-- +goose Up
CREATE TABLE fanout_tasks (
    content_id    BIGINT UNSIGNED NOT NULL,
    seq           INT             NOT NULL,
    author_id     BIGINT UNSIGNED NOT NULL,
    publish_time  BIGINT          NOT NULL,
    kind          VARCHAR(32)     NOT NULL,
    mode          TINYINT         NOT NULL,
    retract       TINYINT         NOT NULL DEFAULT 0,
    lo            BIGINT UNSIGNED NOT NULL,
    hi            BIGINT UNSIGNED NOT NULL,
    last_user     BIGINT UNSIGNED NOT NULL,
    delivered     BIGINT          NOT NULL DEFAULT 0,
    done          TINYINT         NOT NULL DEFAULT 0,
    claim_token   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    claimed_until BIGINT          NOT NULL DEFAULT 0,
    attempts      INT             NOT NULL DEFAULT 0,
    PRIMARY KEY (content_id, seq),
    KEY idx_fanout_tasks_claim (done, claimed_until)
) ENGINE = InnoDB DEFAULT CHARSET = ascii;

-- +goose Down
DROP TABLE fanout_tasks;

-- authors counts each author's followers and holds its fan-out mode:
-- 0 push to all, 1 switching to pull (a job marks every follower's following
-- row pull = 1, resuming after switch_after), 2 pull (push to active
-- followers only). The claim columns lease the switch job to one worker.
-- +goose Up
CREATE TABLE authors (
    author_id      BIGINT UNSIGNED NOT NULL,
    follower_count BIGINT          NOT NULL DEFAULT 0,
    mode           TINYINT         NOT NULL DEFAULT 0,
    switch_after   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    claim_token    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    claimed_until  BIGINT          NOT NULL DEFAULT 0,
    attempts       INT             NOT NULL DEFAULT 0,
    PRIMARY KEY (author_id),
    KEY idx_authors_claim (mode, claimed_until)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE authors;

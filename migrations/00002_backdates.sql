-- A sequence per database that moves with every backdated post, so that
-- processes may keep what they learned of outboxes' older posts.
-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS backdates (
    id  TINYINT UNSIGNED NOT NULL COMMENT 'always 0: one row per database',
    seq BIGINT UNSIGNED  NOT NULL COMMENT 'grows by one with each post published here whose publish_time is older than its publish by more than the store''s backdate margin: the heads that feed reads cache of this database''s outboxes hold only while it stays put',
    PRIMARY KEY (id)
) ENGINE = InnoDB
  COMMENT 'one row per database, bumped in the transaction of every backdated post: the only writes that can add a post to a range of an outbox older than the margin';

INSERT IGNORE INTO backdates (id, seq) VALUES (0, 0);

-- +goose Down
DROP TABLE IF EXISTS backdates;

-- The bookkeeping of feedd import: its progress, kept in the databases so
-- that an import killed at any instant and run again resumes, and the marks
-- of what its later phases have left to settle.
-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS imports (
    import_id  BIGINT UNSIGNED NOT NULL COMMENT 'the first 8 bytes of the SHA-256 of the file: the same file resumes the same import',
    phase      TINYINT         NOT NULL DEFAULT 0 COMMENT '0 loading records, 1 settling authors, 2 settling users, 3 done',
    line_count BIGINT          NOT NULL COMMENT 'lines of the file',
    lines_done BIGINT          NOT NULL DEFAULT 0 COMMENT 'lines whose records are written on every database: a resumed load starts after them',
    started_at BIGINT          NOT NULL COMMENT 'Unix ms when the import first ran',
    updated_at BIGINT          NOT NULL COMMENT 'Unix ms of the last progress',
    PRIMARY KEY (import_id)
) ENGINE = InnoDB
  COMMENT 'keyed by import id: the progress of each import of a file';

CREATE TABLE IF NOT EXISTS import_marks (
    import_id BIGINT UNSIGNED NOT NULL,
    kind      TINYINT         NOT NULL COMMENT '1 a user whose follows, mutes or followed authors the import changed: its inbox, pull bits and muted edges are settled; 2 an author given followers: its count and mode are settled; 3 an author given posts: its followers are marked 1',
    id        BIGINT UNSIGNED NOT NULL COMMENT 'the user or author id, on whose shard the row lives',
    PRIMARY KEY (import_id, kind, id)
) ENGINE = InnoDB
  COMMENT 'keyed by the marked id: what an import has left to settle; each row is deleted in the transaction that settles it';

-- +goose Down
DROP TABLE IF EXISTS import_marks;
DROP TABLE IF EXISTS imports;

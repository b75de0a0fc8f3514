-- The server's times of a stream's transitions: when it went live and when
-- it ended, by feedd's clock (created_at already holds its creation). A
-- live-feed session stores the time of its snapshot instead of its streams,
-- and its later pages take each stream's state as of that time from these
-- columns (DESIGN.md, Live streams). 0 is a transition not made yet, or
-- made before the columns existed: long before any session.
--
-- idx_streams_ended holds the replays by their server end, so a page reads
-- the few that ended since a session's time as one range per host.
--
-- live_sessions.snapshot_at is that time; the snapshot column keeps only
-- the streams whose state the first page saw otherwise. A session stored
-- before (snapshot_at NULL) is 410 on its next page.
--
-- Like 00003, each ALTER runs only when its change is missing.
-- +goose NO TRANSACTION
-- +goose Up
SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'streams' AND column_name = 'started_srv') = 0,
  'ALTER TABLE streams
    ADD COLUMN started_srv BIGINT NOT NULL DEFAULT 0 COMMENT ''Unix ms by the server when the stream went live; 0 not yet (or long ago)'',
    ADD COLUMN ended_srv BIGINT NOT NULL DEFAULT 0 COMMENT ''Unix ms by the server when the stream ended; 0 not yet (or long ago)''',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'streams' AND index_name = 'idx_streams_ended') = 0,
  'ALTER TABLE streams ADD INDEX idx_streams_ended (host_id, ended_srv)',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'live_sessions' AND column_name = 'snapshot_at') = 0,
  'ALTER TABLE live_sessions
    ADD COLUMN snapshot_at BIGINT NULL COMMENT ''Unix ms by the server: later pages show each stream in its state at this time; NULL: a session of an earlier format, gone (410)''',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

ALTER TABLE live_sessions MODIFY COLUMN snapshot MEDIUMBLOB NOT NULL COMMENT 'the streams whose state the first page saw other than their server times give as of snapshot_at: 9-byte records (stream_id, state: 0 not shown, 1 preview, 2 live)';

-- +goose Down
-- Sessions of this format would read as empty snapshots: they go.
SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'live_sessions' AND column_name = 'snapshot_at') > 0,
  'DELETE FROM live_sessions WHERE snapshot_at IS NOT NULL',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

ALTER TABLE live_sessions MODIFY COLUMN snapshot MEDIUMBLOB NOT NULL COMMENT 'the live and preview streams of the followed hosts at the first page, in feed order: 33-byte records (stream_id, host_id, state, scheduled_start, started_at)';

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'live_sessions' AND column_name = 'snapshot_at') > 0,
  'ALTER TABLE live_sessions DROP COLUMN snapshot_at',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'streams' AND index_name = 'idx_streams_ended') > 0,
  'ALTER TABLE streams DROP INDEX idx_streams_ended',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

SET @feed_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'streams' AND column_name = 'started_srv') > 0,
  'ALTER TABLE streams DROP COLUMN started_srv, DROP COLUMN ended_srv',
  'DO 0');
PREPARE feed_ddl FROM @feed_ddl;
EXECUTE feed_ddl;
DEALLOCATE PREPARE feed_ddl;

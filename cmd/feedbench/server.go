package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
)

// The server queries a report states its figures against.

// tableFootprint is a table's size as the server reports it.
type tableFootprint struct {
	Rows       int64 // exact, by COUNT(*)
	DataBytes  int64 // information_schema.TABLES.DATA_LENGTH (the clustered index)
	IndexBytes int64 // INDEX_LENGTH (secondary indexes)
}

// BytesPerRow is (data + index) / rows.
func (f tableFootprint) BytesPerRow() float64 {
	if f.Rows == 0 {
		return 0
	}
	return float64(f.DataBytes+f.IndexBytes) / float64(f.Rows)
}

const (
	optimizeInboxSQL = `OPTIMIZE TABLE inbox`
	analyzeInboxSQL  = `ANALYZE TABLE inbox`
	inboxSizeSQL     = `SELECT DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox'`
	countInboxSQL = `SELECT COUNT(*) FROM inbox`
)

// inboxFootprint measures the inbox table: optionally rebuilt first
// (OPTIMIZE), then analyzed so the size statistics are current.
func inboxFootprint(ctx context.Context, db *sqlx.DB, optimize bool) (tableFootprint, error) {
	var f tableFootprint
	var engine string
	if err := db.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox'`).Scan(&engine); err != nil {
		return f, fmt.Errorf("inbox footprint: %w", err)
	}
	if strings.EqualFold(engine, "rocksdb") {
		// MyRocks's table statistics count what is in its files: write
		// the memtables out first.
		if _, err := db.ExecContext(ctx, "SET GLOBAL rocksdb_force_flush_memtable_now = 1"); err != nil {
			return f, fmt.Errorf("inbox footprint: %w", err)
		}
	}
	stmts := []string{analyzeInboxSQL}
	if optimize {
		stmts = []string{optimizeInboxSQL, analyzeInboxSQL}
	}
	for _, q := range stmts {
		// Both statements return a status result set; drain it.
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return f, fmt.Errorf("inbox footprint: %w", err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			return f, fmt.Errorf("inbox footprint: %w", err)
		}
	}
	if err := db.QueryRowContext(ctx, inboxSizeSQL).Scan(&f.DataBytes, &f.IndexBytes); err != nil {
		return f, fmt.Errorf("inbox footprint: %w", err)
	}
	if err := db.QueryRowContext(ctx, countInboxSQL).Scan(&f.Rows); err != nil {
		return f, fmt.Errorf("inbox footprint: %w", err)
	}
	return f, nil
}

// serverInfo describes the server for the report.
type serverInfo struct {
	Version             string
	BufferPoolBytes     int64
	FlushLogAtTrxCommit int
	// TiDB: the server is TiDB, which lacks what some measurements use
	// (phase.notOnTiDB, OPTIMIZE TABLE).
	TiDB bool
}

const serverInfoSQL = `SELECT VERSION(), @@innodb_buffer_pool_size, @@innodb_flush_log_at_trx_commit`

// readServerInfo reports the server's version and the InnoDB settings that
// bound the benchmark figures.
func readServerInfo(ctx context.Context, db *sqlx.DB) (serverInfo, error) {
	var si serverInfo
	if err := db.QueryRowContext(ctx, serverInfoSQL).Scan(&si.Version, &si.BufferPoolBytes, &si.FlushLogAtTrxCommit); err != nil {
		return si, fmt.Errorf("server info: %w", err)
	}
	si.TiDB = strings.Contains(si.Version, "TiDB")
	return si, nil
}

// otherSessionsSQL counts sessions of other databases running a statement;
// phase R's databases, named after the benchmark's, are this run's own.
const otherSessionsSQL = `SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump')
AND (DB IS NULL OR LEFT(DB, CHAR_LENGTH(DATABASE())) <> DATABASE())`

// otherActiveSessions counts the server's sessions that are running a
// statement for another database at this instant: on a shared server their
// load bends the figures.
func otherActiveSessions(ctx context.Context, db *sqlx.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, otherSessionsSQL).Scan(&n)
	return n, err
}

// purgeBacklogSQL reads InnoDB's history list length (the metric is on by
// default on MySQL 8 and MariaDB alike).
const purgeBacklogSQL = `SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'`

// purgeBacklog returns how many committed transactions' undo logs InnoDB
// has yet to purge: deleted rows leave the index only when purge gets to
// them, in the background, so a writer's window would time its
// predecessor's purge.
func purgeBacklog(ctx context.Context, db *sqlx.DB) (int64, error) {
	var n int64
	var myErr *mysql.MySQLError
	if err := db.QueryRowContext(ctx, purgeBacklogSQL).Scan(&n); errors.As(err, &myErr) && myErr.Number == 1146 {
		return 0, nil // no InnoDB metrics (TiDB): no purge to wait for
	} else if err != nil {
		return 0, fmt.Errorf("purge backlog: %w", err)
	}
	return n, nil
}

// compactionStateSQL reads whether RocksDB has compactions to run in the
// inbox's column family, and the bytes its compactions have written so far.
const compactionStateSQL = `SELECT
 (SELECT VALUE FROM information_schema.ROCKSDB_CFSTATS WHERE CF_NAME = ? AND STAT_TYPE = 'COMPACTION_PENDING'),
 (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'ROCKSDB_COMPACT_WRITE_BYTES')`

// settleCompactions waits until MyRocks has no compaction pending in the
// inbox's column family and its compactions have written nothing for two
// seconds, or two minutes in all: the background work a burst of writes
// left behind, run by the engine's own schedule.
func (b *bench) settleCompactions(ctx context.Context) error {
	if _, err := b.db.ExecContext(ctx, "SET GLOBAL rocksdb_force_flush_memtable_now = 1"); err != nil {
		return fmt.Errorf("settle compactions: %w", err)
	}
	start := time.Now()
	var last int64 = -1
	lastAt := start
	for {
		var pending, written int64
		if err := b.db.QueryRowContext(ctx, compactionStateSQL, store.InboxFamily).Scan(&pending, &written); err != nil {
			return fmt.Errorf("settle compactions: %w", err)
		}
		now := time.Now()
		if written != last {
			last, lastAt = written, now
		}
		if pending == 0 && now.Sub(lastAt) >= 2*time.Second {
			b.log.Info("feedbench: compactions settled", "waited", now.Sub(start).Round(time.Millisecond))
			return nil
		}
		if now.Sub(start) > 2*time.Minute {
			b.log.Warn("feedbench: compactions still running; measuring anyway", "pending", pending, "waited", now.Sub(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// diskReadsSQL reads the counters of what the inbox's engines read from
// disk: InnoDB's buffer pool misses and MyRocks's block cache misses (with
// direct I/O, as make bench-disk runs, each is a read of the disk).
const diskReadsSQL = `SHOW GLOBAL STATUS WHERE Variable_name IN
 ('Innodb_buffer_pool_reads', 'Rocksdb_block_cache_data_miss', 'Rocksdb_block_cache_index_miss', 'Rocksdb_block_cache_filter_miss')`

// engineDiskReads returns the server's engine reads from disk so far; ok is
// false where the server does not report them (TiDB).
func engineDiskReads(ctx context.Context, db *sqlx.DB) (n int64, ok bool) {
	rows, err := db.QueryContext(ctx, diskReadsSQL)
	if err != nil {
		return 0, false
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return 0, false
		}
		n += v
		ok = true
	}
	return n, ok && rows.Err() == nil
}

package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"

	"github.com/go-sql-driver/mysql"

	"github.com/feedhq/feed"
)

// This file holds the raw statements cmd/feedbench measures the service
// against (its ceilings), the bulk inbox loader that builds benchmark data,
// and the few server queries the benchmark reports. None of it runs on a
// request path.

// InsertInboxRows writes rows with multi-row INSERT IGNORE statements of a
// thousand rows on sh (every row must belong to sh). It is the fan-out
// ceiling: the same rows a fan-out batch writes, without the follow check,
// the task bookkeeping or trimming. Returns the rows inserted.
func (sh *Shard) InsertInboxRows(ctx context.Context, rows []InboxRow) (int64, error) {
	n, err := insertChunks(ctx, sh.DB, insertInboxHead, 5, "", len(rows), func(i int) []any {
		r := rows[i]
		return []any{r.UserID, r.PublishTime, r.ContentID, r.AuthorID, r.Kind}
	})
	return n, wrap("insert inbox rows", err)
}

// oldestInboxSQL lists a user's oldest inbox entries, the header row aside.
const oldestInboxSQL = `SELECT content_id, publish_time FROM inbox WHERE user_id = ? AND publish_time < 9223372036854775807
ORDER BY publish_time, content_id LIMIT ?`

// OldestInboxEntries returns up to n of the user's oldest inbox entries,
// oldest first: where a retention ceiling cuts.
func (sh *Shard) OldestInboxEntries(ctx context.Context, userID uint64, n int) ([]InboxRow, error) {
	var out []InboxRow
	rows, err := sh.DB.QueryContext(ctx, oldestInboxSQL, userID, n)
	if err != nil {
		return nil, wrap("oldest inbox entries", err)
	}
	defer rows.Close()
	for rows.Next() {
		r := InboxRow{UserID: userID}
		if err := rows.Scan(&r.ContentID, &r.PublishTime); err != nil {
			return nil, wrap("oldest inbox entries", err)
		}
		out = append(out, r)
	}
	return out, wrap("oldest inbox entries", rows.Err())
}

// DeleteInboxBelow deletes, for each bound, the entries of its user older
// than it, with the one statement trims use, on sh. After InsertInboxRows
// of as many rows it is the retention ceiling: the least a writer that
// keeps inboxes at their size must also do.
func (sh *Shard) DeleteInboxBelow(ctx context.Context, bounds []InboxRow) (int64, error) {
	if len(bounds) == 0 {
		return 0, nil
	}
	n, err := deleteBelow(ctx, sh.DB, bounds)
	return n, wrap("delete inbox rows", err)
}

// RetractFromFollowers removes one post from the inboxes of its author's
// followers on sh with the statement retractions use, and returns how many
// entries went: a benchmark undoes the rows of a writer that does not trim
// with it.
func (sh *Shard) RetractFromFollowers(ctx context.Context, p feed.Post) (int64, error) {
	t := &Task{Retract: true, AuthorID: p.AuthorID, PublishTime: p.PublishTime, ContentID: p.ContentID}
	n, err := writeInboxes(ctx, sh.DB, t, math.MaxUint64, 0)
	return n, wrap("retract from followers", err)
}

// LoadInbox bulk-loads inbox rows, routed to their users' shards: for
// building benchmark data. Returns the rows inserted.
func (s *Store) LoadInbox(ctx context.Context, rows []InboxRow) (int64, error) {
	byShard := map[*Shard][]InboxRow{}
	for _, r := range rows {
		sh := s.ShardOf(r.UserID)
		byShard[sh] = append(byShard[sh], r)
	}
	var total int64
	for sh, rs := range byShard {
		n, err := sh.InsertInboxRows(ctx, rs)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// inboxPageSQL is the read ceiling: one keyset page of one inbox, a backward
// range scan of the primary key and nothing else (no floor, no pull
// authors, no read state).
const inboxPageSQL = `SELECT content_id, author_id, publish_time, kind FROM inbox
WHERE user_id = ? AND ` + keysetOlder + ` ORDER BY publish_time DESC, content_id DESC LIMIT ?`

// headerProbeSQL is inboxPageSQL widened to one more key above every post,
// (maxTime, maxID), where the user's header row lives: the shape of the
// service's one-block feed page without its header columns, pull reads or
// merge, measured to price the shape alone (docs/BENCHMARKS.md).
const headerProbeSQL = `SELECT content_id, author_id, publish_time, kind FROM inbox
WHERE user_id = ? AND (` + keysetOlder + ` OR (publish_time = ? AND content_id = ?))
ORDER BY publish_time DESC, content_id DESC LIMIT ?`

// InboxPageStmt is inboxPageSQL (or headerProbeSQL) prepared once;
// database/sql prepares it once on each pooled connection it runs on.
type InboxPageStmt struct {
	stmt        *sql.Stmt
	headerProbe bool
}

// PrepareInboxPage prepares the ceiling page statement on the shard, or
// with headerProbe its one-block variant.
func (sh *Shard) PrepareInboxPage(ctx context.Context, headerProbe bool) (*InboxPageStmt, error) {
	q := inboxPageSQL
	if headerProbe {
		q = headerProbeSQL
	}
	st, err := sh.DB.PrepareContext(ctx, q)
	if err != nil {
		return nil, wrap("prepare inbox page", err)
	}
	return &InboxPageStmt{stmt: st, headerProbe: headerProbe}, nil
}

// Page returns up to limit inbox entries of the user older than before,
// newest first, appended to buf[:0].
func (p *InboxPageStmt) Page(ctx context.Context, userID uint64, before feed.Key, limit int, buf []feed.Post) ([]feed.Post, error) {
	args := []any{userID, before.PublishTime, before.PublishTime, before.ContentID, limit}
	if p.headerProbe {
		args = slices.Insert(args, 4, any(maxTime), any(maxID))
	}
	rows, err := p.stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, wrap("inbox page", err)
	}
	defer rows.Close()
	out := buf[:0]
	for rows.Next() {
		var q feed.Post
		if err := rows.Scan(&q.ContentID, &q.AuthorID, &q.PublishTime, &q.Kind); err != nil {
			return nil, wrap("inbox page", err)
		}
		out = append(out, q)
	}
	return out, wrap("inbox page", rows.Err())
}

// Close releases the statement on every connection.
func (p *InboxPageStmt) Close() error { return p.stmt.Close() }

// TableFootprint is a table's size as the server reports it.
type TableFootprint struct {
	Rows       int64 // exact, by COUNT(*)
	DataBytes  int64 // information_schema.TABLES.DATA_LENGTH (the clustered index)
	IndexBytes int64 // INDEX_LENGTH (secondary indexes)
}

// BytesPerRow is (data + index) / rows.
func (f TableFootprint) BytesPerRow() float64 {
	if f.Rows == 0 {
		return 0
	}
	return float64(f.DataBytes+f.IndexBytes) / float64(f.Rows)
}

const optimizeInboxSQL = `OPTIMIZE TABLE inbox`

const analyzeInboxSQL = `ANALYZE TABLE inbox`

const inboxSizeSQL = `SELECT DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox'`

const countInboxSQL = `SELECT COUNT(*) FROM inbox`

// InboxFootprint measures the shard's inbox table: optionally rebuilt first
// (OPTIMIZE), then analyzed so the size statistics are current.
func (sh *Shard) InboxFootprint(ctx context.Context, optimize bool) (TableFootprint, error) {
	var f TableFootprint
	stmts := []string{analyzeInboxSQL}
	if optimize {
		stmts = []string{optimizeInboxSQL, analyzeInboxSQL}
	}
	for _, q := range stmts {
		// Both statements return a status result set; drain it.
		rows, err := sh.DB.QueryContext(ctx, q)
		if err != nil {
			return f, wrap("inbox footprint", err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			return f, wrap("inbox footprint", err)
		}
	}
	if err := sh.DB.QueryRowContext(ctx, inboxSizeSQL).Scan(&f.DataBytes, &f.IndexBytes); err != nil {
		return f, wrap("inbox footprint", err)
	}
	err := sh.DB.QueryRowContext(ctx, countInboxSQL).Scan(&f.Rows)
	return f, wrap("inbox footprint", err)
}

// ServerInfo describes the server of a shard for a benchmark report.
type ServerInfo struct {
	Version             string
	BufferPoolBytes     int64
	FlushLogAtTrxCommit int
}

const serverInfoSQL = `SELECT VERSION(), @@innodb_buffer_pool_size, @@innodb_flush_log_at_trx_commit`

// ServerInfo reports the shard server's version and the InnoDB settings
// that bound the benchmark figures.
func (sh *Shard) ServerInfo(ctx context.Context) (ServerInfo, error) {
	var si ServerInfo
	err := sh.DB.QueryRowContext(ctx, serverInfoSQL).Scan(&si.Version, &si.BufferPoolBytes, &si.FlushLogAtTrxCommit)
	return si, wrap("server info", err)
}

// otherSessionsSQL counts sessions of other databases running a statement.
const otherSessionsSQL = `SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump')
AND (DB IS NULL OR DB <> DATABASE())`

// OtherActiveSessions counts the server's sessions that are running a
// statement for another database at this instant: a benchmark on a shared
// server reports it, since their load bends the figures.
func (sh *Shard) OtherActiveSessions(ctx context.Context) (int, error) {
	var n int
	err := sh.DB.QueryRowContext(ctx, otherSessionsSQL).Scan(&n)
	return n, wrap("other sessions", err)
}

// purgeBacklogSQL reads InnoDB's history list length (the metric is on by
// default on MySQL 8 and MariaDB alike).
const purgeBacklogSQL = `SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'`

// PurgeBacklog returns how many committed transactions' undo logs InnoDB
// has yet to purge on sh: deleted rows leave the index only when purge
// gets to them, in the background. A benchmark waits for it to drain so
// that one writer's purge is not timed in the next writer's window.
func (sh *Shard) PurgeBacklog(ctx context.Context) (int64, error) {
	var n int64
	err := sh.DB.QueryRowContext(ctx, purgeBacklogSQL).Scan(&n)
	return n, wrap("purge backlog", err)
}

// DropDatabases drops the database of every shard: for benchmarks and tests
// that created their own. The store is unusable afterwards.
func (s *Store) DropDatabases(ctx context.Context) error {
	for _, sh := range s.shards {
		c, err := mysql.ParseDSN(sh.dsn)
		if err != nil {
			return fmt.Errorf("store: drop database of shard %s: %w", sh.Name, err)
		}
		// A schema name cannot be a placeholder; quoteIdent escapes it.
		if _, err := sh.DB.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(c.DBName)); err != nil {
			return fmt.Errorf("store: drop database of shard %s: %w", sh.Name, classify(err))
		}
	}
	return nil
}

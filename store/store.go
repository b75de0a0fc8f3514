// Package store holds every SQL statement of the service and owns routing:
// each exported method names the user or author whose shard it touches and
// runs its transaction on that shard only.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/sqlconn"
)

// Shard is one database holding a set of virtual shards, with its own pool.
// Every transaction runs on exactly one Shard.
type Shard struct {
	Name string
	// DB is the pool of the Workers class, which statements of a context
	// naming no class use.
	DB    *sqlx.DB
	pools [numClasses]*sqlx.DB
	dsn   string
	// conn opens DB's connections; closing it closes its kill pool.
	conn *sqlconn.Connector

	mu sync.Mutex // guards hot
	// hot holds the hot reads per class, prepared once per connection, so
	// the server parses each once (hotStmtSQL).
	hot       [numClasses][numHotStmts]*sqlx.Stmt
	pullHints userHints

	health    shardHealth
	conflicts conflicts
	// epochSeen is told the layout epoch each probe reads (Store.epochSeen).
	epochSeen func(int64)
}

// Store routes ids to shards and runs the SQL.
type Store struct {
	shards []*Shard // sorted by name
	byName map[string]*Shard

	// deepReaders: see ReadsDeep.
	deepReaders userHints
	heads       atomic.Pointer[headCache]   // nil unless CacheHeads turned it on
	outboxes    atomic.Pointer[outboxCache] // nil unless CacheOutboxes turned it on
	followees   followeeCache
	routes      atomic.Pointer[routing]
	refreshMu   sync.Mutex    // one Refresh at a time
	stale       chan struct{} // see Stale
	engine      Engine
}

// Option is an option of Open.
type Option func(*sqlconn.Options)

// WithTrace makes f see every statement the store's connections send,
// with its placeholders, before it is sent: what a statement audit, such
// as the check that each filters on its sharding key, reads.
func WithTrace(f func(query string)) Option {
	return func(o *sqlconn.Options) { o.Trace = f }
}

// Open connects to every database of the map. It does not ping: use
// CheckHealth (readiness) or Migrate to check the servers.
func Open(m *shardmap.Map, opts ...Option) (*Store, error) {
	names, err := m.Owners()
	if err != nil {
		return nil, err
	}
	byName := map[string]*Shard{}
	engine, err := ParseEngine(string(m.InboxEngine))
	if err != nil {
		return nil, err
	}
	s := &Store{byName: byName, stale: make(chan struct{}, 1), engine: engine}
	s.routes.Store(&routing{})
	conn := sqlconn.Options{Epoch: s.Epoch, Refused: func(err error) {
		if fenced(err) {
			s.wake()
		}
	}}
	for _, o := range opts {
		o(&conn)
	}
	for name, cfg := range m.Databases {
		sh, err := openShard(name, cfg, conn)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("store: database %q: %w", name, err)
		}
		byName[name] = sh
		s.shards = append(s.shards, sh)
	}
	slices.SortFunc(s.shards, func(a, b *Shard) int { return strings.Compare(a.Name, b.Name) })
	for _, sh := range s.shards {
		sh.epochSeen = s.epochSeen
	}
	owner := make([]*Shard, len(names))
	for v, name := range names {
		owner[v] = byName[name]
	}
	s.routes.Store(&routing{owner: owner})
	return s, nil
}

// openShard opens a shard's pools, one per Class, whose statements are
// killed on the server when their context ends (sqlconn.Connector) and
// whose connections write under the store's layout epoch.
func openShard(name string, cfg shardmap.Database, opt sqlconn.Options) (*Shard, error) {
	mc, err := parseDSN(cfg.DSN)
	if err != nil {
		return nil, err
	}
	conn, err := sqlconn.NewConnector(mc, opt)
	if err != nil {
		return nil, err
	}
	sh := &Shard{Name: name, dsn: mc.FormatDSN(), conn: conn}
	size := cfg.Connections.WithDefaults()
	for c, n := range [numClasses]int{Workers: size.Workers, Reads: size.Read, Writes: size.Write} {
		db := sqlx.NewDb(sql.OpenDB(conn), "mysql")
		db.SetMaxOpenConns(n)
		db.SetMaxIdleConns(n)
		db.SetConnMaxIdleTime(5 * time.Minute)
		sh.pools[c] = db
	}
	sh.DB = sh.pools[Workers]
	sh.health.set(Health{State: StateUnknown})
	return sh, nil
}

// lockWaitTimeout is how long, in seconds, a statement of the store waits
// for a row lock on the server (innodb_lock_wait_timeout, which TiDB's
// pessimistic transactions follow too) unless the DSN sets it. A statement
// whose client is gone waits on for the server's whole timeout holding its
// transaction's locks: one whose process was killed gets no KILL QUERY, and
// the server does not notice the closed connection while it waits. The
// server's default of 50 s would stall, for that long, every writer of the
// rows it holds; this bound is above the service's write deadline, and a
// statement that reaches it fails as a retryable conflict.
const lockWaitTimeout = 5

// parseDSN sets the driver options the store relies on: interpolated
// parameters (one round trip per statement that is not prepared), no
// implicit time parsing (times are Unix milliseconds), and a lock wait
// bounded by lockWaitTimeout.
func parseDSN(dsn string) (*mysql.Config, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad dsn: %w", err)
	}
	if c.DBName == "" {
		return nil, errors.New("dsn names no database")
	}
	if _, set := c.Params["interpolateParams"]; !set {
		c.InterpolateParams = true
	}
	if _, set := c.Params["innodb_lock_wait_timeout"]; !set {
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params["innodb_lock_wait_timeout"] = strconv.Itoa(lockWaitTimeout)
	}
	return c, nil
}

// Close closes every pool.
func (s *Store) Close() error {
	var errs []error
	for _, sh := range s.shards {
		for _, stmts := range sh.hot {
			for _, st := range stmts {
				if st != nil {
					errs = append(errs, st.Close())
				}
			}
		}
		for _, db := range sh.pools {
			errs = append(errs, db.Close())
		}
		errs = append(errs, sh.conn.Close())
	}
	return errors.Join(errs...)
}

// Shards returns every shard, sorted by name. Workers run per shard.
func (s *Store) Shards() []*Shard { return s.shards }

// ShardOf returns the shard of a user id or author id. Both hash the same
// way, so a user's inbox and the same id's posts share a shard.
// With one shard it hashes nothing: fan-out and planning ask it for every
// follower.
func (s *Store) ShardOf(id uint64) *Shard {
	if len(s.shards) == 1 {
		return s.shards[0]
	}
	owner := s.route().owner
	return owner[shardmap.VirtualShard(id, len(owner))]
}

// groupByShard splits ids by the shard that owns them, keeping their order.
// With one shard it hashes nothing.
func (s *Store) groupByShard(ids []uint64) map[*Shard][]uint64 {
	if len(s.shards) == 1 {
		if len(ids) == 0 {
			return map[*Shard][]uint64{}
		}
		return map[*Shard][]uint64{s.shards[0]: ids}
	}
	out := map[*Shard][]uint64{}
	for _, id := range ids {
		sh := s.ShardOf(id)
		out[sh] = append(out[sh], id)
	}
	return out
}

// affected takes what ExecContext returns and reports whether the statement
// changed a row: for writes whose WHERE clause is the decision.
func affected(r sql.Result, err error) (bool, error) {
	n, err := rowsAffected(r, err)
	return n > 0, err
}

// rowsAffected takes what ExecContext returns and reports the rows the
// statement changed.
func rowsAffected(r sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// inTx runs fn in a READ COMMITTED transaction on sh's pool for ctx's
// class, again after a deadlock, a lock wait timeout or a snapshot
// conflict: the server resolves them by rolling one side back, and every
// write here is safe to replay.
// The tries back off exponentially with jitter, so that writers meeting on
// a hot row (a user's header under fan-out, or every write slowed by a
// reshard's triggers) spread out instead of meeting again; a conflict that
// outlasts txAttempts reaches the caller as EUNAVAILABLE (errConflicts).
//
// Correctness rests on the rows a transaction locks (FOR UPDATE, or by
// writing them), never on a snapshot or a gap lock, so every transaction
// reads the latest committed rows at each statement. That is what makes it
// correct alike on InnoDB, on MyRocks (whose REPEATABLE READ reads the
// snapshot of a transaction's first statement, even in a DELETE's scan,
// and takes no gap locks) and on TiDB (whose REPEATABLE READ reads the
// transaction's start): an unfollow's purge must see the entries a fan-out
// committed a moment ago, and a follow's count the edge another follow
// just added. It also keeps InnoDB from locking gaps, so inserts beside a
// fan-out batch's range go on; a locking range read still waits for the
// first entry past its end (and lets it go at once), which is why a read
// of one user's rows looks them up by equality where it can (pullRowSQL).
func (sh *Shard) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	db := sh.pool(ctx)
	for i := 0; ; i++ {
		// A conflict an inner transaction (fan-out's on another
		// database) gave up on is not run again with this one, which
		// would run all of that one's tries again.
		err := runTx(ctx, db, fn)
		if err == nil || !Retryable(err) || Conflict(err) {
			return err
		}
		if i == txAttempts-1 {
			sh.conflicts.gaveUp.Add(1)
			return errors.Join(errConflicts, err)
		}
		sh.conflicts.retried.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(txBackoff(i)):
		}
	}
}

// conflicts counts the shard's transactions the server rolled back for a
// conflict, by what inTx did next: ran them again, or gave up (the last of
// txAttempts).
type conflicts struct{ retried, gaveUp atomic.Int64 }

// Conflicts returns the shard's conflict counts in this process, for the
// metrics: rollbacks inTx ran again, and transactions it gave up on.
func (sh *Shard) Conflicts() (retried, gaveUp int64) {
	return sh.conflicts.retried.Load(), sh.conflicts.gaveUp.Load()
}

// txAttempts and txBackoff bound inTx's tries: at most about half a second
// of waits in all, well inside a request's write deadline.
const (
	txAttempts   = 8
	txBackoffMin = 5 * time.Millisecond
	txBackoffMax = 200 * time.Millisecond
)

// txBackoff is the wait after the i-th failed try (from 0): doubling from
// txBackoffMin up to txBackoffMax, drawn from its upper half.
func txBackoff(i int) time.Duration {
	d := min(txBackoffMin<<i, txBackoffMax)
	return d/2 + rand.N(d/2+1)
}

var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

func runTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	tx, err := db.BeginTxx(ctx, readCommitted)
	if err != nil {
		return classify(err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return classify(tx.Commit())
}

// errConflicts is a transaction's end when the server kept rolling it back
// for other writers' locks: contention, not a fault, and the retry is safe.
var errConflicts = feed.Errorf(feed.EUNAVAILABLE, "the database is busy with conflicting writes; retry")

// MySQL error numbers the store acts on.
const (
	errCheckRead        = 1020 // MariaDB innodb_snapshot_isolation: a locked row changed after the snapshot
	errDupEntry         = 1062
	errTiDB             = 1105 // TiDB's catch-all, see tidbLockRetries
	errNoSuchTable      = 1146
	errLockWaitTimeout  = 1205
	errDeadlock         = 1213
	errInterrupted      = 1317 // KILL QUERY: sqlconn kills a statement whose context ended
	errStatementTimeout = 1969 // MariaDB max_statement_time
	errQueryTimeout     = 3024 // MySQL max_execution_time
)

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// tidbLockRetries is TiDB's message when a pessimistic lock met write
// conflicts more often than its retry limit (tidb_pessimistic_txn_retry):
// another transaction's writes won, as a deadlock's victim's lose on InnoDB.
const tidbLockRetries = "pessimistic lock retry limit reached"

// Retryable says whether a whole transaction may run again after err:
// a deadlock, a lock wait timeout, a snapshot conflict, or TiDB's lock
// retries running out.
// MariaDB under innodb_snapshot_isolation (a setting since 10.6.18, 10.11.8
// and 11.4.2, on by default from 11.6.2) refuses a locking read of a row
// changed after the transaction's snapshot with errCheckRead, where MySQL
// reads the latest row; a retry takes a fresh snapshot. Fan-out batches open
// no snapshot (batchFollowersSQL), so this is for the other transactions.
func Retryable(err error) bool {
	switch mysqlErrno(err) {
	case errDeadlock, errLockWaitTimeout, errCheckRead:
		return true
	case errTiDB:
		return strings.Contains(err.Error(), tidbLockRetries)
	}
	return false
}

// classify turns connection failures, and statements cut off by their
// deadline (killed on the server or timed out there), into EUNAVAILABLE so
// clients get a 503 they can retry instead of a 500; other errors pass
// through unchanged.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	if fenced(err) {
		return errors.Join(errFenced, err)
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.As(err, &ne) {
		return errors.Join(feed.Errorf(feed.EUNAVAILABLE, "database unavailable"), err)
	}
	switch mysqlErrno(err) {
	case errInterrupted, errStatementTimeout, errQueryTimeout:
		return errors.Join(errTimedOut, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.Join(errTimedOut, err)
	}
	return err
}

// errTimedOut is a statement cut off by its deadline.
var errTimedOut = feed.Errorf(feed.EUNAVAILABLE, "the database did not answer in time")

// wrap prefixes a database error with the operation and classifies it.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if feed.ErrorCode(err) != feed.EINTERNAL {
		return err
	}
	err = classify(fmt.Errorf("store: %s: %w", op, err))
	if feed.ErrorCode(err) == feed.EINTERNAL && Retryable(err) {
		// A statement outside inTx that met a conflict: contention too.
		return errors.Join(errConflicts, err)
	}
	return err
}

// Conflict says whether err is a conflict with other writers that outlasted
// the store's tries: contention, not a fault, and the caller may retry.
func Conflict(err error) bool { return errors.Is(err, errConflicts) }

// Package sqlconn is the store's connection plumbing, which knows no table:
// a connector whose statements are killed on the server when their context
// ends and whose connections write under an epoch, consistent snapshot
// reads, multi-row inserts and integer scans.
package sqlconn

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// killTimeout bounds one KILL QUERY: a server that does not answer it is
// down, and the statement dies with its connection anyway.
const killTimeout = 2 * time.Second

// The driver answers a cancelled context by closing its connection, which
// frees the caller but not the server: a statement waiting for a lock (a
// backup's FLUSH TABLES WITH READ LOCK, a long DDL) goes on waiting, and an
// autocommit write would still run once the lock is released. Connector
// makes every statement whose context ends while it runs be cancelled on the
// server too, with KILL QUERY sent over a small pool of its own, so a request
// past its deadline leaves nothing behind on the server.
type Connector struct {
	driver.Connector
	killer *sql.DB
	opt    Options
}

// Options are what a Connector asks of its owner.
type Options struct {
	// Epoch is the epoch a new connection writes under (the session
	// variable @feed_epoch, which the layout fence compares). A connection
	// whose epoch is no longer Epoch's is not reused. Nil: always 0.
	Epoch func() int64
	// Refused is told of every error a write returned, so the owner can
	// tell a write a fence refused (nil: nobody is told).
	Refused func(err error)
	// Trace, if set, sees every statement the connections send, with its
	// placeholders, before it is sent.
	Trace func(query string)
}

func (o Options) epoch() int64 {
	if o.Epoch == nil {
		return 0
	}
	return o.Epoch()
}

// rawConn is what the MySQL driver's connections implement and the pool
// relies on; killConn passes each method through.
type rawConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// rawStmt is what the driver's prepared statements implement.
type rawStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
	driver.NamedValueChecker
}

// NewConnector returns a connector for cfg whose statements are killed on
// the server when their context ends.
func NewConnector(cfg *mysql.Config, opt Options) (*Connector, error) {
	cfg = cfg.Clone()
	cfg.DialFunc = dialCaptured
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	killer := sql.OpenDB(c)
	killer.SetMaxOpenConns(2)
	killer.SetMaxIdleConns(1)
	return &Connector{Connector: c, killer: killer, opt: opt}, nil
}

// dialKey carries, in the context of Connect, where dialCaptured leaves the
// socket it opened.
type dialKey struct{}

// dialCaptured dials as the driver does and hands the socket to Connect, so
// that a connection whose COMMIT a hung server never answers can be closed
// under the driver's feet (killConn.Close).
func dialCaptured(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err == nil {
		if out, ok := ctx.Value(dialKey{}).(*net.Conn); ok {
			*out = conn
		}
	}
	return conn, err
}

// Connect opens a connection and learns its server-side id, one round trip
// per connection, so that a kill needs no lookup.
func (k *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	var sock net.Conn
	conn, err := k.Connector.Connect(context.WithValue(ctx, dialKey{}, &sock))
	if err != nil {
		return nil, err
	}
	raw, ok := conn.(rawConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("sqlconn: driver connection %T lacks context support", conn)
	}
	id, err := connectionID(ctx, raw)
	if err != nil {
		conn.Close()
		return nil, err
	}
	// The layout fence (layout_fence) compares this with the epoch a
	// database takes writes under.
	epoch := k.opt.epoch()
	if _, err := raw.ExecContext(ctx, "SET @feed_epoch = "+strconv.FormatInt(epoch, 10), nil); err != nil {
		conn.Close()
		return nil, err
	}
	return &killConn{raw: raw, id: id, killer: k.killer, sock: sock, epoch: epoch, opt: &k.opt}, nil
}

// Close closes the kill pool.
func (k *Connector) Close() error { return k.killer.Close() }

func connectionID(ctx context.Context, c rawConn) (uint64, error) {
	rows, err := c.QueryContext(ctx, "SELECT CONNECTION_ID()", nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		return 0, fmt.Errorf("sqlconn: connection id: %w", err)
	}
	switch v := dest[0].(type) {
	case int64:
		return uint64(v), nil
	case uint64: // TiDB's ids are unsigned 64-bit
		return v, nil
	case []byte:
		return strconv.ParseUint(string(v), 10, 64)
	}
	return 0, fmt.Errorf("sqlconn: connection id of type %T", dest[0])
}

// killConn is a driver connection whose statements are watched.
type killConn struct {
	raw    rawConn
	id     uint64
	killer *sql.DB
	// killed is set once a kill was sent: the connection is not reused,
	// since a late KILL QUERY could hit its next statement.
	killed atomic.Bool
	// sock is the connection's socket, closed under a COMMIT or ROLLBACK
	// whose context ends, so that a server that hangs holds nobody.
	sock net.Conn
	// epoch is the layout epoch the connection writes under (@feed_epoch):
	// once the store routes by a newer one the connection is not reused.
	epoch int64
	opt   *Options
}

// stale says whether the store routes by a newer epoch than the
// connection writes under.
func (c *killConn) stale() bool { return c.epoch != c.opt.epoch() }

// follow makes the connection write under the epoch pinned in ctx
// (WithEpoch), if it writes under another: the epoch its write chose its
// database by. The connection is then stale, and not reused.
func (c *killConn) follow(ctx context.Context) error {
	e, ok := EpochOf(ctx)
	if !ok || e == c.epoch {
		return nil
	}
	if _, err := c.raw.ExecContext(ctx, "SET @feed_epoch = "+strconv.FormatInt(e, 10), nil); err != nil {
		return err
	}
	c.epoch = e
	return nil
}

// refused tells the owner of a write's error.
func (c *killConn) refused(err error) {
	if err != nil && c.opt.Refused != nil {
		c.opt.Refused(err)
	}
}

// trace shows the owner a statement about to be sent.
func (c *killConn) trace(query string) {
	if c.opt.Trace != nil {
		c.opt.Trace(query)
	}
}

// watch sends KILL QUERY for this connection if ctx ends before the
// returned stop is called. stop marks the connection killed when the kill
// has started: a kill still on its way must not reach the connection's next
// statement, so the connection is not reused.
func (c *killConn) watch(ctx context.Context) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	stopKill := context.AfterFunc(ctx, func() {
		c.killed.Store(true)
		kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		defer cancel()
		// The id is a number from the server; KILL takes no placeholder.
		_, _ = c.killer.ExecContext(kctx, "KILL QUERY "+strconv.FormatUint(c.id, 10))
	})
	return func() {
		if !stopKill() {
			c.killed.Store(true)
		}
	}
}

func (c *killConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.trace(query)
	defer c.watch(ctx)()
	if err := c.follow(ctx); err != nil {
		return nil, err
	}
	r, err := c.raw.ExecContext(ctx, query, args)
	c.refused(err)
	return r, err
}

// QueryContext watches the statement until its first result arrives, which
// is where lock waits happen; once rows stream, the driver's own close of
// the connection on cancel ends the statement.
func (c *killConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.trace(query)
	defer c.watch(ctx)()
	return c.raw.QueryContext(ctx, query, args)
}

func (c *killConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.trace(query)
	st, err := c.raw.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	raw, ok := st.(rawStmt)
	if !ok {
		st.Close()
		return nil, fmt.Errorf("sqlconn: driver statement %T lacks context support", st)
	}
	return &killStmt{raw: raw, conn: c}, nil
}

// BeginTx keeps the transaction's context so its COMMIT, which the driver
// runs without one, is watched too: a commit waits for a backup's lock.
func (c *killConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	defer c.watch(ctx)()
	if err := c.follow(ctx); err != nil {
		return nil, err
	}
	tx, err := c.raw.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &killTx{raw: tx, conn: c, ctx: ctx}, nil
}

func (c *killConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *killConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *killConn) Close() error { return c.raw.Close() }

func (c *killConn) Ping(ctx context.Context) error              { return c.raw.Ping(ctx) }
func (c *killConn) CheckNamedValue(nv *driver.NamedValue) error { return c.raw.CheckNamedValue(nv) }
func (c *killConn) IsValid() bool {
	return !c.killed.Load() && !c.stale() && c.raw.IsValid()
}

func (c *killConn) ResetSession(ctx context.Context) error {
	if c.killed.Load() || c.stale() {
		return driver.ErrBadConn
	}
	return c.raw.ResetSession(ctx)
}

type killStmt struct {
	raw  rawStmt
	conn *killConn
}

func (s *killStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	defer s.conn.watch(ctx)()
	return s.raw.ExecContext(ctx, args)
}

func (s *killStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	defer s.conn.watch(ctx)()
	return s.raw.QueryContext(ctx, args)
}

func (s *killStmt) Close() error                                { return s.raw.Close() }
func (s *killStmt) NumInput() int                               { return s.raw.NumInput() }
func (s *killStmt) CheckNamedValue(nv *driver.NamedValue) error { return s.raw.CheckNamedValue(nv) }

// Exec and Query complete driver.Stmt; database/sql calls the context forms.
func (s *killStmt) Exec(args []driver.Value) (driver.Result, error) { return s.raw.Exec(args) }
func (s *killStmt) Query(args []driver.Value) (driver.Rows, error)  { return s.raw.Query(args) }

type killTx struct {
	raw  driver.Tx
	conn *killConn
	ctx  context.Context
}

func (t *killTx) Commit() error   { return t.end(t.raw.Commit) }
func (t *killTx) Rollback() error { return t.end(t.raw.Rollback) }

// end runs COMMIT or ROLLBACK, which the driver sends without a context,
// under the transaction's. A transaction whose context has already ended
// sends nothing: the connection is dropped, and the server rolls the
// transaction back with it. One whose context ends while the statement
// runs has it killed and its socket closed, which ends the driver's wait
// whatever the server does; the outcome of a commit cut off so is unknown,
// but the caller's write is one transaction, so it happened whole or not at
// all. Either way the connection is not reused.
func (t *killTx) end(f func() error) error {
	if t.ctx.Done() == nil {
		return f()
	}
	if t.ctx.Err() != nil {
		t.conn.killed.Store(true)
		return driver.ErrBadConn
	}
	stop := t.conn.watch(t.ctx)
	unblock := context.AfterFunc(t.ctx, func() {
		if t.conn.sock != nil {
			_ = t.conn.sock.Close()
		}
	})
	err := f()
	if !unblock() {
		t.conn.killed.Store(true)
		err = cmp.Or(t.ctx.Err(), err)
	}
	stop()
	return err
}

// epochKey carries, in a write's context, the epoch its connections write under.
type epochKey struct{}

// WithEpoch returns ctx whose statements run on connections that write
// under epoch e: one that writes under another first sets it, and is not
// reused afterwards.
func WithEpoch(ctx context.Context, e int64) context.Context {
	return context.WithValue(ctx, epochKey{}, e)
}

// EpochOf is the epoch WithEpoch recorded in ctx, if any.
func EpochOf(ctx context.Context) (int64, bool) {
	e, ok := ctx.Value(epochKey{}).(int64)
	return e, ok
}

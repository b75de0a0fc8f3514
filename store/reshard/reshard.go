// Package reshard moves virtual shards between databases while feedd
// serves. The rows of every table keyed by an id of a moving virtual shard
// are copied to the database the new map names, the writes made meanwhile
// are captured and applied (online.go), the copies are verified against
// their sources, and the new layout is recorded with the next epoch in a
// short pause of the source's writes. Every step can run again after a
// crash: copies insert what is missing, captured writes stay logged until
// applied, verification reads, the cut-over is one transaction.
package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
)

// KeyedTable is a table whose rows move with a virtual shard, and the
// column whose id places a row.
type KeyedTable struct{ Name, Key string }

// Keyed lists every keyed table.
var Keyed = []KeyedTable{
	{"posts", "author_id"},
	{"deliveries", "author_id"},
	{"fanout_tasks", "author_id"},
	{"followers", "author_id"},
	{"authors", "author_id"},
	{"hidden_from", "author_id"},
	{"streams", "host_id"},
	{"inbox", "user_id"},
	{"following", "user_id"},
	{"follow_events", "user_id"},
	{"kept_history", "user_id"},
	{"markers", "user_id"},
	{"mutes", "user_id"},
	{"user_counts", "user_id"},
	{"replays", "user_id"},
	{"replay_floors", "user_id"},
	{"live_sessions", "user_id"},
	{"console_sessions", "session_id"},
	{"moves", "user_id"},
	{"content_ids", "content_id"},
	{"imports", "import_id"},
	{"import_marks", "id"},
}

// Move is a run of virtual shards that changes database.
type Move struct {
	First, Last int
	From, To    string
}

func (m Move) String() string {
	return fmt.Sprintf("vshards %d-%d: %s -> %s", m.First, m.Last, m.From, m.To)
}

// Progress reports rows handled by a long step.
type Progress struct {
	Step  string // "count", "copy", "verify", "cleanup", "abort"
	Table string
	Rows  int64 // rows read so far in this step
	Moved int64 // rows of moving virtual shards among them
	// Estimate is the server's estimate of the table's rows (InnoDB's
	// TABLE_ROWS), for a rate's ETA; the scan may read more or fewer.
	Estimate int64
}

// DefaultBatchSize is Options.BatchSize when it is not set.
const DefaultBatchSize = 1000

// Options tune a reshard.
type Options struct {
	// BatchSize is the rows one statement reads or writes
	// (DefaultBatchSize); a copy within one server takes InServerBatches
	// batches a statement.
	BatchSize int
	// Throttle is a pause after each batch, to spare a busy server.
	Throttle time.Duration
	// Progress, if set, is called after each batch.
	Progress func(Progress)
	// Log receives the migrations' lines (nil: discarded).
	Log *slog.Logger
}

// Reshard is a move from the layout in force to the layout of a map.
type Reshard struct {
	dbs     map[string]*sqlx.DB
	names   []string // of dbs, sorted
	epoch   int64    // of the layout in force
	inForce []string // database of each virtual shard, in force
	target  []string // database of each virtual shard, wanted
	Moves   []Move
	opt     Options
}

// Open connects to every database of m (which may list databases that
// own no range: those being emptied) and reads the layout in force.
func Open(ctx context.Context, m *shardmap.Map, opt Options) (*Reshard, error) {
	target, err := m.Owners()
	if err != nil {
		return nil, err
	}
	if opt.BatchSize < 1 {
		opt.BatchSize = DefaultBatchSize
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	r := &Reshard{dbs: map[string]*sqlx.DB{}, target: target, opt: opt}
	for name, cfg := range m.Databases {
		// A database new to the deployment gets the schema first.
		if err := store.MigrateDatabase(ctx, name, cfg.DSN, store.Engine(m.InboxEngine), opt.Log); err != nil {
			r.Close()
			return nil, fmt.Errorf("reshard: %w", err)
		}
		c, err := mysql.ParseDSN(cfg.DSN)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("reshard: database %q: bad dsn: %w", name, err)
		}
		c.InterpolateParams = true
		db, err := sqlx.Open("mysql", c.FormatDSN())
		if err != nil {
			r.Close()
			return nil, err
		}
		db.SetMaxOpenConns(4)
		r.dbs[name] = db
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	if store.Engine(m.InboxEngine) == store.RocksDB {
		r.warnStaleEstimates(ctx)
	}
	var layout string
	for _, name := range r.names {
		if got, err := store.ReadIdentity(ctx, r.dbs[name]); err != nil {
			r.Close()
			return nil, fmt.Errorf("reshard: database %s: %w", name, err)
		} else if got != "" && got != name {
			r.Close()
			return nil, fmt.Errorf("reshard: the dsn of database %s reaches the database named %s", name, got)
		}
		e, l, err := store.ReadLayout(ctx, r.dbs[name])
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("reshard: database %s: %w", name, err)
		}
		if e > r.epoch {
			r.epoch, layout = e, l
		}
	}
	if r.epoch == 0 {
		r.Close()
		return nil, fmt.Errorf("reshard: no database records a layout in force: start feedd once with the map the data is laid out by")
	}
	if r.inForce, err = shardmap.ParseLayout(layout); err != nil {
		r.Close()
		return nil, fmt.Errorf("reshard: the layout in force (epoch %d): %w", r.epoch, err)
	}
	if len(r.inForce) != len(target) {
		r.Close()
		return nil, fmt.Errorf("reshard: the map has %d virtual shards, the data %d; the count cannot change", len(target), len(r.inForce))
	}
	for _, name := range r.inForce {
		if _, ok := r.dbs[name]; !ok {
			r.Close()
			return nil, fmt.Errorf("reshard: database %s holds virtual shards in force but is not in the map; list it there (with no ranges if it is being emptied)", name)
		}
	}
	r.Moves = moves(r.inForce, target)
	return r, nil
}

// memtableStatsSQL reads how often MyRocks counts the rows a table holds
// in memory (microseconds); deploy/rocksdb.cnf sets a second.
const memtableStatsSQL = `SELECT @@rocksdb_force_compute_memtable_stats_cachetime`

// warnStaleEstimates warns of a server that counts them less often: until
// it does, a receiving inbox the copy just filled looks empty to the
// optimizer, which plans catch-up's deletes by key as scans of the table.
func (r *Reshard) warnStaleEstimates(ctx context.Context) {
	for _, name := range r.names {
		var us int64
		if err := r.dbs[name].GetContext(ctx, &us, memtableStatsSQL); err != nil || us <= 1_000_000 {
			continue
		}
		r.opt.Log.Warn("reshard: MyRocks counts a table's rows in memory less often than once a second; catch-up may scan the inbox: set rocksdb_force_compute_memtable_stats_cachetime as deploy/rocksdb.cnf does",
			"database", name, "rocksdb_force_compute_memtable_stats_cachetime", us)
	}
}

// Close closes the connections.
func (r *Reshard) Close() {
	for _, db := range r.dbs {
		db.Close()
	}
}

// Epoch is the epoch of the layout in force.
func (r *Reshard) Epoch() int64 { return r.epoch }

// LayoutInForce and Target are the canonical texts of both layouts.
func (r *Reshard) LayoutInForce() string { return shardmap.FormatLayout(r.inForce) }
func (r *Reshard) Target() string        { return shardmap.FormatLayout(r.target) }

// moves lists the runs of virtual shards whose database changes.
func moves(from, to []string) []Move {
	var out []Move
	for v := 0; v < len(from); {
		if from[v] == to[v] {
			v++
			continue
		}
		last := v
		for last+1 < len(from) && from[last+1] == from[v] && to[last+1] == to[v] {
			last++
		}
		out = append(out, Move{First: v, Last: last, From: from[v], To: to[v]})
		v = last + 1
	}
	return out
}

// table is a keyed table as the server describes it.
type table struct {
	name string
	cols []string // in order
	pk   []int    // indexes into cols
	key  int      // index of the placing id into cols
	// order is the placing id, then the rest of the primary key: the
	// order rows are read by id in (groups.go).
	order []int
	// byID names the index whose columns begin with order ("" if none):
	// it finds an id's rows without reading the others'.
	byID string
}

// pkOf returns the primary key values of row, a row of t.
func (t table) pkOf(row []any) []any {
	k := make([]any, len(t.pk))
	for i, c := range t.pk {
		k[i] = row[c]
	}
	return k
}

// describeByName is describe, by table name.
func describeByName(ctx context.Context, db *sqlx.DB) (map[string]table, error) {
	tables, err := describe(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make(map[string]table, len(tables))
	for _, t := range tables {
		out[t.name] = t
	}
	return out, nil
}

// allClaimable says whether every row of t is claimable: the copy takes
// none of them, and catch-up has nothing of t to apply.
func (t table) allClaimable() bool {
	c, ok := store.Claimable[t.name]
	return ok && c.Col == ""
}

// claimable says whether workers may claim row, a row of t. Such rows move
// right after the cut-over, not with the copy: on the database receiving
// them, its workers would otherwise take up work that is not its own yet.
func (t table) claimable(row []any) bool {
	c, ok := store.Claimable[t.name]
	if !ok {
		return false
	}
	if c.Col == "" {
		return true
	}
	b, _ := row[slices.Index(t.cols, c.Col)].([]byte)
	return slices.Contains(c.Values, string(b))
}

const estimateSQL = `SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`

// estimate returns the server's estimate of a table's rows (0 if unknown).
func estimate(ctx context.Context, db *sqlx.DB, name string) int64 {
	var n int64
	_ = db.GetContext(ctx, &n, estimateSQL, name)
	return n
}

const columnsSQL = `SELECT COLUMN_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`

const indexesSQL = `SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY INDEX_NAME <> 'PRIMARY', INDEX_NAME, SEQ_IN_INDEX`

// describe reads the keyed tables' columns and primary keys from db.
func describe(ctx context.Context, db *sqlx.DB) ([]table, error) {
	out := make([]table, 0, len(Keyed))
	for _, k := range Keyed {
		t := table{name: k.Name, key: -1}
		if err := db.SelectContext(ctx, &t.cols, columnsSQL, k.Name); err != nil {
			return nil, err
		}
		var idx []struct {
			Name   string `db:"INDEX_NAME"`
			Column string `db:"COLUMN_NAME"`
		}
		if err := db.SelectContext(ctx, &idx, indexesSQL, k.Name); err != nil {
			return nil, err
		}
		indexes := map[string][]int{}
		var names []string // PRIMARY first
		for _, c := range idx {
			if indexes[c.Name] == nil {
				names = append(names, c.Name)
			}
			indexes[c.Name] = append(indexes[c.Name], slices.Index(t.cols, c.Column))
		}
		t.key = slices.Index(t.cols, k.Key)
		t.pk = indexes["PRIMARY"]
		if len(t.cols) == 0 || t.key < 0 || len(t.pk) == 0 || slices.Contains(t.pk, -1) {
			return nil, fmt.Errorf("table %s: unexpected schema (columns %v, primary key %v): migrate every database first", k.Name, t.cols, t.pk)
		}
		t.order = append([]int{t.key}, slices.DeleteFunc(slices.Clone(t.pk), func(c int) bool { return c == t.key })...)
		for _, name := range names {
			if cols := indexes[name]; len(cols) >= len(t.order) && slices.Equal(cols[:len(t.order)], t.order) {
				t.byID = name
				break
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// quoted returns the columns backquoted and comma-separated.
func quoted(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = "`" + c + "`"
	}
	return strings.Join(q, ", ")
}

// after returns the keyset predicate "pk > last" in its long form, which
// every MySQL-family server range-scans, and its arguments.
func (t table) after(last []any) (string, []any) { return t.keyset(t.pk, last, ">", ">") }

// keyset returns the predicate comparing the columns cols (indexes into
// t.cols) with those of row in its long form: "c1 op c2 op ..." in tuple
// order, strict op on every column but the last, which takes lastOp. So
// ">" and ">" is "cols > row", "<" and "<=" is "cols <= row".
func (t table) keyset(cols []int, row []any, op, lastOp string) (string, []any) {
	var b strings.Builder
	var args []any
	for i, c := range cols {
		col := "`" + t.cols[c] + "`"
		if i == len(cols)-1 {
			b.WriteString(col + " " + lastOp + " ?")
			args = append(args, row[c])
			break
		}
		b.WriteString(col + " " + op + " ? OR (" + col + " = ? AND (")
		args = append(args, row[c], row[c])
	}
	b.WriteString(strings.Repeat("))", len(cols)-1))
	return b.String(), args
}

// scan reads every row of t on db in primary key order, batch by batch,
// and calls fn with each row's placing id and values (nil for NULL). The
// index is forced for the reason rowsByKey gives.
func (r *Reshard) scan(ctx context.Context, db *sqlx.DB, t table, fn func(id uint64, row []any) error) error {
	cols := quoted(t.cols)
	order := make([]string, len(t.pk))
	for i, c := range t.pk {
		order[i] = "`" + t.cols[c] + "`"
	}
	var last []any
	for {
		q := "SELECT " + cols + " FROM `" + t.name + "` FORCE INDEX (PRIMARY)"
		var args []any
		if last != nil {
			where, a := t.after(last)
			q += " WHERE " + where
			args = a
		}
		q += " ORDER BY " + strings.Join(order, ", ") + " LIMIT ?"
		args = append(args, r.opt.BatchSize)
		n, err := scanBatch(ctx, db, q, args, len(t.cols), func(row []any) error {
			last = row
			id, err := placingID(row[t.key])
			if err != nil {
				return fmt.Errorf("table %s: %w", t.name, err)
			}
			return fn(id, row)
		})
		if err != nil {
			return err
		}
		if n < r.opt.BatchSize {
			return nil
		}
		if err := r.pause(ctx); err != nil {
			return err
		}
	}
}

func scanBatch(ctx context.Context, db sqlx.QueryerContext, q string, args []any, ncols int, fn func(row []any) error) (int, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	raw := make([]sql.RawBytes, ncols)
	ptrs := make([]any, ncols)
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		row := make([]any, ncols)
		for i, b := range raw {
			if b != nil {
				row[i] = []byte(strings.Clone(string(b)))
			}
		}
		n++
		if err := fn(row); err != nil {
			return n, err
		}
	}
	return n, rows.Err()
}

func placingID(v any) (uint64, error) {
	b, ok := v.([]byte)
	if !ok {
		return 0, fmt.Errorf("a row without its placing id")
	}
	var id uint64
	if _, err := fmt.Sscan(string(b), &id); err != nil {
		return 0, fmt.Errorf("placing id %q: %w", b, err)
	}
	return id, nil
}

// vshard returns the virtual shard of an id.
func (r *Reshard) vshard(id uint64) int { return shardmap.VirtualShard(id, len(r.target)) }

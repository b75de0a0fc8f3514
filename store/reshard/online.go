package reshard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/sqlconn"
)

// Writes go on while a reshard copies. Triggers capture them: on the
// database giving virtual shards up and on the ones receiving them, every
// row a statement inserts, updates or deletes in a keyed table is logged,
// by table and primary key, in reshard_changes while layout_fence.capture
// is set. Catching up reads each logged row again on the source and writes
// what it finds (or the deletion) to the target, so the order of the log
// does not matter and applying an entry twice changes nothing. The source
// is the truth until the cut-over: a write the service makes on a target
// to a moving row (a push through a copied follow edge) is logged there
// and undone or confirmed by the same rule.
//
// Only feedd's writes are captured and fenced: its connections, and no
// other client's, set @feed_epoch. The reshard's own writes (the copy,
// catching up, the cut-over's deletes) are neither.
//
// The same triggers fence stale writers. Each connection of feedd records
// the layout epoch it routes by (@feed_epoch); the trigger locks its
// connection's row of layout_fence (FOR UPDATE: one of fenceStripes rows,
// so concurrent writers rarely share one) and refuses a write from a
// connection of an older epoch than the database's. The cut-over locks
// every row: writes in flight finish first, new ones wait; the last
// changes are applied; the rows get the next epoch in the transaction that
// records the new layout; and the waiting writes are refused as stale, so
// their processes route by the new layout and retry there.

// ErrTiDB is why a reshard refuses to move virtual shards from or to a
// database on TiDB: TiDB has no triggers, so writes could be neither
// captured nor fenced. TiDB needs no resharding either: it splits and
// moves its data across its storage nodes by itself.
var ErrTiDB = errors.New("online resharding is not supported on TiDB: it captures writes and fences stale writers with triggers, which TiDB does not have; " +
	"a TiDB deployment is one database in sharding.yaml and scales out by TiDB's own means (add TiKV nodes; placement rules place data)")

// CheckServer returns ErrTiDB, naming the database, when db is on TiDB.
func CheckServer(ctx context.Context, name string, db sqlx.QueryerContext) error {
	tidb, err := store.IsTiDB(ctx, db)
	if err != nil {
		return fmt.Errorf("reshard: database %s: %w", name, err)
	}
	if tidb {
		return fmt.Errorf("reshard: database %s is on TiDB: %w", name, ErrTiDB)
	}
	return nil
}

// checkServers refuses a reshard whose moves give or take virtual shards
// on TiDB (CheckServer).
func (r *Reshard) checkServers(ctx context.Context) error {
	for _, m := range r.Moves {
		for _, name := range []string{m.From, m.To} {
			if err := CheckServer(ctx, name, r.dbs[name]); err != nil {
				return err
			}
		}
	}
	return nil
}

// fenceStripes is the number of layout_fence rows. A writer locks the row
// of its connection id, exclusively, so two writers wait for each other
// only when their connections share a row.
const fenceStripes = "64"

// trigger names are feed_fence_<table>_<ins|upd|del>.
func triggerName(table, event string) string {
	return "feed_fence_" + table + "_" + strings.ToLower(event[:3])
}

var events = []string{"INSERT", "UPDATE", "DELETE"}

// triggerSQL is the fence and capture trigger of one table and event.
func triggerSQL(t table, event string) string {
	rowPK := func(row string) string {
		cols := make([]string, len(t.pk))
		for i, c := range t.pk {
			cols[i] = row + ".`" + t.cols[c] + "`"
		}
		return "JSON_ARRAY(" + strings.Join(cols, ", ") + ")"
	}
	logRow := func(row string) string {
		return "INSERT INTO reshard_changes (table_name, id, pk) VALUES ('" + t.name + "', " +
			row + ".`" + t.cols[t.key] + "`, " + rowPK(row) + ");"
	}
	var capture string
	switch event {
	case "INSERT":
		capture = logRow("NEW")
	case "DELETE":
		capture = logRow("OLD")
	default:
		capture = logRow("NEW") + " IF " + rowPK("OLD") + " <> " + rowPK("NEW") + " THEN " + logRow("OLD") + " END IF;"
	}
	return "CREATE TRIGGER `" + triggerName(t.name, event) + "` AFTER " + event + " ON `" + t.name + "` FOR EACH ROW BEGIN " +
		"DECLARE e BIGINT DEFAULT 0; DECLARE c TINYINT DEFAULT 0; " +
		"IF @feed_epoch IS NOT NULL THEN " +
		"SELECT epoch, capture INTO e, c FROM layout_fence WHERE id = CONNECTION_ID() % " + fenceStripes + " FOR UPDATE; " +
		"IF @feed_epoch < e THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '" + store.FencedMessage + "'; END IF; " +
		"IF c = 1 THEN " + capture + " END IF; END IF; END"
}

const (
	// fenceSQL raises every fence row to the epoch in force, creating the
	// rows a database lacks.
	fenceSQL        = `INSERT INTO layout_fence (id, epoch, capture) WITH RECURSIVE stripe (id) AS (SELECT 0 UNION ALL SELECT id + 1 FROM stripe WHERE id + 1 < ` + fenceStripes + `) SELECT id, ?, 0 FROM stripe ON DUPLICATE KEY UPDATE epoch = GREATEST(epoch, VALUES(epoch))`
	triggersSQL     = `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE 'feed\_fence\_%'`
	captureSQL      = `SELECT capture FROM layout_fence WHERE id = 0`
	captureOnSQL    = `UPDATE layout_fence SET capture = 1`
	clearChangesSQL = `DELETE FROM reshard_changes`
	// ddlWaitSQL bounds how long CREATE or DROP TRIGGER waits for the
	// table's metadata lock: behind a long transaction it would hold up
	// every statement on the table meanwhile.
	ddlWaitSQL = `SET SESSION lock_wait_timeout = 2`
)

// startCapture fences a database at the epoch in force and turns the
// capture on, then installs the missing triggers. A database whose capture
// was off starts with an empty log; one whose capture is on (a run cut
// short) keeps its log, which holds what the copy has not seen.
func (r *Reshard) startCapture(ctx context.Context, name string) error {
	db := r.dbs[name]
	// Writers lock fence rows while triggers exist (a run cut short): the
	// update may deadlock with them, and runs again.
	if err := r.exec(ctx, name, fenceSQL, r.epoch); err != nil {
		return fmt.Errorf("reshard: database %s: fence: %w", name, err)
	}
	var on int
	if err := db.GetContext(ctx, &on, captureSQL); err != nil {
		return fmt.Errorf("reshard: database %s: %w", name, err)
	}
	if on == 0 {
		for _, q := range []string{clearChangesSQL, captureOnSQL} {
			if err := r.exec(ctx, name, q); err != nil {
				return fmt.Errorf("reshard: database %s: start capture: %w", name, err)
			}
		}
	}
	return r.installTriggers(ctx, name)
}

// installTriggers creates the fence triggers a database lacks.
func (r *Reshard) installTriggers(ctx context.Context, name string) error {
	db := r.dbs[name]
	var have []string
	if err := db.SelectContext(ctx, &have, triggersSQL); err != nil {
		return fmt.Errorf("reshard: database %s: %w", name, err)
	}
	tables, err := describe(ctx, db)
	if err != nil {
		return fmt.Errorf("reshard: database %s: %w", name, err)
	}
	conn, err := ddlConn(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, t := range tables {
		for _, ev := range events {
			if slices.Contains(have, triggerName(t.name, ev)) {
				continue
			}
			if err := retryDDL(ctx, conn, triggerSQL(t, ev)); err != nil {
				return fmt.Errorf("reshard: database %s: create trigger on %s: %w", name, t.name, err)
			}
		}
	}
	return nil
}

// dropTriggers removes the fence triggers of a database.
func (r *Reshard) dropTriggers(ctx context.Context, name string) error {
	db := r.dbs[name]
	var have []string
	if err := db.SelectContext(ctx, &have, triggersSQL); err != nil {
		return fmt.Errorf("reshard: database %s: %w", name, err)
	}
	conn, err := ddlConn(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, trg := range have {
		if err := retryDDL(ctx, conn, "DROP TRIGGER IF EXISTS `"+trg+"`"); err != nil {
			return fmt.Errorf("reshard: database %s: drop trigger %s: %w", name, trg, err)
		}
	}
	return nil
}

// ddlConn is a connection whose DDL waits at most ddlWaitSQL's bound for
// a metadata lock.
func ddlConn(ctx context.Context, db *sqlx.DB) (*sqlx.Conn, error) {
	conn, err := db.Connx(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, ddlWaitSQL); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// retryDDL runs a trigger statement, again after a metadata lock timeout
// (a transaction held the table).
func retryDDL(ctx context.Context, conn *sqlx.Conn, q string) error {
	return retryLocked(ctx, func() error {
		_, err := conn.ExecContext(ctx, q)
		return err
	})
}

// exec runs a statement on a database, again after a deadlock or a lock
// wait timeout (retryLocked).
func (r *Reshard) exec(ctx context.Context, name, q string, args ...any) error {
	return retryLocked(ctx, func() error {
		_, err := r.dbs[name].ExecContext(ctx, q, args...)
		return err
	})
}

// retryLocked runs fn again after a deadlock or a lock wait timeout: up to
// ten times, a growing pause apart. Fence rows are locked by the writers
// of a database with triggers, so the reshard's own writes to them meet
// both.
func retryLocked(ctx context.Context, fn func() error) error {
	var err error
	for i := range 10 {
		if err = fn(); err == nil || !store.Retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(i+1) * 100 * time.Millisecond):
		}
	}
	return err
}

// resyncChunk bounds the logged keys one catch-up write covers.
const resyncChunk = 200

// change is a logged row: its table and primary key.
type change struct {
	seq   uint64
	table string
	id    uint64
	pk    string
}

const changesSQL = `SELECT seq, table_name, id, pk FROM reshard_changes ORDER BY seq LIMIT ?`

// changesBatch is the fewest log entries a catch-up statement reads: a
// small --batch-size spares a busy server during the copy, but the log
// must be applied faster than it is written.
const changesBatch = 1000

// drained reports a catch-up pass.
type drained struct {
	applied int          // rows read again and written to their target
	touched map[int]bool // virtual shards they belong to
}

// drain applies the changes logged on database name whose rows belong to
// a moving virtual shard, reading each row again on its source and writing
// it to its target, and deletes the log entries it read. With all set it
// runs until the log is empty; otherwise one pass over the entries that
// were there when it started.
func (r *Reshard) drain(ctx context.Context, name string, tables map[string]table, all bool, out *drained) error {
	db := r.dbs[name]
	var until uint64
	if !all {
		if err := db.GetContext(ctx, &until, `SELECT COALESCE(MAX(seq), 0) FROM reshard_changes`); err != nil {
			return err
		}
	}
	for {
		batch, err := r.drainPass(ctx, name, tables, out)
		if err != nil || len(batch) == 0 {
			return err
		}
		seqs := make([]any, len(batch))
		for i, c := range batch {
			seqs[i] = c.seq
		}
		if err := r.exec(ctx, name, "DELETE FROM reshard_changes WHERE seq IN (?"+strings.Repeat(",?", len(seqs)-1)+")", seqs...); err != nil {
			return err
		}
		if !all && batch[len(batch)-1].seq >= until {
			return nil
		}
	}
}

// drainPass applies one batch of the log of database name and returns its
// entries. It reads the log, and the rows logged there
// that database name holds, in one consistent snapshot across engines: a
// transaction that writes the inbox in RocksDB and logs the change in
// InnoDB commits in one engine before the other, and a snapshot sees it in
// both or in neither, so an entry is never applied before its row shows
// (docs/SHARDING.md, "Capturing writes").
func (r *Reshard) drainPass(ctx context.Context, name string, tables map[string]table, out *drained) ([]change, error) {
	snap, err := sqlconn.OpenConsistentRead(ctx, r.dbs[name])
	if err != nil {
		return nil, err
	}
	defer snap.Close(ctx)
	var batch []change
	rows, err := snap.QueryxContext(ctx, changesSQL, max(r.opt.BatchSize, changesBatch))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var c change
		if err := rows.Scan(&c.seq, &c.table, &c.id, &c.pk); err != nil {
			rows.Close()
			return nil, err
		}
		batch = append(batch, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// By table, then by source and target: each group is one read and
	// one write.
	type group struct{ table, from, to string }
	keys := map[group]map[string]bool{}
	for _, c := range batch {
		v := r.vshard(c.id)
		if t, ok := tables[c.table]; !ok || r.inForce[v] == r.target[v] || t.allClaimable() {
			continue // not moving, or moving only after the cut-over
		}
		out.touched[v] = true
		g := group{c.table, r.inForce[v], r.target[v]}
		if keys[g] == nil {
			keys[g] = map[string]bool{}
		}
		keys[g][c.pk] = true
	}
	for g, pks := range keys {
		var src sqlx.QueryerContext = r.dbs[g.from]
		if g.from == name {
			src = snap
		}
		for chunk := range slices.Chunk(slices.Sorted(maps.Keys(pks)), resyncChunk) {
			n, err := r.resyncRetried(ctx, tables[g.table], src, g.to, chunk)
			if err != nil {
				return nil, fmt.Errorf("reshard: catch up %s (%s -> %s): %w", g.table, g.from, g.to, err)
			}
			out.applied += n
		}
	}
	return batch, nil
}

// resyncRetried is resync, run again when its write meets the target's
// workers: they lock the rows they work on, so a write there may deadlock
// with them (or, on MyRocks, meet their newer writes as a snapshot
// conflict). Keys whose write keeps meeting them are resynced in halves,
// down to one key a statement: short statements keep a busy target's
// conflicts to the rows they touch (one statement over thousands of rows
// met one on every try).
func (r *Reshard) resyncRetried(ctx context.Context, t table, from sqlx.QueryerContext, to string, pks []string) (int, error) {
	var n int
	err := retryLocked(ctx, func() error {
		var err error
		n, err = r.resync(ctx, t, from, to, pks)
		return err
	})
	if err == nil || len(pks) == 1 || !store.Retryable(err) {
		return n, err
	}
	half := len(pks) / 2
	a, err := r.resyncRetried(ctx, t, from, to, pks[:half])
	if err != nil {
		return a, err
	}
	b, err := r.resyncRetried(ctx, t, from, to, pks[half:])
	return a + b, err
}

// resync makes the rows of t with the given primary keys (JSON arrays) on
// database to what they are on database from: written where found, deleted
// where not.
func (r *Reshard) resync(ctx context.Context, t table, from sqlx.QueryerContext, to string, pks []string) (int, error) {
	var keys [][]any
	for _, pk := range pks {
		k, err := decodePK(pk)
		if err != nil || len(k) != len(t.pk) {
			return 0, fmt.Errorf("logged key %s: %v", pk, err)
		}
		keys = append(keys, k)
	}
	found, err := r.rowsByKey(ctx, from, t, keys)
	if err != nil {
		return 0, err
	}
	// A claimable row moves after the cut-over (settleClaimable), so the
	// target holds no copy of it meanwhile, as the copy takes none: one
	// made while the row was not claimable (a done delivery whose post is
	// then deleted) is stale, and verify would count it there.
	for k, row := range found {
		if t.claimable(row) {
			delete(found, k)
		}
	}
	if len(found) > 0 {
		rows := slices.Collect(maps.Values(found))
		head := "REPLACE INTO `" + t.name + "` (" + quoted(t.cols) + ")"
		if _, err := sqlconn.InsertRows(ctx, r.dbs[to], head, len(t.cols), "", len(rows), func(i int) []any { return rows[i] }); err != nil {
			return 0, err
		}
	}
	var gone [][]any
	for _, k := range keys {
		if _, ok := found[keyString(k)]; !ok {
			gone = append(gone, k)
		}
	}
	if len(gone) > 0 {
		if err := deleteKeys(ctx, r.dbs[to], t, gone); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// rowsByKey reads the rows of t with the given primary keys, by key. The
// index is forced: with estimates that leave out recent rows (MyRocks
// counts a memtable's rows only every rocksdb_force_compute_memtable_stats_cachetime)
// the optimizer would rather scan the table than look up a thousand keys.
func (r *Reshard) rowsByKey(ctx context.Context, db sqlx.QueryerContext, t table, keys [][]any) (map[string][]any, error) {
	out := map[string][]any{}
	q, args := byKeys(t, keys)
	_, err := scanBatch(ctx, db, "SELECT "+quoted(t.cols)+" FROM `"+t.name+"` FORCE INDEX (PRIMARY) WHERE "+q, args, len(t.cols), func(row []any) error {
		k := t.pkOf(row)
		for i, v := range k {
			k[i] = string(v.([]byte))
		}
		out[keyString(k)] = row
		return nil
	})
	return out, err
}

// byKeys is the condition "primary key is one of keys" and its arguments.
func byKeys(t table, keys [][]any) (string, []any) {
	cols := make([]string, len(t.pk))
	for i, c := range t.pk {
		cols[i] = "`" + t.cols[c] + "` = ?"
	}
	one := "(" + strings.Join(cols, " AND ") + ")"
	args := make([]any, 0, len(keys)*len(t.pk))
	for _, k := range keys {
		args = append(args, k...)
	}
	return strings.TrimSuffix(strings.Repeat(one+" OR ", len(keys)), " OR "), args
}

// decodePK turns a logged JSON array into arguments: numbers as their
// decimal text, which the server compares exactly with integer columns.
func decodePK(pk string) ([]any, error) {
	d := json.NewDecoder(strings.NewReader(pk))
	d.UseNumber()
	var vals []any
	if err := d.Decode(&vals); err != nil {
		return nil, err
	}
	for i, v := range vals {
		switch v := v.(type) {
		case json.Number:
			vals[i] = v.String()
		case string:
		default:
			return nil, fmt.Errorf("unexpected value %v", v)
		}
	}
	return vals, nil
}

// keyString is a primary key's map key; its values are decimal or
// string texts.
func keyString(k []any) string {
	parts := make([]string, len(k))
	for i, v := range k {
		parts[i] = v.(string)
	}
	return strings.Join(parts, "\x00")
}

package reshard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
)

// Plan is what a reshard would move: rows per table, and how fast this
// machine read them (the copy reads the same rows once more and writes
// them).
type Plan struct {
	Moves   []Move
	Rows    map[string]int64 // by table: rows of moving virtual shards
	Scanned int64            // rows read to count them
	Elapsed time.Duration
}

// Plan counts the rows each table would move, reading every source
// database's keyed tables once.
func (r *Reshard) Plan(ctx context.Context) (Plan, error) {
	p := Plan{Moves: r.Moves, Rows: map[string]int64{}}
	start := time.Now()
	err := r.eachSourceRow(ctx, "count", func(t table, _ string, _ uint64, _ []any) error {
		p.Rows[t.name]++
		return nil
	}, &p.Scanned)
	p.Elapsed = time.Since(start)
	return p, err
}

// eachSourceRow reads every keyed table of every database that loses
// virtual shards and calls fn for each row of a moving virtual shard, with
// the database the row moves to.
func (r *Reshard) eachSourceRow(ctx context.Context, step string, fn func(t table, to string, id uint64, row []any) error, scanned *int64) error {
	for _, from := range r.sources() {
		db := r.dbs[from]
		tables, err := describe(ctx, db)
		if err != nil {
			return fmt.Errorf("reshard: database %s: %w", from, err)
		}
		for _, t := range tables {
			pr := Progress{Step: step, Table: t.name, Estimate: estimate(ctx, db, t.name)}
			err := r.scan(ctx, db, t, func(id uint64, row []any) error {
				pr.Rows++
				*scanned++
				v := r.vshard(id)
				if r.inForce[v] == from && r.target[v] != from {
					pr.Moved++
					if err := fn(t, r.target[v], id, row); err != nil {
						return err
					}
				}
				if pr.Rows%int64(r.opt.BatchSize) == 0 {
					r.report(pr)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("reshard: %s %s on %s: %w", step, t.name, from, err)
			}
			r.report(pr)
		}
	}
	return nil
}

func (r *Reshard) report(p Progress) {
	if r.opt.Progress != nil {
		r.opt.Progress(p)
	}
}

// sources returns the databases that lose virtual shards, sorted.
func (r *Reshard) sources() []string {
	var out []string
	for _, m := range r.Moves {
		if !slices.Contains(out, m.From) {
			out = append(out, m.From)
		}
	}
	slices.Sort(out)
	return out
}

// Fan-outs in flight are planned again: their tasks name target databases
// by the old layout, so a task could miss followers who moved or name a
// database the new map drops. Planned afresh under the new layout, a push
// writes each inbox once (the writes are idempotent) and a retraction
// sweeps every database.
const (
	dropAllTasksSQL  = `DELETE FROM fanout_tasks`
	replanRunningSQL = `UPDATE deliveries SET state = 0, delivered = 0, tasks_left = 0, claim_token = 0, claimed_until = 0 WHERE state = 1`
)

// replanFanouts sends every running delivery back to planning, on every
// database, sources and targets alike, so the digests still agree.
func (r *Reshard) replanFanouts(ctx context.Context) error {
	for _, name := range r.names {
		for _, q := range []string{dropAllTasksSQL, replanRunningSQL} {
			if _, err := r.dbs[name].ExecContext(ctx, q); err != nil {
				return fmt.Errorf("reshard: database %s: replan fan-outs: %w", name, err)
			}
		}
	}
	return nil
}

const (
	sinceProbeSQL = `SELECT ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) - COALESCE(MAX(probed_at), 0) FROM health`
	markSQL       = `INSERT INTO reshard (id, layout, started_at) VALUES (0, ?, ?) ON DUPLICATE KEY UPDATE id = id`
	unmarkSQL     = `DELETE FROM reshard WHERE id = 0`
)

// Apply moves the data: it marks every database (feedd refuses to start
// while a reshard is under way), copies the rows of moving virtual shards
// to their new databases, verifies every moved table per virtual shard,
// then records the new layout with the next epoch and removes the marks.
// The rows stay on their old databases until Cleanup. Run again after a
// crash, Apply finishes the job. feedd must be stopped: Apply refuses to
// start while any process probes a database.
func (r *Reshard) Apply(ctx context.Context) error {
	target := r.Target()
	if err := r.mark(ctx, target); err != nil {
		return err
	}
	if len(r.Moves) > 0 {
		if err := r.copy(ctx); err != nil {
			return err
		}
		if err := r.Verify(ctx); err != nil {
			return err
		}
		if err := r.replanFanouts(ctx); err != nil {
			return err
		}
	}
	// The cut-over: the next epoch on every database, then the marks
	// go. A crash in between leaves the new epoch in force somewhere and
	// the marks in place; Apply run again finds nothing to move and ends
	// here.
	epoch := r.epoch
	if len(r.Moves) > 0 {
		epoch++
	}
	for _, name := range r.names {
		if err := store.RecordLayout(ctx, r.dbs[name], epoch, target); err != nil {
			return fmt.Errorf("reshard: database %s: record the layout: %w", name, err)
		}
	}
	for _, name := range r.names {
		if _, err := r.dbs[name].ExecContext(ctx, unmarkSQL); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
	}
	r.epoch, r.inForce, r.Moves = epoch, slices.Clone(r.target), nil
	return nil
}

// mark checks that feedd is stopped and no other reshard is under way,
// then records this one on every database.
func (r *Reshard) mark(ctx context.Context, target string) error {
	for _, name := range r.names {
		db := r.dbs[name]
		under, err := store.ReshardUnderWay(ctx, db)
		if err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		if under != "" && under != target {
			return fmt.Errorf("reshard: database %s records a reshard to %q under way; apply or abort it with its own map", name, under)
		}
		var sinceMs int64
		if err := db.GetContext(ctx, &sinceMs, sinceProbeSQL); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		if ago := time.Duration(sinceMs) * time.Millisecond; ago < r.opt.IdleFor {
			return fmt.Errorf("reshard: a feedd process probed database %s %s ago: stop every feedd process first", name, ago.Round(time.Millisecond))
		}
	}
	now := time.Now().UnixMilli()
	for _, name := range r.names {
		if _, err := r.dbs[name].ExecContext(ctx, markSQL, target, now); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		// A database new to the deployment takes its name now.
		if err := store.RecordIdentity(ctx, r.dbs[name], name); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
	}
	return nil
}

// copy inserts every row of a moving virtual shard into its new database,
// batch by batch; rows already there (an earlier run) are left as they are.
func (r *Reshard) copy(ctx context.Context) error {
	type pending struct {
		t    table
		rows []any // flattened
		n    int
	}
	batches := map[string]*pending{} // by target database
	flush := func(to string) error {
		b := batches[to]
		if b == nil || b.n == 0 {
			return nil
		}
		head := "INSERT IGNORE INTO `" + b.t.name + "` (" + quoted(b.t.cols) + ")"
		_, err := store.InsertRows(ctx, r.dbs[to], head, len(b.t.cols), "", b.n, func(i int) []any {
			return b.rows[i*len(b.t.cols) : (i+1)*len(b.t.cols)]
		})
		b.rows, b.n = b.rows[:0], 0
		return err
	}
	var scanned int64
	var current string
	err := r.eachSourceRow(ctx, "copy", func(t table, to string, _ uint64, row []any) error {
		if t.name != current { // a new table: write the last one's rest
			for name := range batches {
				if err := flush(name); err != nil {
					return err
				}
			}
			current = t.name
			clear(batches)
		}
		b := batches[to]
		if b == nil {
			b = &pending{t: t}
			batches[to] = b
		}
		b.rows = append(b.rows, row...)
		if b.n++; b.n == r.opt.BatchSize {
			return flush(to)
		}
		return nil
	}, &scanned)
	if err != nil {
		return err
	}
	for name := range batches {
		if err := flush(name); err != nil {
			return fmt.Errorf("reshard: copy to %s: %w", name, err)
		}
	}
	return nil
}

// Mismatch is a virtual shard whose rows of a table differ between its old
// and new database.
type Mismatch struct {
	Table    string
	VShard   int
	From, To string
}

// MismatchError lists what verification found different.
type MismatchError []Mismatch

func (e MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reshard: %d virtual shard tables differ between their old and new database:", len(e))
	for i, m := range e {
		if i == 10 {
			fmt.Fprintf(&b, " …")
			break
		}
		fmt.Fprintf(&b, " %s of vshard %d (%s -> %s);", m.Table, m.VShard, m.From, m.To)
	}
	return b.String()
}

// Verify compares, for every moving virtual shard and keyed table, a
// digest of its rows on the old database with one on the new: the same
// rows with the same values, in primary key order. It returns a
// MismatchError naming what differs.
func (r *Reshard) Verify(ctx context.Context) error {
	want, err := r.digests(ctx, "verify", func(v int) string { return r.inForce[v] })
	if err != nil {
		return err
	}
	got, err := r.digests(ctx, "verify", func(v int) string { return r.target[v] })
	if err != nil {
		return err
	}
	var bad MismatchError
	for k, d := range want {
		if !bytes.Equal(d, got[k]) {
			bad = append(bad, Mismatch{Table: k.table, VShard: k.vshard, From: r.inForce[k.vshard], To: r.target[k.vshard]})
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			bad = append(bad, Mismatch{Table: k.table, VShard: k.vshard, From: r.inForce[k.vshard], To: r.target[k.vshard]})
		}
	}
	if len(bad) > 0 {
		slices.SortFunc(bad, func(a, b Mismatch) int {
			return cmpKey(a.VShard, a.Table, b.VShard, b.Table)
		})
		return bad
	}
	return nil
}

func cmpKey(v1 int, t1 string, v2 int, t2 string) int {
	if v1 != v2 {
		return v1 - v2
	}
	return strings.Compare(t1, t2)
}

type digestKey struct {
	table  string
	vshard int
}

// digests hashes, per moving virtual shard and table, the rows that the
// database side(v) holds, read in primary key order.
func (r *Reshard) digests(ctx context.Context, step string, side func(v int) string) (map[digestKey][]byte, error) {
	moving := map[int]bool{}
	for _, m := range r.Moves {
		for v := m.First; v <= m.Last; v++ {
			moving[v] = true
		}
	}
	var dbNames []string
	for v := range moving {
		if name := side(v); !slices.Contains(dbNames, name) {
			dbNames = append(dbNames, name)
		}
	}
	slices.Sort(dbNames)
	hashes := map[digestKey]hash.Hash{}
	for _, name := range dbNames {
		db := r.dbs[name]
		tables, err := describe(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("reshard: database %s: %w", name, err)
		}
		for _, t := range tables {
			pr := Progress{Step: step, Table: t.name, Estimate: estimate(ctx, db, t.name)}
			err := r.scan(ctx, db, t, func(id uint64, row []any) error {
				pr.Rows++
				if v := r.vshard(id); moving[v] && side(v) == name {
					pr.Moved++
					k := digestKey{t.name, v}
					h := hashes[k]
					if h == nil {
						h = sha256.New()
						hashes[k] = h
					}
					writeRow(h, row)
				}
				if pr.Rows%int64(r.opt.BatchSize) == 0 {
					r.report(pr)
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("reshard: %s %s on %s: %w", step, t.name, name, err)
			}
			r.report(pr)
		}
	}
	out := make(map[digestKey][]byte, len(hashes))
	for k, h := range hashes {
		out[k] = h.Sum(nil)
	}
	return out, nil
}

// writeRow feeds a row to h unambiguously: each value length-prefixed,
// NULL apart from every string.
func writeRow(h hash.Hash, row []any) {
	var n [9]byte
	for _, v := range row {
		b, ok := v.([]byte)
		if !ok {
			h.Write([]byte{0xff})
			continue
		}
		n[0] = 0
		binary.BigEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
}

// Status is where the data is and where a reshard under way takes it.
type Status struct {
	Epoch    int64
	InForce  string
	UnderWay map[string]string // database → the layout its mark names
	Moves    []Move            // from the layout in force to the map's
}

// Status reads the layout in force and the marks of a reshard under way.
func (r *Reshard) Status(ctx context.Context) (Status, error) {
	s := Status{Epoch: r.epoch, InForce: r.LayoutInForce(), UnderWay: map[string]string{}, Moves: r.Moves}
	for _, name := range r.names {
		under, err := store.ReshardUnderWay(ctx, r.dbs[name])
		if err != nil {
			return s, fmt.Errorf("reshard: database %s: %w", name, err)
		}
		if under != "" {
			s.UnderWay[name] = under
		}
	}
	return s, nil
}

// Abort undoes a reshard that has not cut over: it deletes the copies of
// moving virtual shards' rows from their new databases and removes the
// marks. After the cut-over there is nothing to abort: the layout in force
// is the new one (reshard back with the old map instead).
func (r *Reshard) Abort(ctx context.Context) error {
	st, err := r.Status(ctx)
	if err != nil {
		return err
	}
	for name, layout := range st.UnderWay {
		if layout != r.Target() {
			return fmt.Errorf("reshard: the reshard marked on %s moves to %q, not to this map's layout; abort it with its own map", name, layout)
		}
	}
	if len(r.Moves) > 0 {
		if err := r.deleteWhere(ctx, "abort", func(name string, v int) bool {
			return r.target[v] == name && r.inForce[v] != name
		}); err != nil {
			return err
		}
	}
	for _, name := range r.names {
		if _, err := r.dbs[name].ExecContext(ctx, unmarkSQL); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
	}
	return nil
}

// Cleanup deletes, from every database, the rows of virtual shards the
// layout in force places elsewhere: what a finished reshard left on the
// old databases. It refuses while a reshard is under way.
func (r *Reshard) Cleanup(ctx context.Context) error {
	st, err := r.Status(ctx)
	if err != nil {
		return err
	}
	if len(st.UnderWay) > 0 {
		return fmt.Errorf("reshard: a reshard is under way: apply or abort it before cleaning up")
	}
	return r.deleteWhere(ctx, "cleanup", func(name string, v int) bool { return r.inForce[v] != name })
}

// deleteWhere deletes, from each database, the rows of the keyed tables
// whose virtual shard gone(database, vshard) says do not belong there, by
// primary key, batch by batch.
func (r *Reshard) deleteWhere(ctx context.Context, step string, gone func(name string, v int) bool) error {
	for _, name := range r.names {
		db := r.dbs[name]
		tables, err := describe(ctx, db)
		if err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		for _, t := range tables {
			pr := Progress{Step: step, Table: t.name, Estimate: estimate(ctx, db, t.name)}
			// Where the placing id leads the primary key, a row's id names
			// a range of it, which one DELETE … IN removes whole; other
			// tables go row by row.
			byID := t.pk[0] == t.key
			var keys [][]any
			var ids []any
			del := func() error {
				var err error
				switch {
				case len(ids) > 0:
					_, err = db.ExecContext(ctx, "DELETE FROM `"+t.name+"` WHERE `"+t.cols[t.key]+"` IN (?"+
						strings.Repeat(",?", len(ids)-1)+")", ids...)
				case len(keys) > 0:
					err = deleteKeys(ctx, db, t, keys)
				}
				keys, ids = keys[:0], ids[:0]
				return err
			}
			var lastID uint64
			err := r.scan(ctx, db, t, func(id uint64, row []any) error {
				pr.Rows++
				if gone(name, r.vshard(id)) {
					pr.Moved++
					switch {
					case !byID:
						k := make([]any, len(t.pk))
						for i, c := range t.pk {
							k[i] = row[c]
						}
						keys = append(keys, k)
					case len(ids) == 0 || id != lastID:
						ids, lastID = append(ids, id), id
					}
				}
				if pr.Rows%int64(r.opt.BatchSize) == 0 {
					r.report(pr)
					return del()
				}
				return nil
			})
			if err == nil {
				err = del()
			}
			if err != nil {
				return fmt.Errorf("reshard: %s %s on %s: %w", step, t.name, name, err)
			}
			r.report(pr)
		}
	}
	return nil
}

// deleteKeys deletes rows of t by primary key, one statement per batch.
func deleteKeys(ctx context.Context, db *sqlx.DB, t table, keys [][]any) error {
	cols := make([]string, len(t.pk))
	for i, c := range t.pk {
		cols[i] = "`" + t.cols[c] + "` = ?"
	}
	one := "(" + strings.Join(cols, " AND ") + ")"
	q := "DELETE FROM `" + t.name + "` WHERE " + strings.TrimSuffix(strings.Repeat(one+" OR ", len(keys)), " OR ")
	args := make([]any, 0, len(keys)*len(t.pk))
	for _, k := range keys {
		args = append(args, k...)
	}
	_, err := db.ExecContext(ctx, q, args...)
	return err
}

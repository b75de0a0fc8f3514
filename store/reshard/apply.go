package reshard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/sqlconn"
)

// Plan is what a reshard would move: rows per table, and how fast this
// machine read them (the copy reads the same rows once more and writes
// them).
type Plan struct {
	Moves   []Move
	Rows    map[string]int64 // by table: rows of moving virtual shards
	Scanned int64            // rows read to count them: the moving ones, and every row of a table whose id leads no index
	Elapsed time.Duration
}

// Plan counts the rows each table would move, reading the moving rows of
// every source database once. It refuses what Apply refuses: moves on
// TiDB (ErrTiDB).
func (r *Reshard) Plan(ctx context.Context) (Plan, error) {
	p := Plan{Moves: r.Moves, Rows: map[string]int64{}}
	if err := r.checkServers(ctx); err != nil {
		return p, err
	}
	start := time.Now()
	// The moving rows are read, not only counted: the time it takes is
	// what an estimate of the apply's scales.
	err := r.eachSourceRow(ctx, "count", nil, nil, func(t table, _ string, _ uint64, _ []any) error {
		p.Rows[t.name]++
		return nil
	}, &p.Scanned)
	p.Elapsed = time.Since(start)
	return p, err
}

// eachSourceRow reads the rows of moving virtual shards in every keyed
// table of every database that loses virtual shards (eachRow), and calls
// fn for each with the database the row moves to; onGroup, if set, may
// take a group of them whole instead, of batch(to) rows if batch is set.
func (r *Reshard) eachSourceRow(ctx context.Context, step string, batch func(to string) int, onGroup func(t table, to string, g group) (bool, error),
	fn func(t table, to string, id uint64, row []any) error, scanned *int64) error {
	for _, from := range r.sources() {
		db := r.dbs[from]
		tables, err := describe(ctx, db)
		if err != nil {
			return fmt.Errorf("reshard: database %s: %w", from, err)
		}
		for _, t := range tables {
			pr := Progress{Step: step, Table: t.name, Estimate: estimate(ctx, db, t.name)}
			var whole func(to string, g group) (bool, error)
			if onGroup != nil {
				whole = func(to string, g group) (bool, error) { return onGroup(t, to, g) }
			}
			err := r.eachRow(ctx, db, t, &pr, func(id uint64) string {
				if v := r.vshard(id); r.inForce[v] == from && r.target[v] != from {
					return r.target[v]
				}
				return ""
			}, batch, whole, func(to string, id uint64, row []any) error {
				return fn(t, to, id, row)
			})
			if t.byID != "" {
				*scanned += pr.Moved // the others were only counted
			} else {
				*scanned += pr.Rows
			}
			if err != nil {
				return fmt.Errorf("reshard: %s %s on %s: %w", step, t.name, from, err)
			}
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

const (
	markSQL    = `INSERT INTO reshard (id, layout, started_at) VALUES (0, ?, ?) ON DUPLICATE KEY UPDATE id = id`
	unmarkSQL  = `DELETE FROM reshard WHERE id = 0`
	phaseSQL   = `UPDATE reshard SET phase = ? WHERE id = 0`
	copiedSQL  = `UPDATE reshard SET copied = ? WHERE id = 0`
	captureOff = `UPDATE layout_fence SET capture = 0`
)

// Report tells what a cut-over did.
type Report struct {
	Source string
	Moves  []Move
	Epoch  int64         // the epoch it recorded
	Pause  time.Duration // writes on the source waited this long at most
	Caught int           // rows applied from the change logs during the pause
}

// Apply moves the data while feedd serves: for each database that gives
// virtual shards up, in turn, it captures the writes on it and on the
// databases receiving them, copies the rows of the moving virtual shards,
// applies the captured writes until they are few, verifies every moved
// table per virtual shard, and cuts over: writes on the source pause, the
// last captured writes are applied, and the layout with those virtual
// shards moved is recorded with the next epoch, which running feedd
// processes route by from then on. The rows stay on the source until
// Cleanup. Run again after a crash, Apply goes on from where the layout in
// force and the logs are. report, if set, is called after each cut-over.
// It refuses, before it writes anything, moves from or to a database on
// TiDB (ErrTiDB).
func (r *Reshard) Apply(ctx context.Context, report func(Report)) error {
	if err := r.checkServers(ctx); err != nil {
		return err
	}
	target := r.Target()
	if err := r.mark(ctx, target); err != nil {
		return err
	}
	// A run cut short right after a cut-over recorded the epoch on the
	// source only, and may have left its work queues there.
	if err := r.recordEverywhere(ctx); err != nil {
		return err
	}
	for _, name := range r.names {
		tables, err := describeByName(ctx, r.dbs[name])
		if err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		if err := r.settleClaimable(ctx, name, tables); err != nil {
			return err
		}
	}
	for len(r.Moves) > 0 {
		step := r.stepFrom(r.Moves[0].From)
		rep, err := step.move(ctx)
		if err != nil {
			return err
		}
		r.epoch, r.inForce = rep.Epoch, slices.Clone(step.target)
		r.Moves = moves(r.inForce, r.target)
		if err := r.recordEverywhere(ctx); err != nil {
			return err
		}
		if report != nil {
			report(rep)
		}
	}
	for _, name := range r.names {
		for _, q := range []string{captureOff, clearChangesSQL, unmarkSQL} {
			if err := r.exec(ctx, name, q); err != nil {
				return fmt.Errorf("reshard: database %s: %w", name, err)
			}
		}
	}
	return nil
}

// mark refuses a reshard while another to a different layout is under
// way, then records this one on every database.
func (r *Reshard) mark(ctx context.Context, target string) error {
	for _, name := range r.names {
		under, err := store.ReshardUnderWay(ctx, r.dbs[name])
		if err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		if under != "" && under != target {
			return fmt.Errorf("reshard: database %s records a reshard to %q under way; apply or abort it with its own map", name, under)
		}
	}
	now := time.Now().UnixMilli()
	for _, name := range r.names {
		if err := r.exec(ctx, name, markSQL, target, now); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		// A database new to the deployment takes its name now.
		if err := store.RecordIdentity(ctx, r.dbs[name], name); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
	}
	return nil
}

// recordEverywhere records the layout in force on every database.
func (r *Reshard) recordEverywhere(ctx context.Context) error {
	for _, name := range r.names {
		if err := store.RecordLayout(ctx, r.dbs[name], r.epoch, r.LayoutInForce()); err != nil {
			return fmt.Errorf("reshard: database %s: record the layout: %w", name, err)
		}
	}
	return nil
}

// stepFrom is the part of the reshard that one source gives up: the same
// databases, with a target layout that moves only its virtual shards.
func (r *Reshard) stepFrom(src string) *Reshard {
	st := *r
	st.target = slices.Clone(r.inForce)
	for v := range st.target {
		if r.inForce[v] == src {
			st.target[v] = r.target[v]
		}
	}
	st.Moves = moves(st.inForce, st.target)
	return &st
}

// catchUpRounds bounds the passes over the change logs before verifying:
// a database written faster than the logs are applied never gets to few.
const catchUpRounds = 20

// move runs one step: one source's virtual shards to their targets.
func (r *Reshard) move(ctx context.Context) (Report, error) {
	src := r.Moves[0].From
	rep := Report{Source: src, Moves: r.Moves, Epoch: r.epoch + 1}
	dbs := []string{src}
	for _, m := range r.Moves {
		if !slices.Contains(dbs, m.To) {
			dbs = append(dbs, m.To)
		}
	}
	byName, err := describeByName(ctx, r.dbs[src])
	if err != nil {
		return rep, fmt.Errorf("reshard: database %s: %w", src, err)
	}
	setPhase := func(phase string) error {
		return r.exec(ctx, src, phaseSQL, phase)
	}
	if err := setPhase("copy"); err != nil {
		return rep, err
	}
	for _, name := range dbs {
		if err := r.startCapture(ctx, name); err != nil {
			return rep, err
		}
	}
	if err := r.copy(ctx); err != nil {
		return rep, err
	}
	if err := setPhase("catch-up"); err != nil {
		return rep, err
	}
	for range catchUpRounds {
		d := drained{touched: map[int]bool{}}
		if err := r.drainAll(ctx, dbs, byName, &d); err != nil {
			return rep, err
		}
		r.report(Progress{Step: "catch-up", Table: "changes", Rows: int64(d.applied), Moved: int64(d.applied)})
		if d.applied < r.opt.BatchSize {
			break
		}
	}
	if err := setPhase("verify"); err != nil {
		return rep, err
	}
	if err := r.verifyOnline(ctx, dbs, byName); err != nil {
		return rep, err
	}
	if err := setPhase("cut-over"); err != nil {
		return rep, err
	}
	// A writer waiting for the fence while holding a lock the cut-over
	// needs is a deadlock InnoDB breaks by rolling one side back.
	err = retryLocked(ctx, func() error {
		var err error
		rep, err = r.cutOver(ctx, src, dbs, byName, rep)
		return err
	})
	return rep, err
}

// drainAll runs one catch-up pass on each database.
func (r *Reshard) drainAll(ctx context.Context, dbs []string, tables map[string]table, d *drained) error {
	for _, name := range dbs {
		if err := r.drain(ctx, name, tables, false, d); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
	}
	return nil
}

// verifyRounds bounds the verifications before a cut-over. A virtual
// shard that differs is accepted only if a write to it was captured
// meanwhile; the cut-over applies it with writes held.
const verifyRounds = 3

// verifyOnline compares every moved table per virtual shard while writes
// go on. A difference in a virtual shard no captured write touched between
// the reads and the next pass over the logs is a real one: MismatchError.
func (r *Reshard) verifyOnline(ctx context.Context, dbs []string, tables map[string]table) error {
	for round := 1; ; round++ {
		before := drained{touched: map[int]bool{}}
		if err := r.drainAll(ctx, dbs, tables, &before); err != nil {
			return err
		}
		err := r.Verify(ctx)
		var bad MismatchError
		if err == nil || !errors.As(err, &bad) {
			return err
		}
		after := drained{touched: map[int]bool{}}
		if err := r.drainAll(ctx, dbs, tables, &after); err != nil {
			return err
		}
		var real MismatchError
		for _, m := range bad {
			if !after.touched[m.VShard] {
				real = append(real, m)
			}
		}
		if len(real) > 0 {
			return real
		}
		if round == verifyRounds {
			return nil
		}
	}
}

const (
	lockWaitSQL  = `SET SESSION innodb_lock_wait_timeout = 2`
	cutFenceSQL  = `UPDATE layout_fence SET epoch = ?, capture = 0`
	cutLayoutSQL = `INSERT IGNORE INTO shard_map (epoch, layout, adopted_at) VALUES (?, ?, ?)`
)

// cutOver takes the source's fence, which holds its writes; applies the
// last captured writes; records the next epoch's layout in the fence's
// transaction; then moves the source's claimable rows of the moved virtual
// shards (settleClaimable).
func (r *Reshard) cutOver(ctx context.Context, src string, dbs []string, tables map[string]table, rep Report) (Report, error) {
	conn, err := r.dbs[src].Connx(ctx)
	if err != nil {
		return rep, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, lockWaitSQL); err != nil {
		return rep, err
	}
	tx, err := conn.BeginTxx(ctx, nil)
	if err != nil {
		return rep, err
	}
	defer tx.Rollback()
	start := time.Now()
	if _, err := tx.ExecContext(ctx, cutFenceSQL, rep.Epoch); err != nil {
		return rep, fmt.Errorf("reshard: database %s: take the fence: %w", src, err)
	}
	d := drained{touched: map[int]bool{}}
	// The source's log grows no more; the targets' is read once.
	if err := r.drain(ctx, src, tables, true, &d); err != nil {
		return rep, err
	}
	for _, name := range dbs[1:] {
		if err := r.drain(ctx, name, tables, false, &d); err != nil {
			return rep, err
		}
	}
	if _, err := tx.ExecContext(ctx, cutLayoutSQL, rep.Epoch, r.Target(), time.Now().UnixMilli()); err != nil {
		return rep, err
	}
	if err := tx.Commit(); err != nil {
		return rep, fmt.Errorf("reshard: database %s: cut over: %w", src, err)
	}
	rep.Pause, rep.Caught = time.Since(start), d.applied
	r.inForce = slices.Clone(r.target)
	if err := r.settleClaimable(ctx, src, tables); err != nil {
		return rep, err
	}
	for _, name := range dbs[1:] {
		for _, q := range []string{captureOff, clearChangesSQL} {
			if err := r.exec(ctx, name, q); err != nil {
				return rep, fmt.Errorf("reshard: database %s: %w", name, err)
			}
		}
	}
	return rep, r.exec(ctx, src, clearChangesSQL)
}

// retireSwitchSQL ends the switch of a moved author's copy on the database
// it left, once the switch moved: authors is data, which Cleanup deletes.
const retireSwitchSQL = `UPDATE authors SET mode = 0 WHERE author_id = ? AND mode = 1`

// settleClaimable moves the claimable rows database name holds of virtual
// shards the layout in force places elsewhere to their owners: after a
// cut-over, its source's work queues. Workers leave such rows alone (a
// claim takes only rows its database owns), so nothing changes them
// meanwhile; the cut-over's transaction holds no rows but the fence's, and
// writers waiting on the fence cannot deadlock with it. Each row is written
// to its owner, then deleted from name (an author's switch is ended there
// instead): run again after a crash, it moves what is left.
func (r *Reshard) settleClaimable(ctx context.Context, name string, tables map[string]table) error {
	for _, tn := range slices.Sorted(maps.Keys(store.Claimable)) {
		t := tables[tn]
		byOwner := map[string][][]any{}
		_, err := scanBatch(ctx, r.dbs[name], "SELECT "+quoted(t.cols)+" FROM `"+t.name+"` WHERE "+store.Claimable[t.name].SQL, nil, len(t.cols), func(row []any) error {
			id, err := placingID(row[t.key])
			if err != nil {
				return err
			}
			if owner := r.inForce[r.vshard(id)]; owner != name && t.claimable(row) {
				byOwner[owner] = append(byOwner[owner], row)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("reshard: database %s: %s: %w", name, t.name, err)
		}
		head := "REPLACE INTO `" + t.name + "` (" + quoted(t.cols) + ")"
		for owner, rows := range byOwner {
			for chunk := range slices.Chunk(rows, r.opt.BatchSize) {
				if err := retryLocked(ctx, func() error {
					_, err := sqlconn.InsertRows(ctx, r.dbs[owner], head, len(t.cols), "", len(chunk), func(i int) []any { return chunk[i] })
					return err
				}); err != nil {
					return fmt.Errorf("reshard: database %s: %s: %w", owner, t.name, err)
				}
				keys := make([][]any, len(chunk))
				for i, row := range chunk {
					keys[i] = t.pkOf(row)
				}
				if t.name == "authors" {
					for _, k := range keys {
						if err := r.exec(ctx, name, retireSwitchSQL, k[0]); err != nil {
							return fmt.Errorf("reshard: database %s: %s: %w", name, t.name, err)
						}
					}
					continue
				}
				if err := retryLocked(ctx, func() error { return deleteKeys(ctx, r.dbs[name], t, keys) }); err != nil {
					return fmt.Errorf("reshard: database %s: %s: %w", name, t.name, err)
				}
			}
		}
	}
	return nil
}

// copy inserts every row of a moving virtual shard into its new database,
// batch by batch; rows already there (an earlier run) are left as they are.
// Into a database on the source's server the rows are copied by the server
// (copyGroup); into another they go through the client.
func (r *Reshard) copy(ctx context.Context) error {
	src := r.Moves[0].From
	conns, schemas := map[string]*sqlx.Conn{}, map[string]string{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, m := range r.Moves {
		if _, ok := schemas[m.To]; ok {
			continue
		}
		conn, schema, err := r.inServer(ctx, src, m.To)
		if err != nil {
			return fmt.Errorf("reshard: copy to %s: %w", m.To, err)
		}
		schemas[m.To] = schema
		if conn != nil {
			conns[m.To] = conn
			r.opt.Log.Info("reshard: the copy stays within the server", "from", src, "to", m.To)
		} else {
			r.opt.Log.Info("reshard: the copy goes through this client (another server)", "from", src, "to", m.To)
		}
	}
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
		_, err := sqlconn.InsertRows(ctx, r.dbs[to], head, len(b.t.cols), "", b.n, func(i int) []any {
			return b.rows[i*len(b.t.cols) : (i+1)*len(b.t.cols)]
		})
		b.rows, b.n = b.rows[:0], 0
		return err
	}
	var scanned, copied int64
	// The source's mark counts the rows for status and the metrics.
	count := func(n int64) error {
		every := int64(r.opt.BatchSize * 10)
		before := copied
		if copied += n; copied/every == before/every {
			return nil
		}
		return r.exec(ctx, src, copiedSQL, copied)
	}
	var current string
	batch := func(to string) int {
		if conns[to] != nil {
			return InServerBatches * r.opt.BatchSize
		}
		return r.opt.BatchSize
	}
	err := r.eachSourceRow(ctx, "copy", batch, func(t table, to string, g group) (bool, error) {
		conn := conns[to]
		if conn == nil {
			return false, nil
		}
		if err := r.copyGroup(ctx, conn, t, schemas[to], g); err != nil {
			return true, err
		}
		return true, count(g.rows)
	}, func(t table, to string, _ uint64, row []any) error {
		if t.claimable(row) {
			return nil // moves after the cut-over (settleClaimable)
		}
		if err := count(1); err != nil {
			return err
		}
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
	return r.exec(ctx, src, copiedSQL, copied)
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
			err := r.eachRow(ctx, db, t, &pr, func(id uint64) string {
				if v := r.vshard(id); moving[v] && side(v) == name {
					return name
				}
				return ""
			}, nil, nil, func(_ string, id uint64, row []any) error {
				if t.claimable(row) {
					return nil
				}
				k := digestKey{t.name, r.vshard(id)}
				h := hashes[k]
				if h == nil {
					h = sha256.New()
					hashes[k] = h
				}
				writeRow(h, row)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("reshard: %s %s on %s: %w", step, t.name, name, err)
			}
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
	UnderWay map[string]Mark // by database
	Moves    []Move          // from the layout in force to the map's
}

// Mark is a database's record of a reshard under way.
type Mark struct {
	Layout string // the layout it moves to
	Phase  string // on the database giving virtual shards up: copy, catch-up, verify, cut-over
	Copied int64  // rows copied so far by its current step
	// Backlog is the captured writes not applied yet.
	Backlog int64
}

const markStatusSQL = `SELECT layout, phase, copied, (SELECT COUNT(*) FROM reshard_changes) FROM reshard WHERE id = 0`

// Status reads the layout in force and the marks of a reshard under way.
func (r *Reshard) Status(ctx context.Context) (Status, error) {
	s := Status{Epoch: r.epoch, InForce: r.LayoutInForce(), UnderWay: map[string]Mark{}, Moves: r.Moves}
	for _, name := range r.names {
		var m Mark
		err := r.dbs[name].QueryRowContext(ctx, markStatusSQL).Scan(&m.Layout, &m.Phase, &m.Copied, &m.Backlog)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		} else if err != nil {
			return s, fmt.Errorf("reshard: database %s: %w", name, err)
		}
		s.UnderWay[name] = m
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
	for name, m := range st.UnderWay {
		if m.Layout != r.Target() {
			return fmt.Errorf("reshard: the reshard marked on %s moves to %q, not to this map's layout; abort it with its own map", name, m.Layout)
		}
	}
	// Writes stop being captured first, so that nothing applies to the
	// copies being deleted. The triggers stay: a database that gave
	// virtual shards up in a cut-over of this reshard fences stale
	// writers with them until Cleanup.
	for _, name := range r.names {
		for _, q := range []string{captureOff, clearChangesSQL} {
			if err := r.exec(ctx, name, q); err != nil {
				return fmt.Errorf("reshard: database %s: %w", name, err)
			}
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
		if err := r.exec(ctx, name, unmarkSQL); err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
	}
	return nil
}

// Cleanup deletes, from every database, the rows of virtual shards the
// layout in force places elsewhere: what a finished reshard left on the
// old databases. Then it drops the fence triggers. It refuses while a
// reshard is under way.
func (r *Reshard) Cleanup(ctx context.Context) error {
	st, err := r.Status(ctx)
	if err != nil {
		return err
	}
	if len(st.UnderWay) > 0 {
		return fmt.Errorf("reshard: a reshard is under way: apply or abort it before cleaning up")
	}
	if err := r.deleteWhere(ctx, "cleanup", func(name string, v int) bool { return r.inForce[v] != name }); err != nil {
		return err
	}
	// No database holds rows it does not own: nothing is left to fence.
	for _, name := range r.names {
		if err := r.dropTriggers(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// deleteWhere deletes, from each database, the rows of the keyed tables
// whose virtual shard gone(database, vshard) says do not belong there: by
// group (eachRow), or by primary key a batch at a time.
func (r *Reshard) deleteWhere(ctx context.Context, step string, gone func(name string, v int) bool) error {
	for _, name := range r.names {
		db := r.dbs[name]
		tables, err := describe(ctx, db)
		if err != nil {
			return fmt.Errorf("reshard: database %s: %w", name, err)
		}
		for _, t := range tables {
			pr := Progress{Step: step, Table: t.name, Estimate: estimate(ctx, db, t.name)}
			var keys [][]any
			// Workers may hold the rows (a push through a stale follow
			// edge): a deadlock runs the batch again.
			del := func() error {
				if len(keys) == 0 {
					return nil
				}
				err := retryLocked(ctx, func() error { return deleteKeys(ctx, db, t, keys) })
				keys = keys[:0]
				return err
			}
			err := r.eachRow(ctx, db, t, &pr, func(id uint64) string {
				if gone(name, r.vshard(id)) {
					return name
				}
				return ""
			}, nil, func(_ string, g group) (bool, error) {
				return true, r.deleteGroup(ctx, db, t, g)
			}, func(_ string, _ uint64, row []any) error {
				if keys = append(keys, t.pkOf(row)); len(keys) == r.opt.BatchSize {
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
		}
	}
	return nil
}

// deleteKeys deletes rows of t by primary key, one statement per batch.
func deleteKeys(ctx context.Context, db sqlx.ExecerContext, t table, keys [][]any) error {
	q, args := byKeys(t, keys)
	_, err := db.ExecContext(ctx, "DELETE FROM `"+t.name+"` WHERE "+q, args...)
	return err
}

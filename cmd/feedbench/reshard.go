package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/reshard"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/sqlconn"
	"github.com/feedhq/feed/store/storeload"
)

// Phase R moves the upper half of the virtual shards, 512–1023, from a
// loaded database to an empty one with store/reshard, as `feedd reshard
// apply` and `cleanup` do, and copies the same rows with raw SQL into a
// third database for a ceiling. The three databases are the run's own,
// named after the benchmark database.
const (
	reshardFirstMoved = shardmap.DefaultVirtualShards / 2
	// ceilingIDs is how many ids one INSERT … SELECT of the ceiling names.
	ceilingIDs = 1000
)

// stepResult is what one step of a reshard read and did.
type stepResult struct {
	Read  int64 // rows read
	Moved int64 // rows of moving virtual shards among them (copied, digested or deleted)
	Time  time.Duration
}

type reshardResult struct {
	Users, InboxRows int
	Load             time.Duration

	Copy, Verify, Cleanup stepResult
	SetUp, CutOver, Apply time.Duration // set-up: from the apply's start to the copy's

	CeilingRows int64
	CeilingIDs  time.Duration // reading the keys' ids and picking the moving ones
	Ceiling     time.Duration // the INSERT … SELECT statements

	// The load that runs on the source before and during the apply.
	Before, During reshardLoadResult
	Pauses         []time.Duration // each cut-over's, as apply reports it
}

// reshardLoadResult counts what the load did over a window.
type reshardLoadResult struct {
	Window  time.Duration
	Reads   int64 // feed pages read
	Writes  int64 // read marks written
	Fenced  int64 // writes refused as stale (503 in the API), retried
	Failed  int64 // other errors
	Readers int
}

// progressTally sums reshard's progress reports per step. A report carries
// the running count of one table's scan on one database, so a report of
// the same step and table as the one before continues its scan.
type progressTally struct {
	steps map[string]*stepResult
	first map[string]time.Time // by step: when its first report came
	last  map[string]time.Time // by step: when its last report came
	prev  reshard.Progress
}

func (t *progressTally) add(p reshard.Progress) {
	s := t.steps[p.Step]
	if s == nil {
		s = &stepResult{}
		t.steps[p.Step] = s
	}
	read, moved := p.Rows, p.Moved
	if p.Step == t.prev.Step && p.Table == t.prev.Table && p.Rows >= t.prev.Rows {
		read, moved = read-t.prev.Rows, moved-t.prev.Moved
	}
	s.Read += read
	s.Moved += moved
	if _, ok := t.first[p.Step]; !ok {
		t.first[p.Step] = time.Now()
	}
	t.last[p.Step] = time.Now()
	t.prev = p
}

// resharding runs phase R and drops its databases.
func (b *bench) resharding(ctx context.Context) (err error) {
	o := b.opt
	srcName, dstName, ceilName := b.server.DBName+"_rsrc", b.server.DBName+"_rdst", b.server.DBName+"_rceil"
	defer func() {
		for _, name := range []string{srcName, dstName, ceilName} {
			if o.Keep {
				b.log.Info("feedbench: keeping database", "database", name)
				continue
			}
			// The names are the benchmark database's, [a-z0-9_], with a suffix.
			if _, derr := b.db.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS `"+name+"`"); derr != nil && err == nil {
				err = fmt.Errorf("drop database %s: %w", name, derr)
			}
		}
	}()
	res := &reshardResult{Users: o.ReshardUsers, InboxRows: o.ReshardInboxRows}
	start := time.Now()
	src, err := store.Open(shardmap.Single(b.dsnOf(srcName)))
	if err != nil {
		return err
	}
	defer src.Close()
	if err := src.Migrate(ctx, b.log); err != nil {
		return err
	}
	// The one-database layout is recorded at epoch 1, as feedd's first start does.
	if err := src.CheckLayout(ctx); err != nil {
		return err
	}
	if err := b.loadReshardSource(ctx, src); err != nil {
		return err
	}
	res.Load = time.Since(start)
	b.log.Info("feedbench: R source loaded", "seconds", res.Load.Seconds())

	// The service's store, routing by the layout in force and following
	// the cut-over as feedd serve does, carries a load while the ceiling
	// and the apply run.
	live, err := store.Open(reshardMap(b.dsnOf(srcName), b.dsnOf(dstName), false))
	if err != nil {
		return err
	}
	defer live.Close()
	if err := live.Migrate(ctx, b.log); err != nil {
		return err
	}
	if err := live.CheckLayout(ctx); err != nil {
		return err
	}
	users := make([]uint64, o.ReshardUsers)
	for i := range users {
		users[i] = loadedUser(i)
	}
	stopLoad := b.reshardLoad(ctx, live, users)
	time.Sleep(reshardLoadWindow)
	res.Before = stopLoad()

	stopLoad = b.reshardLoad(ctx, live, users)
	err = b.reshardCeiling(ctx, srcName, ceilName, res)
	stopLoad()
	if err != nil {
		return err
	}

	tally := &progressTally{steps: map[string]*stepResult{}, first: map[string]time.Time{}, last: map[string]time.Time{}}
	r, err := reshard.Open(ctx, reshardMap(b.dsnOf(srcName), b.dsnOf(dstName), true), reshard.Options{
		Progress: tally.add,
		Log:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer r.Close()
	stopLoad = b.reshardLoad(ctx, live, users)
	start = time.Now()
	err = r.Apply(ctx, func(rep reshard.Report) { res.Pauses = append(res.Pauses, rep.Pause) })
	end := time.Now()
	res.During = stopLoad()
	if err != nil {
		return err
	}
	res.Apply = end.Sub(start)
	copying, copied, verified := tally.first["copy"], tally.last["copy"], tally.last["verify"]
	res.Copy, res.Verify = *tally.steps["copy"], *tally.steps["verify"]
	res.SetUp, res.Copy.Time, res.Verify.Time, res.CutOver = copying.Sub(start), copied.Sub(copying), verified.Sub(copied), end.Sub(verified)
	b.log.Info("feedbench: R applied", "rows_copied", res.Copy.Moved, "copy_seconds", res.Copy.Time.Seconds(),
		"verify_seconds", res.Verify.Time.Seconds(), "apply_seconds", res.Apply.Seconds())
	// The load's read marks may add header rows after the ceiling ran;
	// the copy must miss none.
	if res.Copy.Moved < res.CeilingRows {
		return fmt.Errorf("phase R: reshard copied %d rows, the raw copy %d", res.Copy.Moved, res.CeilingRows)
	}
	if res.During.Failed > 0 || res.Before.Failed > 0 {
		return fmt.Errorf("phase R: %d reads or writes failed during the reshard (other than refused as stale)", res.During.Failed+res.Before.Failed)
	}

	start = time.Now()
	if err := r.Cleanup(ctx); err != nil {
		return err
	}
	res.Cleanup = *tally.steps["cleanup"]
	res.Cleanup.Time = time.Since(start)
	b.log.Info("feedbench: R cleaned up", "rows_deleted", res.Cleanup.Moved, "seconds", res.Cleanup.Time.Seconds())
	b.rep.Reshard = res
	return nil
}

// dsnOf is the DSN of a database on the benchmark's server, with the
// parameters interpolated client-side as the store and reshard do.
func (b *bench) dsnOf(database string) string {
	c := b.server.Clone()
	c.DBName = database
	c.InterpolateParams = true
	return c.FormatDSN()
}

// reshardMap lists both databases: with moved set it is the map a reshard
// to two databases reads (the source keeps virtual shards below
// reshardFirstMoved, the second takes the rest); without, the one-database
// layout with the second listed for the cut-over to route to.
func reshardMap(mainDSN, secondDSN string, moved bool) *shardmap.Map {
	last := shardmap.DefaultVirtualShards - 1
	m := &shardmap.Map{
		VirtualShards: shardmap.DefaultVirtualShards,
		Databases:     map[string]shardmap.Database{"main": {DSN: mainDSN}, "second": {DSN: secondDSN}},
		Ranges:        []shardmap.Range{{VShards: fmt.Sprintf("0-%d", last), Database: "main"}},
	}
	if moved {
		m.Ranges = []shardmap.Range{
			{VShards: fmt.Sprintf("0-%d", reshardFirstMoved-1), Database: "main"},
			{VShards: fmt.Sprintf("%d-%d", reshardFirstMoved, last), Database: "second"},
		}
	}
	return m
}

// reshardLoadWindow is how long the load runs before the reshard, for the
// rate it is compared with.
const reshardLoadWindow = 5 * time.Second

// reshardReaders read feed pages side by side; one writer marks feeds
// read, a write of the user's header row in inbox, which the reshard
// captures and, at the cut-over, fences.
const reshardReaders = 2

// reshardLoad runs readers and a writer on st until stop, which returns
// what they did. A refresher routes st by the layout a cut-over records,
// as feedd serve's does.
func (b *bench) reshardLoad(ctx context.Context, st *store.Store, users []uint64) (stop func() reshardLoadResult) {
	ctx, cancel := context.WithCancel(ctx)
	var res reshardLoadResult
	var reads, writes, fenced, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-st.Stale():
				_, _ = st.Refresh(ctx)
			}
		}
	})
	count := func(err error, ok *atomic.Int64) {
		switch {
		case err == nil:
			ok.Add(1)
		case ctx.Err() != nil:
		case feed.ErrorCode(err) == feed.EUNAVAILABLE && !store.Conflict(err):
			fenced.Add(1)
		default:
			failed.Add(1)
			b.log.Warn("feedbench: R load", "err", err)
		}
	}
	for i := range reshardReaders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for ctx.Err() == nil {
				_, err := st.ReadFeed(ctx, users[rng.IntN(len(users))], store.Top, feed.Key{}, 20, nil)
				count(err, &reads)
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(99, 1))
		for ctx.Err() == nil {
			now := time.Now().UnixMilli()
			count(st.MarkRead(ctx, users[rng.IntN(len(users))], now, now, 0), &writes)
			time.Sleep(2 * time.Millisecond)
		}
	})
	start := time.Now()
	return func() reshardLoadResult {
		res.Window = time.Since(start)
		cancel()
		wg.Wait()
		res.Reads, res.Writes, res.Fenced, res.Failed, res.Readers = reads.Load(), writes.Load(), fenced.Load(), failed.Load(), reshardReaders
		return res
	}
}

const (
	loadPostsHead      = `INSERT INTO posts (author_id, publish_time, content_id, kind, created_at)`
	loadDeliveriesHead = `INSERT INTO deliveries (content_id, author_id, publish_time, kind, state, recipients, delivered, created_at)`
	deliveryDone       = 2
)

// loadReshardSource fills src as a deployment at rest: opt.ReshardUsers
// users with opt.ReshardInboxRows inbox rows each (phase C's and D's
// loader), following the inboxAuthors authors of those rows, whose posts
// are in posts with their finished deliveries. content_ids stays empty, as
// publishing leaves it with one database.
func (b *bench) loadReshardSource(ctx context.Context, src *store.Store) error {
	o := b.opt
	users := make([]uint64, o.ReshardUsers)
	for i := range users {
		users[i] = loadedUser(i)
	}
	if _, err := b.loadInboxes(ctx, src, users, o.ReshardInboxRows); err != nil {
		return err
	}
	// Four importers: each author's import commits on its own, and the
	// commits wait on the log flush more than on the CPU.
	authors := make(chan uint64, inboxAuthors)
	for a := range inboxAuthors {
		authors <- inboxAuthorBase + uint64(a)
	}
	close(authors)
	var g group
	for range 4 {
		g.Go(func() error {
			for a := range authors {
				if err := storeload.Followers(ctx, src, a, users, b.data.t0, false); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	db := src.Shards()[0].DB
	n := o.ReshardInboxRows * inboxAuthors
	post := func(i int) ([]any, int64) {
		p := b.data.loadedPost(i/inboxAuthors, i%inboxAuthors, o.ReshardInboxRows)
		return []any{p.AuthorID, p.PublishTime, p.ContentID, p.Kind}, p.PublishTime
	}
	if _, err := sqlconn.InsertRows(ctx, db, loadPostsHead, 5, "", n, func(i int) []any {
		row, at := post(i)
		return append(row, at)
	}); err != nil {
		return fmt.Errorf("load posts: %w", err)
	}
	if _, err := sqlconn.InsertRows(ctx, db, loadDeliveriesHead, 8, "", n, func(i int) []any {
		row, at := post(i)
		return []any{row[2], row[0], row[1], row[3], deliveryDone, len(users), len(users), at}
	}); err != nil {
		return fmt.Errorf("load deliveries: %w", err)
	}
	return nil
}

// reshardCeiling copies the rows of the moving virtual shards from the
// source database into a fresh one with the same schema, with raw SQL: per
// keyed table it reads the placing ids once, keeps those of moving virtual
// shards, and runs INSERT … SELECT across the two databases, ceilingIDs
// ids a statement. It records the rows copied and the time of both parts.
func (b *bench) reshardCeiling(ctx context.Context, source, target string, res *reshardResult) error {
	if err := store.MigrateDatabase(ctx, "ceiling", b.dsnOf(target), store.InnoDB, slog.New(slog.DiscardHandler)); err != nil {
		return err
	}
	db, err := sqlx.Open("mysql", b.dsnOf(source))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, t := range reshard.Keyed {
		start := time.Now()
		var ids, moving []uint64
		if err := db.SelectContext(ctx, &ids, "SELECT DISTINCT `"+t.Key+"` FROM `"+t.Name+"`"); err != nil {
			return fmt.Errorf("ceiling: ids of %s: %w", t.Name, err)
		}
		for _, id := range ids {
			if shardmap.VirtualShard(id, shardmap.DefaultVirtualShards) >= reshardFirstMoved {
				moving = append(moving, id)
			}
		}
		res.CeilingIDs += time.Since(start)
		start = time.Now()
		head := "INSERT INTO `" + target + "`.`" + t.Name + "` SELECT * FROM `" + t.Name + "` WHERE `" + t.Key + "` IN ("
		for chunk := range slices.Chunk(moving, ceilingIDs) {
			args := make([]any, len(chunk))
			for i, id := range chunk {
				args[i] = id
			}
			q := head + strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",") + ")"
			r, err := db.ExecContext(ctx, q, args...)
			if err != nil {
				return fmt.Errorf("ceiling: copy %s: %w", t.Name, err)
			}
			n, err := r.RowsAffected()
			if err != nil {
				return err
			}
			res.CeilingRows += n
		}
		res.Ceiling += time.Since(start)
	}
	b.log.Info("feedbench: R raw copy", "rows", res.CeilingRows, "seconds", res.Ceiling.Seconds(), "ids_seconds", res.CeilingIDs.Seconds())
	return nil
}

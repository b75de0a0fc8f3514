package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storeload"
)

// Phase D's steady state: the footprint of inboxes that fan-out and
// retention have turned over, on a database of its own. Loaded rows arrive
// in an order no deployment writes, and phase A's inboxes take a few dozen
// rows each; what a deployment keeps on disk is inboxes at their limit whose
// entries fan-out has replaced several times, each push a random append into
// a full inbox and each sampled trim a cut at its old end.

// steadyAuthorBase numbers the steady state's authors; the last
// steadyBigAuthors of them are followed by every user, so their posts take
// the fan-out's task path (pushSQL) while the others' small audiences take
// the batched one (PushDeliveries).
const (
	steadyAuthorBase  = 300_000
	steadyBigAuthors  = 2
	steadyPhotoEvery  = 10 // one post in ten is a photo, as in the loaded rows
	steadyWaitTimeout = 2 * time.Minute
)

// steadyResult is what the steady-state run measured.
type steadyResult struct {
	Users, Limit, Slack, Authors, Follows int
	Turnovers                             int
	Rows                                  int64 // inbox rows fan-out wrote
	Trimmed                               int64 // rows sampled trims cut
	Elapsed                               time.Duration
}

// steadyState fills opt.SteadyUsers inboxes to the inbox limit
// opt.SteadyLimit through the service's own fan-out and retention, then
// turns them over opt.SteadyTurnovers times, and measures the inbox after
// the fill and at the end.
func (b *bench) steadyState(ctx context.Context) (err error) {
	o := b.opt
	name := b.server.DBName + "_steady"
	defer func() {
		if o.Keep {
			b.log.Info("feedbench: keeping database", "database", name)
			return
		}
		// The name is the benchmark database's, [a-z0-9_], with a suffix.
		if _, derr := b.db.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS `"+name+"`"); derr != nil && err == nil {
			err = fmt.Errorf("drop database %s: %w", name, derr)
		}
	}()
	m := shardmap.Single(b.dsnOf(name))
	m.InboxEngine = b.opt.InboxEngine
	st, err := store.Open(m)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx, b.log); err != nil {
		return err
	}
	cfg := b.stack.svc.Config()
	cfg.InboxLimit = o.SteadyLimit
	reg := prometheus.NewRegistry()
	svc, err := service.New(st, cfg, b.log, service.NewMetrics(reg), time.Now)
	if err != nil {
		return err
	}
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	workersDone := make(chan struct{})
	go func() {
		defer close(workersDone)
		svc.RunWorkers(wctx, service.SoftStopTimeoutDefault)
	}()
	defer func() { stopWorkers(); <-workersDone }()

	res := &steadyResult{Users: o.SteadyUsers, Limit: cfg.InboxLimit, Slack: cfg.InboxSlack,
		Authors: o.SteadyAuthors, Follows: o.SteadyFollows, Turnovers: o.SteadyTurnovers}
	authors, err := b.steadyFollows(ctx, st)
	if err != nil {
		return err
	}
	// Every user receives SteadyFollows posts of the small authors and
	// one of each big author per round.
	perRound := o.SteadyFollows + steadyBigAuthors
	start := time.Now()
	round := 0
	for turn := 0; turn <= o.SteadyTurnovers; turn++ {
		for range (o.SteadyLimit + perRound - 1) / perRound {
			n, err := b.steadyRound(ctx, st, svc, reg, authors, round)
			if err != nil {
				return err
			}
			res.Rows += n
			round++
		}
		when := fmt.Sprintf("steady state after %d turnovers", turn)
		switch turn {
		case 0:
			when = "inboxes filled to the limit by fan-out"
		case 1:
			when = "steady state after 1 turnover"
		}
		if err := b.steadyFootprint(ctx, st, when, turn == 0 || turn == o.SteadyTurnovers); err != nil {
			return err
		}
	}
	res.Elapsed = time.Since(start)
	// The last figure is taken right after a burst of churn, with the
	// engine's background work on it still to come. A service at steady
	// state runs that work as it goes: measure again once it is done,
	// nothing forced (no OPTIMIZE, no manual compaction).
	if err := b.quiesce(ctx); err != nil {
		return err
	}
	if store.Engine(o.InboxEngine) == store.RocksDB {
		if err := b.settleCompactions(ctx); err != nil {
			return err
		}
	}
	if err := b.steadyFootprint(ctx, st, "settled: the last turnover's inboxes once purge and compactions finished", true); err != nil {
		return err
	}
	res.Trimmed = int64(counterOf(reg, "feed_inbox_trimmed_rows_total"))
	b.rep.Steady = res
	return nil
}

// steadyFootprint measures the steady-state database's inbox, logs it and,
// if report, adds it to the report's footprints as when.
func (b *bench) steadyFootprint(ctx context.Context, st *store.Store, when string, report bool) error {
	f, err := inboxFootprint(ctx, st.Shards()[0].DB, false)
	if err != nil {
		return err
	}
	b.log.Info("feedbench: D steady state", "when", when, "rows", f.Rows, "bytes_per_row", f.BytesPerRow())
	if report {
		b.rep.Footprints = append(b.rep.Footprints, footprintResult{When: when, tableFootprint: f})
	}
	return nil
}

// steadyFollows gives each of opt.SteadyUsers users a header row (as a
// follow creates it) and opt.SteadyFollows of opt.SteadyAuthors small
// authors drawn at random, and makes every user follow the big authors.
// Returns every author.
func (b *bench) steadyFollows(ctx context.Context, st *store.Store) ([]uint64, error) {
	o := b.opt
	users := make([]uint64, o.SteadyUsers)
	for i := range users {
		users[i] = loadedUser(i)
	}
	now := time.Now().UnixMilli()
	if err := storeload.Activity(ctx, st, users, now, now, nil); err != nil {
		return nil, err
	}
	authors := make([]uint64, o.SteadyAuthors+steadyBigAuthors)
	followers := make([][]uint64, len(authors))
	for a := range authors {
		authors[a] = steadyAuthorBase + uint64(a)
	}
	for _, u := range users {
		for _, a := range b.rng.Perm(o.SteadyAuthors)[:o.SteadyFollows] {
			followers[a] = append(followers[a], u)
		}
	}
	for a := o.SteadyAuthors; a < len(authors); a++ {
		followers[a] = users
	}
	for a, f := range followers {
		slices.Sort(f)
		if err := storeload.Followers(ctx, st, authors[a], f, now, false); err != nil {
			return nil, err
		}
	}
	return authors, nil
}

// steadyRound publishes one post per author through svc and waits until
// the workers have delivered them all; returns the inbox rows written. One
// post in steadyPhotoEvery is a photo, by the round's number seq.
func (b *bench) steadyRound(ctx context.Context, st *store.Store, svc *service.Service, reg *prometheus.Registry, authors []uint64, seq int) (int64, error) {
	rows0 := counterOf(reg, "feed_fanout_inbox_rows_total")
	for i, a := range authors {
		kind := feed.KindPost
		if (seq+i)%steadyPhotoEvery == 0 {
			kind = "photo"
		}
		if _, _, err := svc.Publish(ctx, service.PublishInput{AuthorID: a, Kind: kind}); err != nil {
			return 0, err
		}
	}
	if err := waitIdle(ctx, st, steadyWaitTimeout); err != nil {
		return 0, fmt.Errorf("D steady state: %w", err)
	}
	return int64(counterOf(reg, "feed_fanout_inbox_rows_total") - rows0), nil
}

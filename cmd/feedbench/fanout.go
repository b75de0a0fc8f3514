package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
)

// fanout runs phase A: opt.FanoutAuthors authors, each followed by
// opt.FanoutFollowers loaded users drawn at random, publish one post per
// round; the real workers fan them out. The ceiling writes the same number
// of rows of the same shape into the same inboxes, in statements of the
// batch size, on as many connections as there are workers. A second set of
// as many authors, followed by users of a second population loaded to half
// the inbox rows, runs the same two writers where retention is not due.
// Rounds reverse the order of the writers, so none always meets the biggest
// table. With diagnostics, a second service whose inbox limit is too large
// for retention ever to trim runs the first authors' posts, to price the
// trims, and a raw ceiling cuts as many rows as it writes.
func (b *bench) fanout(ctx context.Context) error {
	o := b.opt
	cfg := b.stack.svc.Config()
	res := fanoutResult{Authors: o.FanoutAuthors, Followers: o.FanoutFollowers, Rounds: o.Rounds, Workers: cfg.Workers,
		Batch: cfg.BatchSize, InboxLimit: cfg.InboxLimit, InboxSlack: cfg.InboxSlack, TrimEvery: cfg.TrimEvery(),
		RoomRows: max(1, o.InboxRows/2)}
	room := make([]uint64, o.Users)
	for i := range room {
		room[i] = roomUser(i)
	}
	if _, err := b.loadInboxes(ctx, b.st, room, res.RoomRows); err != nil {
		return err
	}
	followers, err := b.fanoutFollowers(ctx, fanoutAuthorBase, b.data.users)
	if err != nil {
		return err
	}
	roomFollowers, err := b.fanoutFollowers(ctx, roomAuthorBase, room)
	if err != nil {
		return err
	}
	if res.Overshoot, err = b.overshoot(ctx, res.TrimEvery); err != nil {
		return err
	}
	type step struct {
		name string
		run  func() error
	}
	steps := []step{
		{"fan-out", func() error {
			_, err := b.fanoutRound(ctx, b.stack.svc, b.stack.reg, &res.Fanout, fanoutAuthorBase)
			return err
		}},
		{"ceiling", func() error {
			posts, err := b.ceilingRound(ctx, &res.Ceiling, followers, fanoutAuthorBase, cfg.BatchSize, 0)
			if err != nil {
				return err
			}
			return b.undo(ctx, followers, posts)
		}},
		// The inboxes with room keep their size: both writers' rows go
		// once their clocks stop.
		{"fan-out into inboxes with room", func() error {
			posts, err := b.fanoutRound(ctx, b.stack.svc, b.stack.reg, &res.Room, roomAuthorBase)
			if err != nil {
				return err
			}
			return b.undo(ctx, roomFollowers, posts)
		}},
		{"ceiling into inboxes with room", func() error {
			posts, err := b.ceilingRound(ctx, &res.RoomCeiling, roomFollowers, roomAuthorBase, cfg.BatchSize, 0)
			if err != nil {
				return err
			}
			return b.undo(ctx, roomFollowers, posts)
		}},
	}
	if o.Diagnostics {
		noTrim := cfg
		noTrim.InboxLimit = 1 << 30
		reg := prometheus.NewRegistry()
		svc, err := service.New(b.st, noTrim, b.log, service.NewMetrics(reg), time.Now)
		if err != nil {
			return err
		}
		res.NoTrimRun = true
		steps = append(steps, step{"ceiling with retention", func() error {
			_, err := b.ceilingRound(ctx, &res.CeilingRetain, followers, fanoutAuthorBase, cfg.BatchSize, res.TrimEvery)
			return err
		}})
		steps = slices.Insert(steps, 1, step{"fan-out without trims", func() error {
			b.stack.haltWorkers()
			b.stack.startWorkers(svc)
			defer func() { b.stack.haltWorkers(); b.stack.startWorkers(b.stack.svc) }()
			posts, err := b.fanoutRound(ctx, svc, reg, &res.NoTrim, fanoutAuthorBase)
			if err != nil {
				return err
			}
			return b.undo(ctx, followers, posts)
		}})
	}
	for round := range o.Rounds {
		order := slices.Clone(steps)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, st := range order {
			if err := b.quiesce(ctx); err != nil {
				return err
			}
			if err := st.run(); err != nil {
				return fmt.Errorf("A %s: %w", st.name, err)
			}
		}
		b.log.Info("feedbench: A round done", "round", round+1, "of", o.Rounds,
			"fanout_rows_per_second", int(res.Fanout.Rate()), "no_trim_rows_per_second", int(res.NoTrim.Rate()),
			"ceiling_rows_per_second", int(res.Ceiling.Rate()), "retention_ceiling_rows_per_second", int(res.CeilingRetain.Rate()),
			"room_fanout_rows_per_second", int(res.Room.Rate()),
			"room_ceiling_rows_per_second", int(res.RoomCeiling.Rate()))
	}
	b.rep.Fanout = &res
	return nil
}

// fanoutPoll is how often fanoutRound reads the row counter. Each read
// gathers the whole registry (about 20 µs of CPU and 40 kB of garbage) on the
// CPUs the fan-out runs on, and the ceiling's window has no such poller;
// every 5 ms it costs a fraction of a percent, and the window's end is found
// at most 5 ms late, which counts against the fan-out.
const fanoutPoll = 5 * time.Millisecond

// fanoutFollowers makes opt.FanoutFollowers users drawn from users follow
// each of opt.FanoutAuthors authors numbered from authorBase, and returns
// them by author.
func (b *bench) fanoutFollowers(ctx context.Context, authorBase uint64, users []uint64) ([][]uint64, error) {
	followedAt := time.Now().Add(-loadSpan).UnixMilli()
	followers := make([][]uint64, b.opt.FanoutAuthors)
	for a := range followers {
		followers[a] = b.sample(users, b.opt.FanoutFollowers)
		if err := storeload.Followers(ctx, b.st, authorBase+uint64(a), followers[a], followedAt, false); err != nil {
			return nil, err
		}
	}
	return followers, nil
}

// fanoutRound publishes one post per author through svc, whose workers must
// be the ones running, and waits until every delivery is done: the time from
// the first publish to the commit of the last batch, which the service's row
// counter reports (a worker counts a batch after its commit and after the
// task's finish). Watching the counter instead of polling the database keeps
// the wait from loading the server it measures; the deliveries' state is
// checked once afterwards. Returns the posts, by author.
func (b *bench) fanoutRound(ctx context.Context, svc *service.Service, reg *prometheus.Registry, w *writerStats, authorBase uint64) ([]feed.Post, error) {
	rows0 := counterOf(reg, "feed_fanout_inbox_rows_total")
	trim0 := counterOf(reg, "feed_inbox_trimmed_rows_total")
	err0 := counterOf(reg, "feed_worker_errors_total")
	bSum0, bCount0 := histogramOf(reg, "feed_fanout_batch_seconds")
	want := int64(b.opt.FanoutAuthors * b.opt.FanoutFollowers)
	cpu0 := readCPUTimes()
	start := time.Now()
	posts := make([]feed.Post, b.opt.FanoutAuthors)
	for a := range posts {
		var err error
		if posts[a], _, err = svc.Publish(ctx, service.PublishInput{AuthorID: authorBase + uint64(a)}); err != nil {
			return nil, err
		}
	}
	rows := int64(0)
	for deadline := start.Add(10 * time.Minute); rows < want; time.Sleep(fanoutPoll) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("fan-out wrote %d inbox rows in 10m, want %d", rows, want)
		}
		rows = int64(counterOf(reg, "feed_fanout_inbox_rows_total") - rows0)
	}
	el := time.Since(start)
	w.addCPU(cpu0)
	if err := b.stack.waitIdle(ctx, time.Minute); err != nil {
		return nil, err
	}
	if rows = int64(counterOf(reg, "feed_fanout_inbox_rows_total") - rows0); rows != want {
		return nil, fmt.Errorf("fan-out wrote %d inbox rows, want %d", rows, want)
	}
	bSum1, bCount1 := histogramOf(reg, "feed_fanout_batch_seconds")
	w.Rows += rows
	w.Time += el
	w.Trimmed += int64(counterOf(reg, "feed_inbox_trimmed_rows_total") - trim0)
	w.WorkerErrors += int64(counterOf(reg, "feed_worker_errors_total") - err0)
	w.BatchSeconds += bSum1 - bSum0
	w.Batches += int64(bCount1 - bCount0)
	return posts, nil
}

// ceilingRound writes one synthetic post per author into the same
// followers' inboxes with raw multi-row INSERT IGNORE statements. With a
// cut size, cuts of the shape trims use are spread among the INSERTs,
// deleting as many entries as the round writes, cut entries of one user's
// oldest at a time (see cutOldest): each cut reads where it falls inside
// the clock, as a trim must, so on disk it pays the reads of the pages it
// deletes from. Unlike trims, the cuts leave the floors where they were:
// the inboxes stop being complete down to them, which no later phase reads
// that deep to see. Returns the synthetic posts, by author.
func (b *bench) ceilingRound(ctx context.Context, w *writerStats, followers [][]uint64, authorBase uint64, batch, cut int) ([]feed.Post, error) {
	now := time.Now().UnixMilli()
	var inserts [][]store.InboxRow
	posts := make([]feed.Post, len(followers))
	written := 0
	for a, users := range followers {
		p := feed.Post{ContentID: b.nextCeilingPost(), AuthorID: authorBase + uint64(a), PublishTime: now, Kind: feed.KindPost}
		posts[a] = p
		for lo := 0; lo < len(users); lo += batch {
			rows := make([]store.InboxRow, 0, batch)
			for _, u := range users[lo:min(lo+batch, len(users))] {
				rows = append(rows, store.InboxRow{UserID: u, Post: p})
			}
			inserts = append(inserts, rows)
			written += len(rows)
		}
	}
	type job struct {
		rows []store.InboxRow
		cuts []userCut
	}
	var cuts [][]userCut
	var spare []uint64
	if cut > 0 {
		cuts, spare = b.retentionCuts(inserts, written, cut)
	}
	// Each insert, then its even share of the cuts.
	jobs := make([]job, 0, len(inserts)+len(cuts))
	for i, rows := range inserts {
		jobs = append(jobs, job{rows: rows})
		for _, c := range cuts[i*len(cuts)/len(inserts) : (i+1)*len(cuts)/len(inserts)] {
			jobs = append(jobs, job{cuts: c})
		}
	}
	var inserted, deleted atomic.Int64
	cpu0 := readCPUTimes()
	start := time.Now()
	if err := spread(b.opt.Workers, len(jobs), func(i int) error {
		if jobs[i].cuts != nil {
			n, err := cutOldest(ctx, b.db, jobs[i].cuts)
			deleted.Add(n)
			return err
		}
		n, err := insertInboxRows(ctx, b.db, jobs[i].rows)
		inserted.Add(n)
		return err
	}); err != nil {
		return nil, err
	}
	// Inboxes smaller than a cut (a quick run's) gave less: more users
	// make up the rest, still on the clock.
	for left := inserted.Load() - deleted.Load(); cut > 0 && left > 0; left = inserted.Load() - deleted.Load() {
		if len(spare) == 0 {
			return nil, fmt.Errorf("the retention ceiling found too few users to cut %d more entries", left)
		}
		var more []userCut
		for len(spare) > 0 && len(more) < trimStatementUsers && int64(len(more)*cut) < left {
			more = append(more, userCut{user: spare[0], n: int(min(int64(cut), left-int64(len(more)*cut)))})
			spare = spare[1:]
		}
		n, err := cutOldest(ctx, b.db, more)
		if err != nil {
			return nil, err
		}
		deleted.Add(n)
	}
	w.Time += time.Since(start)
	w.addCPU(cpu0)
	if cut > 0 && deleted.Load() != inserted.Load() {
		return nil, fmt.Errorf("retention ceiling deleted %d rows for %d written", deleted.Load(), inserted.Load())
	}
	w.Rows += inserted.Load()
	w.Trimmed += deleted.Load()
	return posts, nil
}

// undo deletes a writer's posts from their authors' followers' inboxes
// after its clock stopped: a writer that does not trim then leaves the
// inboxes as it found them, and the next writer's trims do not cut its rows.
func (b *bench) undo(ctx context.Context, followers [][]uint64, posts []feed.Post) error {
	for a, p := range posts {
		n, err := retractFromFollowers(ctx, b.db, p)
		if err != nil {
			return err
		}
		if n != int64(len(followers[a])) {
			return fmt.Errorf("undoing post %d deleted %d inbox entries, want %d", p.ContentID, n, len(followers[a]))
		}
	}
	return nil
}

// quiesce waits until InnoDB has purged what earlier writers deleted, so
// that no writer's window times a predecessor's purge. On a shared server
// other sessions keep some backlog, so it also stops once the backlog has
// not shrunk for two seconds, and after a minute in any case.
func (b *bench) quiesce(ctx context.Context) error {
	start := time.Now()
	low, lowAt := int64(-1), start
	for {
		n, err := purgeBacklog(ctx, b.db)
		if err != nil || n == 0 {
			return err
		}
		now := time.Now()
		if low < 0 || n < low {
			low, lowAt = n, now
		}
		if now.Sub(lowAt) > 2*time.Second || now.Sub(start) > time.Minute {
			b.log.Warn("feedbench: purge backlog stopped draining; the next writer may pay for some of it",
				"history_list_length", n, "waited", now.Sub(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// overshoot brings the loaded inboxes to the steady state of sampled
// retention: each push checks its inbox with probability 1/every, so an
// inbox holds, above the limit, the pushes since its last check, a
// geometric number with mean every-1. The extra entries are each inbox's
// oldest, as the overshoot is what the next trim cuts. Returns the rows
// added.
func (b *bench) overshoot(ctx context.Context, every int) (int64, error) {
	var rows []store.InboxRow
	for _, u := range b.data.users {
		n := 0
		if every > 1 {
			n = int(math.Log(1-b.rng.Float64()) / math.Log(1-1/float64(every)))
		}
		for k := range n {
			rows = append(rows, store.InboxRow{UserID: u, Post: feed.Post{ContentID: overshootContentBase + uint64(k),
				AuthorID: inboxAuthorBase, PublishTime: b.data.t0 + 1 + int64(k), Kind: feed.KindPost}})
		}
	}
	return insertInboxRows(ctx, b.db, rows)
}

// trimStatementUsers is how many users one of the retention ceiling's
// statements cuts.
const trimStatementUsers = 64

// retentionCuts plans, in statements of trimStatementUsers users, cuts that
// delete rows entries in all: cut of one user's oldest at a time (the last
// takes what is left), the users drawn at random from the inserts'
// recipients, each once. It reads nothing: the cuts find their bounds on
// the clock. The recipients left over are returned for cuts that come up
// short. A sampled trim cuts about the slack from one inbox, which costs
// the server much less per entry than cutting every inbox by the few
// entries a round adds to it.
func (b *bench) retentionCuts(inserts [][]store.InboxRow, rows, cut int) (plan [][]userCut, spare []uint64) {
	seen := map[uint64]bool{}
	var users []uint64
	for _, rs := range inserts {
		for _, r := range rs {
			if !seen[r.UserID] {
				seen[r.UserID] = true
				users = append(users, r.UserID)
			}
		}
	}
	b.rng.Shuffle(len(users), func(i, j int) { users[i], users[j] = users[j], users[i] })
	var stmt []userCut
	for rows > 0 && len(users) > 0 {
		n := min(cut, rows)
		stmt = append(stmt, userCut{user: users[0], n: n})
		users, rows = users[1:], rows-n
		if len(stmt) == trimStatementUsers {
			plan, stmt = append(plan, stmt), nil
		}
	}
	if len(stmt) > 0 {
		plan = append(plan, stmt)
	}
	return plan, users
}

// nextCeilingPost returns a fresh content id for a ceiling's synthetic post.
func (b *bench) nextCeilingPost() uint64 {
	b.ceilingPosts++
	return ceilingContentBase + b.ceilingPosts
}

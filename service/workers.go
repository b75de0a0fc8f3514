package service

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// SoftStopTimeoutDefault is how long RunWorkers lets batches in flight finish
// after its context ends before it cancels them (a cancelled batch rolls back
// and is redone by the next claimant).
const SoftStopTimeoutDefault = 10 * time.Second

// releaseTimeout bounds giving claims back after a failed or cancelled step.
const releaseTimeout = 2 * time.Second

// releaseCtx returns the context to give claims back with once a step
// failed: not cancelled with work, so a batch cut off by the end of the soft
// stop still hands its row to the next claimant at once instead of leaving
// it to wait out the lease (the next process may be starting right now).
func releaseCtx(work context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(work), releaseTimeout)
}

// wakeup wakes every idle worker of this process at once: closing a channel
// is a broadcast, and a fresh one is made for the next round.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

func newWakeup() *wakeup { return &wakeup{ch: make(chan struct{})} }

func (w *wakeup) notify() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

func (w *wakeup) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// RunWorkers runs the background loops on every shard until ctx ends:
// planning deliveries, running fan-out sub-tasks, applying follow events,
// switching authors to pull mode and purging deleted posts' tombstones. Workers coordinate only through leases in
// the database, so any number of processes may run them. When ctx ends the
// loops stop claiming, batches in flight get softStop to finish, and claims
// not started are released.
func (s *Service) RunWorkers(ctx context.Context, softStop time.Duration) {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(softStop, cancelWork)
	})
	defer stop()

	var wg sync.WaitGroup
	run := func(name string, step func(ctx, work context.Context) (int, error)) {
		wg.Go(func() { s.loop(ctx, work, name, step) })
	}
	for _, sh := range s.store.Shards() {
		run("plan", func(ctx, work context.Context) (int, error) { return s.planDeliveries(work, sh) })
		for range s.cfg.Workers {
			run("fanout", func(ctx, work context.Context) (int, error) { return s.runTasks(ctx, work, sh) })
		}
		run("follow", func(ctx, work context.Context) (int, error) { return s.applyFollowEvents(ctx, work, sh) })
		run("switch", func(ctx, work context.Context) (int, error) { return s.runSwitches(ctx, work, sh) })
		run("tombstones", func(ctx, work context.Context) (int, error) { return s.purgeTombstones(work, sh) })
	}
	wg.Wait()
}

// Worker backoff after a failed step: doubling from the first to the cap,
// each wait drawn at random from its upper half so that the loops of many
// processes do not retry a recovering database in step.
const (
	backoffFirst = 100 * time.Millisecond
	backoffCap   = 10 * time.Second
	// failureLogEvery spaces a failing loop's repeated log lines.
	failureLogEvery = time.Minute
)

// loop calls step until ctx ends; when a step finds no work it sleeps for a
// jittered poll interval or until a local write wakes it. Errors back off.
func (s *Service) loop(ctx, work context.Context, name string, step func(ctx, work context.Context) (int, error)) {
	var (
		backoff time.Duration
		streak  failureStreak
	)
	for ctx.Err() == nil {
		wake := s.wake.wait()
		n, err := step(ctx, work)
		switch {
		case err != nil && ctx.Err() == nil:
			s.metrics.workerErrors.WithLabelValues(name).Inc()
			streak.failed(s.log, name, err)
			backoff = min(max(2*backoff, backoffFirst), backoffCap)
			wake = nil // do not spin on wake-ups while failing
		case err != nil:
			// Stopping: a step cut short is not a failure.
		default:
			streak.succeeded(s.log, name)
			backoff = 0
			if n > 0 {
				continue
			}
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if backoff == 0 {
			wait = s.cfg.PollInterval/2 + rand.N(s.cfg.PollInterval)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// failureStreak logs a loop's run of failures without flooding: the first
// failure, then at most one line per failureLogEvery, then the recovery of
// a loop that logged. A database that is unreachable is the health probes'
// to report (once per transition), so its failures are logged at debug
// only; a conflict that outlasted the store's tries is logged like any
// other failure.
type failureStreak struct {
	count   int
	logged  time.Time
	started time.Time
}

func (f *failureStreak) failed(log *slog.Logger, loop string, err error) {
	now := time.Now()
	if f.count == 0 {
		f.started = now
	}
	f.count++
	switch {
	case feed.ErrorCode(err) == feed.EUNAVAILABLE && !store.Conflict(err):
		log.Debug("worker: step failed", "loop", loop, "failures", f.count, "error", err)
	case f.count == 1 || now.Sub(f.logged) >= failureLogEvery:
		log.Error("worker: step failed", "loop", loop, "failures", f.count, "error", err)
		f.logged = now
	}
}

func (f *failureStreak) succeeded(log *slog.Logger, loop string) {
	if f.count > 0 && !f.logged.IsZero() {
		log.Info("worker: recovered", "loop", loop, "failures", f.count,
			"after", time.Since(f.started).Round(time.Millisecond).String())
	}
	*f = failureStreak{}
}

func (s *Service) lease() (now, until int64) {
	t := s.now()
	return t.UnixMilli(), t.Add(s.cfg.Lease).UnixMilli()
}

// each calls fn for every item, at most n at a time, and returns the first
// error. One loop per shard claims a batch of small jobs and runs them side
// by side: as fast as a loop per worker, without multiplying idle polling.
func each[T any](items []T, n int, fn func(T) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, n)
	)
	for _, it := range items {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(it); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// planDeliveries delivers newly published posts of the shard. Most posts
// reach few followers: those are pushed together, a batch's worth of inbox
// rows per transaction (store.PushDeliveries), so the cost of a
// transaction is shared by many posts and delivery keeps up with
// publishing. The others are planned into fan-out tasks, Workers at a time.
func (s *Service) planDeliveries(work context.Context, sh *store.Shard) (int, error) {
	now, until := s.lease()
	jobs, err := s.store.ClaimDeliveries(work, sh, now, until, deliveryClaim, rand.Uint64())
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	plan, err := s.pushDeliveries(work, sh, jobs)
	if err != nil {
		s.releaseDeliveries(work, jobs)
		return len(jobs), err
	}
	opt := store.PlanOptions{TaskSize: s.cfg.TaskSize, PullOnly: s.cfg.ActiveDays == 0}
	err = each(plan, s.cfg.Workers, func(job store.DeliveryJob) error {
		pctx, cancel := s.stepContext(work)
		defer cancel()
		res, err := s.store.PlanDelivery(pctx, job, opt)
		if errors.Is(err, store.ErrLostClaim) {
			return nil
		} else if err != nil {
			s.releaseDeliveries(work, []store.DeliveryJob{job})
			return err
		}
		s.metrics.deliveries.WithLabelValues(modeName(res.Mode)).Inc()
		if res.Tasks > 0 {
			s.wake.notify()
		} else {
			s.delivered(job.CreatedAt)
		}
		s.sampleTrims(work, []uint64{job.AuthorID})
		return nil
	})
	return len(jobs), err
}

// deliveryClaim is how many deliveries a planner claims at once: enough
// small posts to fill a push batch.
const deliveryClaim = 256

// pushDeliveries pushes the small deliveries among jobs and returns the
// others, to plan into tasks. The jobs are split into Workers parts pushed
// side by side, each a batch at a time: a batch waits on its statements'
// round trips and commit, which others can use. Publish put each post into
// its author's own inbox, which no push samples for trims: an author who
// publishes more than they read would grow it without bound, so delivery
// samples it as a push would.
func (s *Service) pushDeliveries(work context.Context, sh *store.Shard, jobs []store.DeliveryJob) ([]store.DeliveryJob, error) {
	var (
		mu   sync.Mutex
		plan []store.DeliveryJob
	)
	parts := slices.Collect(slices.Chunk(jobs, (len(jobs)+s.cfg.Workers-1)/s.cfg.Workers))
	err := each(parts, s.cfg.Workers, func(jobs []store.DeliveryJob) error {
		for len(jobs) > 0 {
			start := time.Now()
			// Posts with followers on a database that is down, or that
			// does not take their push within pushTargetTimeout, are
			// planned into tasks, which wait for it. The planners write
			// to other databases outside the workers' gate, so a post is
			// never diverted to tasks for a busy database.
			opt := store.BatchOptions{Size: s.cfg.BatchSize, Skip: down(s.store.Shards()), TargetTimeout: pushTargetTimeout}
			pctx, cancel := s.stepContext(work)
			res, err := s.store.PushDeliveries(pctx, sh, jobs, opt)
			cancel()
			if err != nil {
				return err
			}
			s.metrics.batchSeconds.Observe(time.Since(start).Seconds())
			s.metrics.deliveries.WithLabelValues(modeName(store.ModePush)).Add(float64(len(res.Pushed)))
			s.metrics.inboxRows.WithLabelValues("push").Add(float64(res.Written))
			users := res.Users
			for _, j := range res.Pushed {
				users = append(users, j.AuthorID)
				s.delivered(j.CreatedAt)
			}
			s.sampleTrims(work, users)
			mu.Lock()
			plan = append(plan, res.Plan...)
			mu.Unlock()
			jobs = res.Later
		}
		return nil
	})
	return plan, err
}

// releaseDeliveries gives claimed deliveries back after a failed step; those
// already done or taken over are left alone by the claim's guard.
func (s *Service) releaseDeliveries(work context.Context, jobs []store.DeliveryJob) {
	rctx, cancel := releaseCtx(work)
	defer cancel()
	for _, j := range jobs {
		if s.store.ReleaseDelivery(rctx, j) != nil {
			return
		}
	}
}

func modeName(mode int) string {
	switch mode {
	case store.ModePushActive:
		return "push_active"
	case store.ModePull:
		return "pull"
	}
	return "push"
}

// runTasks claims one fan-out sub-task with its first batch and runs its
// other batches to the end. A stop request ends it between batches; the
// task is then released and the next claimant resumes from its progress
// mark. Tasks whose target database is down, or busy with as many batches
// as it may hold (targetGate), are left for later: a database that fails
// holds back its own followers' share only.
func (s *Service) runTasks(ctx, work context.Context, sh *store.Shard) (int, error) {
	now, _ := s.lease()
	start := time.Now()
	bctx, cancel := s.stepContext(work)
	t, res, err := s.store.RunNextTask(bctx, sh, now, rand.Uint64(), s.batchOptions())
	cancel()
	if err != nil || t == nil {
		return 0, err
	}
	for {
		s.batchDone(work, t, res, start)
		if res.Replanned {
			s.wake.notify() // its delivery waits for a planner
		}
		if res.TaskDone {
			return 1, nil
		}
		if ctx.Err() != nil {
			rctx, cancel := releaseCtx(work)
			defer cancel()
			return 1, s.store.ReleaseTask(rctx, t)
		}
		start = time.Now()
		bctx, cancel := s.stepContext(work)
		res, err = s.store.RunTaskBatch(bctx, t, s.batchOptions())
		cancel()
		if err != nil {
			// The batch rolled back (its other-shard writes may have
			// committed; a replay repeats them harmlessly). Give the task
			// back so the next claimant resumes at once; after a lost
			// claim (a delete turned the task into a removal, or another
			// worker took it over) wake the workers to take it up as it
			// is now.
			rctx, cancel := releaseCtx(work)
			defer cancel()
			rerr := s.store.ReleaseTask(rctx, t)
			if errors.Is(err, store.ErrTargetBusy) {
				return 1, rerr // its target is at its share of batches: later
			}
			if errors.Is(err, store.ErrLostClaim) {
				s.wake.notify()
				return 1, rerr
			}
			return 1, err
		}
	}
}

// batchOptions are the options of a batch starting now.
func (s *Service) batchOptions() store.BatchOptions {
	now, until := s.lease()
	return store.BatchOptions{
		Size:          s.cfg.BatchSize,
		ActiveAfter:   s.now().Add(-s.activeWindow()).UnixMilli(),
		Now:           now,
		LeaseUntil:    until,
		Skip:          s.targets.skip(s.store.Shards()),
		Enter:         s.targets.enter,
		TargetTimeout: targetWriteTimeout,
	}
}

// targetWriteTimeout bounds a batch's write to another database than the
// author's: a push of a thousand rows takes well under a second, so a write
// this slow is waiting for a database that hangs, and the task is left for
// when it answers.
const targetWriteTimeout = 5 * time.Second

// pushTargetTimeout bounds a push of many small posts to another database
// than the authors': shorter than a task's write, since the posts of the
// batch with no followers there wait for it too.
const pushTargetTimeout = time.Second

// stepContext bounds one step of a worker (a batch, a plan, a follow event)
// by the lease: a step that outlives its lease has lost its claim anyway,
// and a database that hangs holds the worker no longer than that.
func (s *Service) stepContext(work context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(work, s.cfg.Lease)
}

// targetGate bounds the fan-out batches of this process writing to each
// database at once, so that one that hangs holds at most that many workers
// (until the batch's targetWriteTimeout) and the rest serve the others.
type targetGate struct {
	mu    sync.Mutex
	limit int
	busy  map[*store.Shard]int
}

func newTargetGate(workers int) *targetGate {
	return &targetGate{limit: max(1, workers/2), busy: map[*store.Shard]int{}}
}

func (g *targetGate) enter(sh *store.Shard) (leave func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy[sh] >= g.limit {
		return nil, false
	}
	g.busy[sh]++
	return func() {
		g.mu.Lock()
		g.busy[sh]--
		g.mu.Unlock()
	}, true
}

// skip names the databases whose tasks a worker should not claim now: down
// as their probe last found them, or at the gate's limit.
func (g *targetGate) skip(shards []*store.Shard) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := down(shards)
	for _, sh := range shards {
		if !sh.Health().Unreachable() && g.busy[sh] >= g.limit {
			out = append(out, sh.Name)
		}
	}
	return out
}

// down names the databases that are down as their probes last found them.
func down(shards []*store.Shard) []string {
	var out []string
	for _, sh := range shards {
		if sh.Health().Unreachable() {
			out = append(out, sh.Name)
		}
	}
	return out
}

// batchDone records a committed batch and samples its inboxes for trims.
func (s *Service) batchDone(ctx context.Context, t *store.Task, res store.BatchResult, start time.Time) {
	s.metrics.batchSeconds.Observe(time.Since(start).Seconds())
	op := "push"
	switch {
	case t.Retract:
		op = "retract"
	case t.Kind == store.ReplayKind:
		op = "replay"
		s.sampleTrimsOf(ctx, res.Users, s.store.TrimReplays, s.metrics.live.replaysTrimmed)
	default:
		s.sampleTrims(ctx, res.Users)
	}
	s.metrics.inboxRows.WithLabelValues(op).Add(float64(res.Written))
	s.delivered(res.PublishedAt)
}

// sampleTrims trims each pushed-to inbox with probability 1/TrimEvery, which
// bounds inboxes near InboxLimit at about one deleted row per pushed one.
// The sampled inboxes of a batch are trimmed together, with a fixed number
// of statements per shard.
func (s *Service) sampleTrims(ctx context.Context, users []uint64) {
	s.sampleTrimsOf(ctx, users, s.store.TrimInboxes, s.metrics.trimmedRows)
}

// sampleTrimsOf samples users as sampleTrims does and trims their lists
// with trim (inboxes or replays lists), counting the rows it deletes.
func (s *Service) sampleTrimsOf(ctx context.Context, users []uint64, trim func(context.Context, []uint64, int) (int64, error), trimmed prometheus.Counter) {
	every := s.cfg.TrimEvery()
	var sampled []uint64
	for _, u := range users {
		if rand.IntN(every) == 0 {
			sampled = append(sampled, u)
		}
	}
	// A trim is a write on the users' databases: skip those that are down,
	// and give the rest the bound of a batch's write to another database.
	sampled = slices.DeleteFunc(sampled, func(u uint64) bool { return s.store.ShardOf(u).Health().Unreachable() })
	if len(sampled) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, targetWriteTimeout)
	defer cancel()
	n, err := trim(ctx, sampled, s.cfg.InboxLimit)
	trimmed.Add(float64(n))
	if err != nil {
		// Retention is best effort: the next sampled pushes retry it.
		s.log.Warn("worker: trim", "users", len(sampled), "error", err)
	}
}

// applyFollowEvents reconciles a few follow events of the shard, Workers at
// a time: the author's followers row is made to match the following row as
// it is now (so repeated operations collapse to the last), and a live
// follow is backfilled. An event that changed meanwhile runs again; one
// that failed or was not started before a stop is released.
func (s *Service) applyFollowEvents(ctx, work context.Context, sh *store.Shard) (int, error) {
	now, until := s.lease()
	evs, err := s.store.ClaimFollowEvents(work, sh, now, until, 4*s.cfg.Workers, rand.Uint64())
	if err != nil {
		return 0, err
	}
	err = each(evs, s.cfg.Workers, func(ev store.FollowEvent) error {
		if s.store.ShardOf(ev.AuthorID).Health().Unreachable() {
			// Left claimed: it is taken up again when the lease ends,
			// which spaces the retries while the author's database is down.
			return nil
		}
		err := ctx.Err()
		if err == nil {
			ectx, cancel := s.stepContext(work)
			err = s.applyFollowEvent(ectx, ev)
			cancel()
		}
		if err != nil {
			rctx, cancel := releaseCtx(work)
			defer cancel()
			_ = s.store.ReleaseFollowEvent(rctx, ev)
			if ctx.Err() != nil {
				return nil // stopping, not failing
			}
			return err
		}
		s.metrics.followEvents.Inc()
		return nil
	})
	return len(evs), err
}

func (s *Service) applyFollowEvent(ctx context.Context, ev store.FollowEvent) error {
	f, err := s.store.GetFollowing(ctx, ev.UserID, ev.AuthorID)
	if err == nil {
		var mode int
		if mode, err = s.store.AddFollower(ctx, f, s.cfg.PushThreshold); err == nil {
			// Replays first: reads merge the host's own replay list until
			// the posts' backfill clears the pending bit.
			_, err = s.store.BackfillReplays(ctx, ev.UserID, ev.AuthorID, s.cfg.InboxLimit)
		}
		if err == nil {
			err = s.backfill(ctx, ev.UserID, ev.AuthorID, mode != store.AuthorPush)
		}
		if mode == store.AuthorSwitching {
			s.wake.notify()
		}
	} else if feed.ErrorCode(err) == feed.ENOTFOUND {
		err = s.store.RemoveFollower(ctx, ev.AuthorID, ev.UserID)
	}
	if err == nil {
		err = s.store.SyncHidden(ctx, ev.UserID, ev.AuthorID)
	}
	if err != nil {
		return err
	}
	gone, err := s.store.FinishFollowEvent(ctx, ev)
	if err == nil && !gone {
		s.wake.notify() // changed meanwhile: released to run again
	}
	return err
}

// backfill copies the author's recent posts into the user's inbox, then
// removes any of them deleted while it ran: a delete's sweep may have passed
// this inbox before the copy landed.
func (s *Service) backfill(ctx context.Context, userID, authorID uint64, pullAuthor bool) error {
	res, posts, err := s.store.Backfill(ctx, userID, authorID, s.cfg.InboxLimit, pullAuthor)
	if err != nil || !res.Followed || len(posts) == 0 {
		return err
	}
	s.metrics.backfillRows.Add(float64(res.Copied))
	ids := make([]uint64, len(posts))
	for i, p := range posts {
		ids[i] = p.ContentID
	}
	deleted, err := s.store.DeletedPosts(ctx, authorID, ids)
	if err != nil || len(deleted) == 0 {
		return err
	}
	var gone []feed.Post
	for _, p := range posts {
		if slices.Contains(deleted, p.ContentID) {
			gone = append(gone, p)
		}
	}
	return s.store.RemoveFromInbox(ctx, userID, gone)
}

// runSwitches advances one author's switch to pull mode.
func (s *Service) runSwitches(ctx, work context.Context, sh *store.Shard) (int, error) {
	now, until := s.lease()
	jobs, err := s.store.ClaimSwitches(work, sh, now, until, 1, rand.Uint64())
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	job := &jobs[0]
	for ctx.Err() == nil {
		_, until := s.lease()
		bctx, cancel := s.stepContext(work)
		done, err := s.store.RunSwitchBatch(bctx, job, s.cfg.BatchSize, until)
		cancel()
		if errors.Is(err, store.ErrLostClaim) || done {
			return 1, nil
		} else if err != nil {
			// Marking is idempotent: give the switch back so the next
			// claimant resumes at once instead of after the lease.
			rctx, cancel := releaseCtx(work)
			defer cancel()
			_ = s.store.ReleaseSwitch(rctx, job)
			return 1, err
		}
	}
	rctx, cancel := releaseCtx(work)
	defer cancel()
	return 1, s.store.ReleaseSwitch(rctx, job)
}

// tombstoneBatch bounds the tombstones one step purges.
const tombstoneBatch = 500

// purgeTombstones purges a batch of the shard's deleted posts whose
// retraction finished more than TombstoneTTL ago.
func (s *Service) purgeTombstones(work context.Context, sh *store.Shard) (int, error) {
	ctx, cancel := s.stepContext(work)
	defer cancel()
	n, err := s.store.PurgeTombstones(ctx, sh, s.now().Add(-s.cfg.TombstoneTTL).UnixMilli(), tombstoneBatch)
	s.metrics.purgedPosts.Add(float64(n))
	return n, err
}

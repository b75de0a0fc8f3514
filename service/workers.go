package service

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

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

// queue is a background loop's kind of work, named as in its metrics and
// logs. Each loop waits on its queue's wakeup, and a write wakes the loops
// of the queue it fed only: a publish wakes the planners, not the loops
// that apply follow events or move accounts, whose claims would find
// nothing.
type queue int

const (
	planQueue queue = iota
	fanoutQueue
	followQueue
	switchQueue
	tombstoneQueue
	moveQueue
	queueCount
)

func (q queue) String() string {
	return [queueCount]string{"plan", "fanout", "follow", "switch", "tombstones", "move"}[q]
}

// wakeup wakes every idle loop of one queue of this process at once:
// closing a channel is a broadcast, and a fresh one is made for the next
// round.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

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

// wakeups holds a wakeup per queue.
type wakeups [queueCount]*wakeup

func newWakeups() *wakeups {
	var w wakeups
	for q := range w {
		w[q] = &wakeup{ch: make(chan struct{})}
	}
	return &w
}

// notify wakes the idle loops of queue q.
func (w *wakeups) notify(q queue) { w[q].notify() }

// RunWorkers runs the background loops on every shard until ctx ends:
// planning deliveries, running fan-out sub-tasks, applying follow events,
// switching authors to pull mode, purging deleted posts' tombstones and
// moving accounts. Workers coordinate only through leases in
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
	run := func(q queue, step func(ctx, work context.Context) (int, error)) {
		wg.Go(func() { s.loop(ctx, work, q, step) })
	}
	if s.cfg.Workers > 0 {
		s.handoff.open()
		defer func() {
			for sh, evs := range s.handoff.close() {
				s.releaseFollowEvents(work, sh, evs)
			}
		}()
	}
	for _, sh := range s.store.Shards() {
		run(planQueue, func(ctx, work context.Context) (int, error) { return s.planDeliveries(work, sh) })
		for range s.cfg.Workers {
			run(fanoutQueue, func(ctx, work context.Context) (int, error) { return s.runTasks(ctx, work, sh) })
		}
		for range s.cfg.Workers {
			follows := newStepSize(backfillChunk)
			run(followQueue, func(ctx, work context.Context) (int, error) { return s.applyFollowEvents(ctx, work, sh, follows) })
		}
		run(switchQueue, func(ctx, work context.Context) (int, error) { return s.runSwitches(ctx, work, sh) })
		run(tombstoneQueue, func(ctx, work context.Context) (int, error) { return s.purgeTombstones(work, sh) })
		moves := newStepSize(moveBatchSize)
		run(moveQueue, func(ctx, work context.Context) (int, error) { return s.runMoves(ctx, work, sh, moves) })
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
func (s *Service) loop(ctx, work context.Context, q queue, step func(ctx, work context.Context) (int, error)) {
	name := q.String()
	var (
		backoff time.Duration
		streak  failureStreak
	)
	for ctx.Err() == nil {
		wake := s.wake[q].wait()
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
	_, err := eachBefore(items, n, time.Time{}, fn)
	return err
}

// eachBefore is each that starts no item once due has passed (a zero due
// never does). It returns how many items it started: a prefix of items,
// every call of which has returned.
func eachBefore[T any](items []T, n int, due time.Time, fn func(T) error) (int, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		slots   = make(chan struct{}, n)
		started int
	)
	for _, it := range items {
		slots <- struct{}{}
		if started > 0 && !due.IsZero() && time.Now().After(due) {
			break
		}
		started++
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
	return started, first
}

// stepContext bounds one step of a worker (a batch, a plan, a follow event)
// by the lease: a step that outlives its lease has lost its claim anyway,
// and a database that hangs holds the worker no longer than that.
func (s *Service) stepContext(work context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(work, s.cfg.Lease)
}

// stepDue is when a step of many small items that started at start stops
// starting new ones and records those it finished: half way through its
// lease, leaving the other half to the record. On a loaded database, or
// behind another transaction's locks, a step then ends with less done
// instead of being cut off with its finished items unrecorded, to be
// redone by the next step, which would meet the same delays.
func (s *Service) stepDue(start time.Time) time.Time { return start.Add(s.cfg.Lease / 2) }

// stepSize is the number of items a loop's steps take, adapted to how long
// they run: a step cut off by its deadline (the lease) halves it, so that on
// a slow or loaded database the steps shrink until they end within the
// lease instead of each one redoing the same items and failing again; a
// step that ends within a quarter of the lease doubles it back towards max.
// It belongs to one loop, which runs one step at a time.
type stepSize struct {
	n, max int
}

func newStepSize(max int) *stepSize { return &stepSize{n: max, max: max} }

// ran records how a step of the current size ended: cut off (its context's
// deadline passed while work went on) or in took.
func (z *stepSize) ran(cutOff bool, took, lease time.Duration) {
	switch {
	case cutOff:
		z.n = max(z.n/2, 1)
	case took < lease/4:
		z.n = min(z.n*2, z.max)
	}
}

// released logs a claim a worker could not give back: nothing is lost, its
// lease ends on its own and any worker takes it then.
func (s *Service) released(what string, err error) {
	if err != nil {
		s.log.Debug("workers: claim not released; its lease ends on its own", "claim", what, "err", err)
	}
}

package service

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/feedhq/feed/store"
	"github.com/prometheus/client_golang/prometheus"
)

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
			s.wake.notify(planQueue) // its delivery waits for a planner
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
				s.wake.notify(fanoutQueue)
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

package service

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// An account move gives a new id what the old one had: its follows, mutes
// (and the hides of it), read marker, the hides it gave and its followers,
// who follow the new id instead. The old id keeps its posts and ends with
// none of the rest. A worker loop per database runs the moves whose old id
// lives there, part by part in batches, each resumable from its mark.

// moveBatchSize is how many items one batch of a move handles at most:
// each item is a transaction or three on another database, so a batch
// stays well inside its lease (and the loop's stepSize lowers it on a
// slow database).
const moveBatchSize = 100

// Move starts moving from's follows, mutes, hides, read marker and
// followers to to, and returns the move's progress. Repeating it changes
// nothing; a move of an id whose earlier move is done starts a new one.
//
// Returns EINVALID when to is from, ECONFLICT while a move of from to
// another id is unfinished.
func (s *Service) Move(ctx context.Context, from, to uint64) (feed.Move, error) {
	if from == to {
		return feed.Move{}, feed.Errorf(feed.EINVALID, "a user cannot move to their own id")
	}
	m, started, err := s.store.StartMove(store.WithClass(ctx, store.Writes), from, to, s.now().UnixMilli())
	if started {
		s.wake.notify(moveQueue)
	}
	return m, err
}

// MoveStatus returns the progress of from's move.
//
// Returns ENOTFOUND if from was never moved.
func (s *Service) MoveStatus(ctx context.Context, from uint64) (feed.Move, error) {
	return s.store.GetMove(store.WithClass(ctx, store.Reads), from)
}

// moveMetrics count what moves moved, by part.
type moveMetrics struct {
	items *prometheus.CounterVec
	done  prometheus.Counter
}

func newMoveMetrics(reg prometheus.Registerer) *moveMetrics {
	m := &moveMetrics{
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_move_items_total",
			Help: "Items account moves moved to the new id, by part (mutes, follows, marker, hides, followers)."}, []string{"part"}),
		done: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_moves_done_total", Help: "Account moves finished."}),
	}
	reg.MustRegister(m.items, m.done)
	return m
}

// moveParts names the parts of a move in the metrics, by phase.
var moveParts = [...]string{
	store.MovePhaseMutes:     "mutes",
	store.MovePhaseFollows:   "follows",
	store.MovePhaseMarker:    "marker",
	store.MovePhaseHides:     "hides",
	store.MovePhaseFollowers: "followers",
}

// runMoves claims one move of the shard and runs its batches, of size
// items, until it is done, waits between passes, or the process stops.
func (s *Service) runMoves(ctx, work context.Context, sh *store.Shard, size *stepSize) (int, error) {
	now, until := s.lease()
	jobs, err := s.store.ClaimMoves(work, sh, now, until, 1, rand.Uint64())
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	job := &jobs[0]
	for ctx.Err() == nil && !job.Done() {
		phase := job.Phase
		start := time.Now()
		bctx, cancel := s.stepContext(work)
		moved, err := s.moveBatch(bctx, work, job, size.n, s.stepDue(start))
		size.ran(bctx.Err() != nil && work.Err() == nil, time.Since(start), s.cfg.Lease)
		cancel()
		if errors.Is(err, store.ErrLostClaim) {
			return 1, nil
		} else if err != nil {
			// Every step is idempotent: give the move back so the next
			// claimant resumes at once instead of after the lease.
			rctx, cancel := releaseCtx(work)
			defer cancel()
			s.released("move", s.store.ReleaseMove(rctx, job))
			if ctx.Err() != nil {
				return 1, nil // stopping, not failing
			}
			return 1, err
		}
		s.metrics.moves.items.WithLabelValues(moveParts[phase]).Add(float64(moved))
		if job.Done() && job.Phase > store.MovePhaseFollowers {
			s.metrics.moves.done.Inc()
		}
	}
	if job.Done() {
		return 1, nil
	}
	rctx, cancel := releaseCtx(work)
	defer cancel()
	return 1, s.store.ReleaseMove(rctx, job)
}

// moveBatch runs the next batch of the job's phase in ctx, of up to size
// items, starting none after due, and records it; it returns the items
// moved.
func (s *Service) moveBatch(ctx, work context.Context, job *store.MoveJob, size int, due time.Time) (int64, error) {
	now, until := s.lease()
	step := store.MoveStep{LeaseUntil: until, Now: now}
	switch job.Phase {
	case store.MovePhaseMutes, store.MovePhaseFollows:
		items, err := s.store.MoveItems(ctx, job, size)
		if err != nil {
			return 0, err
		}
		done, moved, err := s.moveItems(ctx, job, items, &step, due)
		if err != nil {
			return 0, err
		}
		step.Next = done == len(items) && len(items) < size
		if done > 0 {
			step.After = items[done-1].AuthorID
		}
		rctx, cancel := s.recordContext(work, &step)
		defer cancel()
		return step.Moved, s.store.FinishMoveItems(rctx, job, moved, step)
	case store.MovePhaseMarker:
		m, ok, err := s.store.GetMarker(ctx, job.From)
		if err != nil {
			return 0, err
		}
		if ok {
			if _, err := s.store.AdvanceMarker(ctx, job.To, m.Key, now); err != nil {
				return 0, err
			}
			step.Moved = 1
		}
		step.Next = true
		rctx, cancel := s.recordContext(work, &step)
		defer cancel()
		return step.Moved, s.store.FinishMoveMarker(rctx, job, step)
	default:
		return s.repointBatch(ctx, work, job, step, size, due)
	}
}

// recordContext returns the context to record a move's step in, and gives
// the step a lease from now. The record is guarded by the claim's token,
// not by the lease's time, so it gets a deadline of its own rather than
// what the step's items left of theirs: items that outran their lease are
// still recorded unless another worker claimed the move meanwhile (and
// redid them, as every item is idempotent).
func (s *Service) recordContext(work context.Context, step *store.MoveStep) (context.Context, context.CancelFunc) {
	_, step.LeaseUntil = s.lease()
	return s.stepContext(work)
}

// moveItems gives the new id the follows, mutes and hides of items, the
// old id's own rows, and returns how many of the items it handled (at
// least one, none started after due) and the batch's progress with the
// authors moved. The items go one by one, in author order, so the new id's
// caps keep the first ones: their writes all wait for the new id's header
// row anyway. Every write is idempotent, so a batch run again after a
// crash redoes nothing.
func (s *Service) moveItems(ctx context.Context, job *store.MoveJob, items []store.MoveItem, step *store.MoveStep, due time.Time) (int, []uint64, error) {
	now := s.now().UnixMilli()
	var moved []uint64
	for i, it := range items {
		if i > 0 && time.Now().After(due) {
			return i, moved, nil
		}
		o, err := s.moveItem(ctx, job.To, it, now)
		if err != nil {
			return 0, nil, err
		}
		switch o {
		case itemMoved:
			moved = append(moved, it.AuthorID)
			step.Moved++
		case itemSkipped:
			step.Skipped++
		}
		if job.Phase == store.MovePhaseMutes && it.Followed {
			switch o {
			case itemMoved:
				step.PairMoved++
			case itemSkipped:
				step.PairSkipped++
			}
		}
	}
	return len(items), moved, nil
}

// itemOutcome is what became of one of the old id's rows.
type itemOutcome int

const (
	itemMoved   itemOutcome = iota
	itemSkipped             // left with the old id: the new id is at a cap
	itemLeft                // a follow left with its mute, counted in the mutes phase
)

// moveItem gives to the marks and follow of one author of the old id's
// rows, mutes first so that a follow it creates is muted from the start.
// An item stays with the old id when the new id mutes max-muted authors
// (mutes phase) or follows max-following ones already, and in the follows
// phase a follow whose mute stayed stays too. An item about to itself is
// dropped: an id cannot follow or mute itself.
func (s *Service) moveItem(ctx context.Context, to uint64, it store.MoveItem, now int64) (itemOutcome, error) {
	if it.AuthorID == to {
		return itemMoved, nil
	}
	if it.Filtered && !it.Muted && !it.Hidden {
		return itemLeft, nil
	}
	if it.Muted {
		if _, err := s.store.SetFilter(ctx, store.Mute, to, it.AuthorID, true, s.cfg.MaxMuted, now); err != nil {
			return capped(err)
		}
	}
	if it.Hidden {
		if _, err := s.store.SetFilter(ctx, store.Hide, to, it.AuthorID, true, s.cfg.MaxMuted, now); err != nil {
			return itemSkipped, err
		}
	}
	if it.Followed {
		if _, err := s.store.Follow(ctx, to, it.AuthorID, s.cfg.MaxFollowing, now); err != nil {
			return capped(err)
		}
	}
	s.wake.notify(followQueue) // follow events to apply
	return itemMoved, nil
}

// capped makes a cap's error an item skipped; other errors fail the batch.
func capped(err error) (itemOutcome, error) {
	if feed.ErrorCode(err) == feed.ELIMIT {
		return itemSkipped, nil
	}
	return itemSkipped, err
}

// repointBatch re-points the next readers of the old id's hidden_from list
// (hides phase) or followers list (followers phase): each one's follow of
// and marks about the old id become the new id's, on the reader's
// database. The lists trail the follow events (each re-point queues some,
// and follows made before the move may still wait for theirs), so a pass
// that found rows is followed by another once a poll interval has passed,
// and the phase ends with a pass that finds none, no event about the old
// id pending. No reader is started after due.
func (s *Service) repointBatch(ctx, work context.Context, job *store.MoveJob, step store.MoveStep, size int, due time.Time) (int64, error) {
	users, err := s.moveReaders(ctx, job, size)
	if err != nil {
		return 0, err
	}
	if len(users) == 0 {
		// The lists show a follow or a hide once its event is applied: the
		// phase ends with a pass that finds none and none pending.
		pending, err := s.store.FollowEventsPending(ctx, job.From)
		if err != nil {
			return 0, err
		}
		step.Next = job.PassRows == 0 && !pending
		step.Repass = !step.Next
		step.RetryAt = s.now().Add(s.cfg.PollInterval).UnixMilli()
		rctx, cancel := s.recordContext(work, &step)
		defer cancel()
		return 0, s.store.AdvanceMove(rctx, job, step)
	}
	var hides, follows atomic.Int64
	started, err := eachBefore(users, s.cfg.Workers, due, func(u uint64) error {
		r, err := s.store.Repoint(ctx, u, job.From, job.To, step.Now)
		if r.Hidden {
			hides.Add(1)
		}
		if r.Followed {
			follows.Add(1)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	s.wake.notify(followQueue) // follow events to apply
	step.After, step.Found = users[started-1], int64(started)
	if job.Phase == store.MovePhaseHides {
		step.Moved, step.PairMoved = hides.Load(), follows.Load()
	} else {
		step.Moved = follows.Load()
	}
	rctx, cancel := s.recordContext(work, &step)
	defer cancel()
	return step.Moved, s.store.AdvanceMove(rctx, job, step)
}

// moveReaders returns the next page (of up to size) of the old id's list
// the job's phase walks: the readers it hides from, or its followers.
func (s *Service) moveReaders(ctx context.Context, job *store.MoveJob, size int) ([]uint64, error) {
	var out []uint64
	if job.Phase == store.MovePhaseHides {
		hides, err := s.store.ListHiddenFrom(ctx, job.From, job.After, size)
		for _, h := range hides {
			out = append(out, h.UserID)
		}
		return out, err
	}
	follows, err := s.store.ListFollowers(ctx, job.From, job.After, size)
	for _, f := range follows {
		out = append(out, f.UserID)
	}
	return out, err
}

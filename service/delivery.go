package service

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

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
			s.wake.notify(fanoutQueue)
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
		if err := s.store.ReleaseDelivery(rctx, j); err != nil {
			s.released("delivery", err)
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

// Delivery reports the fan-out progress of a post.
//
// Returns ENOTFOUND if the author never published it.
func (s *Service) Delivery(ctx context.Context, authorID, contentID uint64) (feed.Delivery, error) {
	ctx = store.WithClass(ctx, store.Reads)
	return s.store.GetDelivery(ctx, authorID, contentID)
}

// pushTargetTimeout bounds a push of many small posts to another database
// than the authors': shorter than a task's write, since the posts of the
// batch with no followers there wait for it too.
const pushTargetTimeout = time.Second

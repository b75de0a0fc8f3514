package service

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/feedhq/feed/store"
)

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
			s.released("switch", s.store.ReleaseSwitch(rctx, job))
			return 1, err
		}
	}
	rctx, cancel := releaseCtx(work)
	defer cancel()
	return 1, s.store.ReleaseSwitch(rctx, job)
}

package service

import (
	"cmp"
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// followEventBatch bounds the events one round claims. backfillChunk bounds
// the users whose events one step applies, their backfills merged (one
// transaction, their authors' posts read once): the follows of a batch apply
// as a few transactions, and a crash loses at most a step. A round starts
// no step once half the claims' lease has passed, and each step ends by the
// lease's end: the events it has not applied go back for any worker, so a
// round never runs on into claims another worker has taken up again (work
// whose finish its claim token would refuse). On a slow database the loop's
// stepSize lowers the step, and the round's claim in proportion. Each shard
// runs Config.Workers follow loops, which claim apart. The steps of a round
// copy from one read of each author's newest posts, holding up to
// roundSourceBound posts.
const (
	followEventBatch = 4096
	backfillChunk    = 64
	roundSourceBound = 100_000
)

// applyFollowEvents reconciles a batch of follow events of the shard, those
// this process's follows handed over (followHandoff) or else a claim: the
// author's followers row is made to match the following row as it is now
// (so repeated operations collapse to the last), and the live follows are
// backfilled. The batch reads its edges with one statement and adds the
// live ones' followers rows with one transaction per author database
// (addFollowers); the backfills of each few users are merged into one
// transaction (store.BackfillMany). An event that changed meanwhile runs
// again; one that failed or was not started before a stop is released.
func (s *Service) applyFollowEvents(ctx, work context.Context, sh *store.Shard, size *stepSize) (int, error) {
	limit := max(followEventBatch*size.n/size.max, 1)
	evs, claimed := s.handoff.take(sh, limit)
	// An event whose user a reshard has placed elsewhere since is left to
	// its lease, as a claim leaves it.
	evs = slices.DeleteFunc(evs, func(ev store.FollowEvent) bool { return s.store.ShardOf(ev.UserID) != sh })
	if len(evs) > 0 && time.Now().After(s.stepDue(claimed)) {
		// Handed too late to start: any worker takes them.
		s.releaseFollowEvents(work, sh, evs)
		return len(evs), nil
	}
	if len(evs) == 0 {
		claimed = time.Now()
	}
	var claimErr error
	if len(evs) < limit {
		// The queue's own events fill the round, so that none waits while
		// follows keep handing theirs over: unfollows, events released,
		// other processes'. The round's deadlines count from the earlier
		// claim.
		now, until := s.lease()
		more, err := s.store.ClaimFollowEvents(work, sh, now, until, limit-len(evs), rand.Uint64())
		if err != nil && len(evs) == 0 {
			return 0, err
		}
		evs, claimErr = append(evs, more...), err
	}
	// Left claimed: taken up again when the lease ends, which spaces the
	// retries while the author's database is down.
	evs = slices.DeleteFunc(evs, func(ev store.FollowEvent) bool {
		return s.store.ShardOf(ev.AuthorID).Health().Unreachable()
	})
	if len(evs) == 0 {
		return 0, nil
	}
	edges, modes, failed, err := s.addFollowers(ctx, work, sh, evs, claimed.Add(s.cfg.Lease))
	if err != nil {
		s.releaseFollowEvents(work, sh, evs)
		return len(evs), err
	}
	var firstErr error
	var ready, unready []store.FollowEvent
	for _, ev := range evs {
		if err := failed[ev.AuthorID]; err != nil {
			unready = append(unready, ev)
			firstErr = cmp.Or(firstErr, err)
		} else {
			ready = append(ready, ev)
		}
	}
	s.releaseFollowEvents(work, sh, unready)
	firstErr = cmp.Or(firstErr, s.applyBackfills(ctx, work, sh, ready, edges, modes, size, claimed))
	if ctx.Err() != nil {
		return len(evs), nil // stopping, not failing
	}
	return len(evs), cmp.Or(firstErr, claimErr)
}

// applyBackfills backfills the live follows of the events, claimed at
// claimed, and finishes them, size.n users a step (their backfills merged),
// so a stop or a crash leaves the steps done finished. A step that fails
// has its events released, and so have the steps not started when half the
// lease has passed; each step ends by the lease's end.
func (s *Service) applyBackfills(ctx, work context.Context, sh *store.Shard, evs []store.FollowEvent, edges map[[2]uint64]feed.Follow, modes map[uint64]int, size *stepSize, claimed time.Time) error {
	due, end := s.stepDue(claimed), claimed.Add(s.cfg.Lease)
	src := store.NewCopySource(s.cfg.InboxLimit, roundSourceBound)
	byUser := map[uint64][]store.FollowEvent{}
	for _, ev := range evs {
		byUser[ev.UserID] = append(byUser[ev.UserID], ev)
	}
	var firstErr error
	for left, steps := slices.Sorted(maps.Keys(byUser)), 0; len(left) > 0; steps++ {
		if steps > 0 && time.Now().After(due) {
			var rest []store.FollowEvent
			for _, u := range left {
				rest = append(rest, byUser[u]...)
			}
			s.releaseFollowEvents(work, sh, rest)
			break
		}
		users := left[:min(size.n, len(left))]
		left = left[len(users):]
		var part []store.FollowEvent
		var pairs []store.BackfillPair
		for _, u := range users {
			for _, ev := range byUser[u] {
				part = append(part, ev)
				if _, live := edges[[2]uint64{ev.UserID, ev.AuthorID}]; live {
					pairs = append(pairs, store.BackfillPair{UserID: ev.UserID, AuthorID: ev.AuthorID, PullAuthor: modes[ev.AuthorID] != store.AuthorPush})
				}
			}
		}
		err := ctx.Err()
		if err == nil {
			start := time.Now()
			bctx, cancel := context.WithDeadline(work, end)
			if len(pairs) > 0 {
				err = s.backfill(bctx, sh, pairs, src)
			}
			if err == nil {
				err = s.finishFollowEvents(bctx, sh, part, edges)
			}
			size.ran(bctx.Err() != nil && work.Err() == nil, time.Since(start), s.cfg.Lease)
			cancel()
		}
		if err != nil {
			s.releaseFollowEvents(work, sh, part)
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		s.metrics.followEvents.Add(float64(len(part)))
	}
	return firstErr
}

// addFollowers reads the edges of the events' pairs and adds the followers
// rows of the live ones, as one step ending by end (the claims' lease): it
// returns the edges, the authors' modes, and the errors of authors whose
// database failed.
func (s *Service) addFollowers(ctx, work context.Context, sh *store.Shard, evs []store.FollowEvent, end time.Time) (map[[2]uint64]feed.Follow, map[uint64]int, map[uint64]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	bctx, cancel := context.WithDeadline(work, end)
	defer cancel()
	edges, err := s.store.FollowEdges(bctx, sh, evs)
	if err != nil {
		return nil, nil, nil, err
	}
	live := make([]feed.Follow, 0, len(edges))
	for _, f := range edges {
		live = append(live, f)
	}
	modes, failed := s.store.AddFollowers(bctx, live, s.cfg.PushThreshold)
	for _, m := range modes {
		if m == store.AuthorSwitching {
			s.wake.notify(switchQueue)
			break
		}
	}
	return edges, modes, failed, nil
}

// releaseFollowEvents gives events of sh back for any worker to retry.
func (s *Service) releaseFollowEvents(work context.Context, sh *store.Shard, evs []store.FollowEvent) {
	if len(evs) == 0 {
		return
	}
	rctx, cancel := releaseCtx(work)
	defer cancel()
	s.released("follow events", s.store.ReleaseFollowEvents(rctx, sh, evs))
}

// backfill copies the pairs' replays, then their posts (from src): reads
// merge the hosts' own replay lists until the posts' backfill clears the
// pending bits.
func (s *Service) backfill(ctx context.Context, sh *store.Shard, pairs []store.BackfillPair, src *store.CopySource) error {
	hosts := make([][2]uint64, len(pairs))
	for i, p := range pairs {
		hosts[i] = [2]uint64{p.UserID, p.AuthorID}
	}
	if _, err := s.store.BackfillReplays(ctx, sh, hosts, s.cfg.InboxLimit); err != nil {
		return err
	}
	_, rows, err := s.store.BackfillMany(ctx, sh, pairs, src)
	s.metrics.backfillRows.Add(float64(rows))
	return err
}

// finishFollowEvents finishes events whose followers rows are added and
// whose live follows are backfilled: the followers rows of gone edges are
// removed, the pairs' hides copied to the authors' lists, and the events
// deleted, but for those changed meanwhile, which are released to run
// again.
func (s *Service) finishFollowEvents(fctx context.Context, sh *store.Shard, evs []store.FollowEvent, edges map[[2]uint64]feed.Follow) error {
	pairs := make([][2]uint64, len(evs))
	for i, ev := range evs {
		pairs[i] = [2]uint64{ev.UserID, ev.AuthorID}
		if _, live := edges[pairs[i]]; !live {
			if err := s.store.RemoveFollower(fctx, ev.AuthorID, ev.UserID); err != nil {
				return err
			}
		}
	}
	if err := s.store.SyncHidden(fctx, sh, pairs); err != nil {
		return err
	}
	released, err := s.store.FinishFollowEvents(fctx, sh, evs)
	if err == nil && released > 0 {
		s.wake.notify(followQueue) // changed meanwhile: released to run again
	}
	return err
}

package service

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// applyFollowEvents reconciles a few follow events of the shard, Workers at
// a time: the author's followers row is made to match the following row as
// it is now (so repeated operations collapse to the last), and a live
// follow is backfilled. The batch reads its edges with one statement and
// adds the live ones' followers rows with one transaction per author
// database; the backfills run per event. An event that changed meanwhile
// runs again; one that failed or was not started before a stop is released.
func (s *Service) applyFollowEvents(ctx, work context.Context, sh *store.Shard) (int, error) {
	now, until := s.lease()
	evs, err := s.store.ClaimFollowEvents(work, sh, now, until, 4*s.cfg.Workers, rand.Uint64())
	if err != nil {
		return 0, err
	}
	// Left claimed: taken up again when the lease ends, which spaces the
	// retries while the author's database is down.
	evs = slices.DeleteFunc(evs, func(ev store.FollowEvent) bool {
		return s.store.ShardOf(ev.AuthorID).Health().Unreachable()
	})
	if len(evs) == 0 {
		return 0, nil
	}
	edges, modes, failed, err := s.addFollowers(ctx, work, sh, evs)
	if err != nil {
		s.releaseFollowEvents(work, evs)
		return len(evs), err
	}
	err = each(evs, s.cfg.Workers, func(ev store.FollowEvent) error {
		err := cmp.Or(ctx.Err(), failed[ev.AuthorID])
		if err == nil {
			ectx, cancel := s.stepContext(work)
			edge, live := edges[[2]uint64{ev.UserID, ev.AuthorID}]
			err = s.applyFollowEvent(ectx, ev, edge, live, modes[ev.AuthorID])
			cancel()
		}
		if err != nil {
			s.releaseFollowEvents(work, []store.FollowEvent{ev})
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

// addFollowers reads the edges of the events' pairs and adds the followers
// rows of the live ones, as one step: it returns the edges, the authors'
// modes, and the errors of authors whose database failed.
func (s *Service) addFollowers(ctx, work context.Context, sh *store.Shard, evs []store.FollowEvent) (map[[2]uint64]feed.Follow, map[uint64]int, map[uint64]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	bctx, cancel := s.stepContext(work)
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
			s.wake.notify()
			break
		}
	}
	return edges, modes, failed, nil
}

// releaseFollowEvents gives events back for any worker to retry.
func (s *Service) releaseFollowEvents(work context.Context, evs []store.FollowEvent) {
	rctx, cancel := releaseCtx(work)
	defer cancel()
	for _, ev := range evs {
		s.released("follow event", s.store.ReleaseFollowEvent(rctx, ev))
	}
}

// applyFollowEvent finishes one event of a batch whose followers rows are
// added: a live edge (its author's mode given) is backfilled, a gone one's
// followers row removed.
func (s *Service) applyFollowEvent(ctx context.Context, ev store.FollowEvent, edge feed.Follow, live bool, mode int) error {
	var err error
	if live {
		// Replays first: reads merge the host's own replay list until
		// the posts' backfill clears the pending bit.
		_, err = s.store.BackfillReplays(ctx, ev.UserID, ev.AuthorID, s.cfg.InboxLimit)
		if err == nil {
			err = s.backfill(ctx, ev.UserID, ev.AuthorID, mode != store.AuthorPush)
		}
	} else {
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

package service

import (
	"context"
	"math/rand/v2"
	"slices"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

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
			s.released("follow event", s.store.ReleaseFollowEvent(rctx, ev))
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

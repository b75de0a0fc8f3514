package service

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Follow makes userID follow authorID. The author's recent posts show in the
// user's feed at once (merged from the outbox until the backfill copies them).
//
// Returns EINVALID for a self-follow, ELIMIT past MaxFollowing.
func (s *Service) Follow(ctx context.Context, userID, authorID uint64) error {
	return s.FollowWith(ctx, feed.FollowRequest{UserID: userID, AuthorID: authorID})
}

// FollowWith makes a follow as Follow does, with its options: a copy limit
// bounds the author's posts from before the follow that the feed shows to
// the newest CopyLimit (feed.FollowRequest). Following an author already
// followed changes nothing, whatever the options.
//
// Returns EINVALID for a self-follow or a copy limit outside 0..InboxLimit,
// ELIMIT past MaxFollowing.
func (s *Service) FollowWith(ctx context.Context, req feed.FollowRequest) error {
	if err := s.checkFollow(req); err != nil {
		return err
	}
	res, err := s.FollowMany(ctx, []feed.FollowRequest{req})
	if err != nil {
		return err
	}
	return res[0].Err
}

// MaxFollowBatch bounds the follows of one FollowMany call.
const MaxFollowBatch = 1000

// checkFollow validates a follow request on its own.
//
// Returns EINVALID for a self-follow or a copy limit outside 0..InboxLimit.
func (s *Service) checkFollow(req feed.FollowRequest) error {
	if req.UserID == req.AuthorID {
		return feed.Errorf(feed.EINVALID, "a user cannot follow themselves")
	}
	if req.CopyLimit != nil && (*req.CopyLimit < 0 || *req.CopyLimit > s.cfg.InboxLimit) {
		return feed.Errorf(feed.EINVALID, "copy_limit must be an integer in 0..%d", s.cfg.InboxLimit)
	}
	return nil
}

// FollowMany makes each follow as FollowWith does and returns each one's
// result in order: a pair that fails (a self-follow, a bad copy limit, a
// user past MaxFollowing, a database down) fails alone. The follows of one
// user database are written in one transaction; copy limits read the
// authors' newest posts first, with a statement per database and 64
// authors for each limit.
//
// Returns EINVALID for no requests, ETOOLARGE for more than MaxFollowBatch,
// with nothing done.
func (s *Service) FollowMany(ctx context.Context, reqs []feed.FollowRequest) ([]feed.FollowResult, error) {
	ctx = store.WithClass(ctx, store.Writes)
	if len(reqs) == 0 {
		return nil, feed.Errorf(feed.EINVALID, "follows must hold 1..%d pairs", MaxFollowBatch)
	} else if len(reqs) > MaxFollowBatch {
		return nil, feed.Errorf(feed.ETOOLARGE, "follows holds %d pairs, more than %d", len(reqs), MaxFollowBatch)
	}
	out := make([]feed.FollowResult, len(reqs))
	// The history bounds, read per copy limit for all its authors at once.
	byLimit := map[int][]uint64{}
	for _, req := range reqs {
		if req.CopyLimit != nil && s.checkFollow(req) == nil {
			byLimit[*req.CopyLimit] = append(byLimit[*req.CopyLimit], req.AuthorID)
		}
	}
	type limited struct {
		author uint64
		n      int
	}
	bounds := map[limited]*feed.Key{}
	failed := map[limited]error{}
	for n, authors := range byLimit {
		from, bad, err := s.store.HistoriesFrom(ctx, slices.Compact(slices.Sorted(slices.Values(authors))), n)
		for _, a := range authors {
			switch k := (limited{a, n}); {
			case err != nil:
				failed[k] = err
			case bad[a] != nil:
				failed[k] = bad[a]
			default:
				bounds[k] = from[a]
			}
		}
	}
	edges := make([]store.FollowEdge, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, req := range reqs {
		if err := s.checkFollow(req); err != nil {
			out[i].Err = err
			continue
		}
		e := store.FollowEdge{UserID: req.UserID, AuthorID: req.AuthorID}
		if req.CopyLimit != nil {
			k := limited{req.AuthorID, *req.CopyLimit}
			if err := failed[k]; err != nil {
				out[i].Err = err
				continue
			}
			e.From = bounds[k]
		}
		edges, idx = append(edges, e), append(idx, i)
	}
	if len(edges) == 0 {
		return out, nil
	}
	// The events go to this process's follow loops, claimed as queued,
	// when they run and have room; the loops are woken once they are
	// there.
	var lease store.EventLease
	claimed, handing := time.Now(), s.handoff.reserve(len(edges))
	if handing {
		_, until := s.lease()
		lease = store.EventLease{Token: rand.Uint64() | 1, Until: until}
	}
	created := false
	var handed []store.FollowEvent
	defer func() {
		if handing {
			for sh, evs := range s.handoff.put(s.store.ShardOf, handed, len(edges), claimed) {
				s.releaseFollowEvents(ctx, sh, evs)
			}
		}
		if created {
			s.wake.notify(followQueue)
		}
	}()
	for j, o := range s.store.FollowMany(ctx, edges, s.cfg.MaxFollowing, s.now().UnixMilli(), lease) {
		out[idx[j]] = feed.FollowResult{Created: o.Created, Err: o.Err}
		created = created || o.Created
		if o.Event != nil {
			handed = append(handed, *o.Event)
		}
	}
	return out, nil
}

// Unfollow removes the edge; no response that starts after it returns shows
// the author's posts.
//
// Returns EINVALID for a self-unfollow.
func (s *Service) Unfollow(ctx context.Context, userID, authorID uint64) error {
	return s.unfollow(ctx, userID, authorID, false)
}

// UnfollowKeepingHistory removes the edge but keeps the author's posts the
// inbox holds in the feed, in their places; no new ones arrive, and a
// deleted one still leaves. Posts the feed merged from the author's outbox
// rather than held (a pending backfill, a pull author's older posts, posts
// below the inbox floor) no longer show. A later follow behaves as any
// follow.
//
// Returns EINVALID for a self-unfollow.
func (s *Service) UnfollowKeepingHistory(ctx context.Context, userID, authorID uint64) error {
	return s.unfollow(ctx, userID, authorID, true)
}

func (s *Service) unfollow(ctx context.Context, userID, authorID uint64, keep bool) error {
	ctx = store.WithClass(ctx, store.Writes)
	if userID == authorID {
		return feed.Errorf(feed.EINVALID, "a user cannot unfollow themselves")
	}
	now := s.now().UnixMilli()
	var err error
	if keep {
		err = s.store.UnfollowKeepingHistory(ctx, userID, authorID, now)
	} else {
		err = s.store.Unfollow(ctx, userID, authorID, now)
	}
	if err != nil {
		return err
	}
	s.wake.notify(followQueue)
	return nil
}

// ListFollowing returns a page of the authors the user follows, by author id.
//
// Returns EINVALID for a malformed cursor or page size.
func (s *Service) ListFollowing(ctx context.Context, userID uint64, page feed.Page) ([]feed.Follow, string, error) {
	ctx = store.WithClass(ctx, store.Reads)
	return pageByID(cursorFollowing, page, func(after uint64) ([]feed.Follow, error) {
		return s.store.ListFollowing(ctx, userID, after, page.Limit+1)
	}, func(f feed.Follow) uint64 { return f.AuthorID })
}

// ListFollowers returns a page of the author's followers, by user id.
//
// Returns EINVALID for a malformed cursor or page size.
func (s *Service) ListFollowers(ctx context.Context, authorID uint64, page feed.Page) ([]feed.Follow, string, error) {
	ctx = store.WithClass(ctx, store.Reads)
	return pageByID(cursorFollowers, page, func(after uint64) ([]feed.Follow, error) {
		return s.store.ListFollowers(ctx, authorID, after, page.Limit+1)
	}, func(f feed.Follow) uint64 { return f.UserID })
}

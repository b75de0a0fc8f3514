package service

import (
	"context"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Follow makes userID follow authorID. The author's recent posts show in the
// user's feed at once (merged from the outbox until the backfill copies them).
//
// Returns EINVALID for a self-follow, ELIMIT past MaxFollowing.
func (s *Service) Follow(ctx context.Context, userID, authorID uint64) error {
	ctx = store.WithClass(ctx, store.Writes)
	if userID == authorID {
		return feed.Errorf(feed.EINVALID, "a user cannot follow themselves")
	}
	created, err := s.store.Follow(ctx, userID, authorID, s.cfg.MaxFollowing, s.now().UnixMilli())
	if created {
		s.wake.notify()
	}
	return err
}

// Unfollow removes the edge; no response that starts after it returns shows
// the author's posts.
//
// Returns EINVALID for a self-unfollow.
func (s *Service) Unfollow(ctx context.Context, userID, authorID uint64) error {
	ctx = store.WithClass(ctx, store.Writes)
	if userID == authorID {
		return feed.Errorf(feed.EINVALID, "a user cannot unfollow themselves")
	}
	if err := s.store.Unfollow(ctx, userID, authorID, s.now().UnixMilli()); err != nil {
		return err
	}
	s.wake.notify()
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

package service

import (
	"context"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Mute makes the author's posts leave the user's feed in every response
// that starts after it returns; the follow itself stays. Unmute brings
// them back within the time a follow's backfill takes, the posts published
// meanwhile included.
//
// Returns EINVALID for a self-mute and ELIMIT beyond MaxMuted authors.
func (s *Service) Mute(ctx context.Context, userID, authorID uint64, on bool) error {
	return s.setFilter(ctx, store.Mute, userID, authorID, on, "mute")
}

// Hide makes the author's posts stop showing in the user's feed in every
// response that starts after it returns; Unhide (on false) restores them as
// Unmute does. The author's list of hides follows within the time a follow
// event takes.
//
// Returns EINVALID for a self-hide.
func (s *Service) Hide(ctx context.Context, authorID, userID uint64, on bool) error {
	return s.setFilter(ctx, store.Hide, userID, authorID, on, "hide from")
}

func (s *Service) setFilter(ctx context.Context, f store.Filter, userID, authorID uint64, on bool, verb string) error {
	ctx = store.WithClass(ctx, store.Writes)
	if userID == authorID {
		return feed.Errorf(feed.EINVALID, "a user cannot %s themselves", verb)
	}
	backfill, err := s.store.SetFilter(ctx, f, userID, authorID, on, s.cfg.MaxMuted, s.now().UnixMilli())
	if err == nil && (backfill || f == store.Hide) {
		s.wake.notify(followQueue)
	}
	return err
}

// ListMuted returns a page of the authors the user mutes, by author id.
//
// Returns EINVALID for a malformed cursor or page size.
func (s *Service) ListMuted(ctx context.Context, userID uint64, page feed.Page) ([]feed.Mute, string, error) {
	ctx = store.WithClass(ctx, store.Reads)
	return pageByID(cursorMuted, page, func(after uint64) ([]feed.Mute, error) {
		return s.store.ListMuted(ctx, userID, after, page.Limit+1)
	}, func(m feed.Mute) uint64 { return m.AuthorID })
}

// ListHiddenFrom returns a page of the users the author hides from, by user
// id.
//
// Returns EINVALID for a malformed cursor or page size.
func (s *Service) ListHiddenFrom(ctx context.Context, authorID uint64, page feed.Page) ([]feed.Mute, string, error) {
	ctx = store.WithClass(ctx, store.Reads)
	return pageByID(cursorHidden, page, func(after uint64) ([]feed.Mute, error) {
		return s.store.ListHiddenFrom(ctx, authorID, after, page.Limit+1)
	}, func(m feed.Mute) uint64 { return m.UserID })
}

package service

import (
	"context"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Marker returns the user's read marker with the number of feed items
// strictly newer than it (all of the feed without a marker), counted as a
// page shows them, exactly up to feed.UnreadCap. The count is a since read
// of UnreadCap+1 items: the inbox plus the pull sources' ranges above the
// marker. Like a page, it marks the user active. When some followed
// authors' database does not answer, the count fails (EUNAVAILABLE) rather
// than come out short.
func (s *Service) Marker(ctx context.Context, userID uint64) (feed.Marker, error) {
	ctx = store.WithClass(ctx, store.Reads)
	m, ok, err := s.store.GetMarker(ctx, userID)
	if err != nil {
		return feed.Marker{}, err
	}
	return s.withUnread(ctx, userID, m, ok)
}

// SetMarker moves the user's marker forward to the position; an older
// position leaves it as stored. It returns the stored marker with its
// unread count.
//
// Returns EINVALID for a malformed or empty position.
func (s *Service) SetMarker(ctx context.Context, userID uint64, position string) (feed.Marker, error) {
	if position == "" {
		return feed.Marker{}, feed.Errorf(feed.EINVALID, "cursor is required")
	}
	k, err := decodePosition(position)
	if err != nil {
		return feed.Marker{}, err
	}
	m, err := s.store.AdvanceMarker(store.WithClass(ctx, store.Writes), userID, k, s.now().UnixMilli())
	if err != nil {
		return feed.Marker{}, err
	}
	return s.withUnread(store.WithClass(ctx, store.Reads), userID, m, true)
}

// withUnread counts the items above the stored marker m (ok: there is one).
func (s *Service) withUnread(ctx context.Context, userID uint64, m store.Marker, ok bool) (feed.Marker, error) {
	var out feed.Marker
	if ok {
		out.Cursor, out.UpdatedAt = encodeCursor(cursorFeed, m.Key), m.UpdatedAt
	}
	items, rd, err := s.readFeed(ctx, userID, store.Top, m.Key, feed.UnreadCap+1, nil)
	if err != nil {
		return feed.Marker{}, err
	}
	if missing := rd.missingAuthors(); len(missing) > 0 {
		// A count is exact or not given: unlike a page, it cannot name
		// what it left out.
		return feed.Marker{}, feed.Errorf(feed.EUNAVAILABLE, "the posts of %d followed authors cannot be read now", len(missing))
	}
	out.Unread, out.Capped = min(len(items), feed.UnreadCap), len(items) > feed.UnreadCap
	return out, nil
}

package service

import (
	"context"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Feed returns a page of the user's home feed: posts of the authors the user
// follows now and the user's own, newest first, exactly as a full sort of all
// of them would order them.
//
// The page merges up to three sources, each read newest first below the
// cursor and cut at limit+1:
//   - the inbox, which is complete at and above its floor (the oldest kept
//     entry after trimming, or the oldest entry a capped backfill copied);
//   - the outboxes of followed authors the inbox cannot vouch for: a follow
//     whose backfill is pending (all posts), and authors above the push
//     threshold, whose posts older than the start of the reader's active
//     spell were not pushed to this reader;
//   - below the floor, when the page is not full yet, the outboxes of every
//     followed author and the user's own (deep scroll), so the feed ends only
//     where its authors' history does.
//
// Each source holds every post of its range that the full sort would, so the
// first limit items of the merge are the page. The read also marks the user
// active.
//
// Returns EINVALID for a malformed cursor or page size.
func (s *Service) Feed(ctx context.Context, userID uint64, page feed.Page) ([]feed.Post, string, error) {
	ctx = store.WithClass(ctx, store.Reads)
	if err := checkPage(page); err != nil {
		return nil, "", err
	}
	before, err := decodeCursor(cursorFeed, page.Cursor, store.Top)
	if err != nil {
		return nil, "", err
	}
	snap, err := s.store.ReadFeed(ctx, userID, before, page.Limit+1)
	if err != nil {
		return nil, "", err
	}
	activeSince := s.markRead(ctx, userID, snap)
	queries := snap.Statements
	sources := make([]store.PullSource, 0, len(snap.Pull))
	for _, pa := range snap.Pull {
		bound := before
		if pa.Pull&store.PullPending == 0 {
			// Posts published after active_since were pushed; those at
			// active_since and older are merged. The bound is exclusive,
			// so it sits just above active_since.
			bound = olderOf(before, feed.Key{PublishTime: activeSince + 1})
		}
		sources = append(sources, store.PullSource{AuthorID: pa.AuthorID, Before: bound})
	}
	pulled, n, err := s.pull(ctx, sources, page.Limit+1)
	if err != nil {
		return nil, "", err
	}
	queries += n
	items := mergeNewest(page.Limit+1, snap.Floor, append(pulled, snap.Inbox)...)
	if len(items) <= page.Limit && snap.Floor != nil {
		deep, n, err := s.deepScroll(ctx, userID, olderOf(before, *snap.Floor), page.Limit+1-len(items))
		if err != nil {
			return nil, "", err
		}
		queries += n
		items = append(items, deep...)
	}
	s.metrics.feedPullAuthors.Observe(float64(len(sources)))
	s.metrics.feedQueries.Observe(float64(queries))
	return pageOf(items, page.Limit, func(p feed.Post) string { return encodeCursor(cursorFeed, p.Key()) })
}

// deepScroll reads the newest posts older than before from the outboxes of
// everyone the user follows and the user's own.
func (s *Service) deepScroll(ctx context.Context, userID uint64, before feed.Key, limit int) ([]feed.Post, int, error) {
	authors, err := s.store.FollowedAuthors(ctx, userID)
	if err != nil {
		return nil, 0, err
	}
	sources := make([]store.PullSource, 0, len(authors)+1)
	for _, a := range append(authors, userID) {
		sources = append(sources, store.PullSource{AuthorID: a, Before: before})
	}
	posts, n, err := s.pullPosts(ctx, sources, limit)
	if err != nil {
		return nil, 0, err
	}
	return mergeNewest(limit, nil, posts), n + 1, nil
}

// markRead records the read (at most once per activityGranularity) and
// returns the start of the reader's active spell. A reader whose last read
// is older than the active window, less the clock-skew margin, was skipped
// by fan-out, so it starts a new spell at now + 2×skew and pull authors'
// posts up to then are merged from their outboxes. One skew covers the
// future publish_times publish accepts (a post dated now + skew may be fanned
// out before this read is recorded); the other covers clocks of other
// servers. The margin in the inactivity test likewise makes the reader
// stricter than fan-out's own activity test.
func (s *Service) markRead(ctx context.Context, userID uint64, snap store.FeedSnapshot) int64 {
	now := s.now()
	skew := s.cfg.ClockSkew
	inactiveBefore := now.Add(skew - s.activeWindow()).UnixMilli()
	activeSince := snap.ActiveSince
	if snap.LastReadAt < inactiveBefore {
		activeSince = now.Add(2 * skew).UnixMilli()
	}
	if now.UnixMilli()-snap.LastReadAt < activityGranularity.Milliseconds() {
		return activeSince
	}
	// The page is right without the mark (this read merged as for an
	// inactive user if needed); fan-out may skip the user until a later
	// read marks it. So a read never waits long for it: not at all while
	// the database is known not to take writes, and markReadTimeout at most.
	if s.store.ShardOf(userID).Health().State == store.StateDown {
		return activeSince
	}
	mctx, cancel := context.WithTimeout(store.WithClass(ctx, store.Writes), markReadTimeout)
	defer cancel()
	if err := s.store.MarkRead(mctx, userID, now.UnixMilli(), activeSince, inactiveBefore); err != nil {
		s.log.Debug("service: mark read", "user_id", userID, "error", err)
	}
	return activeSince
}

func (s *Service) activeWindow() time.Duration {
	return time.Duration(s.cfg.ActiveDays) * 24 * time.Hour
}

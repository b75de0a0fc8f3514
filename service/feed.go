package service

import (
	"context"
	"math"
	"slices"
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
// A followed author's outbox on a database that does not answer within
// SourceTimeout is left out, with the author named in MissingAuthors, when
// PartialReads is on; the page is then exact over the other sources and its
// cursor is the same as ever. Otherwise, and whenever the reader's own
// database fails, the page fails with the database's error.
//
// With page.Since set, the page holds only items strictly newer than that
// position: each source is read down to it at most, and the page's next
// cursor is set exactly when items remain between its last item and Since.
//
// With page.Kinds set, the page holds only posts of those kinds: every
// source is read for those kinds alone (the inbox by the server dropping
// the others, the outboxes through an index by kind), so a page of a rare
// kind is as full as the feed allows, at any depth.
//
// Returns EINVALID for a malformed cursor, since, page size or kinds.
func (s *Service) Feed(ctx context.Context, userID uint64, page feed.Page) (feed.FeedPage, error) {
	ctx = store.WithClass(ctx, store.Reads)
	if err := checkPage(page); err != nil {
		return feed.FeedPage{}, err
	}
	kinds, err := checkKinds(page.Kinds)
	if err != nil {
		return feed.FeedPage{}, err
	}
	before, err := decodeCursor(cursorFeed, page.Cursor, store.Top)
	if err != nil {
		return feed.FeedPage{}, err
	}
	since, err := decodePosition(page.Since)
	if err != nil {
		return feed.FeedPage{}, err
	}
	items, rd, err := s.readFeed(ctx, userID, before, since, page.Limit+1, kinds)
	var next string
	if err == nil {
		items, next, err = pageOf(items, page.Limit, feedCursor)
	}
	if err != nil {
		return feed.FeedPage{}, err
	}
	var top string
	if len(items) > 0 {
		top = feedCursor(items[0])
	}
	return feed.FeedPage{Items: items, Next: next, Top: top, MissingAuthors: rd.missingAuthors()}, err
}

// feedCursor is the position of a feed item.
func feedCursor(p feed.Post) string { return encodeCursor(cursorFeed, p.Key()) }

// decodePosition parses a since position: a feed cursor, or "" for none
// (the zero key, below every post).
//
// Returns EINVALID for anything else.
func decodePosition(s string) (feed.Key, error) {
	k, err := decodeCursor(cursorFeed, s, feed.Key{})
	if err != nil {
		return k, feed.Errorf(feed.EINVALID, "malformed since position")
	}
	return k, nil
}

// readFeed returns the newest n items of the user's feed strictly between
// since and before, of the kinds (sorted) when not nil, newest first, and
// what the reads cost and missed. It also marks the user active.
func (s *Service) readFeed(ctx context.Context, userID uint64, before, since feed.Key, n int, kinds []string) ([]feed.Post, *pageRead, error) {
	from := after(since)
	// A next page of a reader whose last page went below the inbox most
	// likely goes there too: what that read starts from is read meanwhile.
	if before != store.Top && s.store.ReadsDeep(userID) {
		ctx = s.store.LearnAhead(ctx, s.store.Shards(), s.cfg.SourceTimeout)
	}
	snap, err := s.store.ReadFeed(ctx, userID, before, from, n, kinds)
	if err != nil {
		return nil, nil, err
	}
	activeSince := s.markRead(ctx, userID, snap)
	rd := &pageRead{user: userID, follows: snap.Follows, queries: snap.Statements, rows: snap.Rows}
	sources := make([]store.PullSource, 0, len(snap.Pull))
	for _, pa := range snap.Pull {
		bound := before
		if pa.Pull&store.PullPending == 0 {
			// Posts published after active_since were pushed; those at
			// active_since and older are merged. The bound is exclusive,
			// so it sits just above active_since.
			bound = olderOf(before, feed.Key{PublishTime: activeSince + 1})
		}
		// A follow with a copy limit shows nothing below its bound.
		sources = append(sources, store.PullSource{AuthorID: pa.AuthorID, Before: bound, From: newerOf(from, pa.From), Kinds: kinds})
		rd.pullAuthors = append(rd.pullAuthors, pa.AuthorID)
	}
	pulled, err := s.pull(ctx, rd, sources, n)
	if err != nil {
		return nil, nil, err
	}
	items := newerThan(since, mergeNewest(n, snap.Floor, append(pulled, snap.Inbox)...))
	// Below the floor only the outboxes are complete; nothing lies there
	// for a page that stops at a since at or above it.
	deep := len(items) < n && snap.Floor != nil && since.Less(*snap.Floor)
	s.store.SetReadsDeep(userID, deep)
	if deep {
		deep, err := s.deepScroll(ctx, rd, userID, olderOf(before, *snap.Floor), from, n-len(items), kinds)
		if err != nil {
			return nil, nil, err
		}
		items = append(items, deep...)
	}
	s.metrics.feedPullAuthors.Observe(float64(len(sources)))
	s.metrics.feedQueries.Observe(float64(rd.queries))
	s.metrics.feedRows.Observe(float64(rd.rows))
	return items, rd, nil
}

// newerThan cuts a newest-first list at the first item not newer than since.
func newerThan(since feed.Key, items []feed.Post) []feed.Post {
	for i, p := range items {
		if !since.Less(p.Key()) {
			return items[:i]
		}
	}
	return items
}

// after is the oldest key newer than k: the inclusive lower bound (From) of
// reads that want items strictly newer than k.
func after(k feed.Key) feed.Key {
	if k.ContentID == math.MaxUint64 {
		return feed.Key{PublishTime: k.PublishTime + 1}
	}
	return feed.Key{PublishTime: k.PublishTime, ContentID: k.ContentID + 1}
}

// deepScroll reads the newest posts older than before, and at or above from,
// of the kinds when not nil, from the outboxes of everyone the user follows
// and the user's own.
func (s *Service) deepScroll(ctx context.Context, rd *pageRead, userID uint64, before, from feed.Key, limit int, kinds []string) ([]feed.Post, error) {
	// What the outbox reads start from is read meanwhile, from every
	// database this page has not found failed.
	ctx = s.store.LearnAhead(ctx, slices.DeleteFunc(slices.Clone(s.store.Shards()), func(sh *store.Shard) bool { return rd.failed[sh] }), s.cfg.SourceTimeout)
	authors, bounds, read, err := s.store.FollowedAuthors(ctx, userID, rd.follows)
	if err != nil {
		return nil, err
	}
	if read {
		rd.queries++
		rd.rows += len(authors)
	}
	sources := make([]store.PullSource, 0, len(authors)+1)
	for _, a := range authors {
		src := store.PullSource{AuthorID: a, Before: before, From: from, Kinds: kinds}
		if b, ok := bounds[a]; ok {
			// A follow with a copy limit shows nothing below its bound:
			// an outbox wholly below it is not read.
			if src.From = newerOf(from, b); !src.From.Less(before) {
				continue
			}
		}
		sources = append(sources, src)
	}
	sources = append(sources, store.PullSource{AuthorID: userID, Before: before, From: from, Kinds: kinds})
	posts, err := s.readOutboxes(ctx, rd, sources, limit)
	if err != nil {
		return nil, err
	}
	return mergeNewest(limit, nil, posts), nil
}

// pageRead is what the outbox reads of one feed page cost and missed.
type pageRead struct {
	user    uint64
	follows int64 // the snapshot's followee-list version
	queries int   // statements run
	rows    int   // rows they returned
	// pullAuthors are the followed authors whose outboxes the page merged
	// above the floor, which a stream watches besides the inbox.
	pullAuthors []uint64
	// missing holds the authors whose database failed, and failed those
	// databases, which the rest of the page does not ask again: a hung one
	// costs a page SourceTimeout once.
	missing []uint64
	failed  map[*store.Shard]bool
}

// missingAuthors returns the missing authors sorted, each once.
func (rd *pageRead) missingAuthors() []uint64 {
	slices.Sort(rd.missing)
	return slices.Compact(rd.missing)
}

// pull reads up to limit posts of each source for a feed page, as lists
// for the merge, through the store's cache of pull authors' newest posts
// (store.PullCached), and takes what the reads cost and missed into rd.
func (s *Service) pull(ctx context.Context, rd *pageRead, sources []store.PullSource, limit int) ([][]feed.Post, error) {
	if len(sources) == 0 {
		return nil, nil // an inbox-only page
	}
	lists, p, err := s.store.PullCached(ctx, sources, limit, s.cfg.SourceTimeout)
	if err != nil {
		return nil, err
	}
	return lists, s.took(rd, p)
}

// readOutboxes reads up to limit posts of each source, each database within
// SourceTimeout: only what the newest limit of all the sources together need
// (store.PullNewest), for a caller that merges and cuts them. The authors of
// a database that failed earlier in the page are not asked again.
func (s *Service) readOutboxes(ctx context.Context, rd *pageRead, sources []store.PullSource, limit int) ([]feed.Post, error) {
	if len(rd.failed) > 0 {
		ask := make([]store.PullSource, 0, len(sources))
		for _, src := range sources {
			if rd.failed[s.store.ShardOf(src.AuthorID)] {
				rd.missing = append(rd.missing, src.AuthorID)
			} else {
				ask = append(ask, src)
			}
		}
		sources = ask
	}
	p, err := s.store.PullNewest(ctx, sources, limit, s.cfg.SourceTimeout)
	if err != nil {
		return nil, err
	}
	return p.Posts, s.took(rd, p)
}

// took adds what an outbox read cost to rd. The authors of a database that
// failed are left out of the page and recorded as missing when
// PartialReads is on and the database is not the reader's own; otherwise
// the page fails with its error.
func (s *Service) took(rd *pageRead, p store.Pulled) error {
	rd.queries += p.Queries
	rd.rows += p.Rows
	if len(p.Missing) == 0 {
		return nil
	}
	own := s.store.ShardOf(rd.user)
	if !s.cfg.PartialReads || slices.ContainsFunc(p.Missing, func(a uint64) bool { return s.store.ShardOf(a) == own }) {
		return p.Err
	}
	if rd.failed == nil {
		rd.failed = map[*store.Shard]bool{}
	}
	for _, a := range p.Missing {
		rd.failed[s.store.ShardOf(a)] = true
	}
	rd.missing = append(rd.missing, p.Missing...)
	return nil
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
	inactiveBefore := s.inactiveBefore(now)
	activeSince := s.spellStart(now, snap.LastReadAt, snap.ActiveSince)
	if now.UnixMilli()-snap.LastReadAt < activityGranularity.Milliseconds() {
		return activeSince
	}
	// The page is right without the mark (this read merged as for an
	// inactive user if needed); fan-out may skip the user until a later
	// read marks it. So a read never waits long for it: not at all while
	// the database is known not to take writes, and markReadTimeout at most.
	if s.store.ShardOf(userID).Health().Unreachable() || inspecting(ctx) {
		return activeSince
	}
	mctx, cancel := context.WithTimeout(store.WithClass(ctx, store.Writes), markReadTimeout)
	defer cancel()
	if err := s.store.MarkRead(mctx, userID, now.UnixMilli(), activeSince, inactiveBefore); err != nil {
		s.log.Debug("service: mark read", "user_id", userID, "error", err)
	}
	return activeSince
}

// inactiveBefore is the last read before which a reader counts as
// inactive: the active window less the clock-skew margin.
func (s *Service) inactiveBefore(now time.Time) int64 {
	return now.Add(s.cfg.ClockSkew - s.activeWindow()).UnixMilli()
}

// spellStart is the start of a reader's active spell as reads use it,
// from its header's last read and active_since: a reader inactive by
// inactiveBefore starts a new spell at now + 2×skew.
func (s *Service) spellStart(now time.Time, lastReadAt, activeSince int64) int64 {
	if lastReadAt < s.inactiveBefore(now) {
		return now.Add(2 * s.cfg.ClockSkew).UnixMilli()
	}
	return activeSince
}

func (s *Service) activeWindow() time.Duration {
	return time.Duration(s.cfg.ActiveDays) * 24 * time.Hour
}

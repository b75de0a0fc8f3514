package service

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Service applies the feed's rules on top of the store.
type Service struct {
	store   *store.Store
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	ids     *idGen
	now     func() time.Time
	// wake nudges idle workers of this process after a write queued work.
	wake *wakeup
	// cache holds pull authors' newest posts; nil when PullCacheTTL is 0.
	cache *outboxCache
	// draining is set once the process is stopping (Drain).
	draining atomic.Bool
	// targets bounds the fan-out batches writing to each database.
	targets *targetGate
	// streams are the open feed streams and their watchers.
	streams *streams
	// deep remembers readers whose last page went below their inbox.
	deep store.UserHints
	// activity samples fan-out for the console's charts; reshards holds
	// the console's view of a reshard under way.
	activity *activity
	reshards *reshards
}

// New returns a Service. now is the clock (time.Now outside tests).
func New(st *store.Store, cfg Config, log *slog.Logger, m *Metrics, now func() time.Time) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkPools(st, cfg.Workers); err != nil {
		return nil, err
	}
	s := &Service{store: st, cfg: cfg, log: log, metrics: m, ids: newIDGen(cfg.NodeID, now), now: now, wake: newWakeup(),
		targets: newTargetGate(cfg.Workers), activity: &activity{}, reshards: &reshards{}}
	s.streams = newStreams(s)
	m.watchPools(st)
	if cfg.PullCacheTTL > 0 {
		s.cache = newOutboxCache(cfg.PullCacheTTL)
	}
	st.CacheHeads(cfg.ClockSkew, now)
	return s, nil
}

// checkPools rejects more fan-out workers per shard than a shard's pool
// has connections. A fan-out batch holds a connection of its author's shard
// while it takes one of each other shard it writes to, so with every
// connection of two shards held by batches waiting for the other's, all
// workers (and every request on those shards) would wait forever. With
// fewer workers than connections a batch waiting for a connection never
// holds the last one. One shard needs no second connection.
func checkPools(st *store.Store, workers int) error {
	shards := st.Shards()
	if len(shards) < 2 {
		return nil
	}
	for _, sh := range shards {
		if n := sh.DB.Stats().MaxOpenConnections; n > 0 && workers >= n {
			return fmt.Errorf("workers (%d) must be fewer than the workers' connections of database %s (connections.workers %d)",
				workers, sh.Name, n)
		}
	}
	return nil
}

// Config returns the service's settings.
func (s *Service) Config() Config { return s.cfg }

var kindPattern = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// PublishInput is a publish request; zero ContentID and nil PublishTime ask
// the server to assign them, empty Kind means feed.KindPost.
type PublishInput struct {
	AuthorID    uint64
	ContentID   uint64
	PublishTime *int64
	Kind        string
}

// Publish stores a post and queues its fan-out; the author's own feed shows
// it when Publish returns. Publishing the same post again returns it with
// created=false.
//
// Returns EINVALID for a bad kind or a publish_time beyond the clock-skew
// allowance, ECONFLICT if the content id names another or a deleted post.
func (s *Service) Publish(ctx context.Context, in PublishInput) (feed.Post, bool, error) {
	ctx = store.WithClass(ctx, store.Writes)
	now := s.now()
	if in.Kind == "" {
		in.Kind = feed.KindPost
	}
	if !kindPattern.MatchString(in.Kind) {
		return feed.Post{}, false, feed.Errorf(feed.EINVALID, "kind must match %s", kindPattern)
	}
	p := feed.Post{AuthorID: in.AuthorID, ContentID: in.ContentID, Kind: in.Kind, PublishTime: now.UnixMilli()}
	if in.PublishTime != nil {
		p.PublishTime = *in.PublishTime
		if p.PublishTime < 0 || p.PublishTime > now.Add(s.cfg.ClockSkew).UnixMilli() {
			return feed.Post{}, false, feed.Errorf(feed.EINVALID,
				"publish_time must be Unix milliseconds between 0 and now + %s", s.cfg.ClockSkew)
		}
	}
	if in.ContentID != 0 {
		stored, created, err := s.store.PublishPost(ctx, p, now.UnixMilli())
		if err != nil || created {
			return s.published(stored, created, err)
		}
		if stored.AuthorID != p.AuthorID || stored.Kind != p.Kind || (in.PublishTime != nil && stored.PublishTime != p.PublishTime) {
			return feed.Post{}, false, feed.Errorf(feed.ECONFLICT, "content_id %d exists with other fields", in.ContentID)
		}
		return stored, false, nil
	}
	// A server-assigned id that collides (two nodes drew the same node id)
	// is drawn again, whether it collided with a live post or a deleted
	// one: the client chose neither.
	for range 3 {
		p.ContentID = s.homeID(p.AuthorID)
		stored, created, err := s.store.PublishPost(ctx, p, now.UnixMilli())
		if feed.ErrorCode(err) == feed.ECONFLICT {
			continue
		}
		if err != nil || created {
			return s.published(stored, created, err)
		}
	}
	return feed.Post{}, false, feed.Errorf(feed.EUNAVAILABLE, "could not assign a unique content id")
}

// maxIDDraws bounds the ids homeID draws: with n databases a draw lands on
// the author's with probability about 1/n.
const maxIDDraws = 256

// homeID draws a server-assigned content id that lives on the author's own
// database, so that claiming it is part of the post's transaction there and
// a publish needs no other database (one that is down cannot fail it). With
// more databases than maxIDDraws can find, the last draw is used; its claim
// then goes to its own database.
func (s *Service) homeID(authorID uint64) uint64 {
	home := s.store.ShardOf(authorID)
	id := s.ids.next()
	for range maxIDDraws - 1 {
		if s.store.ShardOf(id) == home {
			break
		}
		id = s.ids.next()
	}
	return id
}

func (s *Service) published(p feed.Post, created bool, err error) (feed.Post, bool, error) {
	if err == nil {
		s.forget(p.AuthorID)
		s.metrics.postsPublished.Inc()
		s.wake.notify()
	}
	return p, created, err
}

// DeletePost deletes a post and queues its removal from every feed.
// Deleting it again does nothing.
//
// Returns ENOTFOUND if the author never published it.
func (s *Service) DeletePost(ctx context.Context, authorID, contentID uint64) error {
	ctx = store.WithClass(ctx, store.Writes)
	if err := s.store.DeletePost(ctx, authorID, contentID); err != nil {
		return err
	}
	s.forget(authorID)
	s.wake.notify()
	return nil
}

// ListPosts returns a page of the author's live posts, newest first.
//
// Returns EINVALID for a malformed cursor or page size.
func (s *Service) ListPosts(ctx context.Context, authorID uint64, page feed.Page) ([]feed.Post, string, error) {
	ctx = store.WithClass(ctx, store.Reads)
	if err := checkPage(page); err != nil {
		return nil, "", err
	}
	before, err := decodeCursor(cursorPosts, page.Cursor, store.Top)
	if err != nil {
		return nil, "", err
	}
	posts, err := s.store.ListPosts(ctx, authorID, before, page.Limit+1)
	if err != nil {
		return nil, "", err
	}
	return pageOf(posts, page.Limit, func(p feed.Post) string { return encodeCursor(cursorPosts, p.Key()) })
}

// forget drops the author's cached outbox after a local write.
func (s *Service) forget(authorID uint64) {
	if s.cache != nil {
		s.cache.drop(authorID)
	}
}

// checkPage rejects a page size outside 1..MaxPageLimit; the HTTP layer
// checks it too, but the service is callable without it.
func checkPage(page feed.Page) error {
	if page.Limit < 1 || page.Limit > feed.MaxPageLimit {
		return feed.Errorf(feed.EINVALID, "limit must be an integer in 1..%d", feed.MaxPageLimit)
	}
	return nil
}

// pageOf cuts a list fetched with limit+1 rows to limit and returns the
// cursor of its last item, or "" when nothing follows.
func pageOf[T any](items []T, limit int, cursor func(T) string) ([]T, string, error) {
	if len(items) <= limit {
		return items, "", nil
	}
	return items[:limit], cursor(items[limit-1]), nil
}

// Delivery reports the fan-out progress of a post.
//
// Returns ENOTFOUND if the author never published it.
func (s *Service) Delivery(ctx context.Context, authorID, contentID uint64) (feed.Delivery, error) {
	ctx = store.WithClass(ctx, store.Reads)
	return s.store.GetDelivery(ctx, authorID, contentID)
}

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

// pageByID serves a page of a list in id order: list reads up to
// page.Limit+1 items whose id (key) is above after, and the cursor of the
// page is the id of its last item.
func pageByID[T any](kind byte, page feed.Page, list func(after uint64) ([]T, error), key func(T) uint64) ([]T, string, error) {
	if err := checkPage(page); err != nil {
		return nil, "", err
	}
	after, err := decodeCursor(kind, page.Cursor, feed.Key{})
	if err != nil {
		return nil, "", err
	}
	items, err := list(after.ContentID)
	if err != nil {
		return nil, "", err
	}
	return pageOf(items, page.Limit, func(it T) string {
		return encodeCursor(kind, feed.Key{ContentID: key(it)})
	})
}

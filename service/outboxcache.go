package service

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Outbox cache bounds: the newest posts kept per author (enough for the
// first pages of most readers), and how many authors are kept.
const (
	outboxCacheDepth   = 128
	outboxCacheAuthors = 10000
)

// outboxCache keeps the newest posts of the authors reads pull from. A pull
// author is by definition one that many readers merge, so its head is read
// once per TTL instead of once per page. An entry is dropped when this
// process publishes or deletes for the author; changes made through other
// processes show within the TTL, like a fan-out still under way.
type outboxCache struct {
	ttl     time.Duration
	mu      sync.Mutex
	entries map[uint64]outboxEntry
}

type outboxEntry struct {
	posts    []feed.Post // newest first, at most outboxCacheDepth
	complete bool        // the author has no older live post
	at       time.Time
}

func newOutboxCache(ttl time.Duration) *outboxCache {
	return &outboxCache{ttl: ttl, entries: map[uint64]outboxEntry{}}
}

// below returns up to limit cached posts older than before, or false when
// the cache does not reach deep enough to know them all.
// The result shares the entry's array (capped, so appending to it copies).
func (e outboxEntry) below(before feed.Key, limit int) ([]feed.Post, bool) {
	// Newest first: the posts older than before are a suffix.
	i := sort.Search(len(e.posts), func(i int) bool { return e.posts[i].Key().Less(before) })
	out := e.posts[i:]
	if len(out) >= limit {
		return out[:limit:limit], true
	}
	return out[:len(out):len(out)], e.complete
}

func (c *outboxCache) get(author uint64, now time.Time) (outboxEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[author]
	if !ok || now.Sub(e.at) >= c.ttl || now.Before(e.at) {
		return outboxEntry{}, false
	}
	return e, true
}

func (c *outboxCache) put(author uint64, e outboxEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= outboxCacheAuthors {
		for a := range c.entries { // evict an arbitrary entry
			delete(c.entries, a)
			break
		}
	}
	c.entries[author] = e
}

func (c *outboxCache) drop(author uint64) {
	c.mu.Lock()
	delete(c.entries, author)
	c.mu.Unlock()
}

// pull reads up to limit posts of each source for a feed page: from the
// cache where it reaches deep enough, refreshing stale authors with one
// statement per shard, and straight from the outboxes for sources deeper
// than the cache. It returns the posts, as lists for the merge, and counts
// the statements and missing authors in rd. Lists from the cache share its
// arrays: read them only.
func (s *Service) pull(ctx context.Context, rd *pageRead, sources []store.PullSource, limit int) ([][]feed.Post, error) {
	if len(sources) == 0 {
		return nil, nil // an inbox-only page
	}
	if s.cache == nil {
		posts, err := s.readOutboxes(ctx, rd, sources, limit, true)
		return [][]feed.Post{posts}, err
	}
	now := s.now()
	out := make([][]feed.Post, 0, len(sources))
	var stale, direct []store.PullSource
	for _, src := range sources {
		if e, ok := s.cache.get(src.AuthorID, now); !ok {
			stale = append(stale, src)
		} else if posts, ok := e.below(src.Before, limit); ok {
			out = append(out, posts)
		} else {
			direct = append(direct, src)
		}
	}
	if len(stale) > 0 {
		heads := make([]store.PullSource, len(stale))
		for i, src := range stale {
			heads[i] = store.PullSource{AuthorID: src.AuthorID, Before: store.Top}
		}
		posts, err := s.readOutboxes(ctx, rd, heads, outboxCacheDepth, false)
		if err != nil {
			return nil, err
		}
		byAuthor := map[uint64][]feed.Post{}
		for _, p := range posts {
			byAuthor[p.AuthorID] = append(byAuthor[p.AuthorID], p)
		}
		for _, src := range stale {
			if len(rd.failed) > 0 && rd.failed[s.store.ShardOf(src.AuthorID)] {
				// Not read: an entry would say the author has no posts.
				continue
			}
			head := mergeNewest(outboxCacheDepth, nil, byAuthor[src.AuthorID])
			e := outboxEntry{posts: head, complete: len(head) < outboxCacheDepth, at: now}
			s.cache.put(src.AuthorID, e)
			if posts, ok := e.below(src.Before, limit); ok {
				out = append(out, posts)
			} else {
				direct = append(direct, src)
			}
		}
	}
	if len(direct) > 0 {
		posts, err := s.readOutboxes(ctx, rd, direct, limit, true)
		if err != nil {
			return nil, err
		}
		out = append(out, posts)
	}
	return out, nil
}

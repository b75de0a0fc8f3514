package store

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/feedhq/feed"
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
// process publishes or deletes for the author (ForgetOutbox); changes made
// through other processes show within the TTL, like a fan-out still under
// way.
type outboxCache struct {
	ttl     time.Duration
	now     func() time.Time
	mu      sync.Mutex
	entries map[uint64]outboxEntry
}

type outboxEntry struct {
	posts    []feed.Post // newest first, at most outboxCacheDepth
	complete bool        // the author has no older live post
	at       time.Time
}

// CacheOutboxes lets PullCached keep pull authors' newest posts for ttl,
// by the clock now.
func (s *Store) CacheOutboxes(ttl time.Duration, now func() time.Time) {
	s.outboxes.Store(newOutboxCache(ttl, now))
}

// ForgetOutbox drops what PullCached keeps of the author's posts: this
// process published or deleted one.
func (s *Store) ForgetOutbox(author uint64) {
	if c := s.outboxes.Load(); c != nil {
		c.drop(author)
	}
}

func newOutboxCache(ttl time.Duration, now func() time.Time) *outboxCache {
	return &outboxCache{ttl: ttl, now: now, entries: map[uint64]outboxEntry{}}
}

// below returns up to limit cached posts older than before and at or above
// from (the zero key: no bound), or false when
// the cache does not reach deep enough to know them all.
// The result shares the entry's array (capped, so appending to it copies).
func (e outboxEntry) below(before, from feed.Key, limit int) ([]feed.Post, bool) {
	// Newest first: the posts older than before are a suffix, and of
	// those the ones at or above from a prefix.
	i := sort.Search(len(e.posts), func(i int) bool { return e.posts[i].Key().Less(before) })
	out := e.posts[i:]
	if j := sort.Search(len(out), func(j int) bool { return out[j].Key().Less(from) }); j < len(out) {
		// The entry reaches below from: it holds the whole range.
		out = out[:min(j, limit)]
		return out[:len(out):len(out)], true
	}
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

// PullCached reads up to limit posts of each source for a feed page, as
// lists for a merge, with what the reads cost and missed: from the cache
// (CacheOutboxes) where it reaches deep enough, refreshing stale authors'
// heads with one statement per database, and with PullNewest for sources
// deeper than the cache, or for all of them when nothing is cached or the
// read is of some kinds (the cache holds the newest posts of every kind). The
// authors of a database the refresh found failed are not asked again, and
// are missing with it. Lists from the cache share its arrays: read them
// only.
func (s *Store) PullCached(ctx context.Context, sources []PullSource, limit int, shardTimeout time.Duration) ([][]feed.Post, Pulled, error) {
	c := s.outboxes.Load()
	if c == nil || (len(sources) > 0 && sources[0].Kinds != nil) {
		p, err := s.PullNewest(ctx, sources, limit, shardTimeout)
		return [][]feed.Post{p.Posts}, p, err
	}
	now := c.now()
	out := make([][]feed.Post, 0, len(sources))
	var stale, direct []PullSource
	for _, src := range sources {
		if e, ok := c.get(src.AuthorID, now); !ok {
			stale = append(stale, src)
		} else if posts, ok := e.below(src.Before, src.From, limit); ok {
			out = append(out, posts)
		} else {
			direct = append(direct, src)
		}
	}
	var read Pulled
	if len(stale) > 0 {
		heads := make([]PullSource, len(stale))
		for i, src := range stale {
			heads[i] = PullSource{AuthorID: src.AuthorID, Before: Top}
		}
		p, err := s.PullPosts(ctx, heads, outboxCacheDepth, shardTimeout)
		if err != nil {
			return nil, Pulled{}, err
		}
		read.add(Pulled{Queries: p.Queries, Rows: p.Rows, Missing: p.Missing, Err: p.Err})
		failed := s.shardsOf(p.Missing)
		byAuthor := map[uint64][]feed.Post{}
		for _, post := range p.Posts {
			byAuthor[post.AuthorID] = append(byAuthor[post.AuthorID], post)
		}
		for _, src := range stale {
			if failed[s.ShardOf(src.AuthorID)] {
				// Not read: an entry would say the author has no posts.
				continue
			}
			head := newestOf(byAuthor[src.AuthorID], outboxCacheDepth)
			e := outboxEntry{posts: head, complete: len(head) < outboxCacheDepth, at: now}
			c.put(src.AuthorID, e)
			if posts, ok := e.below(src.Before, src.From, limit); ok {
				out = append(out, posts)
			} else {
				direct = append(direct, src)
			}
		}
		if len(failed) > 0 {
			var skipped []uint64
			direct = slices.DeleteFunc(direct, func(src PullSource) bool {
				if failed[s.ShardOf(src.AuthorID)] {
					skipped = append(skipped, src.AuthorID)
					return true
				}
				return false
			})
			read.add(Pulled{Missing: skipped})
		}
	}
	if len(direct) > 0 {
		p, err := s.PullNewest(ctx, direct, limit, shardTimeout)
		if err != nil {
			return nil, Pulled{}, err
		}
		out = append(out, p.Posts)
		p.Posts = nil
		read.add(p)
	}
	return out, read, nil
}

// shardsOf returns the databases of the given authors.
func (s *Store) shardsOf(authors []uint64) map[*Shard]bool {
	if len(authors) == 0 {
		return nil
	}
	out := map[*Shard]bool{}
	for _, a := range authors {
		out[s.ShardOf(a)] = true
	}
	return out
}

// newestOf sorts an author's posts newest first, each once, and keeps the
// first n.
func newestOf(posts []feed.Post, n int) []feed.Post {
	slices.SortFunc(posts, feed.NewestFirst)
	posts = slices.CompactFunc(posts, func(a, b feed.Post) bool { return a.ContentID == b.ContentID })
	return posts[:min(len(posts), n)]
}

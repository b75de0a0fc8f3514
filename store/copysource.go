package store

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/feedhq/feed"
)

// CopySource holds the newest posts and the mode of authors, as read once
// for the copies into inboxes that an import's settling or a round of
// follow backfills makes, up to a bound on the posts it holds, past which
// it starts over: each author is read once per stretch of users rather
// than once per follower. What it holds must be read after the follows it
// copies for were committed and their followers rows added: a post
// published later is pushed to them.
type CopySource struct {
	mu      sync.Mutex
	limit   int
	held    int
	bound   int
	authors map[uint64]authorOutbox
}

// authorOutbox is what settling and backfills need of an author.
type authorOutbox struct {
	posts []feed.Post // the newest limit, newest first
	mode  int         // AuthorPush, AuthorSwitching or AuthorPull
}

// NewCopySource returns a source of each author's newest limit posts,
// holding up to bound posts.
func NewCopySource(limit, bound int) *CopySource {
	return &CopySource{limit: limit, bound: bound, authors: map[uint64]authorOutbox{}}
}

const newestPostsPartSQL = `(SELECT ` + postsInOrder + ` content_id, author_id, publish_time, kind FROM posts
WHERE author_id = ? AND deleted = 0 ORDER BY publish_time DESC, content_id DESC LIMIT ?)`

// outboxChunk bounds the authors one read of newest posts covers.
const outboxChunk = 32

// newestPosts reads each author's newest limit live posts (newest first)
// and mode, a few authors a statement.
func (s *Store) newestPosts(ctx context.Context, authors []uint64, limit int) (map[uint64]authorOutbox, error) {
	out := make(map[uint64]authorOutbox, len(authors))
	if len(authors) == 0 {
		return out, nil
	}
	infos, err := s.AuthorInfos(ctx, authors)
	if err != nil {
		return nil, err
	}
	got := map[uint64][]feed.Post{}
	for sh, part := range s.groupByShard(authors) {
		for chunk := range slices.Chunk(part, outboxChunk) {
			parts := make([]string, len(chunk))
			args := make([]any, 0, 2*len(chunk))
			for i, a := range chunk {
				parts[i] = newestPostsPartSQL
				args = append(args, a, limit)
			}
			rows, err := selectPosts(ctx, sh.pool(ctx), strings.Join(parts, " UNION ALL "), args...)
			if err != nil {
				return nil, wrap("newest posts", err)
			}
			for _, p := range rows {
				got[p.AuthorID] = append(got[p.AuthorID], p)
			}
		}
	}
	for _, a := range authors {
		ps := got[a]
		slices.SortFunc(ps, feed.NewestFirst)
		out[a] = authorOutbox{posts: ps, mode: infos[a].Mode}
	}
	return out, nil
}

// get returns the authors' entries, reading those the source lacks. The
// map is the caller's: a later reset of the source leaves it whole.
func (c *CopySource) get(ctx context.Context, s *Store, authors []uint64) (map[uint64]authorOutbox, error) {
	out := make(map[uint64]authorOutbox, len(authors))
	var missing []uint64
	c.mu.Lock()
	for _, a := range authors {
		if e, ok := c.authors[a]; ok {
			out[a] = e
		} else {
			missing = append(missing, a)
		}
	}
	c.mu.Unlock()
	got, err := s.newestPosts(ctx, missing, c.limit)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held > c.bound {
		c.authors, c.held = map[uint64]authorOutbox{}, 0
	}
	for a, e := range got {
		out[a], c.authors[a] = e, e
		c.held += len(e.posts)
	}
	return out, nil
}

// uncopyDeleted takes out of each user's inbox the copies of posts deleted
// since the source read them: a delete's sweep may have passed the inbox
// before the copy landed. What a user got of an author is a run of its
// newest posts (down to the limit or the edge's bound), so the range from
// the author's oldest copied post up holds its copies and little else.
func (s *Store) uncopyDeleted(ctx context.Context, copied map[uint64][]feed.Post) error {
	since := map[uint64]int64{}
	for _, posts := range copied {
		for _, p := range posts {
			if t, ok := since[p.AuthorID]; !ok || p.PublishTime < t {
				since[p.AuthorID] = p.PublishTime
			}
		}
	}
	deleted, err := s.DeletedSince(ctx, since)
	if err != nil {
		return err
	}
	if len(deleted) == 0 {
		return nil
	}
	for u, posts := range copied {
		var gone []feed.Post
		for _, p := range posts {
			if deleted[p.ContentID] {
				gone = append(gone, p)
			}
		}
		if err := s.RemoveFromInbox(ctx, u, gone); err != nil {
			return err
		}
	}
	return nil
}

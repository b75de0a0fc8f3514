package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// keysetOlder is the keyset condition of every newest-first page, written
// long-hand: not every MySQL-family server range-scans the row-constructor
// form. Arguments: time, time, id.
const keysetOlder = `(publish_time < ? OR (publish_time = ? AND content_id < ?))`

const insertPostSQL = `INSERT INTO posts (author_id, publish_time, content_id, kind, created_at) VALUES (?, ?, ?, ?, ?)`

const insertDeliverySQL = `INSERT INTO deliveries (content_id, author_id, publish_time, kind, created_at) VALUES (?, ?, ?, ?, ?)`

const insertOwnInboxSQL = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind) VALUES (?, ?, ?, ?, ?)`

const getPostSQL = `SELECT content_id, author_id, publish_time, kind, deleted FROM posts WHERE content_id = ?`

type postRow struct {
	feed.Post
	Deleted bool `db:"deleted"`
}

const claimContentIDSQL = `INSERT IGNORE INTO content_ids (content_id, author_id, created_at) VALUES (?, ?, ?)`

const contentOwnerSQL = `SELECT author_id FROM content_ids WHERE content_id = ?`

// PublishPost stores a new post on its author's shard in one transaction: the
// post (the author's outbox), its delivery (the event fan-out workers claim)
// and the author's own inbox entry, so the author sees it at once. With
// several shards it first claims the content id on the id's own shard, so an
// id names one post in the whole service (in the same transaction when that
// is the author's shard).
//
// When the content id exists already it returns the stored post and
// created=false, leaving the caller to judge whether the request repeats it.
// Returns ECONFLICT if the id belongs to a deleted post or, with several
// shards, to another author.
func (s *Store) PublishPost(ctx context.Context, p feed.Post, now int64) (stored feed.Post, created bool, err error) {
	ctx = s.pin(ctx)
	home := s.ShardOf(p.AuthorID)
	var registry *Shard
	if len(s.shards) > 1 {
		registry = s.ShardOf(p.ContentID)
	}
	if registry != nil && registry != home {
		if err := claimContentID(ctx, registry.pool(ctx), p, now); err != nil {
			return stored, false, wrap("publish post", err)
		}
	}
	err = inTx(ctx, home.pool(ctx), func(tx *sqlx.Tx) error {
		if registry == home {
			if err := claimContentID(ctx, tx, p, now); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, insertPostSQL, p.AuthorID, p.PublishTime, p.ContentID, p.Kind, now)
		if mysqlErrno(err) == errDupEntry {
			var row postRow
			if err := sqlx.GetContext(ctx, tx, &row, getPostSQL, p.ContentID); err != nil {
				return err
			}
			if row.Deleted {
				return feed.Errorf(feed.ECONFLICT, "content_id %d belongs to a deleted post", p.ContentID)
			}
			stored, created = row.Post, false
			return nil
		} else if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertDeliverySQL, p.ContentID, p.AuthorID, p.PublishTime, p.Kind, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertOwnInboxSQL, p.AuthorID, p.PublishTime, p.ContentID, p.AuthorID, p.Kind); err != nil {
			return err
		}
		stored, created = p, true
		return nil
	})
	return stored, created, wrap("publish post", err)
}

// claimContentID records that p's author owns its content id; claiming an
// id the author owns already succeeds (a retry).
//
// Returns ECONFLICT if another author owns it.
func claimContentID(ctx context.Context, db sqlx.ExtContext, p feed.Post, now int64) error {
	if _, err := db.ExecContext(ctx, claimContentIDSQL, p.ContentID, p.AuthorID, now); err != nil {
		return err
	}
	var owner uint64
	if err := sqlx.GetContext(ctx, db, &owner, contentOwnerSQL, p.ContentID); err != nil {
		return err
	}
	if owner != p.AuthorID {
		return feed.Errorf(feed.ECONFLICT, "content_id %d belongs to a post of another author", p.ContentID)
	}
	return nil
}

const lockPostSQL = `SELECT content_id, author_id, publish_time, kind, deleted FROM posts WHERE content_id = ? FOR UPDATE`

const markPostDeletedSQL = `UPDATE posts SET deleted = 1 WHERE author_id = ? AND publish_time = ? AND content_id = ?`

const deleteInboxEntrySQL = `DELETE FROM inbox WHERE user_id = ? AND publish_time = ? AND content_id = ?`

const lockDeliverySQL = `SELECT state FROM deliveries WHERE content_id = ? FOR UPDATE`

// A deleted post's delivery goes back to planning, as a retraction: the
// planner makes a task per follower range and database, so the removal
// sweeps every database, also those the push had no task for (a follow
// whose event had not reached the followers list may have got the post
// there by its backfill).
const replanRetractSQL = `UPDATE deliveries SET retract = 1, state = 0, delivered = 0, tasks_left = 0, claim_token = 0, claimed_until = 0 WHERE content_id = ?`

// lockTasksSQL takes a post's task rows before its delivery row, the order
// of the batches, which hold their task row while they finish into the
// delivery row: a delete waits for the batches in flight.
const lockTasksSQL = `SELECT seq FROM fanout_tasks WHERE content_id = ? FOR UPDATE`

// Running tasks are dropped: a worker still pushing fails the claim check
// of its next batch and stops, and the re-planned retraction covers its
// range again.
// DeletePost marks the post deleted, removes it from the author's own inbox
// and turns its delivery into a retraction that removes it from followers'
// inboxes, all in one transaction on the author's shard. Deleting a deleted
// post does nothing.
//
// Returns ENOTFOUND if the author never published contentID.
func (s *Store) DeletePost(ctx context.Context, authorID, contentID uint64) error {
	ctx = s.pin(ctx)
	err := inTx(ctx, s.ShardOf(authorID).pool(ctx), func(tx *sqlx.Tx) error {
		var row postRow
		err := sqlx.GetContext(ctx, tx, &row, lockPostSQL, contentID)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && row.AuthorID != authorID) {
			return feed.Errorf(feed.ENOTFOUND, "post %d of user %d not found", contentID, authorID)
		} else if err != nil || row.Deleted {
			return err
		}
		for _, q := range []string{markPostDeletedSQL, deleteInboxEntrySQL} {
			if _, err := tx.ExecContext(ctx, q, authorID, row.PublishTime, contentID); err != nil {
				return err
			}
		}
		var tasks []int
		if err := tx.SelectContext(ctx, &tasks, lockTasksSQL, contentID); err != nil {
			return err
		}
		var state int
		if err := tx.GetContext(ctx, &state, lockDeliverySQL, contentID); err != nil {
			return err
		}
		if len(tasks) > 0 {
			if _, err := tx.ExecContext(ctx, dropTasksSQL, contentID); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, replanRetractSQL, contentID)
		return err
	})
	return wrap("delete post", err)
}

// GetPost returns a live post of the author.
//
// Returns ENOTFOUND if it does not exist, belongs to another author or was deleted.
func (s *Store) GetPost(ctx context.Context, authorID, contentID uint64) (feed.Post, error) {
	var row postRow
	err := sqlx.GetContext(ctx, s.ShardOf(authorID).pool(ctx), &row, getPostSQL, contentID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (row.AuthorID != authorID || row.Deleted)) {
		return feed.Post{}, feed.Errorf(feed.ENOTFOUND, "post %d of user %d not found", contentID, authorID)
	}
	return row.Post, wrap("get post", err)
}

const listPostsSQL = `SELECT content_id, author_id, publish_time, kind FROM posts
WHERE author_id = ? AND deleted = 0 AND ` + keysetOlder + `
ORDER BY publish_time DESC, content_id DESC LIMIT ?`

// ListPosts returns up to limit live posts of the author older than before, newest first.
func (s *Store) ListPosts(ctx context.Context, authorID uint64, before feed.Key, limit int) ([]feed.Post, error) {
	var posts []feed.Post
	err := sqlx.SelectContext(ctx, s.ShardOf(authorID).pool(ctx), &posts, listPostsSQL,
		authorID, before.PublishTime, before.PublishTime, before.ContentID, limit)
	return posts, wrap("list posts", err)
}

// PullSource asks for one author's live posts older than Before.
type PullSource struct {
	AuthorID uint64
	Before   feed.Key
	// From, when set, bounds the read below: posts at or above it only.
	From feed.Key
}

// pullChunk bounds the authors read by one pull statement.
const pullChunk = 64

// pullPartSQL is one author's part of a pull statement: its newest posts
// below a bound, a backward range scan of the posts primary key.
const pullPartSQL = `(SELECT content_id, author_id, publish_time, kind FROM posts
WHERE author_id = ? AND deleted = 0 AND ` + keysetOlder + ` AND ` + keysetFrom + `
ORDER BY publish_time DESC, content_id DESC LIMIT ?)`

// keysetFrom is the inclusive lower bound of a pull read; the zero key
// bounds nothing.
const keysetFrom = `(publish_time > ? OR (publish_time = ? AND content_id >= ?))`

// Pulled is what PullPosts read.
type Pulled struct {
	Posts   []feed.Post // in no particular order
	Queries int         // statements run
	// Missing holds the authors, sorted, whose database failed or is known
	// unreadable: none of their posts are in Posts.
	Missing []uint64
	// Err is the failure of the first such database, by name.
	Err error
}

// PullPosts reads up to limit live posts of each source, newest first per
// source, for read-time merging. Sources on the same shard are read together
// with one UNION ALL statement per 64 authors, so a page costs one query per
// shard for the usual handful of pull authors; the shards are read in
// parallel.
//
// A shard that fails costs only its own authors, which Pulled reports as
// missing; whether a page may do without them is the caller's decision. A
// shard whose last probe could not read it is not asked at all, and with
// shardTimeout above zero each shard's statements get that long at most, so
// a hung database the probe has not flagged yet costs no more. The error is
// for ctx itself ending, which fails the whole read.
func (s *Store) PullPosts(ctx context.Context, sources []PullSource, limit int, shardTimeout time.Duration) (Pulled, error) {
	byShard := map[*Shard][]PullSource{}
	for _, src := range sources {
		sh := s.ShardOf(src.AuthorID)
		byShard[sh] = append(byShard[sh], src)
	}
	type part struct {
		sh      *Shard
		srcs    []PullSource
		posts   []feed.Post
		queries int
		err     error
	}
	parts := make([]part, 0, len(byShard))
	for _, sh := range s.shards { // by name: Err names the same shard every time
		if srcs, ok := byShard[sh]; ok {
			parts = append(parts, part{sh: sh, srcs: srcs})
		}
	}
	var wg sync.WaitGroup
	for i := range parts {
		p := &parts[i]
		if h := p.sh.Health(); h.Unreadable {
			p.err = errors.Join(feed.Errorf(feed.EUNAVAILABLE, "database unavailable"),
				fmt.Errorf("store: pull posts: database %s is down", p.sh.Name), h.Err)
			continue
		}
		wg.Go(func() { p.posts, p.queries, p.err = pullShard(ctx, p.sh, p.srcs, limit, shardTimeout) })
	}
	wg.Wait()
	var out Pulled
	for _, p := range parts {
		out.Queries += p.queries
		if p.err == nil {
			out.Posts = append(out.Posts, p.posts...)
			continue
		}
		if err := ctx.Err(); err != nil {
			return Pulled{}, wrap("pull posts", err)
		}
		if out.Err == nil {
			out.Err = p.err
		}
		for _, src := range p.srcs {
			out.Missing = append(out.Missing, src.AuthorID)
		}
	}
	slices.Sort(out.Missing)
	out.Missing = slices.Compact(out.Missing)
	return out, nil
}

// PullNewest returns what PullPosts would for a caller that keeps only the
// newest limit posts of all the sources together, reading about a page
// whatever the number of sources. With more sources than limit it first
// reads each source's newest post (one index seek each); the limit-th
// newest of those heads, B, bounds the page from below, since limit posts
// at or above B exist. It then reads, from the sources whose head is at or
// above B only, their posts down to B. Every post of the newest limit is at
// or above B, so it is among them.
func (s *Store) PullNewest(ctx context.Context, sources []PullSource, limit int, shardTimeout time.Duration) (Pulled, error) {
	if len(sources) <= limit {
		return s.PullPosts(ctx, sources, limit, shardTimeout)
	}
	heads, err := s.PullPosts(ctx, sources, 1, shardTimeout)
	if err != nil {
		return Pulled{}, err
	}
	// Newest first.
	slices.SortFunc(heads.Posts, func(a, b feed.Post) int {
		switch {
		case b.Key().Less(a.Key()):
			return -1
		case a.Key().Less(b.Key()):
			return 1
		}
		return 0
	})
	bySource := map[uint64]PullSource{}
	for _, src := range sources {
		bySource[src.AuthorID] = src
	}
	var from feed.Key
	if len(heads.Posts) >= limit {
		from = heads.Posts[limit-1].Key()
	}
	var next []PullSource
	for _, h := range heads.Posts {
		if h.Key().Less(from) {
			break
		}
		src := bySource[h.AuthorID]
		if src.From.Less(from) {
			src.From = from
		}
		next = append(next, src)
	}
	out, err := s.PullPosts(ctx, next, limit, shardTimeout)
	if err != nil {
		return Pulled{}, err
	}
	out.Queries += heads.Queries
	if len(heads.Missing) > 0 {
		out.Missing = slices.Compact(slices.Sorted(slices.Values(append(out.Missing, heads.Missing...))))
		out.Err = cmp.Or(out.Err, heads.Err)
	}
	return out, nil
}

// pullShard runs PullPosts' statements on one shard, within timeout when it
// is above zero, and returns the posts and the statements that completed.
func pullShard(ctx context.Context, sh *Shard, srcs []PullSource, limit int, timeout time.Duration) ([]feed.Post, int, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var (
		mu      sync.Mutex
		out     []feed.Post
		queries int
		first   error
		wg      sync.WaitGroup
		slots   = make(chan struct{}, pullParallel)
	)
	for start := 0; start < len(srcs); start += pullChunk {
		chunk := srcs[start:min(start+pullChunk, len(srcs))]
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			posts, err := pullChunkOf(ctx, sh, chunk, limit)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmp.Or(first, err)
				return
			}
			queries++
			out = append(out, posts...)
		})
	}
	wg.Wait()
	if first != nil {
		return nil, queries, first
	}
	return out, queries, nil
}

// pullParallel is how many of a page's pull statements run at once on one
// database: a page of many followees is many statements, each a few index
// seeks, and the Reads pool has the connections.
const pullParallel = 4

// pullChunkOf runs one pull statement over up to pullChunk sources.
func pullChunkOf(ctx context.Context, sh *Shard, chunk []PullSource, limit int) ([]feed.Post, error) {
	parts := make([]string, len(chunk))
	args := make([]any, 0, 8*len(chunk))
	for i, src := range chunk {
		parts[i] = pullPartSQL
		args = append(args, src.AuthorID, src.Before.PublishTime, src.Before.PublishTime, src.Before.ContentID,
			src.From.PublishTime, src.From.PublishTime, src.From.ContentID, limit)
	}
	var posts []feed.Post
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &posts, strings.Join(parts, " UNION ALL "), args...); err != nil {
		return nil, wrap("pull posts", err)
	}
	return posts, nil
}

// DeletedPosts returns which of the author's content ids are deleted; a
// backfill uses it to undo copies that raced with a delete.
func (s *Store) DeletedPosts(ctx context.Context, authorID uint64, ids []uint64) ([]uint64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(`SELECT content_id FROM posts WHERE content_id IN (?) AND deleted = 1`, ids)
	if err != nil {
		return nil, err
	}
	var out []uint64
	err = sqlx.SelectContext(ctx, s.ShardOf(authorID).pool(ctx), &out, q, args...)
	return out, wrap("deleted posts", err)
}

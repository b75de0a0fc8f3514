package store

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// keysetOlder is the keyset condition of every newest-first page, written
// long-hand: not every MySQL-family server range-scans the row-constructor
// form. Arguments: time, time, id.
const keysetOlder = `(publish_time < ? OR (publish_time = ? AND content_id < ?))`

// The hints inboxInOrder and postsInOrder ask for a newest-first page to be
// read in primary key order, stopping at its LIMIT. TiDB otherwise sorts the
// whole keyset range (TopN) when it lacks statistics of a filtered column;
// MySQL 8 already reads in order, and MariaDB reads the hint as a comment.
const (
	inboxInOrder     = `/*+ ORDER_INDEX(inbox PRIMARY) */`
	postsInOrder     = `/*+ ORDER_INDEX(posts PRIMARY) */`
	postsKindInOrder = `/*+ ORDER_INDEX(posts idx_posts_kind) */`
)

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
// Returns ECONFLICT if the id belongs to a deleted post, a stream or, with
// several shards, to another author.
func (s *Store) PublishPost(ctx context.Context, p feed.Post, now int64) (stored feed.Post, created bool, err error) {
	ctx = s.pin(ctx)
	home := s.ShardOf(p.AuthorID)
	claimHome, err := s.claimAway(ctx, home, p, now)
	if err != nil {
		return stored, false, wrap("publish post", err)
	}
	err = home.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := claimHome(tx); err != nil {
			return err
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
		_, err = tx.ExecContext(ctx, insertDeliverySQL, p.ContentID, p.AuthorID, p.PublishTime, p.Kind, now)
		if mysqlErrno(err) == errDupEntry {
			// A stream's delivery holds the id (streams share the space).
			return feed.Errorf(feed.ECONFLICT, "content_id %d names a stream", p.ContentID)
		} else if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertOwnInboxSQL, p.AuthorID, p.PublishTime, p.ContentID, p.AuthorID, p.Kind); err != nil {
			return err
		}
		if err := bumpBackdates(ctx, tx, p, now); err != nil {
			return err
		}
		stored, created = p, true
		return nil
	})
	return stored, created, wrap("publish post", err)
}

// claimAway claims p's content id, with several shards, on the id's own
// shard when that is not home; claimHome claims it in home's transaction
// when it is, and does nothing otherwise.
func (s *Store) claimAway(ctx context.Context, home *Shard, p feed.Post, now int64) (claimHome func(tx *sqlx.Tx) error, err error) {
	var registry *Shard
	if len(s.shards) > 1 {
		registry = s.ShardOf(p.ContentID)
	}
	if registry != nil && registry != home {
		if err := claimContentID(ctx, registry.pool(ctx), p, now); err != nil {
			return nil, err
		}
	}
	return func(tx *sqlx.Tx) error {
		if registry != home {
			return nil
		}
		return claimContentID(ctx, tx, p, now)
	}, nil
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
const replanRetractSQL = `UPDATE deliveries SET retract = 1, state = ` + deliveryPendingSQL + `, delivered = 0, tasks_left = 0, claim_token = 0, claimed_until = 0 WHERE content_id = ?`

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
	err := s.ShardOf(authorID).inTx(ctx, func(tx *sqlx.Tx) error {
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
		return retractDelivery(ctx, tx, contentID)
	})
	return wrap("delete post", err)
}

// retractDelivery drops a deleted item's fan-out tasks and sends its
// delivery back to planning as a retraction, taking the task rows' locks
// before the delivery row's, the order batches take them in. A plan that
// held the delivery row meanwhile has committed new tasks by the time its
// lock is ours, and no gap lock kept it from doing so: the tasks are
// dropped again after it, or the retraction's own plan would find their
// keys taken.
func retractDelivery(ctx context.Context, tx *sqlx.Tx, contentID uint64) error {
	var tasks []int
	if err := tx.SelectContext(ctx, &tasks, lockTasksSQL, contentID); err != nil {
		return err
	}
	var state int
	if err := tx.GetContext(ctx, &state, lockDeliverySQL, contentID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, dropTasksSQL, contentID); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, replanRetractSQL, contentID)
	return err
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

const listPostsSQL = `SELECT ` + postsInOrder + ` content_id, author_id, publish_time, kind FROM posts
WHERE author_id = ? AND deleted = 0 AND ` + keysetOlder + `
ORDER BY publish_time DESC, content_id DESC LIMIT ?`

// ListPosts returns up to limit live posts of the author older than before, newest first.
func (s *Store) ListPosts(ctx context.Context, authorID uint64, before feed.Key, limit int) ([]feed.Post, error) {
	var posts []feed.Post
	err := sqlx.SelectContext(ctx, s.ShardOf(authorID).pool(ctx), &posts, listPostsSQL,
		authorID, before.PublishTime, before.PublishTime, before.ContentID, limit)
	return posts, wrap("list posts", err)
}

// deletedSincePartSQL finds an author's deleted posts published at or
// after a time: a range of the primary key, where looking each copied id up
// by uk_posts_content would cost two index lookups apiece.
const deletedSincePartSQL = `(SELECT content_id FROM posts WHERE author_id = ? AND publish_time >= ? AND deleted = 1)`

// DeletedSince returns the content ids of the authors' deleted posts, each
// author's published at or after its time, a few authors a statement: a
// backfill uses it to undo copies that raced with a delete.
func (s *Store) DeletedSince(ctx context.Context, since map[uint64]int64) (map[uint64]bool, error) {
	deleted := map[uint64]bool{}
	for sh, authors := range s.groupByShard(slices.Collect(maps.Keys(since))) {
		for chunk := range slices.Chunk(authors, outboxChunk) {
			parts := make([]string, len(chunk))
			args := make([]any, 0, 2*len(chunk))
			for i, a := range chunk {
				parts[i] = deletedSincePartSQL
				args = append(args, a, since[a])
			}
			var ids []uint64
			if err := sqlx.SelectContext(ctx, sh.pool(ctx), &ids, strings.Join(parts, " UNION ALL "), args...); err != nil {
				return nil, wrap("deleted posts", err)
			}
			for _, id := range ids {
				deleted[id] = true
			}
		}
	}
	return deleted, nil
}

// selectPosts runs a query whose columns are content_id, author_id,
// publish_time and kind, in that order, and returns its rows as posts. It
// scans into one set of targets rather than by reflection, and shares the
// common kind's string: reads of outboxes return thousands of rows.
func selectPosts(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) ([]feed.Post, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		id, a sqlconn.Int[uint64]
		t     sqlconn.Int[int64]
		k     sql.RawBytes
		out   []feed.Post
	)
	dest := []any{&id, &a, &t, &k}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, feed.Post{ContentID: id.V, AuthorID: a.V, PublishTime: t.V, Kind: kindOf(k)})
	}
	return out, rows.Err()
}

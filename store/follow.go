package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// Bits of following.pull: how reads treat a followed author.
const (
	// PullBelowActive marks a pull author: its posts older than the reader's
	// active_since were not pushed and are merged from its outbox.
	PullBelowActive = 1
	// PullPending marks a follow whose backfill has not run: the whole
	// outbox is merged until it does.
	PullPending = 2
)

const isFollowingSQL = `SELECT COUNT(*) FROM following WHERE user_id = ? AND author_id = ?`

const countFollowingSQL = `SELECT COUNT(*) FROM following WHERE user_id = ?`

const insertFollowingSQL = `INSERT INTO following (user_id, author_id, followed_at, pull, muted) VALUES (?, ?, ?, ?, ?)`

// pairMutedSQL says whether the pair has a mutes row, as a locking read:
// the latest committed row on every engine, whatever snapshot the
// transaction holds (MyRocks takes it at the first statement, before the
// header lock was granted).
const pairMutedSQL = `SELECT COUNT(*) FROM mutes WHERE user_id = ? AND author_id = ? FOR UPDATE`

const deleteFollowingSQL = `DELETE FROM following WHERE user_id = ? AND author_id = ?`

const purgeAuthorSQL = `DELETE FROM inbox WHERE user_id = ? AND author_id = ?`

// purgeAuthor takes the author's posts out of the user's inbox and the
// author's replays out of the user's replays list, in tx: what an unfollow
// or a mute removes from the user's view.
func purgeAuthor(ctx context.Context, tx *sqlx.Tx, userID, authorID uint64) error {
	for _, q := range []string{purgeAuthorSQL, purgeHostReplaysSQL} {
		if _, err := tx.ExecContext(ctx, q, userID, authorID); err != nil {
			return err
		}
	}
	return nil
}

// queueFollowEventSQL keeps one pending event per pair: a repeat bumps the
// version, so pending operations collapse to the last one.
const queueFollowEventSQL = `INSERT INTO follow_events (user_id, author_id, created_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE version = version + 1`

// Follow adds the edge on the user's shard, marked pending backfill (reads
// merge the author's outbox until the backfill lands), and queues the event
// that updates the author's followers and runs the backfill. Following an
// author already followed does nothing and reports created=false.
//
// Returns ELIMIT when the user already follows maxFollowing authors.
func (s *Store) Follow(ctx context.Context, userID, authorID uint64, maxFollowing int, now int64) (created bool, err error) {
	ctx = s.pin(ctx)
	err = s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		created = false
		// Lock the user's header row: concurrent follows of one user queue
		// here, so the cap holds.
		if err := ensureHeaders(ctx, tx, userID); err != nil {
			return err
		}
		var n int
		if err := tx.GetContext(ctx, &n, isFollowingSQL, userID, authorID); err != nil || n > 0 {
			return err
		}
		if err := tx.GetContext(ctx, &n, countFollowingSQL, userID); err != nil {
			return err
		} else if n >= maxFollowing {
			return feed.Errorf(feed.ELIMIT, "user %d already follows %d authors, the maximum", userID, n)
		}
		// A mute or hide of the author holds for the new edge (mutes
		// take the header row this transaction holds).
		var muted int
		if err := tx.GetContext(ctx, &muted, pairMutedSQL, userID, authorID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertFollowingSQL, userID, authorID, now, PullPending, muted); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, setPullsSQL, 1, userID); err != nil {
			return err
		}
		if err := followsChanged(ctx, tx, userID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, queueFollowEventSQL, userID, authorID, now); err != nil {
			return err
		}
		created = true
		return nil
	})
	if created {
		s.ShardOf(userID).pullHints.Set(userID, true) // the backfill is pending
	}
	return created, wrap("follow", err)
}

// Unfollow removes the edge and purges the author's posts from the user's
// inbox in one transaction on the user's shard, so no later read shows them,
// and queues the event that updates the author's followers. Unfollowing an
// author not followed does nothing.
func (s *Store) Unfollow(ctx context.Context, userID, authorID uint64, now int64) error {
	ctx = s.pin(ctx)
	err := s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		// The header row is the user's lock (pull bits change here).
		var locked []uint64
		if err := tx.SelectContext(ctx, &locked, lockHeaderSQL, userID); err != nil {
			return err
		}
		if deleted, err := affected(tx.ExecContext(ctx, deleteFollowingSQL, userID, authorID)); err != nil || !deleted {
			return err
		}
		if err := purgeAuthor(ctx, tx, userID, authorID); err != nil {
			return err
		}
		if err := recountPulls(ctx, tx, userID); err != nil {
			return err
		}
		if err := followsChanged(ctx, tx, userID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, queueFollowEventSQL, userID, authorID, now)
		return err
	})
	return wrap("unfollow", err)
}

const listFollowingSQL = `SELECT user_id, author_id, followed_at FROM following
WHERE user_id = ? AND author_id > ? ORDER BY author_id LIMIT ?`

// ListFollowing returns up to limit authors the user follows with ids above
// after, in author_id order.
func (s *Store) ListFollowing(ctx context.Context, userID, after uint64, limit int) ([]feed.Follow, error) {
	var out []feed.Follow
	err := sqlx.SelectContext(ctx, s.ShardOf(userID).pool(ctx), &out, listFollowingSQL, userID, after, limit)
	return out, wrap("list following", err)
}

const followedAuthorsSQL = `SELECT author_id FROM following WHERE user_id = ? AND muted = 0`

// FollowedAuthors returns the authors the user reads, followed and not
// muted or hidden: the sources of a deep scroll below the inbox's retained
// window. version is the header's followee-list version from a
// snapshot read before (FeedSnapshot.Follows; 0: none): a list this
// process read under it comes from memory, and read reports whether a
// statement ran. The list is shared: the caller must not change it.
func (s *Store) FollowedAuthors(ctx context.Context, userID uint64, version int64) (authors []uint64, read bool, err error) {
	if version != 0 {
		if authors, ok := s.followees.get(userID, version); ok {
			return authors, false, nil
		}
	}
	if authors, err = s.readFollowedAuthors(ctx, userID); err != nil {
		return nil, true, err
	}
	if version != 0 {
		s.followees.put(userID, version, authors)
	}
	return authors, true, nil
}

// readFollowedAuthors reads the list. Thousands of rows are scanned by
// hand: sqlx's reflection per row cost more than the read.
func (s *Store) readFollowedAuthors(ctx context.Context, userID uint64) ([]uint64, error) {
	rows, err := s.ShardOf(userID).pool(ctx).QueryContext(ctx, followedAuthorsSQL, userID)
	if err != nil {
		return nil, wrap("followed authors", err)
	}
	defer rows.Close()
	out := make([]uint64, 0, 64)
	for rows.Next() {
		var a uint64
		if err := rows.Scan(&a); err != nil {
			return nil, wrap("followed authors", err)
		}
		out = append(out, a)
	}
	return out, wrap("followed authors", rows.Err())
}

const getFollowingSQL = `SELECT user_id, author_id, followed_at FROM following WHERE user_id = ? AND author_id = ?`

// GetFollowing returns the edge as the user's shard has it now.
//
// Returns ENOTFOUND if the user does not follow the author.
func (s *Store) GetFollowing(ctx context.Context, userID, authorID uint64) (feed.Follow, error) {
	var f feed.Follow
	err := sqlx.GetContext(ctx, s.ShardOf(userID).pool(ctx), &f, getFollowingSQL, userID, authorID)
	if errors.Is(err, sql.ErrNoRows) {
		return f, feed.Errorf(feed.ENOTFOUND, "user %d does not follow %d", userID, authorID)
	}
	return f, wrap("get following", err)
}

package store

import (
	"context"

	"github.com/feedhq/feed"
	"github.com/jmoiron/sqlx"
)

// The followers table: who follows an author, on the author's database,
// written only by follow events.

const listFollowersSQL = `SELECT user_id, author_id, followed_at FROM followers
WHERE author_id = ? AND user_id > ? ORDER BY user_id LIMIT ?`

// ListFollowers returns up to limit followers of the author with ids above
// after, in user_id order. The list trails follow and unfollow by the time
// their events take to apply.
func (s *Store) ListFollowers(ctx context.Context, authorID, after uint64, limit int) ([]feed.Follow, error) {
	var out []feed.Follow
	err := sqlx.SelectContext(ctx, s.ShardOf(authorID).pool(ctx), &out, listFollowersSQL, authorID, after, limit)
	return out, wrap("list followers", err)
}

const insertFollowerSQL = `INSERT IGNORE INTO followers (author_id, user_id, followed_at) VALUES (?, ?, ?)`

const deleteFollowerSQL = `DELETE FROM followers WHERE author_id = ? AND user_id = ?`

// AddFollower records the edge on the author's shard and counts it. When
// the count passes pushThreshold the author starts switching to pull mode.
// It returns the author's mode, read under the same lock the switch takes,
// so a follower added while switching is never missed.
func (s *Store) AddFollower(ctx context.Context, f feed.Follow, pushThreshold int64) (mode int, err error) {
	ctx = s.pin(ctx)
	err = s.ShardOf(f.AuthorID).inTx(ctx, func(tx *sqlx.Tx) error {
		r, err := tx.ExecContext(ctx, insertFollowerSQL, f.AuthorID, f.UserID, f.FollowedAt)
		if err != nil {
			return err
		}
		added, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, countAuthorSQL, f.AuthorID, added); err != nil {
			return err
		}
		var a struct {
			Count int64 `db:"follower_count"`
			Mode  int   `db:"mode"`
		}
		if err := sqlx.GetContext(ctx, tx, &a, lockAuthorSQL, f.AuthorID); err != nil {
			return err
		}
		mode = a.Mode
		if a.Mode == AuthorPush && a.Count > pushThreshold {
			mode = AuthorSwitching
			_, err = tx.ExecContext(ctx, startSwitchSQL, f.AuthorID)
		}
		return err
	})
	return mode, wrap("add follower", err)
}

// RemoveFollower drops the edge from the author's shard and the count.
func (s *Store) RemoveFollower(ctx context.Context, authorID, userID uint64) error {
	ctx = s.pin(ctx)
	err := s.ShardOf(authorID).inTx(ctx, func(tx *sqlx.Tx) error {
		if deleted, err := affected(tx.ExecContext(ctx, deleteFollowerSQL, authorID, userID)); err != nil || !deleted {
			return err
		}
		_, err := tx.ExecContext(ctx, countAuthorSQL, authorID, -1)
		return err
	})
	return wrap("remove follower", err)
}

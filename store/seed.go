package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// seedChunk bounds the rows of one bulk statement.
const seedChunk = 1000

const seedFollowingHead = `INSERT IGNORE INTO following (user_id, author_id, followed_at, pull)`

const seedFollowersHead = `INSERT IGNORE INTO followers (author_id, user_id, followed_at)`

const seedAuthorSQL = `INSERT INTO authors (author_id, follower_count, mode) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count), mode = GREATEST(mode, VALUES(mode))`

// ImportFollowers bulk-loads follow edges of one author for users who have
// no history with it: both edge rows and the follower count, without events
// or backfill (there is nothing to copy). With pullMode the author is put in
// pull mode at once and the edges marked accordingly. For loading graphs in
// benchmarks, crash tests and migrations from another system; the service
// itself follows through Follow.
func (s *Store) ImportFollowers(ctx context.Context, authorID uint64, users []uint64, followedAt int64, pullMode bool) error {
	pull, mode := 0, AuthorPush
	if pullMode {
		pull, mode = PullBelowActive, AuthorPull
	}
	for sh, ids := range s.groupByShard(users) {
		for start := 0; start < len(ids); start += seedChunk {
			chunk := ids[start:min(start+seedChunk, len(ids))]
			args := make([]any, 0, 4*len(chunk))
			for _, u := range chunk {
				args = append(args, u, authorID, followedAt, pull)
			}
			if _, err := sh.DB.ExecContext(ctx, multiRowInsert(seedFollowingHead, 4, len(chunk), ""), args...); err != nil {
				return wrap("import followers", err)
			}
		}
	}
	return wrap("import followers", inTx(ctx, s.ShardOf(authorID).DB, func(tx *sqlx.Tx) error {
		var added int64
		for start := 0; start < len(users); start += seedChunk {
			chunk := users[start:min(start+seedChunk, len(users))]
			args := make([]any, 0, 3*len(chunk))
			for _, u := range chunk {
				args = append(args, authorID, u, followedAt)
			}
			r, err := tx.ExecContext(ctx, multiRowInsert(seedFollowersHead, 3, len(chunk), ""), args...)
			if err != nil {
				return err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return err
			}
			added += n
		}
		_, err := tx.ExecContext(ctx, seedAuthorSQL, authorID, added, mode)
		return err
	}))
}

const seedActivityHead = `INSERT INTO user_state (user_id, last_read_at, active_since)`

const seedActivityTail = ` ON DUPLICATE KEY UPDATE last_read_at = VALUES(last_read_at), active_since = VALUES(active_since)`

// ImportActivity records that users last read their feed at lastReadAt, in
// an active spell that began at activeSince: for loading benchmarks and tests.
func (s *Store) ImportActivity(ctx context.Context, users []uint64, lastReadAt, activeSince int64) error {
	for sh, ids := range s.groupByShard(users) {
		for start := 0; start < len(ids); start += seedChunk {
			chunk := ids[start:min(start+seedChunk, len(ids))]
			args := make([]any, 0, 3*len(chunk))
			for _, u := range chunk {
				args = append(args, u, lastReadAt, activeSince)
			}
			if _, err := sh.DB.ExecContext(ctx, multiRowInsert(seedActivityHead, 3, len(chunk), seedActivityTail), args...); err != nil {
				return wrap("import activity", err)
			}
		}
	}
	return nil
}

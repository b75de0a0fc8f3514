package store

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

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
		if pullMode {
			if err := sh.markPulls(ctx, ids); err != nil {
				return wrap("import followers", err)
			}
		}
		if _, err := insertChunks(ctx, sh.DB, seedFollowingHead, 4, "", len(ids), func(i int) []any {
			return []any{ids[i], authorID, followedAt, pull}
		}); err != nil {
			return wrap("import followers", err)
		}
	}
	return wrap("import followers", inTx(ctx, s.ShardOf(authorID).DB, func(tx *sqlx.Tx) error {
		added, err := insertChunks(ctx, tx, seedFollowersHead, 3, "", len(users), func(i int) []any {
			return []any{authorID, users[i], followedAt}
		})
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, seedAuthorSQL, authorID, added, mode)
		return err
	}))
}

const seedActivityHead = `INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, last_read_at, active_since, floor_time, floor_id)`

const seedActivityTail = ` ON DUPLICATE KEY UPDATE last_read_at = VALUES(last_read_at), active_since = VALUES(active_since),
 floor_time = COALESCE(VALUES(floor_time), floor_time), floor_id = COALESCE(VALUES(floor_id), floor_id)`

// ImportActivity records that users last read their feed at lastReadAt, in
// an active spell that began at activeSince, and, unless floor is nil, that
// their inboxes are complete only at and above floor (as after a trim): for
// loading benchmarks and tests.
func (s *Store) ImportActivity(ctx context.Context, users []uint64, lastReadAt, activeSince int64, floor *feed.Key) error {
	var ft, fi any
	if floor != nil {
		ft, fi = floor.PublishTime, floor.ContentID
	}
	for sh, ids := range s.groupByShard(users) {
		if _, err := insertChunks(ctx, sh.DB, seedActivityHead, 9, seedActivityTail, len(ids), func(i int) []any {
			return headerRow(ids[i], lastReadAt, activeSince, ft, fi)
		}); err != nil {
			return wrap("import activity", err)
		}
	}
	return nil
}

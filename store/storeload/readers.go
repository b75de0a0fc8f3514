// Package storeload loads follow graphs, posts, inboxes and reader state
// straight into the store's tables, for tests and benchmarks that need more
// of them than the service's own writes would build in reasonable time. It
// writes what those writes leave behind, without events, backfills or
// fan-out.
package storeload

import (
	"context"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/sqlconn"
)

// byShard splits ids by the shard that owns them, keeping their order.
func byShard(st *store.Store, ids []uint64) map[*store.Shard][]uint64 {
	out := map[*store.Shard][]uint64{}
	for _, id := range ids {
		sh := st.ShardOf(id)
		out[sh] = append(out[sh], id)
	}
	return out
}

const (
	// markPullsHead/Tail upsert users' header rows (at store.Top) marked as
	// pulling.
	markPullsHead   = `INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, pulls)`
	markPullsTail   = ` ON DUPLICATE KEY UPDATE pulls = 1`
	importFollowing = `INSERT IGNORE INTO following (user_id, author_id, followed_at, pull)`
	// importFollowsSQL moves users' followee-list versions (a list for
	// sqlx.In), as the follows an import stands for would have.
	importFollowsSQL = `UPDATE inbox SET follows = COALESCE(follows, 0) + 1 WHERE user_id IN (?) AND publish_time = ? AND content_id = ?`
	importFollowers  = `INSERT IGNORE INTO followers (author_id, user_id, followed_at)`
	importAuthorSQL  = `INSERT INTO authors (author_id, follower_count, mode) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count), mode = GREATEST(mode, VALUES(mode))`
)

// Followers makes users who have no history with the author follow
// it: both edge rows, the follower count and the followee-list versions of
// those of the users with header rows, with nothing to backfill. With
// pullMode the author is put in pull mode at once, the edges get the pull
// bit and the users' headers the pull mark after it, as the store's own
// switches set them. The store's pull hints are its own: its next read of each
// user finds the mark, at one statement more.
func Followers(ctx context.Context, st *store.Store, authorID uint64, users []uint64, followedAt int64, pullMode bool) error {
	pull, mode := 0, store.AuthorPush
	if pullMode {
		pull, mode = store.PullBelowActive, store.AuthorPull
	}
	for sh, ids := range byShard(st, users) {
		if _, err := sqlconn.InsertRows(ctx, sh.DB, importFollowing, 4, "", len(ids), func(i int) []any {
			return []any{ids[i], authorID, followedAt, pull}
		}); err != nil {
			return fmt.Errorf("storeload: followers: %w", err)
		}
		if err := followsMoved(ctx, sh.DB, ids); err != nil {
			return fmt.Errorf("storeload: followers: %w", err)
		}
		if pullMode {
			if _, err := sqlconn.InsertRows(ctx, sh.DB, markPullsHead, 6, markPullsTail, len(ids), func(i int) []any {
				return []any{ids[i], store.Top.PublishTime, store.Top.ContentID, 0, "", 1}
			}); err != nil {
				return fmt.Errorf("storeload: followers: %w", err)
			}
		}
	}
	tx, err := st.ShardOf(authorID).DB.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storeload: followers: %w", err)
	}
	defer tx.Rollback()
	added, err := sqlconn.InsertRows(ctx, tx, importFollowers, 3, "", len(users), func(i int) []any {
		return []any{authorID, users[i], followedAt}
	})
	if err == nil {
		_, err = tx.ExecContext(ctx, importAuthorSQL, authorID, added, mode)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("storeload: followers: %w", err)
	}
	return nil
}

// followsMoved moves the followee-list versions of users of one database
// that have header rows.
func followsMoved(ctx context.Context, db *sqlx.DB, users []uint64) error {
	for part := range slices.Chunk(users, 1000) {
		q, args, err := sqlx.In(importFollowsSQL, part, store.Top.PublishTime, store.Top.ContentID)
		if err == nil {
			_, err = db.ExecContext(ctx, q, args...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

const (
	importActivityHead = `INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, last_read_at, active_since, floor_time, floor_id)`
	importActivityTail = ` ON DUPLICATE KEY UPDATE last_read_at = VALUES(last_read_at), active_since = VALUES(active_since),
 floor_time = COALESCE(VALUES(floor_time), floor_time), floor_id = COALESCE(VALUES(floor_id), floor_id)`
)

// Activity records in the users' header rows that they last read
// their feed at lastReadAt, in an active spell that began at activeSince,
// and, unless floor is nil, that their inboxes are complete only at and
// above floor (as after a trim).
func Activity(ctx context.Context, st *store.Store, users []uint64, lastReadAt, activeSince int64, floor *feed.Key) error {
	var ft, fi any
	if floor != nil {
		ft, fi = floor.PublishTime, floor.ContentID
	}
	for sh, ids := range byShard(st, users) {
		if _, err := sqlconn.InsertRows(ctx, sh.DB, importActivityHead, 9, importActivityTail, len(ids), func(i int) []any {
			return []any{ids[i], store.Top.PublishTime, store.Top.ContentID, 0, "", lastReadAt, activeSince, ft, fi}
		}); err != nil {
			return fmt.Errorf("storeload: activity: %w", err)
		}
	}
	return nil
}

const importMutesHead = `INSERT IGNORE INTO mutes (user_id, author_id, muted_at)`

// Mutes makes each user mute the n authors from first on (first,
// first+1, …), as of mutedAt: mutes rows only, for authors the users do not
// follow.
func Mutes(ctx context.Context, st *store.Store, users []uint64, first uint64, n int, mutedAt int64) error {
	for sh, ids := range byShard(st, users) {
		if _, err := sqlconn.InsertRows(ctx, sh.DB, importMutesHead, 3, "", len(ids)*n, func(i int) []any {
			return []any{ids[i/n], first + uint64(i%n), mutedAt}
		}); err != nil {
			return fmt.Errorf("storeload: mutes: %w", err)
		}
	}
	return nil
}

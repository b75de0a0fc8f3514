package store

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store/sqlconn"
)

// A user's user_counts row holds how many authors the user follows and
// mutes, what the caps are checked against: a capped write reads one row,
// whatever the counts. The writes that change the user's following and
// mutes rows keep it, in their transaction under the user's header row,
// which orders them; a row absent or a count NULL is counted once, from
// the rows, by the next capped write. Writes that change the rows in bulk
// (an import's settling, an account move) set the counts NULL instead.

// userCounts is a user's user_counts row.
type userCounts struct {
	Following int
	Muted     int
}

// insertCountsHead begins every write of user_counts rows.
const insertCountsHead = `INSERT INTO user_counts (user_id, following_count, muted_count)`

// ensureCountsTail creates the users' missing counts rows, not yet
// counted, and leaves them all locked, as ensureHeaders does the header
// rows: a locking read of a missing row would lock the gap where it goes,
// and two transactions inserting into one gap would deadlock.
const ensureCountsTail = ` ON DUPLICATE KEY UPDATE user_id = user_id`

const selectCountsSQL = `SELECT user_id, following_count, muted_count FROM user_counts WHERE user_id IN (?) FOR UPDATE`

// The counts of users not counted yet: locking reads, so the latest
// committed rows on every engine, not an older snapshot's.
const (
	countFollowingSQL = `SELECT user_id, COUNT(*) AS n FROM following WHERE user_id IN (?) GROUP BY user_id FOR UPDATE`
	countMutedSQL     = `SELECT user_id, COUNT(*) AS n FROM mutes WHERE user_id IN (?) AND muted_at IS NOT NULL GROUP BY user_id FOR UPDATE`
)

// saveCountsTail writes the users' counts.
const saveCountsTail = ` ON DUPLICATE KEY UPDATE following_count = VALUES(following_count), muted_count = VALUES(muted_count)`

// Every write of user_counts is an upsert, which locks the row it finds or
// inserts and nothing else: an UPDATE or DELETE of a missing row would lock
// the gap where it goes (InnoDB), and make every first follow or mute of
// another user in that gap wait for the transaction.

// unfollowedSQL and unmutedSQL count a follow or a mute lifted (a count
// not counted yet stays NULL, a missing row is created not counted).
const (
	unfollowedSQL = insertCountsHead + ` VALUES (?, NULL, NULL) ON DUPLICATE KEY UPDATE following_count = following_count - 1`
	unmutedSQL    = insertCountsHead + ` VALUES (?, NULL, NULL) ON DUPLICATE KEY UPDATE muted_count = muted_count - 1`
)

// forgetCountsTail leaves the users' counts not counted: the next capped
// write counts the rows again.
const forgetCountsTail = ` ON DUPLICATE KEY UPDATE following_count = NULL, muted_count = NULL`

// lockCounts returns the counts of users (sorted, distinct, of tx's
// shard, whose header rows tx holds), their rows locked; the users not
// counted yet are counted from their rows, and their counts written, so
// that a write the cap refuses still leaves them counted.
func lockCounts(ctx context.Context, tx *sqlx.Tx, users []uint64) (map[uint64]userCounts, error) {
	if err := upsertUncounted(ctx, tx, users, ensureCountsTail); err != nil {
		return nil, err
	}
	rows, err := selectInChunks[struct {
		UserID    uint64 `db:"user_id"`
		Following *int   `db:"following_count"`
		Muted     *int   `db:"muted_count"`
	}](ctx, tx, selectCountsSQL, users)
	if err != nil {
		return nil, err
	}
	counts := make(map[uint64]userCounts, len(users))
	var uncounted []uint64
	for _, r := range rows {
		if r.Following == nil || r.Muted == nil {
			uncounted = append(uncounted, r.UserID)
			continue
		}
		counts[r.UserID] = userCounts{Following: *r.Following, Muted: *r.Muted}
	}
	if len(uncounted) == 0 {
		return counts, nil
	}
	following, err := countRows(ctx, tx, countFollowingSQL, uncounted)
	if err != nil {
		return nil, err
	}
	muted, err := countRows(ctx, tx, countMutedSQL, uncounted)
	if err != nil {
		return nil, err
	}
	for _, u := range uncounted {
		counts[u] = userCounts{Following: following[u], Muted: muted[u]}
	}
	return counts, saveCounts(ctx, tx, uncounted, counts)
}

// countRows runs q, a count of rows by user_id, for users.
func countRows(ctx context.Context, tx *sqlx.Tx, q string, users []uint64) (map[uint64]int, error) {
	got, err := selectInChunks[struct {
		UserID uint64 `db:"user_id"`
		N      int    `db:"n"`
	}](ctx, tx, q, users)
	if err != nil {
		return nil, err
	}
	n := make(map[uint64]int, len(got))
	for _, g := range got {
		n[g.UserID] = g.N
	}
	return n, nil
}

// saveCounts writes the counts of users, which lockCounts returned and
// the caller changed.
func saveCounts(ctx context.Context, tx *sqlx.Tx, users []uint64, counts map[uint64]userCounts) error {
	_, err := sqlconn.InsertRows(ctx, tx, insertCountsHead, 3, saveCountsTail, len(users), func(i int) []any {
		c := counts[users[i]]
		return []any{users[i], c.Following, c.Muted}
	})
	return err
}

// forgetCounts leaves the counts of users not counted, whose rows tx
// changes in bulk.
func forgetCounts(ctx context.Context, tx *sqlx.Tx, users ...uint64) error {
	return upsertUncounted(ctx, tx, users, forgetCountsTail)
}

// upsertUncounted inserts the users' missing counts rows not counted, and
// applies tail (an ON DUPLICATE KEY UPDATE) to the others.
func upsertUncounted(ctx context.Context, tx *sqlx.Tx, users []uint64, tail string) error {
	_, err := sqlconn.InsertRows(ctx, tx, insertCountsHead, 3, tail, len(users), func(i int) []any {
		return []any{users[i], nil, nil}
	})
	return err
}

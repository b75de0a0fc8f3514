package store

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// InboxRow is one inbox entry, a post as one user's feed holds it: as a
// bound, the key deleteBelow cuts one user's inbox below.
type InboxRow struct {
	UserID uint64
	feed.Post
}

// PullAuthor is a followed author whose outbox reads merge.
type PullAuthor struct {
	AuthorID uint64
	Pull     int // PullBelowActive and/or PullPending
	// From is the oldest key of the author the user may see: the edge's
	// history bound (a follow with a copy limit), zero for none.
	From feed.Key
}

// FeedSnapshot is what one feed page starts from.
type FeedSnapshot struct {
	Inbox       []feed.Post // newest first, older than the page's bound
	Floor       *feed.Key   // the inbox is complete only at and above this key
	Pull        []PullAuthor
	LastReadAt  int64
	ActiveSince int64
	Follows     int64 // the followee-list version (see FollowedAuthors), 0 if none
	Statements  int   // statements the read ran
	Rows        int   // rows they returned: the header, inbox entries and pull authors
}

// ReadFeed returns the user's inbox entries older than before and at or
// above from (up to limit; the zero from bounds nothing), of the kinds
// (sorted, each once) when kinds is not nil, with the state needed to merge
// pull sources into them, in one statement for a user with nothing to
// pull, and otherwise in one statement that reads the pull authors too
// (two if the user was not known to pull: the first one finds the mark).
// Statements reports how many ran.
func (s *Store) ReadFeed(ctx context.Context, userID uint64, before, from feed.Key, limit int, kinds []string) (FeedSnapshot, error) {
	sh := s.ShardOf(userID)
	withPull := sh.pullHints.Has(userID)
	snap, pulls, err := sh.readFeedPage(ctx, withPull, userID, before, from, limit, kinds)
	snap.Statements = 1
	if err == nil && pulls && !withPull {
		first := snap.Rows
		snap, pulls, err = sh.readFeedPage(ctx, true, userID, before, from, limit, kinds)
		snap.Statements, snap.Rows = 2, snap.Rows+first
	}
	if err != nil {
		return FeedSnapshot{}, wrap("read feed", err)
	}
	sh.pullHints.Set(userID, pulls)
	return snap, nil
}

// markReadSQL records a feed read in the user's header row. active_since
// is assigned before last_read_at (MySQL and MariaDB apply SET left to
// right), so the test on the old last_read_at sees the value from before
// this read: a user inactive until now starts a new active spell.
const markReadSQL = `INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, last_read_at, active_since)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE
  active_since = IF(COALESCE(last_read_at, 0) < ?, VALUES(active_since), active_since),
  last_read_at = GREATEST(COALESCE(last_read_at, 0), VALUES(last_read_at))`

// MarkRead records that the user read their feed at now. If the previous
// read was before inactiveBefore, the user's active spell restarts at
// activeSince.
func (s *Store) MarkRead(ctx context.Context, userID uint64, now, activeSince, inactiveBefore int64) error {
	ctx = s.pin(ctx)
	_, err := s.ShardOf(userID).pool(ctx).ExecContext(ctx, markReadSQL, append(headerRow(userID, now, activeSince), inactiveBefore)...)
	return wrap("mark read", err)
}

// trimChunk bounds the users one trim statement covers.
const trimChunk = 64

const floorsSQL = `SELECT user_id, floor_time, floor_id FROM inbox WHERE user_id IN (?) AND ` + headerKeySQL + ` FOR UPDATE`

// headerFloor is a header row's floor, NULL while the inbox is complete.
type headerFloor struct {
	UserID uint64        `db:"user_id"`
	Time   sql.NullInt64 `db:"floor_time"`
	ID     sql.NullInt64 `db:"floor_id"`
}

// lowerThan reports whether the floor is unset or below k, so that raising
// it to k changes it.
func (f headerFloor) lowerThan(k feed.Key) bool {
	return !f.Time.Valid || (feed.Key{PublishTime: f.Time.Int64, ContentID: uint64(f.ID.Int64)}).Less(k)
}

// lockFloors locks the existing header rows of users (sorted) and returns
// their floors. FOR UPDATE takes existing rows exclusive at once, with no
// shared lock to upgrade. For a missing row it locks the gap, and creating
// the row under that lock can deadlock with a concurrent creator (InnoDB
// rolls one back, inTx retries); follows create every follower's header,
// so trims almost never take that path.
func lockFloors(ctx context.Context, tx *sqlx.Tx, users []uint64) ([]headerFloor, error) {
	q, args, err := sqlx.In(floorsSQL, users)
	if err != nil {
		return nil, err
	}
	var floors []headerFloor
	err = sqlx.SelectContext(ctx, tx, &floors, q, args...)
	return floors, err
}

// trimBoundaryPartSQL finds, in one user's inbox, the entries ranked limit
// and limit+1 from the newest: a rank lookup inside one index range (the
// server skips the keys), not paging. Two rows mean the inbox is over its
// limit and the first is the oldest entry to keep.
const trimBoundaryPartSQL = `(SELECT user_id, publish_time, content_id FROM inbox WHERE user_id = ? AND publish_time < 9223372036854775807
ORDER BY publish_time DESC, content_id DESC LIMIT 2 OFFSET ?)`

const trimPartSQL = `(user_id = ? AND ` + keysetOlder + `)`

const setFloorsHead = `INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, floor_time, floor_id)`

const setFloorsTail = ` ON DUPLICATE KEY UPDATE floor_time = VALUES(floor_time), floor_id = VALUES(floor_id)`

// inboxCuts finds where to cut the inboxes of users (of q's shard) that
// hold more than limit entries: for each, its entry ranked limit from the
// newest, the oldest to keep. Users at or under the limit are absent. One
// statement per trimChunk users, each inbox read down to rank limit+1 at
// most.
func inboxCuts(ctx context.Context, q sqlx.QueryerContext, users []uint64, limit int) (map[uint64]feed.Key, error) {
	cuts := map[uint64]feed.Key{}
	for start := 0; start < len(users); start += trimChunk {
		ids := users[start:min(start+trimChunk, len(users))]
		parts := make([]string, len(ids))
		args := make([]any, 0, 2*len(ids))
		for i, u := range ids {
			parts[i] = trimBoundaryPartSQL
			args = append(args, u, limit-1)
		}
		var ranked []struct {
			UserID uint64 `db:"user_id"`
			T      int64  `db:"publish_time"`
			ID     uint64 `db:"content_id"`
		}
		if err := sqlx.SelectContext(ctx, q, &ranked, strings.Join(parts, " UNION ALL "), args...); err != nil {
			return nil, err
		}
		// Two rows of a user: over the limit, and the greater key is the
		// oldest to keep.
		seen := map[uint64]feed.Key{}
		for _, r := range ranked {
			k := feed.Key{PublishTime: r.T, ContentID: r.ID}
			first, ok := seen[r.UserID]
			switch {
			case !ok:
				seen[r.UserID] = k
			case first.Less(k):
				cuts[r.UserID] = k
			default:
				cuts[r.UserID] = first
			}
		}
	}
	return cuts, nil
}

// cutInboxes deletes each user's entries older than its cut and raises its
// floor to the cut, with three statements per trimChunk users whatever
// their number: lock the header rows and read the floors (ascending, so
// concurrent trims queue instead of deadlocking), delete below the cuts,
// write the new floors. The users must live on tx's shard. A cut found
// before the lock is still safe to apply: pushes since only add newer
// entries (the inbox keeps more), and entries purged since were the
// inbox's to lose.
func cutInboxes(ctx context.Context, tx *sqlx.Tx, cuts map[uint64]feed.Key) (int64, error) {
	users := slices.Sorted(maps.Keys(cuts))
	var trimmed int64
	for start := 0; start < len(users); start += trimChunk {
		ids := users[start:min(start+trimChunk, len(users))]
		floors, err := lockFloors(ctx, tx, ids)
		if err != nil {
			return trimmed, err
		}
		if len(floors) < len(ids) {
			// Some header is missing (follows create them, so rarely):
			// create it, locked, and read the floors again.
			if err := ensureHeaders(ctx, tx, ids...); err != nil {
				return trimmed, err
			}
			if floors, err = lockFloors(ctx, tx, ids); err != nil {
				return trimmed, err
			}
		}
		below := make([]InboxRow, 0, len(floors))
		var fargs []any
		for _, f := range floors {
			k := cuts[f.UserID]
			below = append(below, InboxRow{UserID: f.UserID, Post: feed.Post{PublishTime: k.PublishTime, ContentID: k.ContentID}})
			if f.lowerThan(k) {
				fargs = append(fargs, headerRow(f.UserID, k.PublishTime, k.ContentID)...)
			}
		}
		n, err := deleteBelow(ctx, tx, below)
		if err != nil {
			return trimmed, err
		}
		trimmed += n
		if len(fargs) > 0 {
			if _, err := tx.ExecContext(ctx, sqlconn.MultiRowInsert(setFloorsHead, 7, len(fargs)/7, setFloorsTail), fargs...); err != nil {
				return trimmed, err
			}
		}
	}
	return trimmed, nil
}

// deleteBelow deletes, for each bound, the entries of its user older than
// it, in one statement.
func deleteBelow(ctx context.Context, ex sqlx.ExecerContext, bounds []InboxRow) (int64, error) {
	parts := make([]string, len(bounds))
	args := make([]any, 0, 4*len(bounds))
	for i, b := range bounds {
		parts[i] = trimPartSQL
		args = append(args, b.UserID, b.PublishTime, b.PublishTime, b.ContentID)
	}
	r, err := ex.ExecContext(ctx, "DELETE FROM inbox WHERE "+strings.Join(parts, " OR "), args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// TrimInboxes keeps the newest limit entries of each user's inbox and
// returns how many entries it removed. Per shard it first ranks the inboxes
// without locks, so that a check of inboxes under their limit (the usual
// sample while they fill up) costs one statement per 64 users and locks
// nothing; the inboxes over it are cut in one transaction. Entries below
// the new floors are still reachable: reads continue from the outboxes
// there.
func (s *Store) TrimInboxes(ctx context.Context, users []uint64, limit int) (int64, error) {
	ctx = s.pin(ctx)
	var total int64
	for sh, ids := range s.groupByShard(users) {
		cuts, err := inboxCuts(ctx, sh.pool(ctx), slices.Compact(slices.Sorted(slices.Values(ids))), limit)
		if err != nil {
			return total, wrap("trim inboxes", err)
		}
		if len(cuts) == 0 {
			continue
		}
		var n int64
		err = sh.inTx(ctx, func(tx *sqlx.Tx) error {
			n, err = cutInboxes(ctx, tx, cuts)
			return err
		})
		if err != nil {
			return total, wrap("trim inboxes", err)
		}
		total += n
	}
	return total, nil
}

const lockFollowingSQL = `SELECT muted FROM following WHERE user_id = ? AND author_id = ? FOR UPDATE`

const insertInboxHead = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)`

// BackfillResult reports a backfill.
type BackfillResult struct {
	Copied   int64
	Followed bool // false: the user no longer follows the author, nothing copied
}

// Backfill copies the author's newest posts (returned) (at most limit, read
// from the author's shard) into the user's inbox: BackfillMany for one
// follow. The following row is locked (FOR UPDATE; the row is the
// transaction's to settle anyway), so an unfollow or a mute cannot slip
// between the check and the copy; the pending bit is cleared and, for a
// pull author, PullBelowActive set. A muted edge gets nothing copied, and
// an edge with a history bound (a follow with a copy limit) only the posts
// at or above it. If the author had limit posts or more at or above the
// bound, older ones are not copied and the inbox floor rises to the oldest
// copied one. The inbox is then trimmed back to limit.
func (s *Store) Backfill(ctx context.Context, userID, authorID uint64, limit int, pullAuthor bool) (BackfillResult, []feed.Post, error) {
	followed, copied, n, err := s.backfill(ctx, s.ShardOf(userID), []BackfillPair{{UserID: userID, AuthorID: authorID, PullAuthor: pullAuthor}}, NewCopySource(limit, limit))
	return BackfillResult{Copied: n, Followed: followed[[2]uint64{userID, authorID}]}, copied[userID], err
}

// BackfillPair is a follow whose backfill is due, and whether its author
// pulls (the edge then gets PullBelowActive).
type BackfillPair struct {
	UserID, AuthorID uint64
	PullAuthor       bool
}

const (
	lockEdgesSQL = `SELECT user_id, author_id, pull, muted, history_time, history_id FROM ` + followingByPair + ` WHERE `
	// settlePairsSQL settles the pull bits of backfilled edges: the
	// pending bit cleared, PullBelowActive kept, and set for pull authors.
	settlePairsSQL = `UPDATE ` + followingByPair + ` SET pull = (pull & ` + pullBelowActiveSQL + `) | ? WHERE `
	// backfillUsers bounds the users one transaction of BackfillMany takes.
	backfillUsers = 64
)

// BackfillMany is Backfill for many follows of users of sh: the authors'
// newest posts come from src (read there once, when it lacks them), and
// each user's follows are merged and written as one (fillInboxes), with
// their edges settled, in one transaction per backfillUsers users. It
// returns the pairs whose edge was live, and the rows written. Copies of
// posts deleted meanwhile are taken out after the commit, as Backfill's
// caller does.
func (s *Store) BackfillMany(ctx context.Context, sh *Shard, pairs []BackfillPair, src *CopySource) (map[[2]uint64]bool, int64, error) {
	followed, _, n, err := s.backfill(ctx, sh, pairs, src)
	return followed, n, err
}

// backfill is BackfillMany, returning the posts copied by user too.
func (s *Store) backfill(ctx context.Context, sh *Shard, pairs []BackfillPair, src *CopySource) (map[[2]uint64]bool, map[uint64][]feed.Post, int64, error) {
	ctx = s.pin(ctx)
	byUser := map[uint64][]BackfillPair{}
	var authors []uint64
	for _, p := range pairs {
		byUser[p.UserID] = append(byUser[p.UserID], p)
		authors = append(authors, p.AuthorID)
	}
	slices.Sort(authors)
	outboxes, err := src.get(ctx, s, slices.Compact(authors))
	if err != nil {
		return nil, nil, 0, wrap("backfill", err)
	}
	followed := map[[2]uint64]bool{}
	all := map[uint64][]feed.Post{}
	var total int64
	users := slices.Sorted(maps.Keys(byUser))
	for part := range slices.Chunk(users, backfillUsers) {
		var batch []BackfillPair
		for _, u := range part {
			batch = append(batch, byUser[u]...)
		}
		var copied map[uint64][]feed.Post
		var live map[[2]uint64]bool
		var n int64
		err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
			var err error
			live, copied, n, err = backfillUsersTx(ctx, tx, part, batch, outboxes, src.limit)
			return err
		})
		if err != nil {
			return followed, all, total, wrap("backfill", err)
		}
		maps.Copy(followed, live)
		maps.Copy(all, copied)
		total += n
		if err := s.uncopyDeleted(ctx, copied); err != nil {
			return followed, all, total, err
		}
	}
	return followed, all, total, nil
}

// backfillUsersTx does BackfillMany's work for the users (sorted) in tx.
func backfillUsersTx(ctx context.Context, tx *sqlx.Tx, users []uint64, pairs []BackfillPair, outboxes map[uint64]authorOutbox, limit int) (map[[2]uint64]bool, map[uint64][]feed.Post, int64, error) {
	// The copied rows and the floors show before the pending bits clear,
	// which reads take for the inbox being complete.
	if err := openWithInnoDB(ctx, tx); err != nil {
		return nil, nil, 0, err
	}
	if err := ensureHeaders(ctx, tx, users...); err != nil {
		return nil, nil, 0, err
	}
	args := make([]any, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.UserID, p.AuthorID)
	}
	var edges []settleEdge
	if err := sqlx.SelectContext(ctx, tx, &edges, lockEdgesSQL+keyIn([]string{"user_id", "author_id"}, len(pairs))+` FOR UPDATE`, args...); err != nil {
		return nil, nil, 0, err
	}
	live := map[[2]uint64]bool{}
	sources := map[uint64][][]feed.Post{}
	for _, e := range edges {
		live[[2]uint64{e.UserID, e.AuthorID}] = true
		if !e.Muted {
			// Muted: nothing to copy until the mark is lifted, which
			// queues another backfill.
			sources[e.UserID] = append(sources[e.UserID], e.visible(outboxes[e.AuthorID].posts))
		}
	}
	for _, bits := range []int{0, PullBelowActive} {
		var set []any
		for _, p := range pairs {
			if live[[2]uint64{p.UserID, p.AuthorID}] && (bits != 0) == p.PullAuthor {
				set = append(set, p.UserID, p.AuthorID)
			}
		}
		if len(set) == 0 {
			continue
		}
		q := settlePairsSQL + keyIn([]string{"user_id", "author_id"}, len(set)/2)
		if _, err := tx.ExecContext(ctx, q, append([]any{bits}, set...)...); err != nil {
			return nil, nil, 0, err
		}
	}
	if err := recountPulls(ctx, tx, users...); err != nil {
		return nil, nil, 0, err
	}
	copied, n, err := fillInboxes(ctx, tx, users, sources, limit)
	return live, copied, n, err
}

// fillInboxes writes into each user's inbox the newest limit posts of its
// sources (lists newest first, each an author's newest limit or all its
// posts the user may see), raises the user's floor to the oldest of them
// when they fill the limit, and cuts the inboxes that held entries already
// back to the limit, their floors raised to the cut. It returns the posts
// it wrote by user, and how many rows were new. The caller holds the users'
// header rows. One merge per user writes limit rows at most, where a
// backfill per source would write limit per source and trim.
func fillInboxes(ctx context.Context, tx *sqlx.Tx, users []uint64, sources map[uint64][][]feed.Post, limit int) (map[uint64][]feed.Post, int64, error) {
	// Only inboxes that held entries before can rank this copy out.
	var held []uint64
	if err := selectIn(ctx, tx, &held, heldSQL(len(users)), anys(users)...); err != nil {
		return nil, 0, err
	}
	copied := map[uint64][]feed.Post{}
	floors := map[uint64]feed.Key{}
	var rows []InboxRow
	for _, u := range users {
		newest := mergeNewestPosts(sources[u], limit)
		if len(newest) == limit {
			floors[u] = newest[limit-1].Key()
		}
		copied[u] = newest
		for _, p := range newest {
			rows = append(rows, InboxRow{UserID: u, Post: p})
		}
	}
	n, err := sqlconn.InsertRows(ctx, tx, insertInboxHead, 5, "", len(rows), func(i int) []any {
		r := rows[i]
		return []any{r.UserID, r.PublishTime, r.ContentID, r.AuthorID, r.Kind}
	})
	if err != nil {
		return nil, 0, err
	}
	cuts, err := inboxCuts(ctx, tx, held, limit)
	if err != nil {
		return nil, 0, err
	}
	for u, k := range floors {
		if c, ok := cuts[u]; !ok || c.Less(k) {
			cuts[u] = k
		}
	}
	_, err = cutInboxes(ctx, tx, cuts)
	return copied, n, err
}

// heldPartSQL finds whether a user's inbox holds an entry, reading one.
const heldPartSQL = `(SELECT user_id FROM inbox WHERE user_id = ? AND publish_time < 9223372036854775807 LIMIT 1)`

// heldSQL asks which of n users' inboxes hold entries.
func heldSQL(n int) string {
	return strings.Repeat(heldPartSQL+" UNION ALL ", n-1) + heldPartSQL
}

func anys(ids []uint64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// mergeNewestPosts merges lists sorted newest first into the newest limit
// posts of them all.
func mergeNewestPosts(lists [][]feed.Post, limit int) []feed.Post {
	var out []feed.Post
	pos := make([]int, len(lists))
	for len(out) < limit {
		best := -1
		for i, l := range lists {
			if pos[i] < len(l) && (best < 0 || lists[best][pos[best]].Key().Less(l[pos[i]].Key())) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, lists[best][pos[best]])
		pos[best]++
	}
	return out
}

// RemoveFromInbox deletes the given posts of an author from a user's inbox:
// copies a backfill made of posts deleted while it ran.
func (s *Store) RemoveFromInbox(ctx context.Context, userID uint64, posts []feed.Post) error {
	ctx = s.pin(ctx)
	if len(posts) == 0 {
		return nil
	}
	err := s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		for _, p := range posts {
			if _, err := tx.ExecContext(ctx, deleteInboxEntrySQL, userID, p.PublishTime, p.ContentID); err != nil {
				return err
			}
		}
		return nil
	})
	return wrap("remove from inbox", err)
}

// Bounds of the first page's keyset: above every real key.
const (
	maxTime = int64(1<<63 - 1)
	maxID   = uint64(1<<64 - 1)
)

// Top is the keyset bound of a first page: every post is older than it.
var Top = feed.Key{PublishTime: maxTime, ContentID: maxID}

// InboxKeys returns the user's whole inbox, newest first; for tests and
// verification tools, not request paths.
func (s *Store) InboxKeys(ctx context.Context, userID uint64) ([]feed.Post, error) {
	var out []feed.Post
	err := sqlx.SelectContext(ctx, s.ShardOf(userID).pool(ctx), &out, `SELECT content_id, author_id, publish_time, kind FROM inbox
WHERE user_id = ? AND publish_time < 9223372036854775807 ORDER BY publish_time DESC, content_id DESC`, userID)
	if err != nil {
		return nil, fmt.Errorf("store: inbox keys: %w", err)
	}
	return out, nil
}

// inboxTopPartSQL is one user's part of an InboxTops statement: the newest
// entry below the header, one seek at the end of the user's range.
const inboxTopPartSQL = `(SELECT user_id, publish_time, content_id FROM inbox
WHERE user_id = ? AND publish_time < 9223372036854775807 ORDER BY publish_time DESC, content_id DESC LIMIT 1)`

// InboxTops returns the key of the newest inbox entry of each user that
// has one, with one statement per trimChunk users of a shard: what a
// stream watcher compares between polls to notice new entries. It also
// returns the statements run.
func (s *Store) InboxTops(ctx context.Context, users []uint64) (map[uint64]feed.Key, int, error) {
	tops := make(map[uint64]feed.Key, len(users))
	statements := 0
	for sh, ids := range s.groupByShard(users) {
		for start := 0; start < len(ids); start += trimChunk {
			chunk := ids[start:min(start+trimChunk, len(ids))]
			parts := make([]string, len(chunk))
			args := make([]any, len(chunk))
			for i, u := range chunk {
				parts[i], args[i] = inboxTopPartSQL, u
			}
			var rows []struct {
				UserID uint64 `db:"user_id"`
				T      int64  `db:"publish_time"`
				ID     uint64 `db:"content_id"`
			}
			statements++
			if err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, strings.Join(parts, " UNION ALL "), args...); err != nil {
				return nil, statements, wrap("inbox tops", err)
			}
			for _, r := range rows {
				tops[r.UserID] = feed.Key{PublishTime: r.T, ContentID: r.ID}
			}
		}
	}
	return tops, statements, nil
}

// InboxHolds says which of keys the user's inbox holds: those items of a
// page were pushed, the others merged from outboxes when it was read.
func (s *Store) InboxHolds(ctx context.Context, userID uint64, keys []feed.Key) (map[feed.Key]bool, error) {
	out := map[feed.Key]bool{}
	if len(keys) == 0 {
		return out, nil
	}
	q := "SELECT publish_time, content_id FROM inbox WHERE user_id = ? AND " + keyIn([]string{"publish_time", "content_id"}, len(keys))
	args := []any{userID}
	for _, k := range keys {
		args = append(args, k.PublishTime, k.ContentID)
	}
	var found []struct {
		PublishTime int64  `db:"publish_time"`
		ContentID   uint64 `db:"content_id"`
	}
	if err := sqlx.SelectContext(ctx, s.ShardOf(userID).pool(ctx), &found, q, args...); err != nil {
		return nil, wrap("inbox holds", err)
	}
	for _, k := range found {
		out[feed.Key{PublishTime: k.PublishTime, ContentID: k.ContentID}] = true
	}
	return out, nil
}

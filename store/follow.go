package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// Bits of following.pull: how reads treat a followed author.
const (
	// PullBelowActive marks a pull author: its posts older than the reader's
	// active_since were not pushed and are merged from its outbox.
	PullBelowActive = 1
	// PullPending marks a follow whose backfill has not run: the whole
	// outbox is merged until it does.
	PullPending = 2

	pullBelowActiveSQL = "1"
)

const insertFollowingHead = `INSERT INTO following (user_id, author_id, followed_at, pull, muted, history_time, history_id)`

// insertFollowingIgnoreHead adds edges with no copy limit, leaving an edge
// already there as it is.
const insertFollowingIgnoreHead = `INSERT IGNORE INTO following (user_id, author_id, followed_at, pull, muted)`

const deleteFollowingSQL = `DELETE FROM following WHERE user_id = ? AND author_id = ?`

const purgeAuthorSQL = `DELETE FROM inbox WHERE user_id = ? AND author_id = ?`

const deleteKeptSQL = `DELETE FROM kept_history WHERE author_id = ? AND user_id = ?`

// purgeAuthor takes the author's posts out of the user's inbox and the
// author's replays out of the user's replays list, in tx: what an unfollow
// or a mute removes from the user's view. With the posts gone, the pair's
// kept_history row has nothing left to retract.
func purgeAuthor(ctx context.Context, tx *sqlx.Tx, userID, authorID uint64) error {
	for _, q := range []string{purgeAuthorSQL, purgeHostReplaysSQL} {
		if _, err := tx.ExecContext(ctx, q, userID, authorID); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, deleteKeptSQL, authorID, userID)
	return err
}

// queueFollowEventSQL keeps one pending event per pair: a repeat bumps the
// version, so pending operations collapse to the last one.
const queueFollowEventSQL = `INSERT INTO follow_events (user_id, author_id, created_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE version = version + 1`

// queueFollowEventsHead/Tail are queueFollowEventSQL for many pairs, each
// new event claimed as it is queued (EventLease; a zero token and end leave
// it unclaimed). A pair's pending event keeps its claim and has its version
// bumped.
const (
	queueFollowEventsHead = `INSERT INTO follow_events (user_id, author_id, created_at, claim_token, claimed_until, attempts)`
	queueFollowEventsTail = ` ON DUPLICATE KEY UPDATE version = version + 1`
)

// newEventVersion is the version of a follow event as queued (the column's
// default).
const newEventVersion = 1

// EventLease claims the follow events FollowMany queues as it queues them,
// for a caller that applies them itself: a claim as ClaimFollowEvents takes,
// under Token until Until, so no other worker takes them before then and
// any worker may after (the caller stopped or crashed). The zero lease
// queues them unclaimed.
type EventLease struct {
	Token uint64
	Until int64
}

// FollowEdge is a follow to make: the pair and, for a follow with a copy
// limit, From, the oldest key of the author's posts the user may see
// (HistoryFrom); nil shows the author's whole history.
type FollowEdge struct {
	UserID, AuthorID uint64
	From             *feed.Key
}

// FollowOutcome is what became of one FollowEdge: Created, or not because
// the user already followed the author (Err nil), or Err: ELIMIT for a
// user at the cap, or the failure of the user's database. Event is the
// created follow's event as leased (FollowMany with an EventLease): the
// caller's to apply and finish, or release. When the pair had an event
// pending already (an unfollow not yet applied), that one keeps its own
// claim and version, and finishing Event deletes nothing.
type FollowOutcome struct {
	Created bool
	Err     error
	Event   *FollowEvent
}

// HistoryFrom returns the From of a follow of the author that brings its
// newest n posts published so far: the key just above its (n+1)-th newest
// live post, or nil when it has n or fewer (the follow then shows them
// all, as one without a limit). It reads the author's database; the follow's
// view of "before" is this read, so a post published after it counts as
// published after the follow.
func (s *Store) HistoryFrom(ctx context.Context, authorID uint64, n int) (*feed.Key, error) {
	from, failed, err := s.HistoriesFrom(ctx, []uint64{authorID}, n)
	return from[authorID], cmp.Or(err, failed[authorID])
}

// HistoriesFrom is HistoryFrom for many authors and one n, read with one
// statement per database and pullChunk authors (PullPosts). An author whose
// database failed is in failed, with its error, and not in from.
func (s *Store) HistoriesFrom(ctx context.Context, authors []uint64, n int) (from map[uint64]*feed.Key, failed map[uint64]error, err error) {
	srcs := make([]PullSource, len(authors))
	for i, a := range authors {
		srcs[i] = PullSource{AuthorID: a, Before: Top}
	}
	p, err := s.PullPosts(ctx, srcs, n+1, 0)
	if err != nil {
		return nil, nil, wrap("history bounds", err)
	}
	failed = make(map[uint64]error, len(p.Missing))
	for _, a := range p.Missing {
		failed[a] = wrap("history bounds", p.Err)
	}
	byAuthor := map[uint64][]feed.Post{}
	for _, post := range p.Posts {
		byAuthor[post.AuthorID] = append(byAuthor[post.AuthorID], post)
	}
	from = make(map[uint64]*feed.Key, len(authors))
	for _, a := range authors {
		posts := byAuthor[a]
		if _, gone := failed[a]; gone || len(posts) <= n {
			continue
		}
		slices.SortFunc(posts, feed.NewestFirst)
		k := posts[n].Key()
		if k.ContentID == maxID {
			k = feed.Key{PublishTime: k.PublishTime + 1}
		} else {
			k.ContentID++
		}
		from[a] = &k
	}
	return from, failed, nil
}

// Follow adds the edge on the user's shard, marked pending backfill (reads
// merge the author's outbox until the backfill lands), and queues the event
// that updates the author's followers and runs the backfill. Following an
// author already followed does nothing and reports created=false. The
// follow shows the author's whole history; FollowMany takes a bound.
//
// Returns ELIMIT when the user already follows maxFollowing authors.
func (s *Store) Follow(ctx context.Context, userID, authorID uint64, maxFollowing int, now int64) (created bool, err error) {
	out := s.FollowMany(ctx, []FollowEdge{{UserID: userID, AuthorID: authorID}}, maxFollowing, now, EventLease{})
	return out[0].Created, out[0].Err
}

// followChunk bounds the pairs of one statement of FollowMany.
const followChunk = 500

// FollowMany makes the follows, each as Follow does, with one transaction
// per user database holding a share of them: it locks the share's header
// rows, reads which edges exist, the users' counts (their user_counts
// rows, locked) and the pairs' mutes, and writes the new edges, the
// counts, the headers' marks and the follow events with multi-row
// statements. Outcomes are in the order of edges; a pair given
// twice is created once. A user past maxFollowing fails its own extra
// pairs (ELIMIT) and the others go through; a database that fails fails
// its share. The events are queued under lease.
func (s *Store) FollowMany(ctx context.Context, edges []FollowEdge, maxFollowing int, now int64, lease EventLease) []FollowOutcome {
	ctx = s.pin(ctx)
	out := make([]FollowOutcome, len(edges))
	byShard := map[*Shard][]int{}
	for i, e := range edges {
		sh := s.ShardOf(e.UserID)
		byShard[sh] = append(byShard[sh], i)
	}
	for sh, idx := range byShard {
		err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
			for _, i := range idx {
				out[i] = FollowOutcome{}
			}
			return followShare(ctx, tx, edges, idx, out, maxFollowing, now, lease)
		})
		var created []uint64
		for _, i := range idx {
			if err != nil {
				out[i] = FollowOutcome{Err: wrap("follow", err)}
			} else if out[i].Created {
				created = append(created, edges[i].UserID)
			}
		}
		for _, u := range created {
			sh.pullHints.Set(u, true) // the backfill is pending
		}
	}
	return out
}

type userAuthor struct {
	UserID   uint64 `db:"user_id"`
	AuthorID uint64 `db:"author_id"`
}

// followShare is FollowMany's transaction for the edges idx of one
// database, writing their outcomes: created or exists, or ELIMIT.
func followShare(ctx context.Context, tx *sqlx.Tx, edges []FollowEdge, idx []int, out []FollowOutcome, maxFollowing int, now int64, lease EventLease) error {
	pairs := make([]userAuthor, 0, len(idx))
	users := make([]uint64, 0, len(idx))
	for _, i := range idx {
		pairs = append(pairs, userAuthor{edges[i].UserID, edges[i].AuthorID})
		users = append(users, edges[i].UserID)
	}
	slices.Sort(users)
	users = slices.Compact(users)
	// Lock the users' header rows, in id order: concurrent follows of a
	// user queue here, so the cap holds.
	if err := ensureHeaders(ctx, tx, users...); err != nil {
		return err
	}
	exists, err := pairsIn(ctx, tx, existingEdgesSQL, "", pairs)
	if err != nil {
		return err
	}
	// A mute or hide of the author holds for the new edge (mutes take the
	// header rows this transaction holds). A locking read: the latest
	// committed rows on every engine, whatever snapshot the transaction
	// holds (MyRocks takes it at the first statement, before the header
	// locks were granted).
	muted, err := pairsIn(ctx, tx, pairsMutedSQL, " FOR UPDATE", pairs)
	if err != nil {
		return err
	}
	kept, err := pairsIn(ctx, tx, pairsKeptSQL, "", pairs)
	if err != nil {
		return err
	}
	counts, err := lockCounts(ctx, tx, users)
	if err != nil {
		return err
	}
	var rows, events [][]any
	var changed []uint64
	for _, i := range idx {
		e := edges[i]
		p := userAuthor{e.UserID, e.AuthorID}
		if exists[p] {
			continue
		}
		c := counts[e.UserID]
		if c.Following >= maxFollowing {
			out[i].Err = feed.Errorf(feed.ELIMIT, "user %d already follows %d authors, the maximum", e.UserID, c.Following)
			continue
		}
		exists[p] = true
		c.Following++
		counts[e.UserID] = c
		out[i].Created = true
		if lease.Token != 0 {
			out[i].Event = &FollowEvent{UserID: e.UserID, AuthorID: e.AuthorID, Version: newEventVersion, Token: lease.Token}
		}
		var ht, hi any
		if e.From != nil {
			ht, hi = e.From.PublishTime, e.From.ContentID
			if kept[p] {
				// Posts an earlier unfollow kept that lie below the
				// bound leave: the follow shows what its limit says.
				if _, err := tx.ExecContext(ctx, purgeBelowSQL, e.UserID, e.AuthorID, e.From.PublishTime, e.From.PublishTime, e.From.ContentID); err != nil {
					return err
				}
			}
		}
		m := 0
		if muted[p] {
			m = 1
		}
		rows = append(rows, []any{e.UserID, e.AuthorID, now, PullPending, m, ht, hi})
		events = append(events, []any{e.UserID, e.AuthorID, now, lease.Token, lease.Until, min(lease.Token, 1)})
		changed = append(changed, e.UserID)
	}
	if len(changed) == 0 {
		return nil
	}
	if _, err := sqlconn.InsertRows(ctx, tx, insertFollowingHead, 7, "", len(rows), func(i int) []any { return rows[i] }); err != nil {
		return err
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	if err := saveCounts(ctx, tx, changed, counts); err != nil {
		return err
	}
	for start := 0; start < len(changed); start += followChunk {
		q, args, err := sqlx.In(markFollowedSQL, changed[start:min(start+followChunk, len(changed))])
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	_, err = sqlconn.InsertRows(ctx, tx, queueFollowEventsHead, 6, queueFollowEventsTail, len(events), func(i int) []any { return events[i] })
	return err
}

// The pair lookups of a share of follows, each the head of a statement
// whose WHERE is the pairs' keyIn, then its tail.
const (
	existingEdgesSQL = `SELECT user_id, author_id FROM ` + followingByPair + ` WHERE `
	pairsMutedSQL    = `SELECT user_id, author_id FROM mutes WHERE `
	pairsKeptSQL     = `SELECT user_id, author_id FROM kept_history WHERE `
)

// pairsIn returns which of pairs the lookup q finds, followChunk pairs a
// statement, each pair looked up by equality on its primary key.
func pairsIn(ctx context.Context, tx *sqlx.Tx, head, tail string, pairs []userAuthor) (map[userAuthor]bool, error) {
	found := make(map[userAuthor]bool, len(pairs))
	for start := 0; start < len(pairs); start += followChunk {
		chunk := pairs[start:min(start+followChunk, len(pairs))]
		args := make([]any, 0, 2*len(chunk))
		for _, p := range chunk {
			args = append(args, p.UserID, p.AuthorID)
		}
		var got []userAuthor
		if err := tx.SelectContext(ctx, &got, head+keyIn([]string{"user_id", "author_id"}, len(chunk))+tail, args...); err != nil {
			return nil, err
		}
		for _, p := range got {
			found[p] = true
		}
	}
	return found, nil
}

// selectInChunks runs q, whose one IN (?) takes ids, once per followChunk ids,
// and returns the rows of all the runs.
func selectInChunks[T any](ctx context.Context, tx *sqlx.Tx, q string, ids []uint64) ([]T, error) {
	var out []T
	for start := 0; start < len(ids); start += followChunk {
		stmt, args, err := sqlx.In(q, ids[start:min(start+followChunk, len(ids))])
		if err != nil {
			return nil, err
		}
		var got []T
		if err := tx.SelectContext(ctx, &got, stmt, args...); err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// markFollowedSQL marks the headers of users given new edges: something to
// pull (the pending backfills) and a new followee-list version.
const markFollowedSQL = `UPDATE inbox SET pulls = 1, follows = COALESCE(follows, 0) + 1
WHERE user_id IN (?) AND ` + headerKeySQL

// purgeBelowSQL deletes the author's entries of the user's inbox older
// than a key.
const purgeBelowSQL = `DELETE FROM inbox WHERE user_id = ? AND author_id = ? AND ` + keysetOlder

const keepHistorySQL = `INSERT INTO kept_history (author_id, user_id, kept_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE kept_at = VALUES(kept_at)`

// Unfollow removes the edge and purges the author's posts from the user's
// inbox in one transaction on the user's shard, so no later read shows them,
// and queues the event that updates the author's followers. Unfollowing an
// author not followed does nothing, except take out the posts an earlier
// unfollow kept.
//
// With keep (UnfollowKeepingHistory), the author's posts in the inbox stay (no new ones arrive) and
// the pair is recorded in kept_history, which retractions join so that a
// deleted post still leaves the inbox; posts a read merged from the
// author's outbox (a pending backfill, a pull author's older posts, deep
// scroll) were never in the inbox and no longer show.
func (s *Store) Unfollow(ctx context.Context, userID, authorID uint64, now int64) error {
	return s.unfollow(ctx, userID, authorID, false, now)
}

// UnfollowKeepingHistory is Unfollow with keep.
func (s *Store) UnfollowKeepingHistory(ctx context.Context, userID, authorID uint64, now int64) error {
	return s.unfollow(ctx, userID, authorID, true, now)
}

func (s *Store) unfollow(ctx context.Context, userID, authorID uint64, keep bool, now int64) error {
	ctx = s.pin(ctx)
	err := s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		// The header row is the user's lock (pull bits change here).
		var locked []uint64
		if err := tx.SelectContext(ctx, &locked, lockHeaderSQL, userID); err != nil {
			return err
		}
		deleted, err := affected(tx.ExecContext(ctx, deleteFollowingSQL, userID, authorID))
		if err != nil || (!deleted && keep) {
			return err
		}
		if !deleted {
			// Not following, but an earlier unfollow may have kept the
			// author's posts: a plain unfollow takes them out too.
			if had, err := affected(tx.ExecContext(ctx, deleteKeptSQL, authorID, userID)); err != nil || !had {
				return err
			}
			return purgeAuthor(ctx, tx, userID, authorID)
		}
		if _, err := tx.ExecContext(ctx, unfollowedSQL, userID); err != nil {
			return err
		}
		if keep {
			if _, err := tx.ExecContext(ctx, keepHistorySQL, authorID, userID, now); err != nil {
				return err
			}
		} else if err := purgeAuthor(ctx, tx, userID, authorID); err != nil {
			return err
		}
		if err := recountPulls(ctx, tx, userID); err != nil {
			return err
		}
		if err := followsChanged(ctx, tx, userID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, queueFollowEventSQL, userID, authorID, now)
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

// followedAuthorsSQL reads idx_following_reads alone, which holds the
// history bounds.
const followedAuthorsSQL = `SELECT author_id, history_time, history_id FROM following FORCE INDEX (idx_following_reads)
WHERE user_id = ? AND muted = 0`

// FollowedAuthors returns the authors the user reads, followed and not
// muted or hidden: the sources of a deep scroll below the inbox's retained
// window, and from, the history bounds of those followed with a copy limit
// (PullAuthor.From; nil when none is). version is the header's followee-list version from a
// snapshot read before (FeedSnapshot.Follows; 0: none): a list this
// process read under it comes from memory, and read reports whether a
// statement ran. The list and map are shared: the caller must not change them.
func (s *Store) FollowedAuthors(ctx context.Context, userID uint64, version int64) (authors []uint64, from map[uint64]feed.Key, read bool, err error) {
	if version != 0 {
		if e, ok := s.followees.get(userID, version); ok {
			return e.authors, e.from, false, nil
		}
	}
	e, err := s.readFollowedAuthors(ctx, userID)
	if err != nil {
		return nil, nil, true, err
	}
	if version != 0 {
		s.followees.put(userID, version, e)
	}
	return e.authors, e.from, true, nil
}

// readFollowedAuthors reads the list. Thousands of rows are scanned by
// hand: sqlx's reflection per row cost more than the read.
func (s *Store) readFollowedAuthors(ctx context.Context, userID uint64) (followees, error) {
	var e followees
	rows, err := s.ShardOf(userID).pool(ctx).QueryContext(ctx, followedAuthorsSQL, userID)
	if err != nil {
		return e, wrap("followed authors", err)
	}
	defer rows.Close()
	e.authors = make([]uint64, 0, 64)
	for rows.Next() {
		var a uint64
		var t sql.NullInt64
		var id sql.Null[uint64]
		if err := rows.Scan(&a, &t, &id); err != nil {
			return e, wrap("followed authors", err)
		}
		e.authors = append(e.authors, a)
		if t.Valid {
			if e.from == nil {
				e.from = map[uint64]feed.Key{}
			}
			e.from[a] = feed.Key{PublishTime: t.Int64, ContentID: id.V}
		}
	}
	return e, wrap("followed authors", rows.Err())
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

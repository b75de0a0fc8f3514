package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// Each user's range of the inbox ends in a header row at the key (maxTime,
// maxID), above every post (publish times are bounded by now plus the clock
// skew), holding the user's per-user state: when the user last read the
// feed and since when the current active spell runs, the inbox floor, and
// whether some followed author must be pulled at read time. The state lives
// in the inbox rather than in a table of its own so that a feed page is one
// backward range scan of the inbox that meets the header first: one index,
// one block to plan (docs/DESIGN.md). Its state columns are NULL in post
// rows, which costs a post row one null-bitmap byte.
//
// The header row is also the user's lock: writes that change the floor or
// the pull bits of the user's following rows lock it first, so they queue
// instead of deadlocking.

// headerKeySQL selects a header row: maxTime and maxID as literals (a test
// checks them).
const headerKeySQL = `publish_time = 9223372036854775807 AND content_id = 18446744073709551615`

// headerRow is the key and filler of a header row, in insertInboxHead's
// column order plus the state columns a statement names after them.
func headerRow(userID uint64, state ...any) []any {
	return append([]any{userID, maxTime, maxID, 0, ""}, state...)
}

// ensureHeadersHead/Tail create the users' missing header rows and, either
// way, leave them all locked exclusively. INSERT IGNORE would leave a shared
// lock on an existing row, and two transactions upgrading theirs with a
// FOR UPDATE deadlock, as concurrent follows of one user would.
const (
	ensureHeadersHead = `INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind)`
	ensureHeadersTail = ` ON DUPLICATE KEY UPDATE user_id = user_id`
)

// ensureHeaders locks the header rows of users of tx's shard, creating the
// missing ones, in the order given (callers that lock several sort them, so
// that concurrent lockers queue instead of deadlocking).
func ensureHeaders(ctx context.Context, tx sqlx.ExecerContext, users ...uint64) error {
	_, err := sqlconn.InsertRows(ctx, tx, ensureHeadersHead, 5, ensureHeadersTail, len(users), func(i int) []any {
		return headerRow(users[i])
	})
	return err
}

// lockHeaderSQL locks the user's header row, or the gap where it would go.
const lockHeaderSQL = `SELECT user_id FROM inbox WHERE user_id = ? AND ` + headerKeySQL + ` FOR UPDATE`

// setPullsSQL sets the users' pull marks: 1 when some followed author must
// be pulled.
const setPullsSQL = `UPDATE inbox SET pulls = ? WHERE user_id IN (?) AND ` + headerKeySQL

// pullRowSQL finds a following row of the user with a pull bit. It is a
// locking read so that it waits for a transaction still settling one: a
// backfill lets go of the header before its following rows show
// (openWithInnoDB), and a consistent read would count a pending bit it
// has cleared, leaving a mark with nothing to pull. It looks up each pull
// value by equality: InnoDB locks the first entry past a range before it
// sees the range has ended, here the next user's, so a range read would
// wait for that user's writers and deadlock with them; at the end of an
// equality lookup it stops without a lock. The values are every nonzero
// combination of the pull bits (PullBelowActive, PullPending).
const pullRowSQL = `SELECT author_id FROM following WHERE user_id = ? AND pull IN (1, 2, 3) LIMIT 1 FOR UPDATE`

// recountPulls recomputes the users' pull marks from the following rows,
// after a change in tx that may have cleared the last pull bit: a lookup
// each, then the marks set with a statement per value. The caller holds
// the header rows.
func recountPulls(ctx context.Context, tx *sqlx.Tx, users ...uint64) error {
	var marks [2][]uint64
	for _, u := range users {
		var found []uint64
		if err := tx.SelectContext(ctx, &found, pullRowSQL, u); err != nil {
			return err
		}
		mark := min(len(found), 1)
		marks[mark] = append(marks[mark], u)
	}
	for mark, us := range marks {
		if len(us) > 0 {
			if err := execIn(ctx, tx, setPullsSQL, append([]any{mark}, us)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// markPullsHead/Tail upsert header rows marked as pulling, for users whose
// following rows got a pull bit outside a header-locked transaction. The
// bits commit first: a recount that ran before them is overwritten by the
// mark, and one that runs after sees them. A crash between leaves bits with
// no mark until the switch job replays the batch, while the author still
// pushes to every follower.
const (
	markPullsHead = `INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, pulls)`
	markPullsTail = ` ON DUPLICATE KEY UPDATE pulls = 1`
)

// markPulls marks the headers of users of sh as pulling, and hints this
// process's reads that they pull. The users' pull bits are committed.
func (sh *Shard) markPulls(ctx context.Context, users []uint64) error {
	// Its own transaction, for inTx's retries: on MyRocks, an upsert of
	// many headers meets a concurrent locker's snapshot conflict.
	err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := sqlconn.InsertRows(ctx, tx, markPullsHead, 6, markPullsTail, len(users), func(i int) []any {
			return headerRow(users[i], 1)
		})
		return err
	})
	if err == nil {
		for _, u := range users {
			sh.pullHints.Set(u, true)
		}
	}
	return err
}

// feedPageSQL reads, in one statement and so one consistent snapshot, the
// user's header row and the inbox page below the bound and at or above the
// lower bound: a backward range scan of the primary key that starts at the
// header and stops at the lower bound, so a count above a read marker reads
// only the rows it counts. src is 0 for both (the header is the row at the
// header key).
const feedPageSQL = feedPageHead + keysetOlder + feedPageTail

// feedPageKindsSQL is feedPageSQL for a page of some kinds only (a list
// for sqlx.In after the bound): the same backward scan, the server
// dropping the entries of other kinds, so a page of a rare kind reads down
// the inbox until it holds a page or meets the lower bound, and returns
// only what it keeps.
const feedPageKindsSQL = feedPageHead + `(` + keysetOlder + ` AND kind IN (?))` + feedPageTail

const (
	feedPageUser = `SELECT ` + inboxInOrder + ` 0 AS src, publish_time AS t, content_id AS id, author_id AS a, kind AS k,
 floor_time AS ft, floor_id AS fi, last_read_at AS lr, active_since AS act, pulls AS p, follows AS fv
 FROM inbox FORCE INDEX (PRIMARY)
 WHERE user_id = ?`
	feedPageHead  = feedPageUser + ` AND (`
	feedPageTail  = ` OR ` + headerKeySQL + `) AND ` + keysetFrom + feedPageOrder
	feedPageOrder = `
 ORDER BY publish_time DESC, content_id DESC LIMIT ?`
)

// feedFirstPageSQL is feedPageSQL for a first page (the bound Top) with no
// lower bound above oldestKey: the same rows, since the header is the
// newest key of the user's range, read by the same backward scan from the
// header down to the LIMIT. Without the keyset bounds the server plans one
// equality instead of their ranges, and most pages read are first pages.
const feedFirstPageSQL = feedPageUser + feedPageOrder

// feedNextPageSQL is feedPageSQL for a page below a cursor with no lower
// bound above oldestKey: the same rows, with one range fewer to plan.
const feedNextPageSQL = feedPageHead + keysetOlder + ` OR ` + headerKeySQL + `)` + feedPageOrder

// feedSincePageSQL is feedPageSQL for a first page with a lower bound (a
// refresh, an unread count): every key of the user's range is at or below
// Top, so the bound alone chooses the same rows.
const feedSincePageSQL = feedPageUser + ` AND ` + keysetFrom + feedPageOrder

// oldestKey is the oldest key a post can have (publish times start at 0,
// content ids at 1): a lower bound at or below it bounds nothing.
var oldestKey = feed.Key{ContentID: 1}

// pageStmtOf returns the page statement (pageAll, …) that reads the inbox
// below before and at or above from, of the kinds when not nil, without
// the pull authors: a statement per kind of page, so that each plans only
// the bounds it has. A list of kinds reads with pageKind's form, its IN
// list expanded. The service reads a page with no since from just above
// the zero key, oldestKey.
func pageStmtOf(before, from feed.Key, kinds []string) int {
	bounded := oldestKey.Less(from)
	switch {
	case kinds != nil:
		return pageKind
	case before == Top && bounded:
		return pageSince
	case before == Top:
		return pageFirst
	case bounded:
		return pageAll
	default:
		return pageNext
	}
}

// feedFirstPagePullSQL, feedNextPagePullSQL and feedSincePagePullSQL are
// the statements above after the pull authors, as feedPagePullSQL is
// feedPageSQL.
const (
	feedFirstPagePullSQL = pullAuthorsPart + `(` + feedFirstPageSQL + `)`
	feedNextPagePullSQL  = pullAuthorsPart + `(` + feedNextPageSQL + `)`
	feedSincePagePullSQL = pullAuthorsPart + `(` + feedSincePageSQL + `)`
)

// feedPagePullSQL is feedPageSQL after, in the same statement, the
// followed authors that reads must pull (src 1: t = pull bits, a = author,
// ft and fi = the edge's history bound, NULL for none), for a user whose
// header says there are some. The statement reads
// following before the inbox: with the inbox in RocksDB each engine reads
// as of its own first read in the statement, and a backfill's inbox rows
// show before its pending bit clears (openWithInnoDB), so a page that finds
// the bit cleared finds the rows. Its empty kind is an ascii literal like
// the column it stands for: TiDB refuses to merge ascii with the
// connection's utf8mb4 in a UNION (error 1271), where MySQL and MariaDB
// coerce.
const feedPagePullSQL = pullAuthorsPart + `(` + feedPageSQL + `)`

// feedPagePullKindsSQL is feedPagePullSQL for a page of some kinds.
const feedPagePullKindsSQL = pullAuthorsPart + `(` + feedPageKindsSQL + `)`

const pullAuthorsPart = `(SELECT 1 AS src, pull AS t, 0 AS id, author_id AS a, _ascii'' AS k,
 history_time AS ft, history_id AS fi, NULL AS lr, NULL AS act, NULL AS p, NULL AS fv
 FROM following FORCE INDEX (idx_following_reads) WHERE user_id = ? AND pull > 0 AND muted = 0)
UNION ALL `

// readFeedPage runs one of the page statements and parses its rows: with
// or without the pull authors, and of the kinds (sorted) when set; pulls
// reports the header's mark.
func (sh *Shard) readFeedPage(ctx context.Context, withPull bool, userID uint64, before, from feed.Key, limit int, kinds []string) (snap FeedSnapshot, pulls bool, err error) {
	var args []any
	stmt := pageStmtOf(before, from, kinds)
	switch stmt {
	case pageFirst:
		args = []any{userID, limit + 1}
	case pageNext:
		args = []any{userID, before.PublishTime, before.PublishTime, before.ContentID, limit + 1}
	case pageSince:
		args = []any{userID, from.PublishTime, from.PublishTime, from.ContentID, limit + 1}
	default:
		args = []any{userID, before.PublishTime, before.PublishTime, before.ContentID}
		switch len(kinds) {
		case 0:
		case 1:
			args = append(args, kinds[0])
		default:
			args = append(args, kinds)
		}
		args = append(args, from.PublishTime, from.PublishTime, from.ContentID, limit+1)
	}
	if withPull {
		// Each pull statement follows its plain one.
		args, stmt = append([]any{userID}, args...), stmt+1
	}
	var rows *sql.Rows
	if len(kinds) <= 1 {
		st, err := sh.hotStmt(ctx, stmt)
		if err != nil {
			return snap, false, err
		}
		rows, err = st.QueryContext(ctx, args...)
		if err != nil {
			return snap, false, err
		}
	} else {
		q := feedPageKindsSQL
		if withPull {
			q = feedPagePullKindsSQL
		}
		q, args, err := sqlx.In(q, args...)
		if err != nil {
			return snap, false, err
		}
		if rows, err = sh.pool(ctx).QueryContext(ctx, q, args...); err != nil {
			return snap, false, err
		}
	}
	defer rows.Close()
	// One set of scan targets for every row: they escape to the heap
	// through Scan, and a set per row would cost a page hundreds of allocations.
	var (
		src, t             sqlconn.Int[int64]
		id, a              sqlconn.Int[uint64]
		k                  sql.RawBytes
		ft, lr, act, p, fv sql.Null[sqlconn.Int[int64]]
		fi                 sql.Null[sqlconn.Int[uint64]]
	)
	dest := []any{&src, &t, &id, &a, &k, &ft, &fi, &lr, &act, &p, &fv}
	snap.Inbox = make([]feed.Post, 0, limit)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return snap, false, err
		}
		snap.Rows++
		switch {
		case src.V == 1:
			pa := PullAuthor{AuthorID: a.V, Pull: int(t.V)}
			if ft.Valid {
				pa.From = feed.Key{PublishTime: ft.V.V, ContentID: fi.V.V}
			}
			snap.Pull = append(snap.Pull, pa)
		case t.V == maxTime && id.V == maxID:
			if ft.Valid {
				snap.Floor = &feed.Key{PublishTime: ft.V.V, ContentID: fi.V.V}
			}
			snap.LastReadAt, snap.ActiveSince, snap.Follows, pulls = lr.V.V, act.V.V, fv.V.V, p.V.V > 0
		case len(snap.Inbox) < limit:
			snap.Inbox = append(snap.Inbox, feed.Post{ContentID: id.V, AuthorID: a.V, PublishTime: t.V, Kind: kindOf(k)})
		}
	}
	return snap, pulls, rows.Err()
}

// kindOf returns a scanned kind as a string, sharing the common one
// instead of allocating it again for every row.
func kindOf(b sql.RawBytes) string {
	if string(b) == feed.KindPost {
		return feed.KindPost
	}
	return string(b)
}

// The statements a shard prepares, its hot reads: the page statements, by
// the page they read (pageStmtOf): between two bounds, of one kind (its IN
// list of one takes a kind where sqlx.In would take a list), first pages
// with and without a lower bound and pages below a cursor without one,
// each with the pull authors after it; and the marker read that precedes
// an unread count.
const (
	pageAll = iota
	pagePull
	pageKind
	pagePullKind
	pageFirst
	pageFirstPull
	pageNext
	pageNextPull
	pageSince
	pageSincePull
	markerRead
	numHotStmts
)

var hotStmtSQL = [numHotStmts]string{
	pageAll:       feedPageSQL,
	pagePull:      feedPagePullSQL,
	pageKind:      feedPageKindsSQL,
	pagePullKind:  feedPagePullKindsSQL,
	pageFirst:     feedFirstPageSQL,
	pageFirstPull: feedFirstPagePullSQL,
	pageNext:      feedNextPageSQL,
	pageNextPull:  feedNextPagePullSQL,
	pageSince:     feedSincePageSQL,
	pageSincePull: feedSincePagePullSQL,
	markerRead:    getMarkerSQL,
}

// hotStmt returns the shard's prepared statement i (pageAll, …),
// preparing it on first use; database/sql then prepares it once per
// pooled connection.
func (sh *Shard) hotStmt(ctx context.Context, i int) (*sqlx.Stmt, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := classOf(ctx)
	if sh.hot[c][i] == nil {
		st, err := sh.pools[c].PreparexContext(ctx, hotStmtSQL[i])
		if err != nil {
			return nil, err
		}
		sh.hot[c][i] = st
	}
	return sh.hot[c][i], nil
}

const activitySQL = `SELECT last_read_at, active_since FROM inbox WHERE user_id = ? AND ` + headerKeySQL

// Activity returns the user's last feed read and the start of its active
// spell from the inbox header (zeros for a user with none), which decide
// which of a pull author's items fan-out pushed to the user.
func (s *Store) Activity(ctx context.Context, userID uint64) (lastReadAt, activeSince int64, err error) {
	var h struct {
		LastReadAt  sql.NullInt64 `db:"last_read_at"`
		ActiveSince sql.NullInt64 `db:"active_since"`
	}
	err = sqlx.GetContext(ctx, s.ShardOf(userID).pool(ctx), &h, activitySQL, userID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, nil
	}
	return h.LastReadAt.Int64, h.ActiveSince.Int64, wrap("activity", err)
}

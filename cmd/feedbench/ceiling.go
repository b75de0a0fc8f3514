package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/sqlconn"
)

// The ceilings: raw statements of the shapes the service runs, written here
// rather than taken from the store, so that they measure the database alone
// and not the store's code around them.

// keysetOlder matches the keys below (?, ?) in (publish_time, content_id)
// order: the keyset bound of the service's pages and trims.
const keysetOlder = `(publish_time < ? OR (publish_time = ? AND content_id < ?))`

const insertInboxHead = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)`

// insertInboxRows writes rows with multi-row INSERT IGNORE statements of up
// to a thousand rows. It is the fan-out ceiling: the rows a fan-out batch
// writes, without the follow check, the task bookkeeping or trimming.
// Returns the rows inserted.
func insertInboxRows(ctx context.Context, db *sqlx.DB, rows []store.InboxRow) (int64, error) {
	n, err := sqlconn.InsertRows(ctx, db, insertInboxHead, 5, "", len(rows), func(i int) []any {
		r := rows[i]
		return []any{r.UserID, r.PublishTime, r.ContentID, r.AuthorID, r.Kind}
	})
	if err != nil {
		return n, fmt.Errorf("insert inbox rows: %w", err)
	}
	return n, nil
}

// oldestPartSQL is one user's part of the retention ceiling's lookup: the
// user's n oldest inbox entries, the header row aside.
const oldestPartSQL = `(SELECT user_id, publish_time, content_id FROM inbox WHERE user_id = ? AND publish_time < 9223372036854775807
ORDER BY publish_time, content_id LIMIT ?)`

// userCut asks the retention ceiling to delete n of a user's oldest entries.
type userCut struct {
	user uint64
	n    int
}

// cutOldest deletes each user's n oldest entries, or all but the newest of
// a smaller inbox, with two statements whatever the number of users: one
// reads the n+1 oldest entries of each (where its cut falls; a trim must
// find that too), the other is deleteInboxBelow. Returns the entries deleted.
func cutOldest(ctx context.Context, db *sqlx.DB, cuts []userCut) (int64, error) {
	parts := make([]string, len(cuts))
	args := make([]any, 0, 2*len(cuts))
	for i, c := range cuts {
		parts[i] = oldestPartSQL
		args = append(args, c.user, c.n+1)
	}
	var oldest []struct {
		UserID uint64 `db:"user_id"`
		feed.Post
	}
	if err := sqlx.SelectContext(ctx, db, &oldest, strings.Join(parts, " UNION ALL "), args...); err != nil {
		return 0, fmt.Errorf("oldest inbox entries: %w", err)
	}
	// The newest of a user's rows bounds its cut; an inbox of one entry
	// keeps it.
	newest := map[uint64]store.InboxRow{}
	seen := map[uint64]int{}
	for _, r := range oldest {
		seen[r.UserID]++
		if n, ok := newest[r.UserID]; !ok || n.Key().Less(r.Key()) {
			newest[r.UserID] = store.InboxRow{UserID: r.UserID, Post: r.Post}
		}
	}
	var bounds []store.InboxRow
	for u, r := range newest {
		if seen[u] > 1 {
			bounds = append(bounds, r)
		}
	}
	if len(bounds) == 0 {
		return 0, nil
	}
	return deleteInboxBelow(ctx, db, bounds)
}

// deleteInboxBelow deletes, for each bound, the entries of its user older
// than it, in one statement of the shape trims run. After insertInboxRows
// of as many rows it is the retention ceiling: the least a writer that
// keeps inboxes at their size must also do.
func deleteInboxBelow(ctx context.Context, db *sqlx.DB, bounds []store.InboxRow) (int64, error) {
	parts := make([]string, len(bounds))
	args := make([]any, 0, 4*len(bounds))
	for i, b := range bounds {
		parts[i] = `(user_id = ? AND ` + keysetOlder + `)`
		args = append(args, b.UserID, b.PublishTime, b.PublishTime, b.ContentID)
	}
	r, err := db.ExecContext(ctx, "DELETE FROM inbox WHERE "+strings.Join(parts, " OR "), args...)
	if err != nil {
		return 0, fmt.Errorf("delete inbox rows: %w", err)
	}
	return r.RowsAffected()
}

// retractSQL removes a post from the inboxes of its author's followers, in
// the shape of the service's retraction over all of them at once.
const retractSQL = `DELETE i FROM following f FORCE INDEX (PRIMARY) STRAIGHT_JOIN inbox i
 ON i.user_id = f.user_id AND i.publish_time = ? AND i.content_id = ?
WHERE f.author_id = ?`

// retractFromFollowers removes p from its author's followers' inboxes and
// returns how many entries went: a benchmark undoes the rows of a writer
// that does not trim with it.
func retractFromFollowers(ctx context.Context, db *sqlx.DB, p feed.Post) (int64, error) {
	r, err := db.ExecContext(ctx, retractSQL, p.PublishTime, p.ContentID, p.AuthorID)
	if err != nil {
		return 0, fmt.Errorf("retract from followers: %w", err)
	}
	return r.RowsAffected()
}

// inboxPageSQL is the read ceiling: one keyset page of one inbox, a backward
// range scan of the primary key and nothing else (no floor, no pull
// authors, no read state).
const inboxPageSQL = `SELECT content_id, author_id, publish_time, kind FROM inbox
WHERE user_id = ? AND ` + keysetOlder + ` ORDER BY publish_time DESC, content_id DESC LIMIT ?`

// headerProbeSQL is inboxPageSQL widened to one more key above every post,
// store.Top, where the user's header row lives: the shape of the service's
// one-block feed page without its header columns, pull reads or merge,
// measured to price the shape alone (docs/BENCHMARKS.md).
const headerProbeSQL = `SELECT content_id, author_id, publish_time, kind FROM inbox
WHERE user_id = ? AND (` + keysetOlder + ` OR (publish_time = ? AND content_id = ?))
ORDER BY publish_time DESC, content_id DESC LIMIT ?`

// inboxPageStmt is inboxPageSQL (or headerProbeSQL) prepared once;
// database/sql prepares it once on each pooled connection it runs on.
type inboxPageStmt struct {
	stmt        *sql.Stmt
	headerProbe bool
}

// prepareInboxPage prepares the ceiling page statement, or with
// headerProbe its one-block variant.
func prepareInboxPage(ctx context.Context, db *sqlx.DB, headerProbe bool) (*inboxPageStmt, error) {
	q := inboxPageSQL
	if headerProbe {
		q = headerProbeSQL
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("prepare inbox page: %w", err)
	}
	return &inboxPageStmt{stmt: st, headerProbe: headerProbe}, nil
}

// page returns up to limit inbox entries of the user older than before,
// newest first.
func (p *inboxPageStmt) page(ctx context.Context, userID uint64, before feed.Key, limit int) ([]feed.Post, error) {
	args := make([]any, 0, 7)
	args = append(args, userID, before.PublishTime, before.PublishTime, before.ContentID)
	if p.headerProbe {
		args = append(args, store.Top.PublishTime, store.Top.ContentID)
	}
	args = append(args, limit)
	rows, err := p.stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("inbox page: %w", err)
	}
	defer rows.Close()
	var out []feed.Post
	for rows.Next() {
		var q feed.Post
		if err := rows.Scan(&q.ContentID, &q.AuthorID, &q.PublishTime, &q.Kind); err != nil {
			return nil, fmt.Errorf("inbox page: %w", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox page: %w", err)
	}
	return out, nil
}

// close releases the statement on every connection.
func (p *inboxPageStmt) close() error { return p.stmt.Close() }

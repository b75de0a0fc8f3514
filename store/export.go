package store

import (
	"context"
	"database/sql"
	"strings"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// Export reads whole tables of one database for feedd export, a page at a
// time: each page is the next range of an index whose first column is the
// user or author id, after the last row of the page before (never OFFSET),
// so a table of any size streams in bounded memory and each row is read
// once. Rows a database holds for ids it does not own under the layout in
// force (copies a reshard left behind) are read and left out, so each
// record comes from the one database that owns it.
//
// A page is a statement of its own, not a snapshot of the database: rows
// written while an export runs may or may not be in it.

// exportSource is the table a record type is read from.
type exportSource struct {
	table string
	// first reads the first page: ids in [lo, hi]. next reads the page
	// after a row: ids from the row's to hi, keys above the row's
	// (exportAfter).
	first, next string
	scan        func(rows *sql.Rows) (feed.Record, error)
}

// exportSQL builds a source's statements from its SELECT … FROM, a filter
// on the rows (or "") and its key columns, the first the user or author id
// the range is of: a range of that id, then the long keyset form, which
// every server range-scans.
func exportSQL(selectFrom, filter string, key ...string) (first, next string) {
	after := key[len(key)-1] + " > ?"
	for i := len(key) - 2; i >= 0; i-- {
		after = "(" + key[i] + " > ? OR (" + key[i] + " = ? AND " + after + "))"
	}
	if filter != "" {
		filter = " AND " + filter
	}
	head := selectFrom + " WHERE " + key[0] + " BETWEEN ? AND ?"
	tail := filter + " ORDER BY " + strings.Join(key, ", ") + " LIMIT ?"
	return head + tail, head + " AND " + after + tail
}

// exportAfter is the arguments of next for the page after the row r was
// read from, of a range of ids up to hi.
func exportAfter(r feed.Record, hi uint64) []any {
	switch r.Type {
	case feed.RecordPost:
		return []any{r.AuthorID, hi, r.AuthorID, r.AuthorID, r.PublishTime, r.PublishTime, r.ContentID}
	case feed.RecordMarker:
		return []any{r.UserID, hi, r.UserID}
	}
	return []any{r.UserID, hi, r.UserID, r.UserID, r.AuthorID}
}

// exportOwner is the id whose database owns r's row.
func exportOwner(r feed.Record) uint64 {
	if r.Type == feed.RecordPost {
		return r.AuthorID
	}
	return r.UserID
}

var exportSources = map[string]exportSource{
	feed.RecordFollow: newExportSource("following", feed.RecordFollow,
		`SELECT user_id, author_id, followed_at FROM following FORCE INDEX (idx_following_user)`, "",
		"user_id", "author_id"),
	feed.RecordMute: newExportSource("mutes", feed.RecordMute,
		`SELECT user_id, author_id FROM mutes`, "muted_at IS NOT NULL", "user_id", "author_id"),
	feed.RecordHide: newExportSource("mutes", feed.RecordHide,
		`SELECT user_id, author_id FROM mutes`, "hidden_at IS NOT NULL", "user_id", "author_id"),
	feed.RecordMarker: newExportSource("markers", feed.RecordMarker,
		`SELECT user_id, content_id, publish_time FROM markers`, "", "user_id"),
	feed.RecordPost: newExportSource("posts", feed.RecordPost,
		`SELECT `+postsInOrder+` author_id, content_id, publish_time, kind FROM posts`, "deleted = 0",
		"author_id", "publish_time", "content_id"),
}

// newExportSource returns the source of typ. Its SELECT names the columns
// of the record's fields in the order user_id, author_id, content_id,
// publish_time, followed_at, kind, leaving out those typ lacks.
func newExportSource(table, typ, selectFrom, filter string, key ...string) exportSource {
	first, next := exportSQL(selectFrom, filter, key...)
	return exportSource{table: table, first: first, next: next, scan: func(rows *sql.Rows) (feed.Record, error) {
		var user, author, content sqlconn.Int[uint64]
		var at sqlconn.Int[int64]
		r := feed.Record{Type: typ}
		var dst []any
		switch typ {
		case feed.RecordFollow:
			dst = []any{&user, &author, &at}
		case feed.RecordMute, feed.RecordHide:
			dst = []any{&user, &author}
		case feed.RecordMarker:
			dst = []any{&user, &content, &at}
		case feed.RecordPost:
			dst = []any{&author, &content, &at, &r.Kind}
		}
		if err := rows.Scan(dst...); err != nil {
			return r, err
		}
		r.UserID, r.AuthorID, r.ContentID = user.V, author.V, content.V
		switch typ {
		case feed.RecordFollow:
			r.FollowedAt = at.V
		case feed.RecordMarker, feed.RecordPost:
			r.PublishTime = at.V
		}
		return r, nil
	}}
}

// Export reads the records of type typ (a feed.Record type) that sh owns
// whose user id (the author id for posts) is in [lo, hi]: every follow,
// mute, hide (the reader's mutes row, which is the truth) and marker of
// those users and every post of those authors not deleted, pageSize rows a
// statement, in key order. It calls emit with each page's records and the
// number of rows the page read; the slice is reused for the next page.
func (s *Store) Export(ctx context.Context, sh *Shard, typ string, lo, hi uint64, pageSize int,
	emit func(recs []feed.Record, rows int) error) error {
	src, ok := exportSources[typ]
	if !ok {
		return feed.Errorf(feed.EINVALID, "no record type %q", typ)
	}
	query, args := src.first, []any{lo, hi}
	var recs []feed.Record
	for {
		var last feed.Record
		n := 0
		recs = recs[:0]
		err := func() error {
			rows, err := sh.pool(ctx).QueryContext(ctx, query, append(args, pageSize)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				if last, err = src.scan(rows); err != nil {
					return err
				}
				n++
				if s.ShardOf(exportOwner(last)) == sh {
					recs = append(recs, last)
				}
			}
			return rows.Err()
		}()
		if err != nil {
			return wrap("export "+src.table, err)
		}
		if err := emit(recs, n); err != nil {
			return err
		}
		if n < pageSize {
			return nil
		}
		query, args = src.next, exportAfter(last, hi)
	}
}

// ExportEstimate is the servers' estimate of the rows Export reads for
// every id on every database, from their table statistics (no table is
// scanned): what a progress bar of a whole export counts up to.
func (s *Store) ExportEstimate(ctx context.Context, types []string) (int64, error) {
	var n int64
	for _, sh := range s.shards {
		sizes, err := sh.TableSizes(ctx)
		if err != nil {
			return 0, err
		}
		for _, typ := range types {
			n += sizes[exportSources[typ].table].Rows
		}
	}
	return n, nil
}

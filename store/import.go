package store

import (
	"context"
	"database/sql"
	"slices"

	"github.com/jmoiron/sqlx"
	"golang.org/x/sync/errgroup"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// An import writes a file's records in bulk, then settles what the
// records imply, each step idempotent so that a run killed at any instant
// and started again ends as an uninterrupted one:
//
//  1. Load: the records' rows (following, followers, posts with finished
//     deliveries, mutes, hidden_from, markers) go in with INSERT IGNORE or
//     merging upserts, batch by batch, with import_marks rows naming what
//     the later phases settle; imports.lines_done records the batches done.
//  2. Settle authors: each author given followers gets its count and,
//     past the push threshold, the switch to pull; each author given posts
//     gets its followers marked for the next phase.
//  3. Settle users: each marked user's feed is made what the records and
//     the API's writes meanwhile imply, in one transaction holding the
//     user's header row: edges of muted or hidden pairs marked and their
//     authors purged, pull bits set for pull authors, and the inbox filled
//     with the newest entries of the followed push authors and the user's
//     own posts, as one backfill of every followee at once would, floor
//     and trim included; the user's counts are left to be counted again.
//     The mark goes in the same transaction.
//
// Nothing is fanned out and nothing waits for a follow event: the rows a
// follow event and a fan-out would write are written directly.

// Import phases (imports.phase).
const (
	ImportLoading = iota
	ImportSettlingAuthors
	ImportSettlingUsers
	ImportDone
)

// Kinds of import marks (import_marks.kind).
const (
	markUser      = 1
	markFollowed  = 2
	markPublished = 3

	markUserSQL = "1"
)

// ImportProgress is an import's record in the databases.
type ImportProgress struct {
	ID        uint64 `db:"import_id"`
	Phase     int    `db:"phase"`
	Lines     int64  `db:"line_count"`
	LinesDone int64  `db:"lines_done"`
}

const startImportSQL = `INSERT IGNORE INTO imports (import_id, line_count, started_at, updated_at) VALUES (?, ?, ?, ?)`

const getImportSQL = `SELECT import_id, phase, line_count, lines_done FROM imports WHERE import_id = ?`

// StartImport records the import of a file of lines lines, or finds the
// record of an earlier run of the same file, and returns it. A finished
// import starts over: its records are all written, so a new run changes
// nothing but settles again.
//
// Returns EUNAVAILABLE while a reshard is under way: an import's batches
// are many and long, and the cut-over would fence them half-way.
func (s *Store) StartImport(ctx context.Context, id uint64, lines, now int64) (ImportProgress, error) {
	var p ImportProgress
	for _, sh := range s.shards {
		if layout, err := ReshardUnderWay(ctx, sh.pool(ctx)); err != nil {
			return p, err
		} else if layout != "" {
			return p, feed.Errorf(feed.EUNAVAILABLE, "a reshard is under way on %s: import once it is finished", sh.Name)
		}
	}
	db := s.ShardOf(id).pool(ctx)
	if _, err := db.ExecContext(ctx, startImportSQL, id, lines, now, now); err != nil {
		return p, wrap("start import", err)
	}
	if err := sqlx.GetContext(ctx, db, &p, getImportSQL, id); err != nil {
		return p, wrap("start import", err)
	}
	if p.Phase == ImportDone {
		p.Phase, p.LinesDone = ImportLoading, 0
		return p, s.AdvanceImport(ctx, p, now)
	}
	return p, nil
}

const advanceImportSQL = `UPDATE imports SET phase = ?, lines_done = ?, updated_at = ? WHERE import_id = ?`

// AdvanceImport records p's phase and lines done.
func (s *Store) AdvanceImport(ctx context.Context, p ImportProgress, now int64) error {
	_, err := s.ShardOf(p.ID).pool(ctx).ExecContext(ctx, advanceImportSQL, p.Phase, p.LinesDone, now, p.ID)
	return wrap("advance import", err)
}

// ImportRecord is a record of an import file with its line number.
type ImportRecord struct {
	Line int64
	feed.Record
}

// ImportConflict is a post record the databases refused: its content id
// names another post.
type ImportConflict struct {
	Line      int64
	ContentID uint64
}

const (
	importFollowingHead  = insertFollowingIgnoreHead
	importFollowersHead  = `INSERT IGNORE INTO followers (author_id, user_id, followed_at)`
	importPostsHead      = `INSERT IGNORE INTO posts (author_id, publish_time, content_id, kind, created_at)`
	importDeliveriesHead = `INSERT IGNORE INTO deliveries (content_id, author_id, publish_time, kind, state, created_at)`
	importContentIDsHead = `INSERT IGNORE INTO content_ids (content_id, author_id, created_at)`
	importHiddenFromHead = `INSERT IGNORE INTO hidden_from (author_id, user_id, hidden_at)`
	importMarksHead      = `INSERT IGNORE INTO import_marks (import_id, kind, id)`
	// A mute and a hide of one pair share its row: each fills its own
	// column and keeps one already set.
	importMutesHead = `INSERT INTO mutes (user_id, author_id, muted_at, hidden_at)`
	importMutesTail = ` ON DUPLICATE KEY UPDATE muted_at = COALESCE(muted_at, VALUES(muted_at)), hidden_at = COALESCE(hidden_at, VALUES(hidden_at))`
)

const postOwnersSQL = `SELECT content_id, author_id, publish_time, kind FROM posts WHERE content_id IN (?)`

const contentOwnersSQL = `SELECT content_id, author_id FROM content_ids WHERE content_id IN (?)`

// importWriters bounds the statements a load runs at once.
const importWriters = 4

// LoadImport writes the rows of a batch of records, each database's share
// of each table in statements of its own, and the marks the later phases
// take up. A post whose content id names another post is left out and
// returned. now stands in for a follow's missing followed_at and stamps
// mutes, hides and posts' created_at.
func (s *Store) LoadImport(ctx context.Context, id uint64, recs []ImportRecord, now int64) ([]ImportConflict, error) {
	conflicts, posts, err := s.claimImportedIDs(ctx, recs, now)
	if err != nil {
		return nil, wrap("load import", err)
	}
	type job struct {
		sh   *Shard
		head string
		cols int
		tail string
		rows [][]any
	}
	jobs := map[string]*job{}
	add := func(sh *Shard, head string, cols int, tail string, row ...any) {
		key := sh.Name + head
		j, ok := jobs[key]
		if !ok {
			j = &job{sh: sh, head: head, cols: cols, tail: tail}
			jobs[key] = j
		}
		j.rows = append(j.rows, row)
	}
	marked := map[[2]uint64]bool{}
	mark := func(kind int, who uint64) {
		if k := [2]uint64{uint64(kind), who}; !marked[k] {
			marked[k] = true
			add(s.ShardOf(who), importMarksHead, 3, "", id, kind, who)
		}
	}
	for _, r := range recs {
		switch r.Type {
		case feed.RecordFollow:
			at := r.FollowedAt
			if at == 0 {
				at = now
			}
			add(s.ShardOf(r.UserID), importFollowingHead, 5, "", r.UserID, r.AuthorID, at, 0, 0)
			add(s.ShardOf(r.AuthorID), importFollowersHead, 3, "", r.AuthorID, r.UserID, at)
			mark(markUser, r.UserID)
			mark(markFollowed, r.AuthorID)
		case feed.RecordMute:
			add(s.ShardOf(r.UserID), importMutesHead, 4, importMutesTail, r.UserID, r.AuthorID, now, nil)
			mark(markUser, r.UserID)
		case feed.RecordHide:
			add(s.ShardOf(r.UserID), importMutesHead, 4, importMutesTail, r.UserID, r.AuthorID, nil, now)
			add(s.ShardOf(r.AuthorID), importHiddenFromHead, 3, "", r.AuthorID, r.UserID, now)
			mark(markUser, r.UserID)
		case feed.RecordMarker:
			add(s.ShardOf(r.UserID), advanceMarkerHead, 4, advanceMarkerTail, r.UserID, r.PublishTime, r.ContentID, now)
		}
	}
	for _, p := range posts {
		sh := s.ShardOf(p.AuthorID)
		add(sh, importPostsHead, 5, "", p.AuthorID, p.PublishTime, p.ContentID, p.Kind, now)
		add(sh, importDeliveriesHead, 6, "", p.ContentID, p.AuthorID, p.PublishTime, p.Kind, deliveryDone, now)
		mark(markPublished, p.AuthorID)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(importWriters)
	for _, j := range jobs {
		g.Go(func() error {
			_, err := sqlconn.InsertRows(gctx, j.sh.pool(gctx), j.head, j.cols, j.tail, len(j.rows), func(i int) []any { return j.rows[i] })
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, wrap("load import", err)
	}
	// Posts go in before anything tells caches of outboxes that older
	// posts arrived.
	for sh := range s.shardsOf(postAuthors(posts)) {
		if _, err := sh.pool(ctx).ExecContext(ctx, bumpBackdatesSQL); err != nil {
			return nil, wrap("load import", err)
		}
	}
	more, err := s.postConflicts(ctx, posts)
	return append(conflicts, more...), wrap("load import", err)
}

func postAuthors(posts []ImportRecord) []uint64 {
	ids := make([]uint64, len(posts))
	for i, p := range posts {
		ids[i] = p.AuthorID
	}
	return ids
}

// claimImportedIDs returns the batch's post records whose content ids the
// authors may take: with several databases it claims them on their own
// databases first, as publishing does, and leaves out (as conflicts) the
// posts whose ids another author owns.
func (s *Store) claimImportedIDs(ctx context.Context, recs []ImportRecord, now int64) ([]ImportConflict, []ImportRecord, error) {
	var posts []ImportRecord
	for _, r := range recs {
		if r.Type == feed.RecordPost {
			posts = append(posts, r)
		}
	}
	if len(s.shards) == 1 || len(posts) == 0 {
		return nil, posts, nil
	}
	byShard := map[*Shard][]ImportRecord{}
	for _, p := range posts {
		sh := s.ShardOf(p.ContentID)
		byShard[sh] = append(byShard[sh], p)
	}
	var conflicts []ImportConflict
	var claimed []ImportRecord
	for sh, ps := range byShard {
		db := sh.pool(ctx)
		if _, err := sqlconn.InsertRows(ctx, db, importContentIDsHead, 3, "", len(ps), func(i int) []any {
			return []any{ps[i].ContentID, ps[i].AuthorID, now}
		}); err != nil {
			return nil, nil, err
		}
		owners := map[uint64]uint64{}
		for chunk := range slices.Chunk(ps, 1000) {
			ids := make([]uint64, len(chunk))
			for i, p := range chunk {
				ids[i] = p.ContentID
			}
			var rows []struct {
				ContentID uint64 `db:"content_id"`
				AuthorID  uint64 `db:"author_id"`
			}
			if err := selectIn(ctx, db, &rows, contentOwnersSQL, ids); err != nil {
				return nil, nil, err
			}
			for _, r := range rows {
				owners[r.ContentID] = r.AuthorID
			}
		}
		for _, p := range ps {
			if owners[p.ContentID] == p.AuthorID {
				claimed = append(claimed, p)
			} else {
				conflicts = append(conflicts, ImportConflict{Line: p.Line, ContentID: p.ContentID})
			}
		}
	}
	return conflicts, claimed, nil
}

// postConflicts returns the posts whose content ids name a post with other
// fields (on the author's database), which INSERT IGNORE left as it was.
func (s *Store) postConflicts(ctx context.Context, posts []ImportRecord) ([]ImportConflict, error) {
	byShard := map[*Shard][]ImportRecord{}
	for _, p := range posts {
		sh := s.ShardOf(p.AuthorID)
		byShard[sh] = append(byShard[sh], p)
	}
	var conflicts []ImportConflict
	for sh, ps := range byShard {
		for chunk := range slices.Chunk(ps, 1000) {
			ids := make([]uint64, len(chunk))
			for i, p := range chunk {
				ids[i] = p.ContentID
			}
			var rows []feed.Post
			if err := selectIn(ctx, sh.pool(ctx), &rows, postOwnersSQL, ids); err != nil {
				return nil, err
			}
			stored := make(map[uint64]feed.Post, len(rows))
			for _, r := range rows {
				stored[r.ContentID] = r
			}
			for _, p := range chunk {
				want := feed.Post{ContentID: p.ContentID, AuthorID: p.AuthorID, PublishTime: p.PublishTime, Kind: p.Kind}
				if stored[p.ContentID] != want {
					conflicts = append(conflicts, ImportConflict{Line: p.Line, ContentID: p.ContentID})
				}
			}
		}
	}
	return conflicts, nil
}

// Settling reads import marks a batch at a time, in id order.
const (
	nextMarksSQL  = `SELECT kind, id FROM import_marks WHERE import_id = ? AND kind IN (?) ORDER BY kind, id LIMIT ?`
	deleteMarkSQL = `DELETE FROM import_marks WHERE import_id = ? AND kind = ? AND id IN (?)`
	// settleAuthorsBatch bounds the authors one settling transaction
	// takes.
	settleAuthorsBatch = 500
)

type importMark struct {
	Kind int    `db:"kind"`
	ID   uint64 `db:"id"`
}

func nextMarks(ctx context.Context, sh *Shard, id uint64, kinds []int, limit int) ([]importMark, error) {
	var out []importMark
	return out, selectIn(ctx, sh.pool(ctx), &out, nextMarksSQL, id, kinds, limit)
}

// PendingMarks counts the marks of the import left to settle on sh, for
// progress reports.
func (s *Store) PendingMarks(ctx context.Context, sh *Shard, id uint64) (int64, error) {
	var n int64
	err := sqlx.GetContext(ctx, sh.pool(ctx), &n, `SELECT COUNT(*) FROM import_marks WHERE import_id = ?`, id)
	return n, wrap("pending marks", err)
}

// ensureAuthorsHead/Tail create the authors' missing rows and leave them
// all locked, as ensureHeaders does for users.
const (
	ensureAuthorsHead = `INSERT INTO authors (author_id, follower_count)`
	ensureAuthorsTail = ` ON DUPLICATE KEY UPDATE author_id = author_id`
)

const countFollowersSQL = `SELECT author_id, COUNT(*) AS n FROM followers WHERE author_id IN (?) GROUP BY author_id`

const setFollowerCountSQL = `UPDATE authors SET follower_count = ? WHERE author_id = ?`

// SettleImportAuthors does the second phase on sh: the authors given
// followers get their counts from their followers rows (under the rows'
// locks, which follow events take too) and, past pushThreshold, the
// switch to pull; the authors given posts get their followers (on every
// database) and themselves marked for the third phase. It returns the
// marks settled, 0 when none were left.
func (s *Store) SettleImportAuthors(ctx context.Context, sh *Shard, id uint64, pushThreshold int64) (int, error) {
	marks, err := nextMarks(ctx, sh, id, []int{markFollowed, markPublished}, settleAuthorsBatch)
	if err != nil || len(marks) == 0 {
		return 0, wrap("settle import authors", err)
	}
	var counted, published []uint64
	for _, m := range marks {
		if m.Kind == markFollowed {
			counted = append(counted, m.ID)
		} else {
			published = append(published, m.ID)
		}
	}
	if len(counted) > 0 {
		if err := sh.inTx(ctx, func(tx *sqlx.Tx) error { return countImported(ctx, tx, id, counted, pushThreshold) }); err != nil {
			return 0, wrap("settle import authors", err)
		}
	}
	if len(published) > 0 {
		if err := s.markFollowers(ctx, id, published); err != nil {
			return 0, wrap("settle import authors", err)
		}
		if err := execIn(ctx, sh.pool(ctx), deleteMarkSQL, id, markPublished, published); err != nil {
			return 0, wrap("settle import authors", err)
		}
	}
	return len(marks), nil
}

// countImported sets the authors' follower counts in tx and deletes their
// marks.
func countImported(ctx context.Context, tx *sqlx.Tx, id uint64, authors []uint64, pushThreshold int64) error {
	if _, err := sqlconn.InsertRows(ctx, tx, ensureAuthorsHead, 2, ensureAuthorsTail, len(authors), func(i int) []any {
		return []any{authors[i], 0}
	}); err != nil {
		return err
	}
	var counts []struct {
		AuthorID uint64 `db:"author_id"`
		N        int64  `db:"n"`
	}
	if err := selectIn(ctx, tx, &counts, countFollowersSQL, authors); err != nil {
		return err
	}
	for _, c := range counts {
		if _, err := tx.ExecContext(ctx, setFollowerCountSQL, c.N, c.AuthorID); err != nil {
			return err
		}
		if c.N > pushThreshold {
			if _, err := tx.ExecContext(ctx, startSwitchSQL, c.AuthorID); err != nil {
				return err
			}
		}
	}
	return execIn(ctx, tx, deleteMarkSQL, id, markFollowed, authors)
}

// edgesOfAuthorsSQL pages the follow edges of a few authors in (author,
// user) order.
const edgesOfAuthorsSQL = `SELECT author_id, user_id FROM following WHERE author_id IN (?)
AND (author_id > ? OR (author_id = ? AND user_id > ?)) ORDER BY author_id, user_id LIMIT ?`

// edgesOfAuthorsPage bounds the edges one page of edgesOfAuthorsSQL reads.
const edgesOfAuthorsPage = 5000

// markFollowers marks the authors and each of their followers, on their
// own databases, as users to settle.
func (s *Store) markFollowers(ctx context.Context, id uint64, authors []uint64) error {
	for sh, part := range s.groupByShard(authors) {
		if _, err := sqlconn.InsertRows(ctx, sh.pool(ctx), importMarksHead, 3, "", len(part), func(i int) []any {
			return []any{id, markUser, part[i]}
		}); err != nil {
			return err
		}
	}
	for _, sh := range s.shards {
		var after [2]uint64
		for {
			var edges []struct {
				AuthorID uint64 `db:"author_id"`
				UserID   uint64 `db:"user_id"`
			}
			if err := selectIn(ctx, sh.pool(ctx), &edges, edgesOfAuthorsSQL, authors, after[0], after[0], after[1], edgesOfAuthorsPage); err != nil {
				return err
			}
			if _, err := sqlconn.InsertRows(ctx, sh.pool(ctx), importMarksHead, 3, "", len(edges), func(i int) []any {
				return []any{id, markUser, edges[i].UserID}
			}); err != nil {
				return err
			}
			if len(edges) < edgesOfAuthorsPage {
				break
			}
			last := edges[len(edges)-1]
			after = [2]uint64{last.AuthorID, last.UserID}
		}
	}
	return nil
}

// settleEdge is a following row of a user being settled.
type settleEdge struct {
	UserID      uint64           `db:"user_id"`
	AuthorID    uint64           `db:"author_id"`
	Pull        int              `db:"pull"`
	Muted       bool             `db:"muted"`
	HistoryTime sql.NullInt64    `db:"history_time"`
	HistoryID   sql.Null[uint64] `db:"history_id"`
}

// visible returns the posts (newest first) the edge shows: those at or
// above its copy limit's bound, if it has one.
func (e settleEdge) visible(posts []feed.Post) []feed.Post {
	if !e.HistoryTime.Valid {
		return posts
	}
	bound := feed.Key{PublishTime: e.HistoryTime.Int64, ContentID: e.HistoryID.V}
	n := 0
	for n < len(posts) && !posts[n].Key().Less(bound) {
		n++
	}
	return posts[:n]
}

const (
	edgesOfSQL       = `SELECT user_id, author_id, pull, muted, history_time, history_id FROM following WHERE user_id IN (?)`
	lockEdgesOfSQL   = edgesOfSQL + ` FOR UPDATE`
	lockFilteredSQL  = `SELECT user_id, author_id FROM mutes WHERE user_id IN (?) FOR UPDATE`
	markPullEdgeSQL  = `UPDATE following SET pull = pull | 1 WHERE user_id = ? AND author_id = ?`
	setPullsUsersSQL = `UPDATE inbox SET pulls = 1 WHERE user_id IN (?) AND ` + headerKeySQL
	bumpFollowsSQL   = `UPDATE inbox SET follows = COALESCE(follows, 0) + 1 WHERE user_id IN (?) AND ` + headerKeySQL
)

const nextUsersSQL = `SELECT id FROM import_marks WHERE import_id = ? AND kind = ` + markUserSQL + ` AND id > ? ORDER BY id LIMIT ?`

// NextImportUsers returns up to limit of sh's users marked for the third
// phase with ids above after, in id order.
func (s *Store) NextImportUsers(ctx context.Context, sh *Shard, id, after uint64, limit int) ([]uint64, error) {
	var users []uint64
	err := sqlx.SelectContext(ctx, sh.pool(ctx), &users, nextUsersSQL, id, after, limit)
	return users, wrap("next import users", err)
}

// SettleImportUsers does the third phase for marked users of one database,
// each in the way Backfill does for one edge (see the comment at the top
// of this file), with limit the inbox limit, and returns the inbox entries
// it wrote. The outboxes come from cache, read before the transaction;
// edges the API added meanwhile are left to their own backfill, and copies
// of posts deleted meanwhile are taken out after the commit, as a backfill
// does.
func (s *Store) SettleImportUsers(ctx context.Context, id uint64, users []uint64, limit int, src *CopySource) (int64, error) {
	if len(users) == 0 {
		return 0, nil
	}
	sh := s.ShardOf(users[0])
	var edges []settleEdge
	if err := selectIn(ctx, sh.pool(ctx), &edges, edgesOfSQL, users); err != nil {
		return 0, wrap("settle import users", err)
	}
	authors := slices.Clone(users)
	for _, e := range edges {
		authors = append(authors, e.AuthorID)
	}
	slices.Sort(authors)
	outboxes, err := src.get(ctx, s, slices.Compact(authors))
	if err != nil {
		return 0, wrap("settle import users", err)
	}
	var copied map[uint64][]feed.Post
	var n int64
	err = sh.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		copied, n, err = settleUsers(ctx, tx, id, users, limit, outboxes)
		return err
	})
	if err != nil {
		return 0, wrap("settle import users", err)
	}
	return n, s.uncopyDeleted(ctx, copied)
}

// settleUsers settles the users in tx and returns what it copied, by user.
func settleUsers(ctx context.Context, tx *sqlx.Tx, id uint64, users []uint64, limit int, outboxes map[uint64]authorOutbox) (map[uint64][]feed.Post, int64, error) {
	if err := ensureHeaders(ctx, tx, users...); err != nil {
		return nil, 0, err
	}
	var edges []settleEdge
	if err := selectIn(ctx, tx, &edges, lockEdgesOfSQL, users); err != nil {
		return nil, 0, err
	}
	var filtered []struct {
		UserID   uint64 `db:"user_id"`
		AuthorID uint64 `db:"author_id"`
	}
	if err := selectIn(ctx, tx, &filtered, lockFilteredSQL, users); err != nil {
		return nil, 0, err
	}
	isFiltered := map[[2]uint64]bool{}
	for _, f := range filtered {
		isFiltered[[2]uint64{f.UserID, f.AuthorID}] = true
	}
	sources := map[uint64][][]feed.Post{}
	var pulling []uint64
	for _, u := range users {
		sources[u] = append(sources[u], outboxes[u].posts)
	}
	for _, e := range edges {
		if isFiltered[[2]uint64{e.UserID, e.AuthorID}] {
			if !e.Muted {
				if _, err := tx.ExecContext(ctx, muteEdgeSQL, e.UserID, e.AuthorID); err != nil {
					return nil, 0, err
				}
				if err := purgeAuthor(ctx, tx, e.UserID, e.AuthorID); err != nil {
					return nil, 0, err
				}
			}
			continue
		}
		if e.Muted {
			continue // a lifted filter's own backfill is queued
		}
		author, ok := outboxes[e.AuthorID]
		if !ok {
			continue // followed meanwhile through the API: its backfill copies
		}
		if author.mode != AuthorPush {
			if e.Pull&PullBelowActive == 0 {
				if _, err := tx.ExecContext(ctx, markPullEdgeSQL, e.UserID, e.AuthorID); err != nil {
					return nil, 0, err
				}
			}
			pulling = append(pulling, e.UserID)
			continue
		}
		sources[e.UserID] = append(sources[e.UserID], e.visible(author.posts))
	}
	if len(pulling) > 0 {
		if err := execIn(ctx, tx, setPullsUsersSQL, pulling); err != nil {
			return nil, 0, err
		}
	}
	copied, n, err := fillInboxes(ctx, tx, users, sources, limit)
	if err != nil {
		return nil, 0, err
	}
	if err := execIn(ctx, tx, bumpFollowsSQL, users); err != nil {
		return nil, 0, err
	}
	if err := forgetCounts(ctx, tx, users...); err != nil {
		return nil, 0, err
	}
	return copied, n, execIn(ctx, tx, deleteMarkSQL, id, markUser, users)
}

// selectIn runs query with its IN lists expanded, as execIn does.
func selectIn[T any](ctx context.Context, q sqlx.QueryerContext, dest *[]T, query string, args ...any) error {
	query, args, err := sqlx.In(query, args...)
	if err != nil {
		return err
	}
	return sqlx.SelectContext(ctx, q, dest, query, args...)
}

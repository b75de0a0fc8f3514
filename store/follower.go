package store

import (
	"cmp"
	"context"
	"slices"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
	"github.com/jmoiron/sqlx"
)

// The followers table: who follows an author, on the author's database,
// written only by follow events.

const listFollowersSQL = `SELECT user_id, author_id, followed_at FROM followers
WHERE author_id = ? AND user_id > ? ORDER BY user_id LIMIT ?`

// ListFollowers returns up to limit followers of the author with ids above
// after, in user_id order. The list trails follow and unfollow by the time
// their events take to apply.
func (s *Store) ListFollowers(ctx context.Context, authorID, after uint64, limit int) ([]feed.Follow, error) {
	var out []feed.Follow
	err := sqlx.SelectContext(ctx, s.ShardOf(authorID).pool(ctx), &out, listFollowersSQL, authorID, after, limit)
	return out, wrap("list followers", err)
}

const deleteFollowerSQL = `DELETE FROM followers WHERE author_id = ? AND user_id = ?`

// AddFollower records the edge on the author's shard and counts it. When
// the count passes pushThreshold the author starts switching to pull mode.
// It returns the author's mode, read under the same lock the switch takes,
// so a follower added while switching is never missed.
func (s *Store) AddFollower(ctx context.Context, f feed.Follow, pushThreshold int64) (mode int, err error) {
	modes, failed := s.AddFollowers(ctx, []feed.Follow{f}, pushThreshold)
	return modes[f.AuthorID], failed[f.AuthorID]
}

// RemoveFollower drops the edge from the author's shard and the count.
func (s *Store) RemoveFollower(ctx context.Context, authorID, userID uint64) error {
	ctx = s.pin(ctx)
	err := s.ShardOf(authorID).inTx(ctx, func(tx *sqlx.Tx) error {
		if deleted, err := affected(tx.ExecContext(ctx, deleteFollowerSQL, authorID, userID)); err != nil || !deleted {
			return err
		}
		_, err := tx.ExecContext(ctx, countAuthorSQL, authorID, -1)
		return err
	})
	return wrap("remove follower", err)
}

const edgesOfPairsSQL = `SELECT user_id, author_id, followed_at FROM ` + followingByPair + ` WHERE `

// FollowEdges returns the edges that exist among the events' pairs, read on
// sh, the database of the events' users, with one statement per
// followChunk pairs: what a batch of follow events reconciles with.
func (s *Store) FollowEdges(ctx context.Context, sh *Shard, evs []FollowEvent) (map[[2]uint64]feed.Follow, error) {
	out := make(map[[2]uint64]feed.Follow, len(evs))
	for start := 0; start < len(evs); start += followChunk {
		chunk := evs[start:min(start+followChunk, len(evs))]
		args := make([]any, 0, 2*len(chunk))
		for _, ev := range chunk {
			args = append(args, ev.UserID, ev.AuthorID)
		}
		var got []feed.Follow
		if err := sqlx.SelectContext(ctx, sh.pool(ctx), &got, edgesOfPairsSQL+keyIn([]string{"user_id", "author_id"}, len(chunk)), args...); err != nil {
			return nil, wrap("follow edges", err)
		}
		for _, f := range got {
			out[[2]uint64{f.UserID, f.AuthorID}] = f
		}
	}
	return out, nil
}

const (
	existingFollowersSQL = `SELECT user_id, author_id FROM followers WHERE `
	insertFollowersHead  = `INSERT IGNORE INTO followers (author_id, user_id, followed_at)`
	countAuthorsHead     = `INSERT INTO authors (author_id, follower_count)`
	countAuthorsTail     = ` ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count)`
	lockAuthorsSQL       = `SELECT author_id, follower_count, mode FROM authors WHERE author_id IN (?) FOR UPDATE`
)

// AddFollowers is AddFollower for many edges, with one transaction per
// author database holding some of their authors: it reads which followers
// rows exist, inserts the others and counts them per author with multi-row
// statements, then reads the authors' modes under the lock the switch
// takes. It returns each author's mode, and the error of each author whose
// database's transaction failed.
func (s *Store) AddFollowers(ctx context.Context, follows []feed.Follow, pushThreshold int64) (modes map[uint64]int, failed map[uint64]error) {
	ctx = s.pin(ctx)
	modes, failed = map[uint64]int{}, map[uint64]error{}
	byShard := map[*Shard][]feed.Follow{}
	for _, f := range follows {
		sh := s.ShardOf(f.AuthorID)
		byShard[sh] = append(byShard[sh], f)
	}
	for sh, fs := range byShard {
		// Authors in id order: batches lock authors rows in one order.
		slices.SortFunc(fs, func(a, b feed.Follow) int {
			return cmp.Or(cmp.Compare(a.AuthorID, b.AuthorID), cmp.Compare(a.UserID, b.UserID))
		})
		var got map[uint64]int
		err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
			var err error
			got, err = addFollowers(ctx, tx, fs, pushThreshold)
			return err
		})
		for _, f := range fs {
			if err != nil {
				failed[f.AuthorID] = wrap("add followers", err)
			} else {
				modes[f.AuthorID] = got[f.AuthorID]
			}
		}
	}
	return modes, failed
}

// addFollowers is AddFollowers' transaction for the follows of one author
// database, sorted by author.
func addFollowers(ctx context.Context, tx *sqlx.Tx, fs []feed.Follow, pushThreshold int64) (map[uint64]int, error) {
	pairs := make([]userAuthor, len(fs))
	for i, f := range fs {
		pairs[i] = userAuthor{f.UserID, f.AuthorID}
	}
	exists, err := pairsIn(ctx, tx, existingFollowersSQL, " FOR UPDATE", pairs)
	if err != nil {
		return nil, err
	}
	var rows []feed.Follow
	added := map[uint64]int64{}
	var authors []uint64
	for _, f := range fs {
		if len(authors) == 0 || authors[len(authors)-1] != f.AuthorID {
			authors = append(authors, f.AuthorID)
		}
		if p := (userAuthor{f.UserID, f.AuthorID}); !exists[p] {
			exists[p] = true
			rows = append(rows, f)
			added[f.AuthorID]++
		}
	}
	if _, err := sqlconn.InsertRows(ctx, tx, insertFollowersHead, 3, "", len(rows), func(i int) []any {
		return []any{rows[i].AuthorID, rows[i].UserID, rows[i].FollowedAt}
	}); err != nil {
		return nil, err
	}
	if _, err := sqlconn.InsertRows(ctx, tx, countAuthorsHead, 2, countAuthorsTail, len(authors), func(i int) []any {
		return []any{authors[i], added[authors[i]]}
	}); err != nil {
		return nil, err
	}
	got, err := selectInChunks[struct {
		AuthorID uint64 `db:"author_id"`
		Count    int64  `db:"follower_count"`
		Mode     int    `db:"mode"`
	}](ctx, tx, lockAuthorsSQL, authors)
	if err != nil {
		return nil, err
	}
	modes := make(map[uint64]int, len(authors))
	for _, a := range got {
		modes[a.AuthorID] = a.Mode
		if a.Mode == AuthorPush && a.Count > pushThreshold {
			modes[a.AuthorID] = AuthorSwitching
			if _, err := tx.ExecContext(ctx, startSwitchSQL, a.AuthorID); err != nil {
				return nil, err
			}
		}
	}
	return modes, nil
}

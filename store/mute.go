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

// A mute (the reader's choice) and a hide (the author's) have one effect on
// the reader's side: a mutes row for the pair on the reader's database, and
// following.muted set on the edge if the reader follows the author. Both are
// written in one transaction with the purge of the author's posts from the
// reader's inbox, so no read that starts after it shows them; fan-out skips
// muted edges and reads leave their authors out. Lifting the last of the two
// marks the edge pending backfill, as a follow does. The author's list of
// hides (hidden_from, on the author's database) follows through the pair's
// follow event.

// Filter names which of the two marks an operation sets or lifts.
type Filter int

const (
	Mute Filter = iota // the reader mutes the author
	Hide               // the author hides from the reader
)

const lockMuteSQL = `SELECT muted_at, hidden_at FROM mutes WHERE user_id = ? AND author_id = ? FOR UPDATE`

const upsertMuteSQL = `INSERT INTO mutes (user_id, author_id, muted_at, hidden_at) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE muted_at = VALUES(muted_at), hidden_at = VALUES(hidden_at)`

const deleteMuteSQL = `DELETE FROM mutes WHERE user_id = ? AND author_id = ?`

const muteEdgeSQL = `UPDATE following SET muted = 1 WHERE user_id = ? AND author_id = ?`

// unmuteEdgeSQL lifts the edge's mark and makes the author's whole outbox
// merged until the backfill the caller queues has run, as after a follow.
const unmuteEdgeSQL = `UPDATE following SET muted = 0, pull = pull | ? WHERE user_id = ? AND author_id = ?`

// SetFilter sets (on) or lifts the filter of authorID's posts from userID's
// feed, in one transaction on the user's database that holds the user's
// header row, as follows do. Setting a mark already set, or lifting one not
// set, changes nothing. It reports whether the edge now waits for a
// backfill (the caller wakes the workers).
//
// Returns ELIMIT when a mute would make the user mute more than maxMuted
// authors.
func (s *Store) SetFilter(ctx context.Context, f Filter, userID, authorID uint64, on bool, maxMuted int, now int64) (backfill bool, err error) {
	ctx = s.pin(ctx)
	var limit error
	err = s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		backfill, limit = false, nil
		if err := ensureHeaders(ctx, tx, userID); err != nil {
			return err
		}
		var cur struct {
			MutedAt  sql.NullInt64 `db:"muted_at"`
			HiddenAt sql.NullInt64 `db:"hidden_at"`
		}
		err := sqlx.GetContext(ctx, tx, &cur, lockMuteSQL, userID, authorID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		next := cur
		mark := &next.MutedAt
		if f == Hide {
			mark = &next.HiddenAt
		}
		if mark.Valid == on {
			return nil
		}
		*mark = sql.NullInt64{Int64: now, Valid: on}
		if f == Mute {
			// A mute past the cap commits the counts it read.
			if limit, err = countMute(ctx, tx, userID, on, maxMuted); err != nil || limit != nil {
				return err
			}
		}
		was, is := cur.MutedAt.Valid || cur.HiddenAt.Valid, next.MutedAt.Valid || next.HiddenAt.Valid
		if is {
			_, err = tx.ExecContext(ctx, upsertMuteSQL, userID, authorID, next.MutedAt, next.HiddenAt)
		} else {
			_, err = tx.ExecContext(ctx, deleteMuteSQL, userID, authorID)
		}
		if err != nil {
			return err
		}
		if is != was {
			if err := followsChanged(ctx, tx, userID); err != nil {
				return err
			}
		}
		switch {
		case is && !was:
			if _, err := tx.ExecContext(ctx, muteEdgeSQL, userID, authorID); err != nil {
				return err
			}
			if err := purgeAuthor(ctx, tx, userID, authorID); err != nil {
				return err
			}
		case was && !is:
			if backfill, err = affected(tx.ExecContext(ctx, unmuteEdgeSQL, PullPending, userID, authorID)); err != nil {
				return err
			}
			if backfill {
				if _, err := tx.ExecContext(ctx, setPullsSQL, 1, userID); err != nil {
					return err
				}
			}
		}
		// The pair's event backfills a lifted edge and copies a hide to
		// the author's list.
		if backfill || f == Hide {
			_, err = tx.ExecContext(ctx, queueFollowEventSQL, userID, authorID, now)
		}
		return err
	})
	if backfill {
		s.ShardOf(userID).pullHints.Set(userID, true)
	}
	return backfill, wrap("set filter", cmp.Or(err, limit))
}

// countMute counts a mute set (on) or lifted in the user's counts; a mute
// set past maxMuted changes nothing and is limit, an ELIMIT.
func countMute(ctx context.Context, tx *sqlx.Tx, userID uint64, on bool, maxMuted int) (limit, err error) {
	if !on {
		_, err := tx.ExecContext(ctx, unmutedSQL, userID)
		return nil, err
	}
	counts, err := lockCounts(ctx, tx, []uint64{userID})
	if err != nil {
		return nil, err
	}
	c := counts[userID]
	if c.Muted >= maxMuted {
		return feed.Errorf(feed.ELIMIT, "user %d already mutes %d authors, the maximum", userID, c.Muted), nil
	}
	c.Muted++
	counts[userID] = c
	return nil, saveCounts(ctx, tx, []uint64{userID}, counts)
}

const hiddenPairsSQL = `SELECT user_id, author_id, hidden_at FROM mutes WHERE hidden_at IS NOT NULL AND `

const (
	upsertHiddenFromHead = `INSERT INTO hidden_from (author_id, user_id, hidden_at)`
	upsertHiddenFromTail = ` ON DUPLICATE KEY UPDATE hidden_at = VALUES(hidden_at)`
	deleteHiddenFromHead = `DELETE FROM hidden_from WHERE `
)

// SyncHidden makes the authors' hidden_from rows for the users of pairs
// (user, author), all users of sh, match the users' mutes rows as they are
// now: the follow events' share of a hide. It reads the pairs' hides with
// one statement, and writes each author database's share with two.
func (s *Store) SyncHidden(ctx context.Context, sh *Shard, pairs [][2]uint64) error {
	ctx = s.pin(ctx)
	hidden := map[[2]uint64]int64{}
	for chunk := range slices.Chunk(pairs, followChunk) {
		var rows []struct {
			UserID   uint64 `db:"user_id"`
			AuthorID uint64 `db:"author_id"`
			At       int64  `db:"hidden_at"`
		}
		if err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, hiddenPairsSQL+keyIn([]string{"user_id", "author_id"}, len(chunk)), flatPairs(chunk)...); err != nil {
			return wrap("sync hidden", err)
		}
		for _, r := range rows {
			hidden[[2]uint64{r.UserID, r.AuthorID}] = r.At
		}
	}
	byAuthorShard := map[*Shard][][2]uint64{}
	for _, p := range pairs {
		a := s.ShardOf(p[1])
		byAuthorShard[a] = append(byAuthorShard[a], p)
	}
	for ash, ps := range byAuthorShard {
		var set, unset []any
		for _, p := range ps {
			if at, ok := hidden[p]; ok {
				set = append(set, p[1], p[0], at)
			} else {
				unset = append(unset, p[1], p[0])
			}
		}
		db := ash.pool(ctx)
		if _, err := sqlconn.InsertRows(ctx, db, upsertHiddenFromHead, 3, upsertHiddenFromTail, len(set)/3, func(i int) []any { return set[3*i : 3*i+3] }); err != nil {
			return wrap("sync hidden", err)
		}
		for chunk := range slices.Chunk(unset, 2*followChunk) {
			if _, err := db.ExecContext(ctx, deleteHiddenFromHead+keyIn([]string{"author_id", "user_id"}, len(chunk)/2), chunk...); err != nil {
				return wrap("sync hidden", err)
			}
		}
	}
	return nil
}

// flatPairs lists the pairs' ids in order, as arguments of keyIn.
func flatPairs(pairs [][2]uint64) []any {
	out := make([]any, 0, 2*len(pairs))
	for _, p := range pairs {
		out = append(out, p[0], p[1])
	}
	return out
}

const listMutedSQL = `SELECT user_id, author_id, muted_at AS at FROM mutes
WHERE user_id = ? AND author_id > ? AND muted_at IS NOT NULL ORDER BY author_id LIMIT ?`

// ListMuted returns up to limit authors the user mutes with ids above after,
// in author_id order.
func (s *Store) ListMuted(ctx context.Context, userID, after uint64, limit int) ([]feed.Mute, error) {
	var out []feed.Mute
	err := sqlx.SelectContext(ctx, s.ShardOf(userID).pool(ctx), &out, listMutedSQL, userID, after, limit)
	return out, wrap("list muted", err)
}

const listHiddenFromSQL = `SELECT user_id, author_id, hidden_at AS at FROM hidden_from
WHERE author_id = ? AND user_id > ? ORDER BY user_id LIMIT ?`

// ListHiddenFrom returns up to limit users the author hides from with ids
// above after, in user_id order. The list trails hides by the time their
// events take to apply.
func (s *Store) ListHiddenFrom(ctx context.Context, authorID, after uint64, limit int) ([]feed.Mute, error) {
	var out []feed.Mute
	err := sqlx.SelectContext(ctx, s.ShardOf(authorID).pool(ctx), &out, listHiddenFromSQL, authorID, after, limit)
	return out, wrap("list hidden from", err)
}

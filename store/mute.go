package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
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

// countMutedSQL counts the user's mutes with a locking read, so the count is
// of committed rows on every engine, not of an older snapshot.
const countMutedSQL = `SELECT COUNT(*) FROM mutes WHERE user_id = ? AND muted_at IS NOT NULL FOR UPDATE`

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
	err = s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		backfill = false
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
		if f == Mute && on {
			var n int
			if err := tx.GetContext(ctx, &n, countMutedSQL, userID); err != nil {
				return err
			} else if n >= maxMuted {
				return feed.Errorf(feed.ELIMIT, "user %d already mutes %d authors, the maximum", userID, n)
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
	return backfill, wrap("set filter", err)
}

const getHiddenSQL = `SELECT hidden_at FROM mutes WHERE user_id = ? AND author_id = ? AND hidden_at IS NOT NULL`

const upsertHiddenFromSQL = `INSERT INTO hidden_from (author_id, user_id, hidden_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE hidden_at = VALUES(hidden_at)`

const deleteHiddenFromSQL = `DELETE FROM hidden_from WHERE author_id = ? AND user_id = ?`

// SyncHidden makes the author's hidden_from row for the user match the
// user's mutes row as it is now: the follow event's share of a hide.
func (s *Store) SyncHidden(ctx context.Context, userID, authorID uint64) error {
	ctx = s.pin(ctx)
	var at int64
	err := sqlx.GetContext(ctx, s.ShardOf(userID).pool(ctx), &at, getHiddenSQL, userID, authorID)
	db := s.ShardOf(authorID).pool(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = db.ExecContext(ctx, deleteHiddenFromSQL, authorID, userID)
	case err == nil:
		_, err = db.ExecContext(ctx, upsertHiddenFromSQL, authorID, userID, at)
	}
	return wrap("sync hidden", err)
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

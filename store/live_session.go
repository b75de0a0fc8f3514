package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

const insertLiveSessionSQL = `INSERT INTO live_sessions (user_id, session_id, expires_at, snapshot_at, snapshot) VALUES (?, ?, ?, ?, ?)`

// expiredSessionsSQL reads a few expired sessions of the database, oldest
// first, without locks; clean-up then deletes each by its primary key.
const expiredSessionsSQL = `SELECT user_id, session_id FROM live_sessions WHERE expires_at < ? ORDER BY expires_at LIMIT ?`

const deleteExpiredSessionSQL = `DELETE FROM live_sessions WHERE user_id = ? AND session_id = ? AND expires_at < ?`

const getLiveSessionSQL = `SELECT expires_at, snapshot_at, snapshot FROM live_sessions WHERE user_id = ? AND session_id = ?`

// viewerSessionsSQL lists a viewer's sessions, newest first (every session
// lasts the same TTL), a bounded few: the viewer keeps at most
// MaxLiveSessions, and its expired ones go with the clean-up.
const viewerSessionsSQL = `SELECT session_id FROM live_sessions WHERE user_id = ? ORDER BY expires_at DESC, session_id DESC LIMIT 1000`

const deleteLiveSessionSQL = `DELETE FROM live_sessions WHERE user_id = ? AND session_id = ?`

// MaxLiveSessions is how many sessions one viewer keeps: a new one past it
// drops the oldest, whose next page is 410. A client that loops on first
// pages keeps this many snapshots, not one per page.
const MaxLiveSessions = 8

// SessionCleanup is how many expired sessions each new session deletes on
// its database: more than one, so the expired rows shrink whenever
// sessions are created, and few, so a first page pays little for them.
const SessionCleanup = 2

// CreateLiveSession stores a viewer's session with the server time of its
// snapshot and what the first page saw otherwise (snapshot), drops the
// viewer's sessions past the newest MaxLiveSessions, then deletes up to
// SessionCleanup expired sessions of the viewer's database (any viewer's),
// each by its primary key in a statement of its own, so the clean-up locks
// only the rows it deletes. It returns how many it dropped and deleted.
// Clean-up is amortised over the sessions created: expired rows never
// outnumber the sessions created within a TTL by more than those left when
// creation stops. First pages of one viewer at the same instant may each
// miss the other's new session and leave one more than MaxLiveSessions
// until the viewer's next first page.
func (s *Store) CreateLiveSession(ctx context.Context, userID, sessionID uint64, expiresAt, snapshotAt int64, snapshot []byte, now int64) (dropped, cleaned int, err error) {
	db := s.ShardOf(userID).pool(ctx)
	if _, err := db.ExecContext(ctx, insertLiveSessionSQL, userID, sessionID, expiresAt, snapshotAt, snapshot); err != nil {
		return 0, 0, wrap("create live session", err)
	}
	var mine []uint64
	if err := sqlx.SelectContext(ctx, db, &mine, viewerSessionsSQL, userID); err != nil {
		return 0, 0, wrap("drop live sessions", err)
	}
	for _, id := range mine[min(len(mine), MaxLiveSessions):] {
		gone, err := affected(db.ExecContext(ctx, deleteLiveSessionSQL, userID, id))
		if err != nil {
			return dropped, 0, wrap("drop live sessions", err)
		} else if gone {
			dropped++
		}
	}
	type key struct {
		UserID    uint64 `db:"user_id"`
		SessionID uint64 `db:"session_id"`
	}
	cleaned, err = deleteExpired(ctx, db, expiredSessionsSQL, deleteExpiredSessionSQL, now,
		func(k key) []any { return []any{k.UserID, k.SessionID} })
	return dropped, cleaned, wrap("clean live sessions", err)
}

// deleteExpired deletes up to SessionCleanup of the rows that list names
// as expired at now, each by its key with del (args gives the key's
// values; now comes last), a statement of its own, so the clean-up locks
// only the rows it deletes; it returns how many it deleted.
func deleteExpired[K any](ctx context.Context, db *sqlx.DB, list, del string, now int64, args func(K) []any) (int, error) {
	var expired []K
	if err := sqlx.SelectContext(ctx, db, &expired, list, now, SessionCleanup); err != nil {
		return 0, err
	}
	deleted := 0
	for _, k := range expired {
		gone, err := affected(db.ExecContext(ctx, del, append(args(k), now)...))
		if err != nil {
			return deleted, err
		} else if gone {
			deleted++
		}
	}
	return deleted, nil
}

// GetLiveSession returns a viewer's session: the server time of its
// snapshot and what CreateLiveSession stored with it.
//
// Returns ESESSION if the session is unknown, expired at now, or stored in
// an earlier format (no snapshot time).
func (s *Store) GetLiveSession(ctx context.Context, userID, sessionID uint64, now int64) (snapshotAt int64, snapshot []byte, err error) {
	var row struct {
		ExpiresAt  int64         `db:"expires_at"`
		SnapshotAt sql.NullInt64 `db:"snapshot_at"`
		Snapshot   []byte        `db:"snapshot"`
	}
	err = sqlx.GetContext(ctx, s.ShardOf(userID).pool(ctx), &row, getLiveSessionSQL, userID, sessionID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (row.ExpiresAt < now || !row.SnapshotAt.Valid)) {
		return 0, nil, feed.Errorf(feed.ESESSION, "session expired or unknown: start again from the first page")
	}
	return row.SnapshotAt.Int64, row.Snapshot, wrap("get live session", err)
}

package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

const insertLiveSessionSQL = `INSERT INTO live_sessions (user_id, session_id, expires_at, snapshot) VALUES (?, ?, ?, ?)`

// expiredSessionsSQL reads a few expired sessions of the database, oldest
// first, without locks; clean-up then deletes each by its primary key.
const expiredSessionsSQL = `SELECT user_id, session_id FROM live_sessions WHERE expires_at < ? ORDER BY expires_at LIMIT ?`

const deleteExpiredSessionSQL = `DELETE FROM live_sessions WHERE user_id = ? AND session_id = ? AND expires_at < ?`

const getLiveSessionSQL = `SELECT expires_at, snapshot FROM live_sessions WHERE user_id = ? AND session_id = ?`

// SessionCleanup is how many expired sessions each new session deletes on
// its database: more than one, so the expired rows shrink whenever
// sessions are created, and few, so a first page pays little for them.
const SessionCleanup = 2

// CreateLiveSession stores a viewer's session with its snapshot, then
// deletes up to SessionCleanup expired sessions of the viewer's database
// (any viewer's), each by its primary key in a statement of its own, so the
// clean-up locks only the rows it deletes. It returns how many it deleted.
// Clean-up is amortised over the sessions created: expired rows never
// outnumber the sessions created within a TTL by more than those left when
// creation stops.
func (s *Store) CreateLiveSession(ctx context.Context, userID, sessionID uint64, expiresAt int64, snapshot []byte, now int64) (int, error) {
	db := s.ShardOf(userID).pool(ctx)
	if _, err := db.ExecContext(ctx, insertLiveSessionSQL, userID, sessionID, expiresAt, snapshot); err != nil {
		return 0, wrap("create live session", err)
	}
	var expired []struct {
		UserID    uint64 `db:"user_id"`
		SessionID uint64 `db:"session_id"`
	}
	if err := sqlx.SelectContext(ctx, db, &expired, expiredSessionsSQL, now, SessionCleanup); err != nil {
		return 0, wrap("clean live sessions", err)
	}
	deleted := 0
	for _, e := range expired {
		gone, err := affected(db.ExecContext(ctx, deleteExpiredSessionSQL, e.UserID, e.SessionID, now))
		if err != nil {
			return deleted, wrap("clean live sessions", err)
		} else if gone {
			deleted++
		}
	}
	return deleted, nil
}

// GetLiveSession returns the snapshot of a viewer's session.
//
// Returns ESESSION if the session is unknown or expired at now.
func (s *Store) GetLiveSession(ctx context.Context, userID, sessionID uint64, now int64) ([]byte, error) {
	var row struct {
		ExpiresAt int64  `db:"expires_at"`
		Snapshot  []byte `db:"snapshot"`
	}
	err := sqlx.GetContext(ctx, s.ShardOf(userID).pool(ctx), &row, getLiveSessionSQL, userID, sessionID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && row.ExpiresAt < now) {
		return nil, feed.Errorf(feed.ESESSION, "session expired or unknown: start again from the first page")
	}
	return row.Snapshot, wrap("get live session", err)
}

package store

import (
	"context"
	"database/sql"
	"errors"
)

// ConsoleSession is an operator's signed-in console session, on the
// database of its random id.
type ConsoleSession struct {
	ID         uint64 `db:"session_id"`
	SecretHash []byte `db:"secret_hash"` // SHA-256 of the cookie's secret
	TokenMAC   []byte `db:"token_mac"`   // of the token it signed in with
	CreatedAt  int64  `db:"created_at"`
	ExpiresAt  int64  `db:"expires_at"`
}

const (
	insertConsoleSessionSQL = `INSERT INTO console_sessions (session_id, secret_hash, token_mac, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`
	getConsoleSessionSQL    = `SELECT session_id, secret_hash, token_mac, created_at, expires_at FROM console_sessions WHERE session_id = ?`
	deleteConsoleSessionSQL = `DELETE FROM console_sessions WHERE session_id = ?`
	// expiredConsoleSessionsSQL reads a few expired sessions of the
	// database, oldest first, without locks; each is then deleted by its
	// primary key.
	expiredConsoleSessionsSQL      = `SELECT session_id FROM console_sessions WHERE expires_at < ? ORDER BY expires_at LIMIT ?`
	deleteExpiredConsoleSessionSQL = `DELETE FROM console_sessions WHERE session_id = ? AND expires_at < ?`
)

// CreateConsoleSession stores the session, then deletes up to
// SessionCleanup expired sessions of its database, as CreateLiveSession
// does, and returns how many it deleted.
func (s *Store) CreateConsoleSession(ctx context.Context, cs ConsoleSession, now int64) (int, error) {
	db := s.ShardOf(cs.ID).pool(ctx)
	if _, err := db.ExecContext(ctx, insertConsoleSessionSQL, cs.ID, cs.SecretHash, cs.TokenMAC, cs.CreatedAt, cs.ExpiresAt); err != nil {
		return 0, wrap("create console session", err)
	}
	n, err := deleteExpired(ctx, db, expiredConsoleSessionsSQL, deleteExpiredConsoleSessionSQL, now,
		func(id uint64) []any { return []any{id} })
	return n, wrap("clean console sessions", err)
}

// GetConsoleSession returns the session with the id; ok is false if there
// is none.
func (s *Store) GetConsoleSession(ctx context.Context, id uint64) (cs ConsoleSession, ok bool, err error) {
	err = s.ShardOf(id).pool(ctx).GetContext(ctx, &cs, getConsoleSessionSQL, id)
	if errors.Is(err, sql.ErrNoRows) {
		return ConsoleSession{}, false, nil
	}
	return cs, err == nil, wrap("get console session", err)
}

// DeleteConsoleSession deletes the session with the id, if any.
func (s *Store) DeleteConsoleSession(ctx context.Context, id uint64) error {
	_, err := s.ShardOf(id).pool(ctx).ExecContext(ctx, deleteConsoleSessionSQL, id)
	return wrap("delete console session", err)
}

package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// Marker is a user's stored read marker.
type Marker struct {
	Key       feed.Key
	UpdatedAt int64 // Unix ms when it last moved
}

// advanceMarkerSQL creates the user's marker or moves it forward, never
// back, in one statement that locks the row. MySQL and MariaDB apply SET
// left to right, so updated_at and content_id are assigned while the row
// still holds the old position they compare with; publish_time goes last,
// and GREATEST is right for it whatever the ids.
const (
	advanceMarkerHead = `INSERT INTO markers (user_id, publish_time, content_id, updated_at)`
	advanceMarkerTail = `
ON DUPLICATE KEY UPDATE
  updated_at = IF(VALUES(publish_time) > publish_time OR (VALUES(publish_time) = publish_time AND VALUES(content_id) > content_id), VALUES(updated_at), updated_at),
  content_id = IF(VALUES(publish_time) > publish_time OR (VALUES(publish_time) = publish_time AND VALUES(content_id) > content_id), VALUES(content_id), content_id),
  publish_time = GREATEST(publish_time, VALUES(publish_time))`
	advanceMarkerSQL = advanceMarkerHead + ` VALUES (?, ?, ?, ?)` + advanceMarkerTail
)

const getMarkerSQL = `SELECT publish_time, content_id, updated_at FROM markers WHERE user_id = ?`

// lockMarkerSQL reads the marker an advance just upserted: a locking read
// of the row the upsert holds, since an advance that changed nothing left
// no write of its own to read, and TiDB's snapshot predates the upsert.
const lockMarkerSQL = getMarkerSQL + ` FOR UPDATE`

type markerRow struct {
	T  int64  `db:"publish_time"`
	ID uint64 `db:"content_id"`
	At int64  `db:"updated_at"`
}

// AdvanceMarker moves the user's marker forward to k (a key older than the
// stored one leaves it) and returns the stored marker, in one transaction
// on the user's shard.
func (s *Store) AdvanceMarker(ctx context.Context, userID uint64, k feed.Key, now int64) (Marker, error) {
	ctx = s.pin(ctx)
	var m Marker
	err := s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, advanceMarkerSQL, userID, k.PublishTime, k.ContentID, now); err != nil {
			return err
		}
		var err error
		m, _, err = getMarker(tx.QueryRowxContext(ctx, lockMarkerSQL, userID))
		return err
	})
	return m, wrap("advance marker", err)
}

// GetMarker returns the user's marker; ok is false when the user never set one.
func (s *Store) GetMarker(ctx context.Context, userID uint64) (m Marker, ok bool, err error) {
	st, err := s.ShardOf(userID).hotStmt(ctx, markerRead)
	if err == nil {
		m, ok, err = getMarker(st.QueryRowxContext(ctx, userID))
	}
	return m, ok, wrap("get marker", err)
}

// getMarker scans a marker row, of getMarkerSQL's columns.
func getMarker(row *sqlx.Row) (Marker, bool, error) {
	var r markerRow
	err := row.StructScan(&r)
	if errors.Is(err, sql.ErrNoRows) {
		return Marker{}, false, nil
	} else if err != nil {
		return Marker{}, false, err
	}
	return Marker{Key: feed.Key{PublishTime: r.T, ContentID: r.ID}, UpdatedAt: r.At}, true, nil
}

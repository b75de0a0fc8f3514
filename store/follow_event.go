package store

import (
	"context"
	"slices"

	"github.com/jmoiron/sqlx"
)

// The follow_events queue: a follow or unfollow on the user's database,
// applied to the author's followers and count on the author's database
// and then backfilled, idempotently, by whoever claims it.

// FollowEvent is a claimed follow or unfollow, to reconcile.
type FollowEvent struct {
	UserID   uint64 `db:"user_id"`
	AuthorID uint64 `db:"author_id"`
	Version  int64  `db:"version"`
	Token    uint64 `db:"-"`
}

var followEventClaims = claimTable{
	table: "follow_events",
	cols:  "user_id, author_id, version",
	key:   []string{"user_id", "author_id"},
	ready: "1 = 1",
}

// ClaimFollowEvents leases up to limit follow events of the shard.
func (s *Store) ClaimFollowEvents(ctx context.Context, sh *Shard, now, leaseUntil int64, limit int, token uint64) ([]FollowEvent, error) {
	ctx = s.pin(ctx)
	return claim[FollowEvent](ctx, s, sh, followEventClaims, now, leaseUntil, limit, token)
}

func (j *FollowEvent) claimKey() []any { return []any{j.UserID, j.AuthorID} }

func (j *FollowEvent) placingID() uint64 { return j.UserID }

func (j *FollowEvent) setToken(token uint64) { j.Token = token }

const (
	finishFollowEventsHead = `DELETE FROM follow_events WHERE `
	releaseFollowEventsSQL = `UPDATE follow_events SET claim_token = 0, claimed_until = 0 WHERE `
)

// FinishFollowEvents deletes the events (all of sh) that no newer
// operation changed while they were applied, and releases the others, so
// that they run again and reconcile with the newest state; with one
// statement a chunk, two when some changed. It reports how many it released.
func (s *Store) FinishFollowEvents(ctx context.Context, sh *Shard, evs []FollowEvent) (int64, error) {
	ctx = s.pin(ctx)
	db := sh.pool(ctx)
	var released int64
	for chunk := range slices.Chunk(evs, followChunk) {
		del := make([]any, 0, 4*len(chunk))
		for _, ev := range chunk {
			del = append(del, ev.UserID, ev.AuthorID, ev.Version, ev.Token)
		}
		deleted, err := rowsAffected(db.ExecContext(ctx, finishFollowEventsHead+keyIn([]string{"user_id", "author_id", "version", "claim_token"}, len(chunk)), del...))
		if err != nil {
			return released, wrap("finish follow events", err)
		}
		if deleted == int64(len(chunk)) {
			continue // none changed meanwhile
		}
		n, err := releaseFollowEvents(ctx, db, chunk)
		if err != nil {
			return released, wrap("finish follow events", err)
		}
		released += n
	}
	return released, nil
}

// ReleaseFollowEvents gives claimed events (all of sh) back for any worker
// to retry, with one statement a chunk; an event whose claim has passed to
// another worker stays with it.
func (s *Store) ReleaseFollowEvents(ctx context.Context, sh *Shard, evs []FollowEvent) error {
	ctx = s.pin(ctx)
	db := sh.pool(ctx)
	for chunk := range slices.Chunk(evs, followChunk) {
		if _, err := releaseFollowEvents(ctx, db, chunk); err != nil {
			return wrap("release follow events", err)
		}
	}
	return nil
}

func releaseFollowEvents(ctx context.Context, db *sqlx.DB, evs []FollowEvent) (int64, error) {
	args := make([]any, 0, 3*len(evs))
	for _, ev := range evs {
		args = append(args, ev.UserID, ev.AuthorID, ev.Token)
	}
	return rowsAffected(db.ExecContext(ctx, releaseFollowEventsSQL+keyIn([]string{"user_id", "author_id", "claim_token"}, len(evs)), args...))
}

const pendingOfAuthorSQL = `SELECT author_id FROM follow_events WHERE author_id = ? LIMIT 1`

// FollowEventsPending reports whether some follow or unfollow of the
// author, on any database, has its event not applied yet: the author's
// followers list does not show it yet. It scans each database's queue,
// which holds only the events not yet applied.
func (s *Store) FollowEventsPending(ctx context.Context, authorID uint64) (bool, error) {
	for _, sh := range s.shards {
		var found []uint64
		if err := sqlx.SelectContext(ctx, sh.pool(ctx), &found, pendingOfAuthorSQL, authorID); err != nil {
			return false, wrap("follow events pending", err)
		}
		if len(found) > 0 {
			return true, nil
		}
	}
	return false, nil
}

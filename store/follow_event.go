package store

import "context"

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

const finishFollowEventSQL = `DELETE FROM follow_events WHERE user_id = ? AND author_id = ? AND version = ? AND claim_token = ?`

// FinishFollowEvent deletes the event if no newer operation arrived while it
// was applied; otherwise it releases the claim so the event runs again and
// reconciles with the newest state. It reports whether the event is gone.
func (s *Store) FinishFollowEvent(ctx context.Context, ev FollowEvent) (bool, error) {
	ctx = s.pin(ctx)
	db := s.ShardOf(ev.UserID).pool(ctx)
	r, err := db.ExecContext(ctx, finishFollowEventSQL, ev.UserID, ev.AuthorID, ev.Version, ev.Token)
	if err != nil {
		return false, wrap("finish follow event", err)
	}
	if n, err := r.RowsAffected(); err != nil || n == 1 {
		return n == 1, wrap("finish follow event", err)
	}
	return false, s.ReleaseFollowEvent(ctx, ev)
}

// ReleaseFollowEvent gives a claimed event back for any worker to retry.
func (s *Store) ReleaseFollowEvent(ctx context.Context, ev FollowEvent) error {
	ctx = s.pin(ctx)
	return release(ctx, s.ShardOf(ev.UserID).pool(ctx), followEventClaims, ev.claimKey(), ev.Token)
}

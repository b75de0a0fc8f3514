package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// Backlog counts queued work over all shards.
type Backlog struct {
	Deliveries   int64 `db:"deliveries"`    // not yet planned
	Tasks        int64 `db:"tasks"`         // fan-out sub-tasks not finished
	FollowEvents int64 `db:"follow_events"` // follow/unfollow not yet applied
	Switches     int64 `db:"switches"`      // authors switching to pull mode
	Moves        int64 `db:"moves"`         // account moves not done
}

// Idle reports whether nothing is queued.
func (b Backlog) Idle() bool {
	return b.Deliveries+b.Tasks+b.FollowEvents+b.Switches+b.Moves == 0
}

const backlogSQL = `SELECT
 (SELECT COUNT(*) FROM deliveries WHERE state = ` + deliveryPendingSQL + `) AS deliveries,
 (SELECT COUNT(*) FROM fanout_tasks WHERE done = 0) AS tasks,
 (SELECT COUNT(*) FROM follow_events) AS follow_events,
 (SELECT COUNT(*) FROM authors WHERE mode = ` + authorSwitchingSQL + `) AS switches,
 (SELECT COUNT(*) FROM moves WHERE state < ` + moveDoneSQL + `) AS moves`

// Backlog returns the work queued on every shard: for tests waiting for the
// system to come to rest, and for operators.
func (s *Store) Backlog(ctx context.Context) (Backlog, error) {
	var total Backlog
	for _, sh := range s.shards {
		b, err := sh.Backlog(ctx)
		if err != nil {
			return total, err
		}
		total.Deliveries += b.Deliveries
		total.Tasks += b.Tasks
		total.FollowEvents += b.FollowEvents
		total.Switches += b.Switches
		total.Moves += b.Moves
	}
	return total, nil
}

// Backlog returns the work queued on the shard (Store.Backlog sums them).
func (sh *Shard) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	err := sqlx.GetContext(ctx, sh.pool(ctx), &b, backlogSQL)
	return b, wrap("backlog", err)
}

// idleSQL asks whether the shard has no work queued, as Backlog.Idle
// would, stopping at the first queued row of each queue where Backlog
// counts them all.
const idleSQL = `SELECT NOT (
 EXISTS (SELECT 1 FROM deliveries WHERE state = ` + deliveryPendingSQL + `) OR
 EXISTS (SELECT 1 FROM fanout_tasks WHERE done = 0) OR
 EXISTS (SELECT 1 FROM follow_events) OR
 EXISTS (SELECT 1 FROM authors WHERE mode = ` + authorSwitchingSQL + `) OR
 EXISTS (SELECT 1 FROM moves WHERE state < ` + moveDoneSQL + `))`

// Idle reports whether no shard has work queued: Backlog(ctx).Idle() at
// the cost of a look at each queue's first row, for waiting on the system
// to come to rest while it works.
func (s *Store) Idle(ctx context.Context) (bool, error) {
	for _, sh := range s.shards {
		var idle bool
		if err := sqlx.GetContext(ctx, sh.pool(ctx), &idle, idleSQL); err != nil {
			return false, wrap("idle", err)
		}
		if !idle {
			return false, nil
		}
	}
	return true, nil
}

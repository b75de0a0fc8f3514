package store

import (
	"context"
	"strings"

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

// backlogQueues are the queues Backlog counts, each its column of Backlog
// and the rows of its queued work: backlogSQL counts them, idleSQL looks
// for the first of each.
var backlogQueues = [][2]string{
	{"deliveries", "deliveries WHERE state = " + deliveryPendingSQL},
	{"tasks", "fanout_tasks WHERE done = 0"},
	{"follow_events", "follow_events"},
	{"switches", "authors WHERE mode = " + authorSwitchingSQL},
	{"moves", "moves WHERE state < " + moveDoneSQL},
}

var backlogSQL, idleSQL = func() (string, string) {
	var counts, exists []string
	for _, q := range backlogQueues {
		counts = append(counts, "(SELECT COUNT(*) FROM "+q[1]+") AS "+q[0])
		exists = append(exists, "EXISTS (SELECT 1 FROM "+q[1]+")")
	}
	return "SELECT " + strings.Join(counts, ", "), "SELECT NOT (" + strings.Join(exists, " OR ") + ")"
}()

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

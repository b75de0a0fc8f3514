package store

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// The reads of the operator's console: what each database holds and queues,
// the deliveries under way, tasks that keep losing their lease, and where a
// user's feed items come from. None of them is on a request path of the API.

// TableSize is the server's estimate of a table: InnoDB's TABLE_ROWS is a
// sampled estimate, the bytes are the data and index pages it occupies.
type TableSize struct {
	Rows  int64 `db:"table_rows"`
	Bytes int64 `db:"bytes"`
}

const tableSizesSQL = `SELECT TABLE_NAME AS table_name, COALESCE(TABLE_ROWS, 0) AS table_rows,
 COALESCE(DATA_LENGTH, 0) + COALESCE(INDEX_LENGTH, 0) AS bytes
FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'`

// TableSizes returns the size of every table of the shard's database, from
// the server's statistics (no table is scanned).
func (sh *Shard) TableSizes(ctx context.Context) (map[string]TableSize, error) {
	var rows []struct {
		Name string `db:"table_name"`
		TableSize
	}
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, tableSizesSQL); err != nil {
		return nil, wrap("table sizes", err)
	}
	out := make(map[string]TableSize, len(rows))
	for _, r := range rows {
		out[r.Name] = r.TableSize
	}
	return out, nil
}

// DeliveryRow is a delivery as the console lists it. Delivered sums the
// tasks' counts while the delivery runs.
type DeliveryRow struct {
	ContentID  uint64
	AuthorID   uint64
	State      string // feed.DeliveryPending, DeliveryRunning or DeliveryDone
	Mode       string // feed.ModePush, ModePushActive or ModePull
	Retract    bool
	Recipients int64
	Delivered  int64
	TasksLeft  int
	CreatedAt  int64 // Unix ms of the publish
}

type deliveryRow struct {
	ContentID  uint64 `db:"content_id"`
	AuthorID   uint64 `db:"author_id"`
	State      int    `db:"state"`
	Mode       int    `db:"mode"`
	Retract    bool   `db:"retract"`
	Recipients int64  `db:"recipients"`
	Delivered  int64  `db:"delivered"`
	TasksLeft  int    `db:"tasks_left"`
	CreatedAt  int64  `db:"created_at"`
}

// deliveriesOpenSQL lists the deliveries not done through the claim index
// (state, claimed_until); deliveriesRecentSQL the newest by content id, the
// primary key: server-assigned ids grow with time.
const (
	deliveryRowCols = `d.content_id, d.author_id, d.state, d.mode, d.retract, d.recipients, d.tasks_left, d.created_at,
 CASE WHEN d.state = ` + deliveryRunningSQL + ` THEN (SELECT COALESCE(SUM(t.delivered), 0) FROM fanout_tasks t WHERE t.content_id = d.content_id) ELSE d.delivered END AS delivered`
	deliveriesOpenSQL   = `SELECT ` + deliveryRowCols + ` FROM deliveries d WHERE d.state < ` + deliveryDoneSQL + ` ORDER BY d.state DESC, d.created_at LIMIT ?`
	deliveriesRecentSQL = `SELECT ` + deliveryRowCols + ` FROM deliveries d ORDER BY d.content_id DESC LIMIT ?`
)

// Deliveries returns up to limit deliveries of the shard that are not done,
// running first, then up to limit of its newest ones (by content id) that
// the first list does not hold.
func (s *Store) Deliveries(ctx context.Context, sh *Shard, limit int) ([]DeliveryRow, error) {
	var open, recent []deliveryRow
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &open, deliveriesOpenSQL, limit); err != nil {
		return nil, wrap("list deliveries", err)
	}
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &recent, deliveriesRecentSQL, limit); err != nil {
		return nil, wrap("list deliveries", err)
	}
	seen := map[uint64]bool{}
	out := make([]DeliveryRow, 0, len(open)+len(recent))
	for _, d := range append(open, recent...) {
		// A copy a reshard left behind is not this database's.
		if seen[d.ContentID] || s.ShardOf(d.AuthorID) != sh {
			continue
		}
		seen[d.ContentID] = true
		out = append(out, DeliveryRow{ContentID: d.ContentID, AuthorID: d.AuthorID,
			State: [...]string{feed.DeliveryPending, feed.DeliveryRunning, feed.DeliveryDone}[min(max(d.State, 0), 2)],
			Mode:  modeNames[d.Mode], Retract: d.Retract, Recipients: d.Recipients, Delivered: d.Delivered,
			TasksLeft: d.TasksLeft, CreatedAt: d.CreatedAt})
	}
	return out, nil
}

// StuckTask is a fan-out task not done that was claimed again and again:
// each claim after the first took it over from a worker whose lease ran
// out (or that gave it back on a stop).
type StuckTask struct {
	ContentID    uint64 `db:"content_id"`
	Seq          int    `db:"seq"`
	AuthorID     uint64 `db:"author_id"`
	Target       string `db:"target"`
	Attempts     int    `db:"attempts"`
	Delivered    int64  `db:"delivered"`
	ClaimedUntil int64  `db:"claimed_until"`
}

// stuckTasksSQL reads the tasks not done through idx_fanout_tasks_claim.
const stuckTasksSQL = `SELECT content_id, seq, author_id, target, attempts, delivered, claimed_until
FROM fanout_tasks WHERE done = 0 AND attempts >= ? ORDER BY attempts DESC, content_id, seq LIMIT ?`

// StuckTasks returns up to limit tasks of the shard, not done, claimed at
// least minAttempts times.
func (s *Store) StuckTasks(ctx context.Context, sh *Shard, minAttempts, limit int) ([]StuckTask, error) {
	var out []StuckTask
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &out, stuckTasksSQL, minAttempts, limit); err != nil {
		return nil, wrap("stuck tasks", err)
	}
	return out, nil
}

// retryTaskSQL ends the task's lease, so the next worker to poll claims it
// and resumes at its progress mark; the worker that held it finds its
// claim gone at its next batch (lockClaimedTaskSQL) and drops it. The
// attempts start over, so the task leaves the stuck list unless it gets
// stuck again.
const retryTaskSQL = `UPDATE fanout_tasks SET claim_token = 0, claimed_until = 0, attempts = 0
WHERE content_id = ? AND seq = ? AND author_id = ? AND done = 0`

// RetryTask makes a fan-out task claimable at once.
//
// Returns ENOTFOUND if the author's database holds no such task not done.
func (s *Store) RetryTask(ctx context.Context, authorID, contentID uint64, seq int) error {
	ok, err := affected(s.ShardOf(authorID).pool(ctx).ExecContext(ctx, retryTaskSQL, contentID, seq, authorID))
	if err != nil {
		return wrap("retry task", err)
	}
	if !ok {
		return feed.Errorf(feed.ENOTFOUND, "no unfinished task %d of post %d of author %d", seq, contentID, authorID)
	}
	return nil
}

// ReshardMark is a database's record of a reshard under way.
type ReshardMark struct {
	Layout    string `db:"layout"`
	StartedAt int64  `db:"started_at"`
}

const reshardMarkSQL = `SELECT layout, started_at FROM reshard WHERE id = 0`

// ReshardMark returns the shard's record of a reshard under way, and false
// when it records none.
func (sh *Shard) ReshardMark(ctx context.Context) (ReshardMark, bool, error) {
	var m []ReshardMark
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &m, reshardMarkSQL); err != nil {
		return ReshardMark{}, false, wrap("reshard mark", err)
	}
	if len(m) == 0 {
		return ReshardMark{}, false, nil
	}
	return m[0], true, nil
}

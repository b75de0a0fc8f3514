package store

import (
	"context"
	"database/sql"
	"errors"
	"math"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// Delivery states (deliveries.state).
const (
	deliveryPending = 0
	deliveryRunning = 1
	deliveryDone    = 2
)

// Delivery modes (deliveries.mode, fanout_tasks.mode).
const (
	ModePush       = 0 // every follower
	ModePushActive = 1 // followers active recently; the others pull
	ModePull       = 2 // nobody: every follower pulls
)

var modeNames = map[int]string{ModePush: feed.ModePush, ModePushActive: feed.ModePushActive, ModePull: feed.ModePull}

// DeliveryJob is a claimed delivery waiting to be planned.
type DeliveryJob struct {
	ContentID uint64 `db:"content_id"`
	AuthorID  uint64 `db:"author_id"`
	Token     uint64 `db:"-"`
}

var deliveryClaims = claimTable{
	table: "deliveries",
	cols:  "content_id, author_id",
	key:   []string{"content_id"},
	ready: "state = 0",
}

// ClaimDeliveries leases up to limit unplanned deliveries of the shard.
func (s *Store) ClaimDeliveries(ctx context.Context, sh *Shard, now, leaseUntil int64, limit int, token uint64) ([]DeliveryJob, error) {
	return claim[DeliveryJob](ctx, sh.DB, deliveryClaims, now, leaseUntil, limit, token)
}

func (j *DeliveryJob) claimKey() []any { return []any{j.ContentID} }

func (j *DeliveryJob) setToken(token uint64) { j.Token = token }

// PlanOptions decide how a delivery fans out.
type PlanOptions struct {
	TaskSize int  // followers per task
	PullOnly bool // pull authors push to nobody (active window of zero days)
}

// PlanResult reports what planning decided.
type PlanResult struct {
	Mode       int
	Recipients int64
	Tasks      int
}

const lockClaimedDeliverySQL = `SELECT publish_time, kind, retract FROM deliveries
WHERE content_id = ? AND claim_token = ? AND state = 0 FOR UPDATE`

const authorModeSQL = `SELECT mode FROM authors WHERE author_id = ?`

const streamFollowersSQL = `SELECT user_id FROM followers WHERE author_id = ? ORDER BY user_id`

const insertTasksHead = `INSERT INTO fanout_tasks (content_id, seq, author_id, publish_time, kind, mode, retract, lo, hi, last_user)`

const finishPlanSQL = `UPDATE deliveries SET state = ?, mode = ?, recipients = ?, delivered = ?, claim_token = 0, claimed_until = 0
WHERE content_id = ? AND claim_token = ?`

// taskInsertChunk bounds the rows of one multi-row task insert.
const taskInsertChunk = 500

// PlanDelivery splits a claimed delivery into tasks of opt.TaskSize
// followers each, in user_id order, in one transaction on the author's shard.
// A pull-mode post (or one with no followers) needs no task and is done at
// once, unless it is a retraction: that always sweeps every follower, since a
// follow backfill may have copied the post anywhere.
//
// Returns ErrLostClaim if the job's lease was taken over.
func (s *Store) PlanDelivery(ctx context.Context, job DeliveryJob, opt PlanOptions) (PlanResult, error) {
	var res PlanResult
	err := inTx(ctx, s.ShardOf(job.AuthorID).DB, func(tx *sqlx.Tx) error {
		res = PlanResult{}
		var d struct {
			PublishTime int64  `db:"publish_time"`
			Kind        string `db:"kind"`
			Retract     bool   `db:"retract"`
		}
		err := sqlx.GetContext(ctx, tx, &d, lockClaimedDeliverySQL, job.ContentID, job.Token)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrLostClaim
		} else if err != nil {
			return err
		}
		var authorMode int
		if err := tx.GetContext(ctx, &authorMode, authorModeSQL, job.AuthorID); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		res.Mode = ModePush
		if authorMode == AuthorPull {
			res.Mode = ModePushActive
			if opt.PullOnly {
				res.Mode = ModePull
			}
		}
		var bounds []uint64 // hi of each task
		rows, err := tx.QueryContext(ctx, streamFollowersSQL, job.AuthorID)
		if err != nil {
			return err
		}
		var last uint64
		for rows.Next() {
			if err := rows.Scan(&last); err != nil {
				rows.Close()
				return err
			}
			res.Recipients++
			if res.Recipients%int64(opt.TaskSize) == 0 {
				bounds = append(bounds, last)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		needsTasks := res.Recipients > 0 && (d.Retract || res.Mode != ModePull)
		state, delivered := deliveryRunning, int64(0)
		if !needsTasks {
			state = deliveryDone
			if res.Mode == ModePull {
				delivered = res.Recipients
			}
		} else {
			// The last task is open-ended: followers that arrive later are
			// covered by their follow backfill, and the range stays total.
			if len(bounds) == 0 || bounds[len(bounds)-1] != last {
				bounds = append(bounds, last)
			}
			bounds[len(bounds)-1] = math.MaxUint64
			res.Tasks = len(bounds)
			retract := 0
			if d.Retract {
				retract = 1
			}
			for start := 0; start < len(bounds); start += taskInsertChunk {
				end := min(start+taskInsertChunk, len(bounds))
				args := make([]any, 0, 10*(end-start))
				for i := start; i < end; i++ {
					lo := uint64(0)
					if i > 0 {
						lo = bounds[i-1]
					}
					args = append(args, job.ContentID, i, job.AuthorID, d.PublishTime, d.Kind, res.Mode, retract, lo, bounds[i], lo)
				}
				if _, err := tx.ExecContext(ctx, multiRowInsert(insertTasksHead, 10, end-start, ""), args...); err != nil {
					return err
				}
			}
		}
		_, err = tx.ExecContext(ctx, finishPlanSQL, state, res.Mode, res.Recipients, delivered, job.ContentID, job.Token)
		return err
	})
	return res, wrap("plan delivery", err)
}

// ErrLostClaim means a worker's lease on a row ended and another worker may
// own it now: the worker must drop the row without writing.
var ErrLostClaim = errors.New("store: claim lost")

// Task is a claimed fan-out sub-task: followers in (Lo, Hi] of one post.
type Task struct {
	ContentID   uint64 `db:"content_id"`
	Seq         int    `db:"seq"`
	AuthorID    uint64 `db:"author_id"`
	PublishTime int64  `db:"publish_time"`
	Kind        string `db:"kind"`
	Mode        int    `db:"mode"`
	Retract     bool   `db:"retract"`
	Lo          uint64 `db:"lo"`
	Hi          uint64 `db:"hi"`
	LastUser    uint64 `db:"last_user"`
	Token       uint64 `db:"-"`
}

var taskClaims = claimTable{
	table: "fanout_tasks",
	cols:  "content_id, seq, author_id, publish_time, kind, mode, retract, lo, hi, last_user",
	key:   []string{"content_id", "seq"},
	ready: "done = 0",
}

// ClaimTasks leases up to limit unfinished fan-out tasks of the shard.
func (s *Store) ClaimTasks(ctx context.Context, sh *Shard, now, leaseUntil int64, limit int, token uint64) ([]Task, error) {
	return claim[Task](ctx, sh.DB, taskClaims, now, leaseUntil, limit, token)
}

func (j *Task) claimKey() []any { return []any{j.ContentID, j.Seq} }

func (j *Task) setToken(token uint64) { j.Token = token }

const followersPageSQL = `SELECT user_id FROM followers WHERE author_id = ? AND user_id > ? AND user_id <= ? ORDER BY user_id LIMIT ?`

// pushSQL writes the post into the inboxes of the listed users that follow
// its author at this instant. INSERT … SELECT takes shared locks on the
// following rows it reads (REPEATABLE READ), so it serialises with an
// unfollow's delete-and-purge: a post never lands after the purge.
const pushSQL = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)
SELECT f.user_id, ?, ?, ?, ? FROM following f WHERE f.user_id IN (?) AND f.author_id = ?`

// pushActiveSQL is pushSQL restricted to users who read their feed at or
// after a cutoff (as their header rows say): selective push for authors
// above the push threshold.
const pushActiveSQL = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)
SELECT f.user_id, ?, ?, ?, ? FROM following f JOIN inbox u
 ON u.user_id = f.user_id AND u.publish_time = 9223372036854775807 AND u.content_id = 18446744073709551615
WHERE f.user_id IN (?) AND f.author_id = ? AND u.last_read_at >= ?`

const retractSQL = `DELETE FROM inbox WHERE user_id IN (?) AND publish_time = ? AND content_id = ?`

// lockClaimedTaskSQL holds the task row for the batch if the caller still
// owns it in the same mode.
const lockClaimedTaskSQL = `SELECT seq FROM fanout_tasks
WHERE content_id = ? AND seq = ? AND claim_token = ? AND retract = ? AND done = 0 FOR UPDATE`

// advanceTaskSQL records a batch's progress on the task row the batch
// locked (and so still owns).
const advanceTaskSQL = `UPDATE fanout_tasks SET last_user = ?, delivered = delivered + ?, claimed_until = ?
WHERE content_id = ? AND seq = ?`

// finishTaskSQL marks a task whose followers are all written done, if the
// caller still owns it in the same mode.
const finishTaskSQL = `UPDATE fanout_tasks SET done = 1
WHERE content_id = ? AND seq = ? AND claim_token = ? AND retract = ? AND done = 0`

// tasksLeftSQL counts a post's unfinished tasks. It runs in a READ
// COMMITTED transaction that holds the delivery row, so it sees every
// sibling finished before (they commit before releasing that row) without
// locking the siblings' rows: a sibling in mid-batch holds its own. (A
// snapshot read at the start of a batch missed a sibling finished
// meanwhile, and the delivery stayed running forever.)
const tasksLeftSQL = `SELECT COUNT(*) FROM fanout_tasks WHERE content_id = ? AND done = 0`

const completeDeliverySQL = `UPDATE deliveries SET state = 2, delivered = (SELECT COALESCE(SUM(delivered), 0) FROM fanout_tasks WHERE content_id = ?)
WHERE content_id = ?`

const dropTasksSQL = `DELETE FROM fanout_tasks WHERE content_id = ?`

// BatchOptions tune one task batch.
type BatchOptions struct {
	Size        int   // followers per batch
	ActiveAfter int64 // push_active: users who read at or after this time (ms)
	LeaseUntil  int64 // the lease is extended to this with the progress mark
}

// BatchResult reports one batch.
type BatchResult struct {
	Users    []uint64 // followers processed
	Written  int64    // inbox rows added or removed
	TaskDone bool
}

// RunTaskBatch processes the next batch of a claimed task: it reads up to
// opt.Size followers after the progress mark, adds the post to (or, for a
// retraction, removes it from) their inboxes shard by shard, and advances the
// mark in the same transaction as the author-shard writes. With one shard that
// is a single transaction, so a crash at any instant loses and repeats
// nothing; with several, the other shards' writes commit first and are
// idempotent, so a replay after a crash writes nothing twice.
//
// Before writing any inbox the batch locks the task row and checks the
// claim: other shards' writes commit before the home transaction, so a
// stale claimant must stop before them, not at the progress update. The
// lock also holds a concurrent DeletePost until the batch commits, so the
// retraction it starts sweeps after these writes.
//
// The batch that reaches the task's end then finishes the task in a
// transaction of its own (see finishTask). A batch never locks the
// delivery row, so the tasks of one post run side by side.
//
// Returns ErrLostClaim if the lease ended or the post was deleted meanwhile.
// An error from the finish comes with the result of the batch, which
// committed.
func (s *Store) RunTaskBatch(ctx context.Context, t *Task, opt BatchOptions) (BatchResult, error) {
	var res BatchResult
	home := s.ShardOf(t.AuthorID)
	err := inTx(ctx, home.DB, func(tx *sqlx.Tx) error {
		res = BatchResult{}
		if err := sqlx.SelectContext(ctx, tx, &res.Users, followersPageSQL, t.AuthorID, t.LastUser, t.Hi, opt.Size); err != nil {
			return err
		}
		// Done when the followers ran out, or the batch reached the task's
		// last follower (every task but the last ends exactly on one), which
		// spares a task an empty batch just to find out.
		res.TaskDone = len(res.Users) < opt.Size || res.Users[len(res.Users)-1] >= t.Hi
		var seq int
		err := tx.GetContext(ctx, &seq, lockClaimedTaskSQL, t.ContentID, t.Seq, t.Token, t.Retract)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrLostClaim
		} else if err != nil {
			return err
		}
		for sh, users := range s.groupByShard(res.Users) {
			var n int64
			var err error
			if sh == home {
				n, err = writeInboxes(ctx, tx, t, users, opt.ActiveAfter)
			} else {
				err = inTx(ctx, sh.DB, func(otx *sqlx.Tx) error {
					n, err = writeInboxes(ctx, otx, t, users, opt.ActiveAfter)
					return err
				})
			}
			if err != nil {
				return err
			}
			res.Written += n
		}
		if len(res.Users) == 0 {
			return nil // nothing to record; the locked row proved the claim
		}
		mark := res.Users[len(res.Users)-1]
		if _, err := tx.ExecContext(ctx, advanceTaskSQL, mark, len(res.Users), opt.LeaseUntil,
			t.ContentID, t.Seq); err != nil {
			return err
		}
		t.LastUser = mark
		return nil
	})
	if err != nil {
		return BatchResult{}, wrap("run task batch", err)
	}
	if res.TaskDone {
		// The batch's writes stand even if the finish fails.
		return res, wrap("finish task", s.finishTask(ctx, home, t))
	}
	return res, nil
}

// finishTask marks a task whose followers are all written done and, if it
// was the post's last, completes the delivery and drops its tasks. It runs
// after the task's last batch committed, in its own transaction, which locks
// the delivery row before any task row (the order DeletePost uses): the
// finishers of one post queue there, while their batches did not. If it
// fails or the process dies first, the task keeps its progress mark at its
// end, and the next claimant's batch finds no follower left and finishes it.
func (s *Store) finishTask(ctx context.Context, home *Shard, t *Task) error {
	return inTxWith(ctx, home.DB, readCommitted, func(tx *sqlx.Tx) error {
		var state int
		if err := tx.GetContext(ctx, &state, lockDeliverySQL, t.ContentID); err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, finishTaskSQL, t.ContentID, t.Seq, t.Token, t.Retract)
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrLostClaim
		}
		var left int
		if err := tx.GetContext(ctx, &left, tasksLeftSQL, t.ContentID); err != nil || left > 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, completeDeliverySQL, t.ContentID, t.ContentID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, dropTasksSQL, t.ContentID)
		return err
	})
}

// writeInboxes adds t's post to (or, for a retraction, removes it from) the
// listed users' inboxes with one statement on ex, and returns the entries
// changed.
func writeInboxes(ctx context.Context, ex sqlx.ExtContext, t *Task, users []uint64, activeAfter int64) (int64, error) {
	var q string
	var args []any
	var err error
	switch {
	case t.Retract:
		q, args, err = sqlx.In(retractSQL, users, t.PublishTime, t.ContentID)
	case t.Mode == ModePushActive:
		q, args, err = sqlx.In(pushActiveSQL, t.PublishTime, t.ContentID, t.AuthorID, t.Kind, users, t.AuthorID, activeAfter)
	default:
		q, args, err = sqlx.In(pushSQL, t.PublishTime, t.ContentID, t.AuthorID, t.Kind, users, t.AuthorID)
	}
	if err != nil {
		return 0, err
	}
	r, err := ex.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// ReleaseTask gives a claimed task back so any worker can take it at once,
// as on shutdown or after a failed batch.
func (s *Store) ReleaseTask(ctx context.Context, t *Task) error {
	return release(ctx, s.ShardOf(t.AuthorID).DB, taskClaims, t.claimKey(), t.Token)
}

// ReleaseDelivery gives a claimed delivery back unplanned.
func (s *Store) ReleaseDelivery(ctx context.Context, job DeliveryJob) error {
	return release(ctx, s.ShardOf(job.AuthorID).DB, deliveryClaims, job.claimKey(), job.Token)
}

const deliveryStatusSQL = `SELECT state, mode, recipients, delivered FROM deliveries WHERE content_id = ? AND author_id = ?`

const tasksDeliveredSQL = `SELECT COALESCE(SUM(delivered), 0) FROM fanout_tasks WHERE content_id = ?`

// GetDelivery reports the fan-out progress of a post.
//
// Returns ENOTFOUND if the author never published contentID.
func (s *Store) GetDelivery(ctx context.Context, authorID, contentID uint64) (feed.Delivery, error) {
	db := s.ShardOf(authorID).DB
	var row struct {
		State      int   `db:"state"`
		Mode       int   `db:"mode"`
		Recipients int64 `db:"recipients"`
		Delivered  int64 `db:"delivered"`
	}
	err := sqlx.GetContext(ctx, db, &row, deliveryStatusSQL, contentID, authorID)
	if errors.Is(err, sql.ErrNoRows) {
		return feed.Delivery{}, feed.Errorf(feed.ENOTFOUND, "post %d of user %d not found", contentID, authorID)
	} else if err != nil {
		return feed.Delivery{}, wrap("get delivery", err)
	}
	d := feed.Delivery{Mode: modeNames[row.Mode], Recipients: row.Recipients, Delivered: row.Delivered}
	switch row.State {
	case deliveryPending:
		d.State = feed.DeliveryPending
	case deliveryRunning:
		d.State = feed.DeliveryRunning
		if err := db.GetContext(ctx, &d.Delivered, tasksDeliveredSQL, contentID); err != nil {
			return feed.Delivery{}, wrap("get delivery", err)
		}
	default:
		d.State = feed.DeliveryDone
	}
	return d, nil
}

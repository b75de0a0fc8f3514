package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// The fanout_tasks queue: a planned delivery's followers in ranges of task
// size, each leased to one worker and pushed batch by batch into the
// followers' inboxes, resumable from its last_user after any crash.

// ErrLostClaim means a worker's lease on a row ended and another worker may
// own it now: the worker must drop the row without writing.
var ErrLostClaim = errors.New("store: claim lost")

// Task is a claimed fan-out sub-task: the followers in (Lo, Hi] of one post
// whose inboxes live on the database named Target.
type Task struct {
	ContentID   uint64 `db:"content_id"`
	Seq         int    `db:"seq"`
	AuthorID    uint64 `db:"author_id"`
	Target      string `db:"target"`
	PublishTime int64  `db:"publish_time"`
	Kind        string `db:"kind"`
	Mode        int    `db:"mode"`
	Retract     bool   `db:"retract"`
	Lo          uint64 `db:"lo"`
	Hi          uint64 `db:"hi"`
	LastUser    uint64 `db:"last_user"`
	Epoch       int64  `db:"epoch"`
	Token       uint64 `db:"-"`
}

var taskClaims = claimTable{
	table: "fanout_tasks",
	cols:  "content_id, seq, author_id, target, publish_time, kind, mode, retract, lo, hi, last_user, epoch",
	key:   []string{"content_id", "seq"},
	ready: "done = 0",
}

func (j *Task) claimKey() []any { return []any{j.ContentID, j.Seq} }

// nextTaskSQL finds a ready task for the transaction of its first batch,
// which claims it (claimTaskSQL) and so holds its row: no other worker can
// start it meanwhile (they skip the row, or wait for it and find it leased),
// and a worker that dies mid-batch frees it with its connection. A
// task the batch does not finish leaves with a lease (claim_token,
// claimed_until) for its next batches. skip targets are left out: those of
// databases that are down or busy with as many batches as they may take.
func nextTaskSQL(skip int) string {
	q := "SELECT " + taskClaims.cols + " FROM fanout_tasks WHERE " + taskClaims.ready + " AND claimed_until < ?"
	if skip > 0 {
		q += " AND target NOT IN (" + placeholders(skip) + ")"
	}
	return q + " ORDER BY claimed_until LIMIT 1 FOR UPDATE SKIP LOCKED"
}

// claimTaskSQL claims the task nextTaskSQL found, if it is still ready.
const claimTaskSQL = `UPDATE fanout_tasks SET claim_token = ?, claimed_until = ?
WHERE content_id = ? AND seq = ? AND done = 0 AND claimed_until < ?`

// claimedTaskSQL reads the task claimTaskSQL just claimed.
var claimedTaskSQL = "SELECT " + taskClaims.cols + " FROM fanout_tasks WHERE content_id = ? AND seq = ?"

const followersPageSQL = `SELECT user_id FROM followers WHERE author_id = ? AND user_id > ? AND user_id <= ? ORDER BY user_id LIMIT ?`

// batchFollowersSQL is a batch's followers page: a plain read, which in the
// batch's READ COMMITTED transaction reads the latest committed rows and
// keeps no snapshot, so the delivery row the batch updates last is not
// checked against one (MariaDB's innodb_snapshot_isolation, error 1020).
// It locks nothing: the tasks of other targets over the same range read the
// same page, and one whose target stalls must not hold them back.
const batchFollowersSQL = followersPageSQL

// pushSQL writes the post into the inboxes of the users who follow its
// author in the batch's range. That includes a follow whose event has not
// reached the followers list yet; its backfill would copy the post too, and
// INSERT IGNORE keeps one copy.
const pushSQL = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)
SELECT f.user_id, ?, ?, ?, ? FROM following f FORCE INDEX (PRIMARY)
WHERE f.author_id = ? AND f.user_id > ? AND f.user_id <= ? AND f.muted = 0 AND ` + historyShowsParamSQL + ` FOR UPDATE`

// historyShowsParamSQL keeps the edges whose history bound (a follow made
// with a copy limit) lets the post in, the post's key given as parameters
// (publish_time twice, then content_id): a post backdated below the bound
// stays out of the inbox as it stays out of every merged read.
const historyShowsParamSQL = `(f.history_time IS NULL OR f.history_time < ? OR (f.history_time = ? AND f.history_id <= ?))`

// pushActiveSQL is pushSQL restricted to users who read their feed at or
// after a cutoff (as their header rows say): selective push for authors
// above the push threshold. STRAIGHT_JOIN fixes the order, edges then
// headers, so the locks are taken in that order whatever the statistics say.
// The headers are locked too (FOR UPDATE covers every table read): a feed
// read's activity mark waits for the batch, as it would for a shared lock.
const pushActiveSQL = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)
SELECT f.user_id, ?, ?, ?, ? FROM following f FORCE INDEX (PRIMARY) STRAIGHT_JOIN inbox u
 ON u.user_id = f.user_id AND u.publish_time = 9223372036854775807 AND u.content_id = 18446744073709551615
WHERE f.author_id = ? AND f.user_id > ? AND f.user_id <= ? AND f.muted = 0 AND u.last_read_at >= ? AND ` + historyShowsParamSQL + ` FOR UPDATE`

// retractSQL removes the post from the inboxes of the users who follow its
// author in the batch's range, and retractKeptSQL from those of the users
// whose unfollow kept the author's posts (kept_history): every inbox that
// can hold it, since any other unfollow purges the author's posts and
// pushes reach only live edges. The edges are read first: an unfollow that
// keeps the posts deletes the edge and writes the kept row in one
// transaction, so a batch that finds the edge gone finds the kept row; a
// follow leaves the kept row in place.
const (
	retractSQL = `DELETE i FROM following f FORCE INDEX (PRIMARY) STRAIGHT_JOIN inbox i
 ON i.user_id = f.user_id AND i.publish_time = ? AND i.content_id = ?
WHERE f.author_id = ? AND f.user_id > ? AND f.user_id <= ?`
	retractKeptSQL = `DELETE i FROM kept_history k FORCE INDEX (PRIMARY) STRAIGHT_JOIN inbox i
 ON i.user_id = k.user_id AND i.publish_time = ? AND i.content_id = ?
WHERE k.author_id = ? AND k.user_id > ? AND k.user_id <= ?`
)

// lockClaimedTaskSQL holds the task row for the batch if the caller still
// owns it in the same mode.
const lockClaimedTaskSQL = `SELECT seq FROM fanout_tasks
WHERE content_id = ? AND seq = ? AND claim_token = ? AND retract = ? AND done = 0 FOR UPDATE`

// advanceTaskSQL records a batch's progress on the task row the batch
// locked (and so owns): the progress mark, the lease for the next batch
// and, at the task's end, done.
const advanceTaskSQL = `UPDATE fanout_tasks SET last_user = ?, delivered = delivered + ?, done = ?,
 claim_token = ?, claimed_until = ?, attempts = attempts + ?
WHERE content_id = ? AND seq = ?`

// taskFinishedSQL counts a finished task off its delivery unless it is the
// post's last one, which completeDeliverySQL counts off instead: a finishing
// batch that leaves siblings running needs this one statement (no match
// means the task was the last). The delivery row is the last lock a batch
// takes, so the tasks of one post run side by side and queue only for this
// update, their commit, and the first edge of the next task's range, which
// InnoDB locks as the end of a range scan even under READ COMMITTED.
const taskFinishedSQL = `UPDATE deliveries SET tasks_left = tasks_left - 1 WHERE content_id = ? AND tasks_left > 1`

// completeDeliverySQL counts the last task off and completes the delivery;
// a retraction records when it finished in claimed_until, where the
// tombstones' sweep finds it (PurgeTombstones). Every other task counted
// itself off before, under the delivery row's lock and committed. The sum
// is a locking read (FOR UPDATE in the subquery): latest committed rows,
// not the snapshot, on every engine, so it sees their final counts; the
// batch deletes those rows next anyway.
const completeDeliverySQL = `UPDATE deliveries SET tasks_left = 0, state = ` + deliveryDoneSQL + `, claimed_until = IF(retract = 1, ?, 0),
 delivered = (SELECT COALESCE(SUM(delivered), 0) FROM fanout_tasks WHERE content_id = ? FOR UPDATE)
WHERE content_id = ? AND tasks_left = 1`

const deliveryCreatedSQL = `SELECT created_at FROM deliveries WHERE content_id = ?`

const dropTasksSQL = `DELETE FROM fanout_tasks WHERE content_id = ?`

// replanSQL sends a running delivery back to planning, its tasks dropped.
const replanSQL = `UPDATE deliveries SET state = ` + deliveryPendingSQL + `, delivered = 0, tasks_left = 0, claim_token = 0, claimed_until = 0
WHERE content_id = ? AND state = ` + deliveryRunningSQL

// BatchOptions tune one task batch.
type BatchOptions struct {
	Size        int   // followers per batch
	ActiveAfter int64 // push_active: users who read at or after this time (ms)
	Now         int64 // Unix ms: when a retraction finishing in the batch finished
	LeaseUntil  int64 // the lease is extended to this with the progress mark
	// Skip names databases whose tasks RunNextTask leaves alone.
	Skip []string
	// Enter, if set, admits a batch to write to another database than the
	// author's; false refuses it (ErrTargetBusy). leave is called when the
	// write is over. It bounds the workers one slow database can hold.
	Enter func(target *Shard) (leave func(), ok bool)
	// TargetTimeout bounds a batch's write to another database than the
	// author's (0: none), so a database that hangs holds a worker that long.
	TargetTimeout time.Duration
}

// ErrTargetBusy means a batch was not admitted to its target database
// (BatchOptions.Enter): it wrote nothing, and the task is left for later.
var ErrTargetBusy = errors.New("store: target database busy")

// BatchResult reports one batch.
type BatchResult struct {
	Users    []uint64 // followers processed on the task's target
	Written  int64    // inbox rows added or removed
	TaskDone bool
	// Replanned says the task was planned under another layout epoch: it
	// wrote nothing and its delivery is planned again.
	Replanned bool
	// PublishedAt is, when the batch completed the task's delivery, the
	// Unix ms of the post's publish; else 0.
	PublishedAt int64
	mark        uint64 // the progress mark after the batch
}

// RunNextTask claims a ready fan-out task of the shard and runs its first
// batch, in one transaction that holds the task row from claim to commit
// (see nextTaskSQL). It returns nil if no task is ready. A task the batch
// did not finish is leased to token until opt.LeaseUntil: run its next
// batches with RunTaskBatch.
func (s *Store) RunNextTask(ctx context.Context, sh *Shard, now int64, token uint64, opt BatchOptions) (*Task, BatchResult, error) {
	ctx = s.pin(ctx)
	var t *Task
	var res BatchResult
	err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
		var ready []Task
		t, res = nil, BatchResult{}
		args := []any{now}
		for _, name := range opt.Skip {
			args = append(args, name)
		}
		if err := sqlx.SelectContext(ctx, tx, &ready, nextTaskSQL(len(opt.Skip)), args...); err != nil || len(ready) == 0 {
			return err
		}
		if s.ShardOf(ready[0].AuthorID) != sh {
			return nil // a copy left by a reshard's cut-over, about to move (claim)
		}
		// The guarded UPDATE is the claim, whatever SKIP LOCKED did (TiDB
		// ignores it and locks nothing): its row lock holds the task for
		// the batch, and a worker that waited for it finds it leased. The
		// task is read again under that lock: the read above locked
		// nothing on TiDB, and a delete may have put a retraction's task
		// under the same key since.
		if claimed, err := affected(tx.ExecContext(ctx, claimTaskSQL, token, opt.LeaseUntil, ready[0].ContentID, ready[0].Seq, now)); err != nil || !claimed {
			return err
		}
		t = new(Task)
		if err := tx.GetContext(ctx, t, claimedTaskSQL, ready[0].ContentID, ready[0].Seq); err != nil {
			return err
		}
		t.Token = token
		var err error
		res, err = s.runBatch(ctx, tx, sh, t, opt, 1)
		return err
	})
	if errors.Is(err, ErrTargetBusy) {
		return nil, BatchResult{}, nil // not claimed: the rollback freed the row
	} else if err != nil {
		return nil, BatchResult{}, wrap("run next task", err)
	}
	if t != nil {
		t.LastUser = res.mark
	}
	return t, res, nil
}

// RunTaskBatch runs the next batch of a task leased by RunNextTask. It
// locks the task row and checks the lease before writing any inbox: other
// shards' writes commit before the home transaction, so a stale claimant
// must stop before them, not at the progress update.
//
// Returns ErrLostClaim if the lease ended or the post was deleted meanwhile.
func (s *Store) RunTaskBatch(ctx context.Context, t *Task, opt BatchOptions) (BatchResult, error) {
	ctx = s.pin(ctx)
	var res BatchResult
	home := s.ShardOf(t.AuthorID)
	err := home.inTx(ctx, func(tx *sqlx.Tx) error {
		var seq int
		err := tx.GetContext(ctx, &seq, lockClaimedTaskSQL, t.ContentID, t.Seq, t.Token, t.Retract)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrLostClaim
		} else if err != nil {
			return err
		}
		res, err = s.runBatch(ctx, tx, home, t, opt, 0)
		return err
	})
	if err != nil {
		return BatchResult{}, wrap("run task batch", err)
	}
	t.LastUser = res.mark
	return res, nil
}

// runBatch processes the next batch of t, whose row tx holds: it reads up
// to opt.Size followers after the progress mark, and adds the post to (or,
// for a retraction, removes it from) the inboxes of the author's followers
// in the range they span on the task's target database, and records the
// progress in tx, the home shard's transaction. When the target is the home
// shard that is a single transaction, so a crash at any instant loses and
// repeats nothing; otherwise the target's write commits first and is
// idempotent, so a replay after a crash writes nothing twice. The held task
// row also keeps a concurrent DeletePost waiting until the batch commits,
// so the retraction it starts sweeps after these writes.
//
// The batch that reaches the task's end finishes it in the same
// transaction, and completes the delivery if the task was its last.
// claimed is 1 when tx claimed the task (an attempt to count), else 0.
func (s *Store) runBatch(ctx context.Context, tx *sqlx.Tx, home *Shard, t *Task, opt BatchOptions, claimed int) (BatchResult, error) {
	res := BatchResult{mark: t.LastUser}
	if t.Epoch != s.pinned(ctx) {
		// The task names its target by another layout than the one in
		// force, so its range may hold followers that moved: the whole
		// delivery is planned again under this one (inbox writes are
		// idempotent). A process that has not seen the new layout yet
		// runs the task as planned; a database that gave the followers
		// up refuses its writes (layout_fence), and it retries here.
		res.TaskDone, res.Replanned = true, true
		if _, err := tx.ExecContext(ctx, dropTasksSQL, t.ContentID); err != nil {
			return res, err
		}
		_, err := tx.ExecContext(ctx, replanSQL, t.ContentID)
		return res, err
	}
	target := s.byName[t.Target]
	if target == nil {
		return res, fmt.Errorf("task %d/%d targets database %q, which the shard map lacks", t.ContentID, t.Seq, t.Target)
	}
	// One follower more than the batch takes tells whether the task ends
	// here, which spares it an empty batch just to find out.
	var users []uint64
	if err := sqlx.SelectContext(ctx, tx, &users, batchFollowersSQL, t.AuthorID, t.LastUser, t.Hi, opt.Size+1); err != nil {
		return res, err
	}
	res.TaskDone = len(users) <= opt.Size
	users = users[:min(len(users), opt.Size)]
	if len(users) > 0 {
		res.mark = users[len(users)-1]
	}
	for _, u := range users {
		if s.ShardOf(u) == target {
			res.Users = append(res.Users, u)
		}
	}
	through := res.mark
	if res.TaskDone {
		through = t.Hi
	}
	// A push writes where the batch lists followers (a follower not listed
	// yet gets the post from its follow backfill); a retraction sweeps its
	// range on its target whatever the list says.
	if len(res.Users) > 0 || t.Retract {
		var err error
		if target == home {
			res.Written, err = writeInboxes(ctx, tx, t, through, opt.ActiveAfter)
		} else {
			res.Written, err = s.onTarget(ctx, target, opt, func(ctx context.Context, tx *sqlx.Tx) (int64, error) {
				return writeInboxes(ctx, tx, t, through, opt.ActiveAfter)
			})
		}
		if err != nil {
			return res, err
		}
	}
	if _, err := tx.ExecContext(ctx, advanceTaskSQL, res.mark, len(res.Users), res.TaskDone, t.Token, opt.LeaseUntil,
		claimed, t.ContentID, t.Seq); err != nil || !res.TaskDone {
		return res, err
	}
	if counted, err := affected(tx.ExecContext(ctx, taskFinishedSQL, t.ContentID)); err != nil || counted {
		return res, err // siblings still run
	}
	if done, err := affected(tx.ExecContext(ctx, completeDeliverySQL, max(opt.Now, 1), t.ContentID, t.ContentID)); err != nil || !done {
		return res, err
	}
	if err := tx.GetContext(ctx, &res.PublishedAt, deliveryCreatedSQL, t.ContentID); err != nil {
		return res, err
	}
	// The post's tasks are done; drop them. The sum above and this drop
	// lock the other tasks' rows after the delivery row, the reverse of
	// DeletePost's order: a delete racing this last finish deadlocks with
	// it, InnoDB rolls one back, and its retry sees the other's outcome.
	_, err := tx.ExecContext(ctx, dropTasksSQL, t.ContentID)
	return res, err
}

// onTarget runs a fan-out write, fn, on another database than the
// author's, in its own transaction, admitted by opt.Enter and bounded by
// opt.TargetTimeout: fn runs its statements with the context it is given.
//
// fn writes inbox rows while it holds the follow edges it read FOR UPDATE,
// which is what an unfollow waits on before it purges: the transaction
// opens with InnoDB (openWithInnoDB) so that, with the inbox in RocksDB,
// the rows show before the edges are let go. (The author's own database
// needs nothing: its transactions open with the claimed delivery or task.)
func (s *Store) onTarget(ctx context.Context, target *Shard, opt BatchOptions, fn func(ctx context.Context, tx *sqlx.Tx) (int64, error)) (int64, error) {
	if opt.Enter != nil {
		leave, ok := opt.Enter(target)
		if !ok {
			return 0, ErrTargetBusy
		}
		defer leave()
	}
	if opt.TargetTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.TargetTimeout)
		defer cancel()
	}
	var n int64
	err := target.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := openWithInnoDB(ctx, tx); err != nil {
			return err
		}
		var err error
		n, err = fn(ctx, tx)
		return err
	})
	return n, err
}

// writeInboxes adds t's post to (or, for a retraction, removes it from) the
// inboxes (a replay's: the replays lists) of ex's shard whose users follow t's author in (t.LastUser,
// through], with one statement, and returns the entries changed.
func writeInboxes(ctx context.Context, ex sqlx.ExecerContext, t *Task, through uint64, activeAfter int64) (int64, error) {
	var r sql.Result
	var err error
	switch {
	case t.Kind == ReplayKind:
		r, err = writeReplays(ctx, ex, t, through, activeAfter)
	case t.Retract:
		var n int64
		for _, q := range []string{retractSQL, retractKeptSQL} {
			r, err := ex.ExecContext(ctx, q, t.PublishTime, t.ContentID, t.AuthorID, t.LastUser, through)
			if err != nil {
				return n, err
			}
			m, err := r.RowsAffected()
			if err != nil {
				return n, err
			}
			n += m
		}
		return n, nil
	case t.Mode == ModePushActive:
		r, err = ex.ExecContext(ctx, pushActiveSQL, t.PublishTime, t.ContentID, t.AuthorID, t.Kind, t.AuthorID, t.LastUser, through, activeAfter,
			t.PublishTime, t.PublishTime, t.ContentID)
	default:
		r, err = ex.ExecContext(ctx, pushSQL, t.PublishTime, t.ContentID, t.AuthorID, t.Kind, t.AuthorID, t.LastUser, through,
			t.PublishTime, t.PublishTime, t.ContentID)
	}
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// ReleaseTask gives a claimed task back so any worker can take it at once,
// as on shutdown or after a failed batch.
func (s *Store) ReleaseTask(ctx context.Context, t *Task) error {
	ctx = s.pin(ctx)
	return release(ctx, s.ShardOf(t.AuthorID).pool(ctx), taskClaims, t.claimKey(), t.Token)
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"math"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

var modeNames = map[int]string{ModePush: feed.ModePush, ModePushActive: feed.ModePushActive, ModePull: feed.ModePull}

// DeliveryJob is a claimed delivery waiting to be planned.
type DeliveryJob struct {
	ContentID uint64 `db:"content_id"`
	AuthorID  uint64 `db:"author_id"`
	CreatedAt int64  `db:"created_at"` // Unix ms of the publish
	Token     uint64 `db:"-"`
}

var deliveryClaims = claimTable{
	table: "deliveries",
	cols:  "content_id, author_id, created_at",
	key:   []string{"content_id"},
	ready: "state = " + deliveryPendingSQL,
}

// ClaimDeliveries leases up to limit unplanned deliveries of the shard.
func (s *Store) ClaimDeliveries(ctx context.Context, sh *Shard, now, leaseUntil int64, limit int, token uint64) ([]DeliveryJob, error) {
	ctx = s.pin(ctx)
	return claim[DeliveryJob](ctx, s, sh, deliveryClaims, now, leaseUntil, limit, token)
}

func (j *DeliveryJob) claimKey() []any { return []any{j.ContentID} }

func (j *DeliveryJob) placingID() uint64 { return j.AuthorID }

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
WHERE content_id = ? AND claim_token = ? AND state = ` + deliveryPendingSQL + ` FOR UPDATE`

const authorModeSQL = `SELECT mode FROM authors WHERE author_id = ?`

const streamFollowersSQL = `SELECT user_id FROM followers WHERE author_id = ? ORDER BY user_id`

const insertTasksHead = `INSERT INTO fanout_tasks (content_id, seq, author_id, target, publish_time, kind, mode, retract, lo, hi, last_user, epoch)`

const finishPlanSQL = `UPDATE deliveries SET state = ?, mode = ?, recipients = ?, delivered = ?, tasks_left = ?, claim_token = 0, claimed_until = 0
WHERE content_id = ? AND claim_token = ?`

// taskInsertChunk bounds the rows of one multi-row task insert.
const taskInsertChunk = 500

// PlanDelivery splits a claimed delivery into ranges of opt.TaskSize
// followers each, in user_id order, and each range into one task per
// database holding some of its followers, in one transaction on the
// author's shard: a database that is unreachable holds back its own tasks
// only, and the others' followers get the post meanwhile. A pull-mode post
// (or one with no followers) needs no task and is done at once, unless it
// is a retraction: that always sweeps the whole user range on every
// database, since a follow backfill, or a push to a follow not listed yet,
// may have copied the post anywhere.
//
// Returns ErrLostClaim if the job's lease was taken over.
func (s *Store) PlanDelivery(ctx context.Context, job DeliveryJob, opt PlanOptions) (PlanResult, error) {
	ctx = s.pin(ctx)
	var res PlanResult
	err := s.ShardOf(job.AuthorID).inTx(ctx, func(tx *sqlx.Tx) error {
		res = PlanResult{}
		// Read before any follower is placed: a layout that changes while
		// the plan runs leaves the tasks an older epoch than their targets'
		// layout, and they are planned again (runBatch).
		epoch := s.pinned(ctx)
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
		var (
			bounds  []uint64                // hi of each range
			targets []map[*Shard]struct{}   // the databases of each range's followers
			inRange = map[*Shard]struct{}{} // of the range being read
		)
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
			inRange[s.ShardOf(last)] = struct{}{}
			if res.Recipients%int64(opt.TaskSize) == 0 {
				bounds, targets = append(bounds, last), append(targets, inRange)
				inRange = map[*Shard]struct{}{}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// A retraction sweeps every user range even with nobody listed: a
		// push may have reached a follow its list did not hold yet.
		needsTasks := d.Retract || (res.Recipients > 0 && res.Mode != ModePull)
		state, delivered := deliveryRunning, int64(0)
		if !needsTasks {
			state = deliveryDone
			if res.Mode == ModePull {
				delivered = res.Recipients
			}
		} else {
			// The last range is open-ended: followers that arrive later are
			// covered by their follow backfill, and the range stays total.
			if len(bounds) == 0 || bounds[len(bounds)-1] != last {
				bounds, targets = append(bounds, last), append(targets, inRange)
			}
			bounds[len(bounds)-1] = math.MaxUint64
			retract := 0
			if d.Retract {
				retract = 1
			}
			var args []any
			for i, hi := range bounds {
				lo := uint64(0)
				if i > 0 {
					lo = bounds[i-1]
				}
				for _, sh := range s.shards {
					if _, ok := targets[i][sh]; ok || d.Retract {
						args = append(args, job.ContentID, res.Tasks, job.AuthorID, sh.Name, d.PublishTime, d.Kind, res.Mode, retract, lo, hi, lo, epoch)
						res.Tasks++
					}
				}
			}
			const cols = 12
			for start := 0; start < len(args); start += cols * taskInsertChunk {
				chunk := args[start:min(start+cols*taskInsertChunk, len(args))]
				if _, err := tx.ExecContext(ctx, sqlconn.MultiRowInsert(insertTasksHead, cols, len(chunk)/cols, ""), chunk...); err != nil {
					return err
				}
			}
		}
		_, err = tx.ExecContext(ctx, finishPlanSQL, state, res.Mode, res.Recipients, delivered, res.Tasks, job.ContentID, job.Token)
		return err
	})
	return res, wrap("plan delivery", err)
}

// A batch covers a range of user ids, (after, through]: from the task's
// progress mark to the last follower it lists, or to the task's end when it
// finishes the task, so a delivery's batches cover every user id once. Its
// writes read the author's follow edges in that range, on the users' shards,
// instead of listing the users: one range of following's primary key
// (author_id, user_id), where the author's edges lie together in user order,
// so reading and locking them touches a few pages however the users spread
// over the shard. The followers list on the author's shard only cuts the ranges, counts them and
// names their shards.
//
// Reading the edges is also the follow check, and the writes read them FOR
// UPDATE. An unfollow, which deletes the edge and purges the author's posts
// in one transaction, must lock the same edge row to delete it: the two
// serialise on a row lock, and a post never lands after the purge. (A shared
// lock would do on InnoDB; TiDB's INSERT ... SELECT reads without one.) An
// edge inserted after the read is a follow the write does not see, and its
// backfill copies the post.

// ReleaseDelivery gives a claimed delivery back unplanned.
func (s *Store) ReleaseDelivery(ctx context.Context, job DeliveryJob) error {
	ctx = s.pin(ctx)
	return release(ctx, s.ShardOf(job.AuthorID).pool(ctx), deliveryClaims, job.claimKey(), job.Token)
}

const deliveryStatusSQL = `SELECT state, mode, recipients, delivered FROM deliveries WHERE content_id = ? AND author_id = ?`

const tasksDeliveredSQL = `SELECT COALESCE(SUM(delivered), 0) FROM fanout_tasks WHERE content_id = ?`

const tasksPendingSQL = `SELECT DISTINCT target FROM fanout_tasks WHERE content_id = ? AND done = 0 ORDER BY target`

// GetDelivery reports the fan-out progress of a post, and which databases
// that are not up (as their probes last found them) still wait for it.
//
// Returns ENOTFOUND if the author never published contentID.
func (s *Store) GetDelivery(ctx context.Context, authorID, contentID uint64) (feed.Delivery, error) {
	db := s.ShardOf(authorID).pool(ctx)
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
		var targets []string
		if err := db.SelectContext(ctx, &targets, tasksPendingSQL, contentID); err != nil {
			return feed.Delivery{}, wrap("get delivery", err)
		}
		for _, name := range targets {
			if sh := s.byName[name]; sh == nil || sh.Health().Unreachable() {
				d.PendingDatabases = append(d.PendingDatabases, name)
			}
		}
	default:
		d.State = feed.DeliveryDone
	}
	return d, nil
}

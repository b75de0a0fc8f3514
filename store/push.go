package store

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/jmoiron/sqlx"
)

// Most posts reach few followers, and a delivery planned into tasks pays a
// transaction to plan and another to push, each of a few statements, per
// post. PushDeliveries delivers many such posts together instead: one
// transaction on the author's database plans and pushes a batch of them,
// with one push statement per database holding their followers.

// lockDeliveriesSQL locks the claimed deliveries of a batch (content_id IN)
// in primary-key order; the caller keeps those still pending under its
// claim.
const lockDeliveriesSQL = `SELECT content_id, author_id, created_at, publish_time, kind, retract, claim_token FROM deliveries
WHERE content_id IN (?) AND state = ` + deliveryPendingSQL + ` ORDER BY content_id FOR UPDATE`

const authorModesSQL = `SELECT author_id, mode FROM authors WHERE author_id IN (?)`

// firstFollowersPartSQL is one author's part of a statement listing the
// first followers of many authors: enough to tell a small audience, whose
// whole list it is, from a big one.
const firstFollowersPartSQL = `(SELECT author_id, user_id FROM followers WHERE author_id = ? ORDER BY user_id LIMIT ?)`

// pushPostsSQL writes posts, given as a derived table of one row per post,
// into the inboxes of their authors' followers on one database: each post
// joined with its author's follow edges there, one range of following's
// primary key (author_id, user_id) per post. As with a task's push (pushSQL), reading the edges
// FOR UPDATE is the follow check, whose row locks serialise the push with an
// unfollow's purge, and a follow not listed yet gets the post here and from
// its backfill, once (INSERT IGNORE). An edge's history bound keeps out a
// post backdated below it (historyShowsParamSQL).
const (
	pushPostsHead = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)
SELECT f.user_id, p.publish_time, p.content_id, p.author_id, p.kind FROM (`
	pushPostsFirst = `SELECT ? AS content_id, ? AS publish_time, ? AS author_id, ? AS kind`
	pushPostsNext  = ` UNION ALL SELECT ?, ?, ?, ?`
	pushPostsTail  = `) p STRAIGHT_JOIN following f FORCE INDEX (PRIMARY) ON f.author_id = p.author_id AND f.muted = 0
 AND (f.history_time IS NULL OR f.history_time < p.publish_time OR (f.history_time = p.publish_time AND f.history_id <= p.content_id)) FOR UPDATE`
)

// PushResult reports a PushDeliveries call.
type PushResult struct {
	// Pushed are the deliveries done: every listed follower has the post.
	Pushed []DeliveryJob
	// Plan are the deliveries to plan one at a time (PlanDelivery):
	// retractions, replays, pull authors' posts, audiences bigger than a batch,
	// posts with followers on a database that is skipped or failed, and
	// posts whose author a reshard moved to another database. They keep
	// their claim.
	Plan []DeliveryJob
	// Later are small deliveries beyond the batch's rows, still claimed:
	// for the next call.
	Later []DeliveryJob
	// Users are the followers listed for the pushed posts.
	Users []uint64
	// Written is the inbox rows added.
	Written int64
}

// PushDeliveries plans and pushes claimed deliveries of sh whose listed
// followers number at most opt.Size, as many as fit opt.Size inbox rows
// together, in one transaction on sh that holds their delivery rows from
// start to commit. The pushes to other databases commit first, each in its
// own transaction with one statement (admitted by opt.Enter, bounded by
// opt.TargetTimeout), and are idempotent: after a crash or an error the
// deliveries are still pending under the claim, and whoever runs them next
// writes nothing twice. A DeletePost waits on the held delivery rows and
// retracts after the pushes. Jobs whose claim was lost are dropped.
func (s *Store) PushDeliveries(ctx context.Context, sh *Shard, jobs []DeliveryJob, opt BatchOptions) (PushResult, error) {
	ctx = s.pin(ctx)
	// A delivery claimed before a reshard's cut-over moved its author
	// away is the new owner's to plan (PlanDelivery works there); the
	// copy left here is not pushed.
	var moved []DeliveryJob
	jobs = slices.DeleteFunc(slices.Clone(jobs), func(j DeliveryJob) bool {
		if s.ShardOf(j.AuthorID) != sh {
			moved = append(moved, j)
			return true
		}
		return false
	})
	var res PushResult
	if len(jobs) == 0 {
		return PushResult{Plan: moved}, nil
	}
	err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
		res = PushResult{Plan: slices.Clone(moved)}
		posts, err := lockDeliveries(ctx, tx, jobs)
		if err != nil || len(posts) == 0 {
			return err
		}
		small, plan, err := s.smallAudiences(ctx, tx, posts, opt.Size)
		if err != nil {
			return err
		}
		// A post with followers on a skipped database is planned into
		// tasks: those wait for that database, the others run now.
		for _, p := range small {
			p.targets = s.targetsOf(p.followers)
		}
		res.Plan = append(res.Plan, plan...)
		small = divert(small, &res.Plan, func(t *Shard) bool { return t != sh && slices.Contains(opt.Skip, t.Name) })
		batch, later := fitRows(small, opt.Size)
		res.Later = jobsOf(later)
		byTarget := map[*Shard][]*pendingPost{}
		for _, p := range batch {
			for _, t := range p.targets {
				byTarget[t] = append(byTarget[t], p)
			}
		}
		// The other databases' pushes run side by side, each bounded by
		// opt.TargetTimeout. One that fails (a database that hangs, a
		// deadlock) costs only the posts with followers there, which are
		// planned into tasks instead; the rest are done here.
		written, failed := s.pushTargets(ctx, sh, byTarget, opt)
		if err := ctx.Err(); err != nil {
			return err
		}
		res.Written += written
		batch = divert(batch, &res.Plan, func(t *Shard) bool { return failed[t] })
		var home []*pendingPost
		for _, p := range batch {
			if slices.Contains(p.targets, sh) {
				home = append(home, p)
			}
		}
		if len(home) > 0 {
			n, err := pushPosts(ctx, tx, home)
			if err != nil {
				return err
			}
			res.Written += n
		}
		if err := finishPushed(ctx, tx, batch); err != nil {
			return err
		}
		for _, p := range batch {
			res.Pushed = append(res.Pushed, p.DeliveryJob)
			res.Users = append(res.Users, p.followers...)
		}
		return nil
	})
	if err != nil {
		return PushResult{}, wrap("push deliveries", err)
	}
	return res, nil
}

// pendingPost is a claimed delivery locked by PushDeliveries, with its
// listed followers once read.
type pendingPost struct {
	DeliveryJob
	PublishTime int64  `db:"publish_time"`
	Kind        string `db:"kind"`
	Retract     bool   `db:"retract"`
	ClaimToken  uint64 `db:"claim_token"`
	followers   []uint64
	targets     []*Shard // the followers' databases
}

// lockDeliveries locks jobs' delivery rows and returns those still pending
// under the jobs' claims, in content_id order.
func lockDeliveries(ctx context.Context, tx *sqlx.Tx, jobs []DeliveryJob) ([]*pendingPost, error) {
	ids := make([]uint64, len(jobs))
	tokens := make(map[uint64]uint64, len(jobs))
	for i, j := range jobs {
		ids[i], tokens[j.ContentID] = j.ContentID, j.Token
	}
	q, args, err := sqlx.In(lockDeliveriesSQL, ids)
	if err != nil {
		return nil, err
	}
	var rows []*pendingPost
	if err := sqlx.SelectContext(ctx, tx, &rows, q, args...); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(rows, func(p *pendingPost) bool {
		if p.ClaimToken != tokens[p.ContentID] {
			return true
		}
		p.Token = p.ClaimToken
		return false
	}), nil
}

// smallAudiences splits posts into those of push authors with at most size
// listed followers, which it gives their followers, and the rest, to plan
// into tasks. Replays take the task path, whose writes reach replays lists.
func (s *Store) smallAudiences(ctx context.Context, tx *sqlx.Tx, posts []*pendingPost, size int) (small []*pendingPost, plan []DeliveryJob, err error) {
	var authors []uint64
	for _, p := range posts {
		if !p.Retract {
			authors = append(authors, p.AuthorID)
		}
	}
	slices.Sort(authors)
	authors = slices.Compact(authors)
	pullAuthors := map[uint64]bool{}
	if len(authors) > 0 {
		q, args, err := sqlx.In(authorModesSQL, authors)
		if err != nil {
			return nil, nil, err
		}
		var modes []struct {
			AuthorID uint64 `db:"author_id"`
			Mode     int    `db:"mode"`
		}
		if err := sqlx.SelectContext(ctx, tx, &modes, q, args...); err != nil {
			return nil, nil, err
		}
		for _, m := range modes {
			pullAuthors[m.AuthorID] = m.Mode == AuthorPull
		}
		authors = slices.DeleteFunc(authors, func(a uint64) bool { return pullAuthors[a] })
	}
	followers, err := firstFollowers(ctx, tx, authors, size+1)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range posts {
		list := followers[p.AuthorID]
		if p.Retract || p.Kind == ReplayKind || pullAuthors[p.AuthorID] || len(list) > size {
			plan = append(plan, p.DeliveryJob)
			continue
		}
		p.followers = list
		small = append(small, p)
	}
	return small, plan, nil
}

// firstFollowers lists up to limit followers of each author, in user_id
// order, with one UNION ALL statement per pullChunk authors.
func firstFollowers(ctx context.Context, tx *sqlx.Tx, authors []uint64, limit int) (map[uint64][]uint64, error) {
	out := make(map[uint64][]uint64, len(authors))
	for chunk := range slices.Chunk(authors, pullChunk) {
		args := make([]any, 0, 2*len(chunk))
		for _, a := range chunk {
			args = append(args, a, limit)
		}
		q := strings.TrimSuffix(strings.Repeat(firstFollowersPartSQL+" UNION ALL ", len(chunk)), " UNION ALL ")
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		var a, u uint64
		for rows.Next() {
			if err := rows.Scan(&a, &u); err != nil {
				rows.Close()
				return nil, err
			}
			out[a] = append(out[a], u)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fitRows takes posts, in order, while their followers fit rows inbox rows
// together (the first always), and returns them and the rest.
func fitRows(posts []*pendingPost, rows int) (batch, rest []*pendingPost) {
	n := 0
	for i, p := range posts {
		n += len(p.followers)
		if i > 0 && n > rows {
			return posts[:i], posts[i:]
		}
	}
	return posts, nil
}

func jobsOf(posts []*pendingPost) []DeliveryJob {
	out := make([]DeliveryJob, len(posts))
	for i, p := range posts {
		out[i] = p.DeliveryJob
	}
	return out
}

// divert moves the posts with followers on a database that hit names out of
// posts and onto plan, and returns the rest.
func divert(posts []*pendingPost, plan *[]DeliveryJob, hit func(*Shard) bool) []*pendingPost {
	return slices.DeleteFunc(posts, func(p *pendingPost) bool {
		if slices.ContainsFunc(p.targets, hit) {
			*plan = append(*plan, p.DeliveryJob)
			return true
		}
		return false
	})
}

// targetsOf returns the databases of users.
func (s *Store) targetsOf(users []uint64) []*Shard {
	var out []*Shard
	for _, u := range users {
		if t := s.ShardOf(u); !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// pushTargets pushes each group of posts to its database, other than home,
// concurrently (see onTarget), and returns the rows written and the
// databases that failed.
func (s *Store) pushTargets(ctx context.Context, home *Shard, byTarget map[*Shard][]*pendingPost, opt BatchOptions) (int64, map[*Shard]bool) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		written int64
		failed  = map[*Shard]bool{}
	)
	for target, group := range byTarget {
		if target == home {
			continue
		}
		wg.Go(func() {
			n, err := s.onTarget(ctx, target, opt, func(ctx context.Context, tx *sqlx.Tx) (int64, error) {
				return pushPosts(ctx, tx, group)
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[target] = true
			} else {
				written += n
			}
		})
	}
	wg.Wait()
	return written, failed
}

// pushPosts runs pushPostsSQL for posts on ex's database.
func pushPosts(ctx context.Context, ex sqlx.ExecerContext, posts []*pendingPost) (int64, error) {
	var q strings.Builder
	q.WriteString(pushPostsHead)
	q.WriteString(pushPostsFirst)
	args := make([]any, 0, 4*len(posts))
	for i, p := range posts {
		if i > 0 {
			q.WriteString(pushPostsNext)
		}
		args = append(args, p.ContentID, p.PublishTime, p.AuthorID, p.Kind)
	}
	q.WriteString(pushPostsTail)
	r, err := ex.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// finishPushed marks pushed deliveries done, each with its listed
// followers as recipients and delivered, in one statement on rows the
// transaction holds.
func finishPushed(ctx context.Context, tx *sqlx.Tx, posts []*pendingPost) error {
	if len(posts) == 0 {
		return nil
	}
	counts := make([]any, 0, 2*len(posts))
	ids := make([]any, 0, len(posts))
	for _, p := range posts {
		counts = append(counts, p.ContentID, len(p.followers))
		ids = append(ids, p.ContentID)
	}
	whens := strings.Repeat(" WHEN ? THEN ?", len(posts))
	q := "UPDATE deliveries SET state = " + deliveryDoneSQL + ", mode = " + modePushSQL + ", tasks_left = 0, claim_token = 0, claimed_until = 0," +
		" recipients = CASE content_id" + whens + " END, delivered = CASE content_id" + whens + " END" +
		" WHERE content_id IN (" + placeholders(len(posts)) + ")"
	_, err := tx.ExecContext(ctx, q, slices.Concat(counts, counts, ids)...)
	return err
}

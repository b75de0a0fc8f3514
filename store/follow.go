package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// Bits of following.pull: how reads treat a followed author.
const (
	// PullBelowActive marks a pull author: its posts older than the reader's
	// active_since were not pushed and are merged from its outbox.
	PullBelowActive = 1
	// PullPending marks a follow whose backfill has not run: the whole
	// outbox is merged until it does.
	PullPending = 2
)

// Author modes (authors.mode).
const (
	AuthorPush      = 0
	AuthorSwitching = 1
	AuthorPull      = 2
)

const isFollowingSQL = `SELECT COUNT(*) FROM following WHERE user_id = ? AND author_id = ?`

const countFollowingSQL = `SELECT COUNT(*) FROM following WHERE user_id = ?`

const insertFollowingSQL = `INSERT INTO following (user_id, author_id, followed_at, pull, muted) VALUES (?, ?, ?, ?, ?)`

// pairMutedSQL says whether the pair has a mutes row, as a locking read:
// the latest committed row on every engine, whatever snapshot the
// transaction holds (MyRocks takes it at the first statement, before the
// header lock was granted).
const pairMutedSQL = `SELECT COUNT(*) FROM mutes WHERE user_id = ? AND author_id = ? FOR UPDATE`

const deleteFollowingSQL = `DELETE FROM following WHERE user_id = ? AND author_id = ?`

const purgeAuthorSQL = `DELETE FROM inbox WHERE user_id = ? AND author_id = ?`

// purgeAuthor takes the author's posts out of the user's inbox and the
// author's replays out of the user's replays list, in tx: what an unfollow
// or a mute removes from the user's view.
func purgeAuthor(ctx context.Context, tx *sqlx.Tx, userID, authorID uint64) error {
	for _, q := range []string{purgeAuthorSQL, purgeHostReplaysSQL} {
		if _, err := tx.ExecContext(ctx, q, userID, authorID); err != nil {
			return err
		}
	}
	return nil
}

// queueFollowEventSQL keeps one pending event per pair: a repeat bumps the
// version, so pending operations collapse to the last one.
const queueFollowEventSQL = `INSERT INTO follow_events (user_id, author_id, created_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE version = version + 1`

// Follow adds the edge on the user's shard, marked pending backfill (reads
// merge the author's outbox until the backfill lands), and queues the event
// that updates the author's followers and runs the backfill. Following an
// author already followed does nothing and reports created=false.
//
// Returns ELIMIT when the user already follows maxFollowing authors.
func (s *Store) Follow(ctx context.Context, userID, authorID uint64, maxFollowing int, now int64) (created bool, err error) {
	ctx = s.pin(ctx)
	err = s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		created = false
		// Lock the user's header row: concurrent follows of one user queue
		// here, so the cap holds.
		if err := ensureHeaders(ctx, tx, userID); err != nil {
			return err
		}
		var n int
		if err := tx.GetContext(ctx, &n, isFollowingSQL, userID, authorID); err != nil || n > 0 {
			return err
		}
		if err := tx.GetContext(ctx, &n, countFollowingSQL, userID); err != nil {
			return err
		} else if n >= maxFollowing {
			return feed.Errorf(feed.ELIMIT, "user %d already follows %d authors, the maximum", userID, n)
		}
		// A mute or hide of the author holds for the new edge (mutes
		// take the header row this transaction holds).
		var muted int
		if err := tx.GetContext(ctx, &muted, pairMutedSQL, userID, authorID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertFollowingSQL, userID, authorID, now, PullPending, muted); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, setPullsSQL, 1, userID); err != nil {
			return err
		}
		if err := followsChanged(ctx, tx, userID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, queueFollowEventSQL, userID, authorID, now); err != nil {
			return err
		}
		created = true
		return nil
	})
	if created {
		s.ShardOf(userID).pullHints.Set(userID, true) // the backfill is pending
	}
	return created, wrap("follow", err)
}

// Unfollow removes the edge and purges the author's posts from the user's
// inbox in one transaction on the user's shard, so no later read shows them,
// and queues the event that updates the author's followers. Unfollowing an
// author not followed does nothing.
func (s *Store) Unfollow(ctx context.Context, userID, authorID uint64, now int64) error {
	ctx = s.pin(ctx)
	err := s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		// The header row is the user's lock (pull bits change here).
		var locked []uint64
		if err := tx.SelectContext(ctx, &locked, lockHeaderSQL, userID); err != nil {
			return err
		}
		if deleted, err := affected(tx.ExecContext(ctx, deleteFollowingSQL, userID, authorID)); err != nil || !deleted {
			return err
		}
		if err := purgeAuthor(ctx, tx, userID, authorID); err != nil {
			return err
		}
		if err := recountPulls(ctx, tx, userID); err != nil {
			return err
		}
		if err := followsChanged(ctx, tx, userID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, queueFollowEventSQL, userID, authorID, now)
		return err
	})
	return wrap("unfollow", err)
}

const listFollowingSQL = `SELECT user_id, author_id, followed_at FROM following
WHERE user_id = ? AND author_id > ? ORDER BY author_id LIMIT ?`

// ListFollowing returns up to limit authors the user follows with ids above
// after, in author_id order.
func (s *Store) ListFollowing(ctx context.Context, userID, after uint64, limit int) ([]feed.Follow, error) {
	var out []feed.Follow
	err := sqlx.SelectContext(ctx, s.ShardOf(userID).pool(ctx), &out, listFollowingSQL, userID, after, limit)
	return out, wrap("list following", err)
}

const listFollowersSQL = `SELECT user_id, author_id, followed_at FROM followers
WHERE author_id = ? AND user_id > ? ORDER BY user_id LIMIT ?`

// ListFollowers returns up to limit followers of the author with ids above
// after, in user_id order. The list trails follow and unfollow by the time
// their events take to apply.
func (s *Store) ListFollowers(ctx context.Context, authorID, after uint64, limit int) ([]feed.Follow, error) {
	var out []feed.Follow
	err := sqlx.SelectContext(ctx, s.ShardOf(authorID).pool(ctx), &out, listFollowersSQL, authorID, after, limit)
	return out, wrap("list followers", err)
}

const followedAuthorsSQL = `SELECT author_id FROM following WHERE user_id = ? AND muted = 0`

// FollowedAuthors returns the authors the user reads, followed and not
// muted or hidden: the sources of a deep scroll below the inbox's retained
// window. version is the header's followee-list version from a
// snapshot read before (FeedSnapshot.Follows; 0: none): a list this
// process read under it comes from memory, and read reports whether a
// statement ran. The list is shared: the caller must not change it.
func (s *Store) FollowedAuthors(ctx context.Context, userID uint64, version int64) (authors []uint64, read bool, err error) {
	if version != 0 {
		if authors, ok := s.followees.get(userID, version); ok {
			return authors, false, nil
		}
	}
	if authors, err = s.readFollowedAuthors(ctx, userID); err != nil {
		return nil, true, err
	}
	if version != 0 {
		s.followees.put(userID, version, authors)
	}
	return authors, true, nil
}

// readFollowedAuthors reads the list. Thousands of rows are scanned by
// hand: sqlx's reflection per row cost more than the read.
func (s *Store) readFollowedAuthors(ctx context.Context, userID uint64) ([]uint64, error) {
	rows, err := s.ShardOf(userID).pool(ctx).QueryContext(ctx, followedAuthorsSQL, userID)
	if err != nil {
		return nil, wrap("followed authors", err)
	}
	defer rows.Close()
	out := make([]uint64, 0, 64)
	for rows.Next() {
		var a uint64
		if err := rows.Scan(&a); err != nil {
			return nil, wrap("followed authors", err)
		}
		out = append(out, a)
	}
	return out, wrap("followed authors", rows.Err())
}

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

const getFollowingSQL = `SELECT user_id, author_id, followed_at FROM following WHERE user_id = ? AND author_id = ?`

// GetFollowing returns the edge as the user's shard has it now.
//
// Returns ENOTFOUND if the user does not follow the author.
func (s *Store) GetFollowing(ctx context.Context, userID, authorID uint64) (feed.Follow, error) {
	var f feed.Follow
	err := sqlx.GetContext(ctx, s.ShardOf(userID).pool(ctx), &f, getFollowingSQL, userID, authorID)
	if errors.Is(err, sql.ErrNoRows) {
		return f, feed.Errorf(feed.ENOTFOUND, "user %d does not follow %d", userID, authorID)
	}
	return f, wrap("get following", err)
}

const insertFollowerSQL = `INSERT IGNORE INTO followers (author_id, user_id, followed_at) VALUES (?, ?, ?)`

const deleteFollowerSQL = `DELETE FROM followers WHERE author_id = ? AND user_id = ?`

const countAuthorSQL = `INSERT INTO authors (author_id, follower_count) VALUES (?, ?)
ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count)`

const lockAuthorSQL = `SELECT follower_count, mode FROM authors WHERE author_id = ? FOR UPDATE`

// startSwitchSQL puts an author into the switching mode; the switch job
// marks every follower's following row before pushes become selective.
const startSwitchSQL = `UPDATE authors SET mode = 1, switch_after = 0, claim_token = 0, claimed_until = 0 WHERE author_id = ? AND mode = 0`

// AddFollower records the edge on the author's shard and counts it. When
// the count passes pushThreshold the author starts switching to pull mode.
// It returns the author's mode, read under the same lock the switch takes,
// so a follower added while switching is never missed.
func (s *Store) AddFollower(ctx context.Context, f feed.Follow, pushThreshold int64) (mode int, err error) {
	ctx = s.pin(ctx)
	err = s.ShardOf(f.AuthorID).inTx(ctx, func(tx *sqlx.Tx) error {
		r, err := tx.ExecContext(ctx, insertFollowerSQL, f.AuthorID, f.UserID, f.FollowedAt)
		if err != nil {
			return err
		}
		added, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, countAuthorSQL, f.AuthorID, added); err != nil {
			return err
		}
		var a struct {
			Count int64 `db:"follower_count"`
			Mode  int   `db:"mode"`
		}
		if err := sqlx.GetContext(ctx, tx, &a, lockAuthorSQL, f.AuthorID); err != nil {
			return err
		}
		mode = a.Mode
		if a.Mode == AuthorPush && a.Count > pushThreshold {
			mode = AuthorSwitching
			_, err = tx.ExecContext(ctx, startSwitchSQL, f.AuthorID)
		}
		return err
	})
	return mode, wrap("add follower", err)
}

// RemoveFollower drops the edge from the author's shard and the count.
func (s *Store) RemoveFollower(ctx context.Context, authorID, userID uint64) error {
	ctx = s.pin(ctx)
	err := s.ShardOf(authorID).inTx(ctx, func(tx *sqlx.Tx) error {
		if deleted, err := affected(tx.ExecContext(ctx, deleteFollowerSQL, authorID, userID)); err != nil || !deleted {
			return err
		}
		_, err := tx.ExecContext(ctx, countAuthorSQL, authorID, -1)
		return err
	})
	return wrap("remove follower", err)
}

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

// SwitchJob is a claimed author switching from push to pull mode.
type SwitchJob struct {
	AuthorID    uint64 `db:"author_id"`
	SwitchAfter uint64 `db:"switch_after"`
	Token       uint64 `db:"-"`
}

var switchClaims = claimTable{
	table: "authors",
	cols:  "author_id, switch_after",
	key:   []string{"author_id"},
	ready: "mode = 1",
}

// ClaimSwitches leases up to limit authors of the shard that are switching mode.
func (s *Store) ClaimSwitches(ctx context.Context, sh *Shard, now, leaseUntil int64, limit int, token uint64) ([]SwitchJob, error) {
	ctx = s.pin(ctx)
	return claim[SwitchJob](ctx, s, sh, switchClaims, now, leaseUntil, limit, token)
}

func (j *SwitchJob) claimKey() []any { return []any{j.AuthorID} }

func (j *SwitchJob) placingID() uint64 { return j.AuthorID }

func (j *SwitchJob) setToken(token uint64) { j.Token = token }

// ReleaseSwitch gives a claimed switch back for any worker to resume from
// its progress mark, as on shutdown or after a failed batch.
func (s *Store) ReleaseSwitch(ctx context.Context, job *SwitchJob) error {
	ctx = s.pin(ctx)
	return release(ctx, s.ShardOf(job.AuthorID).pool(ctx), switchClaims, job.claimKey(), job.Token)
}

const markPullSQL = `UPDATE following SET pull = pull | 1 WHERE user_id IN (?) AND author_id = ?`

const advanceSwitchSQL = `UPDATE authors SET switch_after = ?, mode = ?, claimed_until = ? WHERE author_id = ? AND claim_token = ? AND mode = 1`

// RunSwitchBatch marks the next batch of the author's followers as pulling
// it, shard by shard, then records progress; the batch that finds no more
// followers puts the author in pull mode. Marking is idempotent, so a replay
// after a crash is harmless. It reports whether the switch finished.
//
// Returns ErrLostClaim if the lease was taken over.
func (s *Store) RunSwitchBatch(ctx context.Context, job *SwitchJob, size int, leaseUntil int64) (bool, error) {
	ctx = s.pin(ctx)
	home := s.ShardOf(job.AuthorID)
	var users []uint64
	err := sqlx.SelectContext(ctx, home.pool(ctx), &users, followersPageSQL, job.AuthorID, job.SwitchAfter, uint64(1<<64-1), size)
	if err != nil {
		return false, wrap("switch batch", err)
	}
	for sh, ids := range s.groupByShard(users) {
		if err := execIn(ctx, sh.pool(ctx), markPullSQL, ids, job.AuthorID); err != nil {
			return false, wrap("switch batch", err)
		}
		if err := sh.markPulls(ctx, ids); err != nil {
			return false, wrap("switch batch", err)
		}
	}
	done := len(users) < size
	mode, mark := AuthorSwitching, job.SwitchAfter
	if done {
		mode = AuthorPull
	}
	if len(users) > 0 {
		mark = users[len(users)-1]
	}
	r, err := home.pool(ctx).ExecContext(ctx, advanceSwitchSQL, mark, mode, leaseUntil, job.AuthorID, job.Token)
	if err != nil {
		return false, wrap("switch batch", err)
	}
	if n, err := r.RowsAffected(); err != nil {
		return false, err
	} else if n == 0 {
		return false, ErrLostClaim
	}
	job.SwitchAfter = mark
	return done, nil
}

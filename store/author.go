package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// The authors table: an author's follower count and mode (push, or pull
// for authors with very many followers), and the queue of authors
// switching from push to pull.

const countAuthorSQL = `INSERT INTO authors (author_id, follower_count) VALUES (?, ?)
ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count)`

// startSwitchSQL puts an author into the switching mode; the switch job
// marks every follower's following row before pushes become selective.
const startSwitchSQL = `UPDATE authors SET mode = ` + authorSwitchingSQL + `, switch_after = 0, claim_token = 0, claimed_until = 0 WHERE author_id = ? AND mode = ` + authorPushSQL

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
	ready: "mode = " + authorSwitchingSQL,
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

const advanceSwitchSQL = `UPDATE authors SET switch_after = ?, mode = ?, claimed_until = ? WHERE author_id = ? AND claim_token = ? AND mode = ` + authorSwitchingSQL

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

// AuthorInfo is an author's fan-out mode and follower count.
type AuthorInfo struct {
	AuthorID  uint64 `db:"author_id"`
	Followers int64  `db:"follower_count"`
	Mode      int    `db:"mode"` // AuthorPush, AuthorSwitching or AuthorPull
}

// AuthorInfos returns what the authors' databases record of each author;
// an author nobody followed yet has no row and is missing from the map.
func (s *Store) AuthorInfos(ctx context.Context, ids []uint64) (map[uint64]AuthorInfo, error) {
	out := map[uint64]AuthorInfo{}
	for sh, part := range s.groupByShard(ids) {
		q, args, err := sqlx.In(authorInfoSQL, part)
		if err != nil {
			return nil, err
		}
		var rows []AuthorInfo
		if err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, q, args...); err != nil {
			return nil, wrap("author infos", err)
		}
		for _, r := range rows {
			out[r.AuthorID] = r
		}
	}
	return out, nil
}

const authorInfoSQL = `SELECT author_id, follower_count, mode FROM authors WHERE author_id IN (?)`

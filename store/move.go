package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// The moves table: account moves, one row per moved id on that id's
// database, leased to one worker at a time (claim.go) and resumed from its
// phase and progress mark after any crash. Each part runs in batches whose
// every step is idempotent: writes on the new id's or a reader's database
// first (follow, mute, re-point), then the old id's side and the progress
// mark in one transaction on the old id's database where both are there
// (mutes, follows, marker), or the mark alone after the other database's
// writes committed (hides, followers, whose rows are on the readers').

// Move phases (moves.phase), in the order a move runs them.
// repointFollowingSQL adds the follow of the new id a re-point gives, with
// the whole history (no copy limit), unless the follower follows it already.
const repointFollowingSQL = insertFollowingIgnoreHead + ` VALUES (?, ?, ?, ?, ?)`

const (
	MovePhaseMutes     = movePhaseMutes
	MovePhaseFollows   = movePhaseFollows
	MovePhaseMarker    = movePhaseMarker
	MovePhaseHides     = movePhaseHides
	MovePhaseFollowers = movePhaseFollowers
)

// moveParts names each phase's counter columns (moves.<part>_moved, …).
var moveParts = [...]string{
	movePhaseMutes:     "mutes",
	movePhaseFollows:   "follows",
	movePhaseMarker:    "marker",
	movePhaseHides:     "hides",
	movePhaseFollowers: "followers",
}

// movePairs names the part whose items a phase moves along with its own:
// a follow of a muted author moves with the mute, and a reader's follow of
// the old id with the old id's hide from the reader.
var movePairs = map[int]int{
	movePhaseMutes: movePhaseFollows,
	movePhaseHides: movePhaseFollowers,
}

// MoveJob is a claimed move: where it stands.
type MoveJob struct {
	From     uint64 `db:"user_id"`
	To       uint64 `db:"to_id"`
	Phase    int    `db:"phase"`
	After    uint64 `db:"after_id"`
	PassRows int64  `db:"pass_rows"`
	Token    uint64 `db:"-"`
}

var moveClaims = claimTable{
	table: "moves",
	cols:  "user_id, to_id, phase, after_id, pass_rows",
	key:   []string{"user_id"},
	ready: "state < " + moveDoneSQL,
}

func (j *MoveJob) claimKey() []any { return []any{j.From} }

func (j *MoveJob) placingID() uint64 { return j.From }

func (j *MoveJob) setToken(token uint64) { j.Token = token }

// ClaimMoves leases up to limit unfinished moves of the shard whose lease
// (or wait between passes) has ended.
func (s *Store) ClaimMoves(ctx context.Context, sh *Shard, now, leaseUntil int64, limit int, token uint64) ([]MoveJob, error) {
	ctx = s.pin(ctx)
	return claim[MoveJob](ctx, s, sh, moveClaims, now, leaseUntil, limit, token)
}

// ReleaseMove gives a claimed move back for any worker to resume from its
// mark at once, as on shutdown or after a failed batch.
func (s *Store) ReleaseMove(ctx context.Context, job *MoveJob) error {
	ctx = s.pin(ctx)
	return release(ctx, s.ShardOf(job.From).pool(ctx), moveClaims, job.claimKey(), job.Token)
}

const moveColsSQL = `user_id, to_id, state, created_at, updated_at,
 follows_moved, follows_skipped, follows_total, mutes_moved, mutes_skipped, mutes_total,
 hides_moved, hides_total, marker_moved, marker_total, followers_moved, followers_total`

const getMoveSQL = `SELECT ` + moveColsSQL + ` FROM moves WHERE user_id = ?`

type moveRow struct {
	From           uint64 `db:"user_id"`
	To             uint64 `db:"to_id"`
	State          int    `db:"state"`
	CreatedAt      int64  `db:"created_at"`
	UpdatedAt      int64  `db:"updated_at"`
	FollowsMoved   int64  `db:"follows_moved"`
	FollowsSkipped int64  `db:"follows_skipped"`
	FollowsTotal   int64  `db:"follows_total"`
	MutesMoved     int64  `db:"mutes_moved"`
	MutesSkipped   int64  `db:"mutes_skipped"`
	MutesTotal     int64  `db:"mutes_total"`
	HidesMoved     int64  `db:"hides_moved"`
	HidesTotal     int64  `db:"hides_total"`
	MarkerMoved    int64  `db:"marker_moved"`
	MarkerTotal    int64  `db:"marker_total"`
	FollowersMoved int64  `db:"followers_moved"`
	FollowersTotal int64  `db:"followers_total"`
}

func (r moveRow) move() feed.Move {
	state := feed.MoveRunning
	switch r.State {
	case movePending:
		state = feed.MovePending
	case moveDone:
		state = feed.MoveDone
	}
	return feed.Move{
		From: r.From, To: r.To, State: state, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Follows:   feed.MoveCount{Moved: r.FollowsMoved, Skipped: r.FollowsSkipped, Total: r.FollowsTotal},
		Mutes:     feed.MoveCount{Moved: r.MutesMoved, Skipped: r.MutesSkipped, Total: r.MutesTotal},
		Hides:     feed.MoveCount{Moved: r.HidesMoved, Total: r.HidesTotal},
		Marker:    feed.MoveCount{Moved: r.MarkerMoved, Total: r.MarkerTotal},
		Followers: feed.MoveCount{Moved: r.FollowersMoved, Total: r.FollowersTotal},
	}
}

// GetMove returns the move of the id and its progress.
//
// Returns ENOTFOUND if the id was never moved.
func (s *Store) GetMove(ctx context.Context, from uint64) (feed.Move, error) {
	var r moveRow
	err := sqlx.GetContext(ctx, s.ShardOf(from).pool(ctx), &r, getMoveSQL, from)
	if errors.Is(err, sql.ErrNoRows) {
		return feed.Move{}, feed.Errorf(feed.ENOTFOUND, "user %d has no move", from)
	}
	return r.move(), wrap("get move", err)
}

// moveTotalsSQL counts what the old id has to move, on its database: its
// following and mutes rows, the readers its hidden_from list names, its
// marker and its follower count (the authors row: counting a popular
// author's followers rows would take a while).
const moveTotalsSQL = `SELECT
 (SELECT COUNT(*) FROM following WHERE user_id = ?) AS follows_total,
 (SELECT COUNT(*) FROM mutes WHERE user_id = ?) AS mutes_total,
 (SELECT COUNT(*) FROM hidden_from WHERE author_id = ?) AS hides_total,
 (SELECT COUNT(*) FROM markers WHERE user_id = ?) AS marker_total,
 (SELECT COALESCE(MAX(follower_count), 0) FROM authors WHERE author_id = ?) AS followers_total`

// startMoveSQL records a move, replacing a finished one of the same id.
const startMoveSQL = `INSERT INTO moves (user_id, to_id, state, phase, after_id, pass_rows,
 follows_moved, follows_skipped, follows_total, mutes_moved, mutes_skipped, mutes_total,
 hides_moved, hides_total, marker_moved, marker_total, followers_moved, followers_total,
 claim_token, claimed_until, attempts, created_at, updated_at)
VALUES (?, ?, ` + movePendingSQL + `, 0, 0, 0, 0, 0, ?, 0, 0, ?, 0, ?, 0, ?, 0, ?, 0, 0, 0, ?, ?)
ON DUPLICATE KEY UPDATE to_id = VALUES(to_id), state = VALUES(state), phase = 0, after_id = 0, pass_rows = 0,
 follows_moved = 0, follows_skipped = 0, follows_total = VALUES(follows_total),
 mutes_moved = 0, mutes_skipped = 0, mutes_total = VALUES(mutes_total),
 hides_moved = 0, hides_total = VALUES(hides_total), marker_moved = 0, marker_total = VALUES(marker_total),
 followers_moved = 0, followers_total = VALUES(followers_total),
 claim_token = 0, claimed_until = 0, attempts = 0, created_at = VALUES(created_at), updated_at = VALUES(updated_at)`

const lockMoveSQL = getMoveSQL + ` FOR UPDATE`

// StartMove records the move of from to to, in one transaction on from's
// database, and returns it with its progress; started is false when the
// same move was already recorded (a repeat changes nothing). A move of
// an id whose earlier move is done replaces it.
//
// Returns ECONFLICT while a move of from to another id is unfinished.
func (s *Store) StartMove(ctx context.Context, from, to uint64, now int64) (m feed.Move, started bool, err error) {
	ctx = s.pin(ctx)
	err = s.ShardOf(from).inTx(ctx, func(tx *sqlx.Tx) error {
		started = false
		var cur moveRow
		err := sqlx.GetContext(ctx, tx, &cur, lockMoveSQL, from)
		switch {
		case err == nil && cur.To == to:
			m = cur.move()
			return nil
		case err == nil && cur.State != moveDone:
			return feed.Errorf(feed.ECONFLICT, "user %d is moving to %d; a move to another id waits until it is done", from, cur.To)
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return err
		}
		var t struct {
			Follows   int64 `db:"follows_total"`
			Mutes     int64 `db:"mutes_total"`
			Hides     int64 `db:"hides_total"`
			Marker    int64 `db:"marker_total"`
			Followers int64 `db:"followers_total"`
		}
		if err := sqlx.GetContext(ctx, tx, &t, moveTotalsSQL, from, from, from, from, from); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, startMoveSQL, from, to, t.Follows, t.Mutes, t.Hides, t.Marker, t.Followers, now, now); err != nil {
			return err
		}
		if err := sqlx.GetContext(ctx, tx, &cur, getMoveSQL, from); err != nil {
			return err
		}
		m, started = cur.move(), true
		return nil
	})
	return m, started, wrap("start move", err)
}

// MoveItem is one author of the old id's own rows: a mutes row (muted by
// the old id, or hiding from it) or a follow.
type MoveItem struct {
	AuthorID uint64 `db:"author_id"`
	Muted    bool   `db:"muted"`    // the old id mutes the author
	Hidden   bool   `db:"hidden"`   // the author hides from the old id
	Followed bool   `db:"followed"` // the old id follows the author
	// Filtered says the old id has a mutes row for the author: in the
	// follows phase, a follow that stayed with its mute (the new id was at
	// max-muted), which stays with the old id too.
	Filtered bool `db:"filtered"`
}

// moveMutesPageSQL reads the old id's next mutes rows, with whether it
// follows each author.
const moveMutesPageSQL = `SELECT m.author_id, m.muted_at IS NOT NULL AS muted, m.hidden_at IS NOT NULL AS hidden,
 EXISTS (SELECT 1 FROM following f WHERE f.user_id = m.user_id AND f.author_id = m.author_id) AS followed, 1 AS filtered
FROM mutes m WHERE m.user_id = ? AND m.author_id > ? ORDER BY m.author_id LIMIT ?`

// moveFollowsPageSQL reads the old id's next follows, with whether it has a
// mutes row for each author.
const moveFollowsPageSQL = `SELECT f.author_id, 0 AS muted, 0 AS hidden, 1 AS followed,
 EXISTS (SELECT 1 FROM mutes m WHERE m.user_id = f.user_id AND m.author_id = f.author_id) AS filtered
FROM following f WHERE f.user_id = ? AND f.author_id > ? ORDER BY f.author_id LIMIT ?`

// MoveItems returns up to limit of the old id's rows after the job's mark:
// its mutes rows in the mutes phase, its follows in the follows phase.
func (s *Store) MoveItems(ctx context.Context, job *MoveJob, limit int) ([]MoveItem, error) {
	q := moveMutesPageSQL
	if job.Phase == movePhaseFollows {
		q = moveFollowsPageSQL
	}
	var out []MoveItem
	err := sqlx.SelectContext(ctx, s.ShardOf(job.From).pool(ctx), &out, q, job.From, job.After, limit)
	return out, wrap("move items", err)
}

// MoveStep is one batch's progress, recorded with the batch's writes on the
// old id's database.
type MoveStep struct {
	After   uint64 // the progress mark: the last item the batch handled
	Found   int64  // hides, followers: rows the batch found in the pass
	Moved   int64
	Skipped int64 // mutes, follows: items left with the old id
	// PairMoved and PairSkipped count the companion part's items: in the
	// mutes phase the follows of the batch's authors, which move (or stay)
	// with their mutes; in the hides phase the follows of the readers,
	// which move with the hides.
	PairMoved, PairSkipped int64
	// Next ends the phase: the next one starts (after the last, the move
	// is done). Repass ends a pass of the hides or followers list that
	// found rows: the next pass starts from the beginning at RetryAt,
	// when the follow events of this one have emptied the list.
	Next, Repass bool
	RetryAt      int64
	LeaseUntil   int64 // the lease for the next batch
	Now          int64
}

// lockClaimedMoveSQL holds the move row for a batch if the caller still
// owns it in the phase it worked on.
const lockClaimedMoveSQL = `SELECT pass_rows FROM moves WHERE user_id = ? AND claim_token = ? AND phase = ? AND state < ` + moveDoneSQL + ` FOR UPDATE`

// advanceMoveSQL records a batch: the phase, the mark, the lease, the
// state, then the counts of each part named (moved, with skipped when
// the part has it).
func advanceMoveSQL(parts ...string) string {
	q := `UPDATE moves SET state = ?, phase = ?, after_id = ?, pass_rows = ?, claim_token = ?, claimed_until = ?, updated_at = ?`
	for _, part := range parts {
		q += `, ` + part + `_moved = ` + part + `_moved + ?`
		total := part + `_moved`
		if moveSkips(part) {
			q += `, ` + part + `_skipped = ` + part + `_skipped + ?`
			total += ` + ` + part + `_skipped`
		}
		// SET runs left to right: the total compares with the new counts.
		q += `, ` + part + `_total = GREATEST(` + part + `_total, ` + total + `)`
	}
	return q + ` WHERE user_id = ?`
}

// moveSkips says whether a part counts items left with the old id.
func moveSkips(part string) bool { return part == "mutes" || part == "follows" }

// advanceMove records step in tx on the old id's database after own, the
// batch's writes there, once it holds the move row under the job's claim.
//
// Returns ErrLostClaim if the lease was taken over.
func (s *Store) advanceMove(ctx context.Context, job *MoveJob, step MoveStep, own func(tx *sqlx.Tx) error) error {
	ctx = s.pin(ctx)
	next := *job
	err := s.ShardOf(job.From).inTx(ctx, func(tx *sqlx.Tx) error {
		next = *job
		var pass []int64
		if err := tx.SelectContext(ctx, &pass, lockClaimedMoveSQL, job.From, job.Token, job.Phase); err != nil {
			return err
		} else if len(pass) == 0 {
			return ErrLostClaim
		}
		if own != nil {
			if err := own(tx); err != nil {
				return err
			}
		}
		state, until := moveRunning, step.LeaseUntil
		next.After, next.PassRows = step.After, pass[0]+step.Found
		switch {
		case step.Next:
			next.Phase, next.After, next.PassRows = job.Phase+1, 0, 0
			if next.Phase > movePhaseFollowers {
				state, next.Token, until = moveDone, 0, 0
			}
		case step.Repass:
			next.After, next.PassRows, next.Token, until = 0, 0, 0, step.RetryAt
		}
		parts := []string{moveParts[job.Phase]}
		args := []any{state, next.Phase, next.After, next.PassRows, next.Token, until, step.Now, step.Moved}
		if moveSkips(parts[0]) {
			args = append(args, step.Skipped)
		}
		if pair, ok := movePairs[job.Phase]; ok {
			parts = append(parts, moveParts[pair])
			args = append(args, step.PairMoved)
			if moveSkips(moveParts[pair]) {
				args = append(args, step.PairSkipped)
			}
		}
		_, err := tx.ExecContext(ctx, advanceMoveSQL(parts...), append(args, job.From)...)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrLostClaim) {
			return err
		}
		return wrap("advance move", err)
	}
	*job = next
	return nil
}

// Done says whether the job has ended: the move is done, or its claim was
// given up between passes.
func (j *MoveJob) Done() bool { return j.Token == 0 }

// AdvanceMove records a batch that wrote nothing on the old id's database
// (the hides and followers passes, whose writes are on the readers').
//
// Returns ErrLostClaim if the lease was taken over.
func (s *Store) AdvanceMove(ctx context.Context, job *MoveJob, step MoveStep) error {
	return s.advanceMove(ctx, job, step, nil)
}

// FinishMoveItems removes from the old id what the batch moved (moved
// names the authors whose follow, mute and hide the new id now has): the
// following and mutes rows, with the purge of the authors' posts from the
// old id's inbox, and queues each pair's follow event, which updates the
// authors' followers and hidden_from lists; the old id's counts are left
// to be counted again. It runs in one transaction with the progress, under
// the old id's header row, as an unfollow does.
//
// Returns ErrLostClaim if the lease was taken over.
func (s *Store) FinishMoveItems(ctx context.Context, job *MoveJob, moved []uint64, step MoveStep) error {
	return s.advanceMove(ctx, job, step, func(tx *sqlx.Tx) error {
		if len(moved) == 0 {
			return nil
		}
		if err := ensureHeaders(ctx, tx, job.From); err != nil {
			return err
		}
		for _, a := range moved {
			if followed, err := affected(tx.ExecContext(ctx, deleteFollowingSQL, job.From, a)); err != nil {
				return err
			} else if followed {
				if err := purgeAuthor(ctx, tx, job.From, a); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, deleteMuteSQL, job.From, a); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, queueFollowEventSQL, job.From, a, step.Now); err != nil {
				return err
			}
		}
		if err := recountPulls(ctx, tx, job.From); err != nil {
			return err
		}
		if err := forgetCounts(ctx, tx, job.From); err != nil {
			return err
		}
		return followsChanged(ctx, tx, job.From)
	})
}

const deleteMarkerSQL = `DELETE FROM markers WHERE user_id = ?`

// FinishMoveMarker removes the old id's read marker, which the new id's
// now covers, with the progress.
//
// Returns ErrLostClaim if the lease was taken over.
func (s *Store) FinishMoveMarker(ctx context.Context, job *MoveJob, step MoveStep) error {
	return s.advanceMove(ctx, job, step, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, deleteMarkerSQL, job.From)
		return err
	})
}

// Repointed says what Repoint changed.
type Repointed struct {
	Followed bool // the user's follow of the old id is now of the new id
	Hidden   bool // the old id's hide from the user is now the new id's
}

// Repoint makes what userID has about from (a follow, its mute of from,
// from's hide from it) about to instead, in one transaction on the user's
// database under the user's header row: the user's share of from's move
// to to. The edge to from goes as an unfollow does, with from's posts
// purged from the inbox; the edge to to is created pending backfill, as a
// follow does, muted if the user's marks about to say so, unless the user
// follows to already (or is to, who cannot follow itself). A mark the user
// has about to already stays as it is. Both pairs' follow events are
// queued: they move the followers and hidden_from rows and backfill. No cap
// applies: the user follows and mutes no more authors than before; the
// user's counts are left to be counted again. A repeat changes nothing.
func (s *Store) Repoint(ctx context.Context, userID, from, to uint64, now int64) (Repointed, error) {
	ctx = s.pin(ctx)
	var res Repointed
	inserted := false
	err := s.ShardOf(userID).inTx(ctx, func(tx *sqlx.Tx) error {
		res, inserted = Repointed{}, false
		if err := ensureHeaders(ctx, tx, userID); err != nil {
			return err
		}
		if err := forgetCounts(ctx, tx, userID); err != nil {
			return err
		}
		var was, toWas marks
		hadFrom, err := lockMarks(ctx, tx, userID, from, &was)
		if err != nil {
			return err
		}
		if _, err := lockMarks(ctx, tx, userID, to, &toWas); err != nil {
			return err
		}
		toIs := toWas
		if hadFrom {
			if _, err := tx.ExecContext(ctx, deleteMuteSQL, userID, from); err != nil {
				return err
			}
			if userID != to {
				toIs = marks{MutedAt: firstSet(toWas.MutedAt, was.MutedAt), HiddenAt: firstSet(toWas.HiddenAt, was.HiddenAt)}
				if _, err := tx.ExecContext(ctx, upsertMuteSQL, userID, to, toIs.MutedAt, toIs.HiddenAt); err != nil {
					return err
				}
			}
			res.Hidden = was.HiddenAt.Valid && !toWas.HiddenAt.Valid && userID != to
		}
		if toIs.any() && !toWas.any() {
			// A follow of to the user had reads to's posts no more.
			if _, err := tx.ExecContext(ctx, muteEdgeSQL, userID, to); err != nil {
				return err
			}
			if err := purgeAuthor(ctx, tx, userID, to); err != nil {
				return err
			}
		}
		if res.Followed, err = affected(tx.ExecContext(ctx, deleteFollowingSQL, userID, from)); err != nil {
			return err
		}
		if res.Followed {
			if err := purgeAuthor(ctx, tx, userID, from); err != nil {
				return err
			}
			if userID != to {
				// A follow of to already there stays as it is.
				if inserted, err = affected(tx.ExecContext(ctx, repointFollowingSQL, userID, to, now, PullPending, toIs.any())); err != nil {
					return err
				}
			}
			if err := recountPulls(ctx, tx, userID); err != nil {
				return err
			}
		}
		if !hadFrom && !res.Followed {
			return nil
		}
		if err := followsChanged(ctx, tx, userID); err != nil {
			return err
		}
		for _, a := range []uint64{from, to} {
			if a == userID {
				continue
			}
			if _, err := tx.ExecContext(ctx, queueFollowEventSQL, userID, a, now); err != nil {
				return err
			}
		}
		return nil
	})
	if inserted {
		s.ShardOf(userID).pullHints.Set(userID, true) // the backfill is pending
	}
	return res, wrap("repoint", err)
}

// marks is a mutes row: the user's mute of the author and the author's
// hide from the user.
type marks struct {
	MutedAt  sql.NullInt64 `db:"muted_at"`
	HiddenAt sql.NullInt64 `db:"hidden_at"`
}

func (m marks) any() bool { return m.MutedAt.Valid || m.HiddenAt.Valid }

// lockMarks reads the pair's mutes row into m with a locking read; ok is
// false when there is none.
func lockMarks(ctx context.Context, tx *sqlx.Tx, userID, authorID uint64, m *marks) (ok bool, err error) {
	err = sqlx.GetContext(ctx, tx, m, lockMuteSQL, userID, authorID)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// firstSet returns a if it is set, else b.
func firstSet(a, b sql.NullInt64) sql.NullInt64 {
	if a.Valid {
		return a
	}
	return b
}

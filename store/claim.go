package store

import (
	"context"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"
)

// A claimable table leases rows to one worker at a time with claim_token and
// claimed_until, like river's JobGetAvailable: SELECT … FOR UPDATE SKIP LOCKED
// finds candidates without waiting, then a guarded UPDATE takes them and its
// RowsAffected is what counts, and the rows taken are read back under its
// locks. Here SKIP LOCKED is only an optimisation: TiDB ignores it silently,
// and the guard still keeps a row to one worker. A
// row whose lease passed is claimable again, which is how a dead worker's
// rows are rescued. (Fan-out tasks are claimed differently, by their first
// batch: see nextTaskSQL.)
type claimTable struct {
	table string // constant table name
	cols  string // columns to return
	key   []string
	ready string // constant predicate of rows that have work
}

// keyIn returns a predicate matching rows keys: "k1 IN (?, ?)" for a
// one-column key, "(k1, k2) IN ((?, ?), (?, ?))" for several rows of a
// longer one, whose point ranges every server builds with less work than
// for the same keys written long-hand (an OR of ANDs). One row of a longer
// key is written "(k1 = ? AND k2 = ?)": MariaDB does not range-scan a
// one-element row constructor IN, and in an UPDATE that scan locks every
// row.
func keyIn(key []string, rows int) string {
	if len(key) == 1 {
		return key[0] + " IN (" + placeholders(rows) + ")"
	}
	if rows == 1 {
		return "(" + strings.Join(key, " = ? AND ") + " = ?)"
	}
	one := "(" + placeholders(len(key)) + ")"
	return "(" + strings.Join(key, ", ") + ") IN (" + strings.TrimSuffix(strings.Repeat(one+", ", rows), ", ") + ")"
}

// followingByPair is the following table for statements that find edges by
// a keyIn of (user_id, author_id) pairs. Three of its indexes begin with
// user_id, and MariaDB's range optimizer weighs every one against each
// pair: over hundreds of pairs that costs many times the statement's
// lookups, and it may choose a range over the users' whole rows. The
// primary key (author_id, user_id) makes each pair one point, and a
// locking read locks only the edges it finds.
const followingByPair = "following FORCE INDEX (PRIMARY)"

// claimUpdateSQL takes rows candidates by primary key. FORCE INDEX keeps the
// optimizer off the claim index: a range of it is every ready row, and the
// UPDATE would lock them all, serialising claimers and deadlocking them with
// workers updating or releasing their rows.
func claimUpdateSQL(t claimTable, rows int) string {
	return "UPDATE " + t.table + " FORCE INDEX (PRIMARY) SET claim_token = ?, claimed_until = ?, attempts = attempts + 1 WHERE " +
		t.ready + " AND claimed_until < ? AND " + keyIn(t.key, rows)
}

// claimRow is a pointer to a row type of a claimable table.
type claimRow[T any] interface {
	*T
	claimKey() []any // the row's key values, in the order of claimTable.key
	placingID() uint64
	setToken(uint64)
}

// claim leases up to limit ready rows of sh whose lease ended before now to
// token until leaseUntil, and returns them carrying the token. Rows whose
// key sh does not own are left alone: a database that gave virtual shards
// up keeps its copies of their rows until cleanup.
func claim[T any, PT claimRow[T]](ctx context.Context, s *Store, sh *Shard, t claimTable, now, leaseUntil int64, limit int, token uint64) ([]T, error) {
	var got []T
	err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
		got = got[:0]
		q := "SELECT " + t.cols + " FROM " + t.table + " WHERE " + t.ready +
			" AND claimed_until < ? ORDER BY claimed_until LIMIT ? FOR UPDATE SKIP LOCKED"
		var cand []T
		if err := sqlx.SelectContext(ctx, tx, &cand, q, now, limit); err != nil {
			return err
		}
		cand = slices.DeleteFunc(cand, func(c T) bool { return s.ShardOf(PT(&c).placingID()) != sh })
		if len(cand) == 0 {
			return nil
		}
		args := []any{token, leaseUntil, now}
		for i := range cand {
			args = append(args, PT(&cand[i]).claimKey()...)
		}
		if claimed, err := affected(tx.ExecContext(ctx, claimUpdateSQL(t, len(cand)), args...)); err != nil || !claimed {
			return err
		}
		// The rows are read again under the locks the UPDATE took: the
		// candidates' values are those of a read that locked nothing where
		// SKIP LOCKED is a no-op (TiDB), and a row may have changed since
		// (a delivery turned into a retraction), or gone to another worker.
		sel := "SELECT " + t.cols + " FROM " + t.table + " WHERE claim_token = ? AND " + keyIn(t.key, len(cand))
		return sqlx.SelectContext(ctx, tx, &got, sel, append([]any{token}, args[3:]...)...)
	})
	for i := range got {
		PT(&got[i]).setToken(token)
	}
	return got, wrap("claim "+t.table, err)
}

// release gives a claimed row back so any worker can take it at once, if the
// token still holds it: on shutdown, after a failed step, or when a newer
// operation means the row must run again.
func release(ctx context.Context, db *sqlx.DB, t claimTable, key []any, token uint64) error {
	q := "UPDATE " + t.table + " SET claim_token = 0, claimed_until = 0 WHERE " + keyIn(t.key, 1) + " AND claim_token = ?"
	_, err := db.ExecContext(ctx, q, append(key, token)...)
	return wrap("release "+t.table, err)
}

// placeholders returns n comma-separated placeholders.
func placeholders(n int) string {
	return "?" + strings.Repeat(", ?", n-1)
}

package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// A deleted post leaves a tombstone: its posts row marked deleted, its
// delivery row (the retraction) and, with several databases, its
// content_ids row; a deleted stream likewise its streams row. They keep a repeated DELETE answering 204, the id taken
// and a backfill racing the delete able to tell. Once the retraction has
// finished and a grace period has passed, nothing needs them:
// PurgeTombstones deletes them, so deletes leave nothing that grows.
//
// A finished retraction records when it finished in its delivery row's
// claimed_until (other finished deliveries hold 0 there), so the sweep is a
// range of idx_deliveries_claim whatever the number of posts.

// tombstonesSQL lists retractions finished in the window (1 to the cutoff).
const tombstonesSQL = `SELECT content_id, author_id FROM deliveries
WHERE state = ` + deliveryDoneSQL + ` AND claimed_until BETWEEN 1 AND ? AND retract = 1 LIMIT ?`

const (
	purgeContentIDsSQL = `DELETE FROM content_ids WHERE content_id IN (?)`
	purgePostsSQL      = `DELETE FROM posts WHERE content_id IN (?) AND deleted = 1`
	// purgeStreamsSQL matches only the listed pairs: a stream id names
	// one stream, of one host.
	purgeStreamsSQL    = `DELETE FROM streams WHERE host_id IN (?) AND stream_id IN (?) AND deleted = 1`
	purgeDeliveriesSQL = `DELETE FROM deliveries WHERE content_id IN (?) AND state = ` + deliveryDoneSQL + ` AND retract = 1`
)

// PurgeTombstones deletes up to limit tombstones of sh's authors whose
// retraction finished before the cutoff (Unix ms), and reports how many,
// with the error of a database whose content ids it could not delete.
// The content_ids rows go first, each database's in one statement: a crash
// or a database that fails leaves the tombstone, which the next sweep
// finds again. Rows of authors a reshard moved away are cleanup's.
func (s *Store) PurgeTombstones(ctx context.Context, sh *Shard, before int64, limit int) (int, error) {
	ctx = s.pin(ctx)
	var rows []struct {
		ContentID uint64 `db:"content_id"`
		AuthorID  uint64 `db:"author_id"`
	}
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, tombstonesSQL, before, limit); err != nil {
		return 0, wrap("tombstones", err)
	}
	byRegistry := map[*Shard][]uint64{}
	var hosts []uint64
	for _, r := range rows {
		if s.ShardOf(r.AuthorID) != sh {
			continue
		}
		hosts = append(hosts, r.AuthorID)
		registry := sh
		if len(s.shards) > 1 {
			registry = s.ShardOf(r.ContentID)
		}
		byRegistry[registry] = append(byRegistry[registry], r.ContentID)
	}
	var (
		ids    []uint64
		failed error // a database's tombstones wait for the next sweep
	)
	for registry, batch := range byRegistry {
		if len(s.shards) > 1 {
			if err := execIn(ctx, registry.pool(ctx), purgeContentIDsSQL, batch); err != nil {
				failed = wrap("purge content ids", err)
				continue
			}
		}
		ids = append(ids, batch...)
	}
	if len(ids) == 0 {
		return 0, failed
	}
	err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
		for _, q := range []string{purgePostsSQL, purgeDeliveriesSQL} {
			if err := execIn(ctx, tx, q, ids); err != nil {
				return err
			}
		}
		return execIn(ctx, tx, purgeStreamsSQL, hosts, ids)
	})
	if err != nil {
		return 0, wrap("purge tombstones", err)
	}
	return len(ids), failed
}

// execIn runs q with its IN lists expanded (sqlx.In: a slice argument
// fills an IN (?)).
func execIn(ctx context.Context, ex sqlx.ExecerContext, q string, args ...any) error {
	q, args, err := sqlx.In(q, args...)
	if err != nil {
		return err
	}
	_, err = ex.ExecContext(ctx, q, args...)
	return err
}

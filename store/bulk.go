package store

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// InboxRow is one inbox entry, a post as one user's feed holds it: as a
// bound, the key deleteBelow cuts one user's inbox below.
type InboxRow struct {
	UserID uint64
	feed.Post
}

// bulkChunk bounds the rows of one multi-row statement.
const bulkChunk = 1000

// InsertRows runs "head VALUES (…),(…) tail" over n rows in statements of
// at most bulkChunk rows, row(i) giving the cols values of row i, and
// returns the rows affected. The store's bulk writes use it, and so do the
// loaders of tests and benchmarks (storetest), which write raw rows.
func InsertRows(ctx context.Context, db sqlx.ExecerContext, head string, cols int, tail string, n int, row func(i int) []any) (int64, error) {
	var total int64
	for start := 0; start < n; start += bulkChunk {
		end := min(start+bulkChunk, n)
		args := make([]any, 0, cols*(end-start))
		for i := start; i < end; i++ {
			args = append(args, row(i)...)
		}
		r, err := db.ExecContext(ctx, multiRowInsert(head, cols, end-start, tail), args...)
		if err != nil {
			return total, err
		}
		k, err := r.RowsAffected()
		if err != nil {
			return total, err
		}
		total += k
	}
	return total, nil
}

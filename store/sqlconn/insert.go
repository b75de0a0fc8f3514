package sqlconn

import (
	"context"
	"strings"

	"github.com/jmoiron/sqlx"
)

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
		r, err := db.ExecContext(ctx, MultiRowInsert(head, cols, end-start, tail), args...)
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

// MultiRowInsert returns "<head> VALUES (?,…),(?,…)…<tail>" for rows rows of
// cols columns: the one place multi-row statements are built, from constant
// text and placeholders only.
func MultiRowInsert(head string, cols, rows int, tail string) string {
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	var b strings.Builder
	b.Grow(len(head) + rows*(len(tuple)+1) + len(tail) + 8)
	b.WriteString(head)
	b.WriteString(" VALUES ")
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tuple)
	}
	b.WriteString(tail)
	return b.String()
}

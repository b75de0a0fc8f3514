package storetest

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
)

const tablesSQL = `SELECT TABLE_NAME FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE' AND TABLE_NAME <> 'goose_db_version'`

// RowCounts returns every table's exact row count, summed over the
// databases of st: what a soak test watches, tables added later included.
func RowCounts(ctx context.Context, st *store.Store) (map[string]int64, error) {
	out := map[string]int64{}
	for _, sh := range st.Shards() {
		var tables []string
		if err := sqlx.SelectContext(ctx, sh.DB, &tables, tablesSQL); err != nil {
			return nil, fmt.Errorf("storetest: tables of %s: %w", sh.Name, err)
		}
		for _, t := range tables {
			var n int64
			if err := sh.DB.GetContext(ctx, &n, "SELECT COUNT(*) FROM `"+t+"`"); err != nil {
				return nil, fmt.Errorf("storetest: rows of %s.%s: %w", sh.Name, t, err)
			}
			out[t] += n
		}
	}
	return out, nil
}

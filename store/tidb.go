package store

import (
	"context"
	"strings"

	"github.com/jmoiron/sqlx"
)

// IsTiDB reports whether db's server is TiDB, whose VERSION() names it
// (as in 8.0.11-TiDB-v8.4.0). TiDB runs the service's SQL but has no
// triggers, which online resharding needs (package reshard refuses it
// there), and scales out by itself.
func IsTiDB(ctx context.Context, db sqlx.QueryerContext) (bool, error) {
	var version string
	if err := db.QueryRowxContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return false, err
	}
	return strings.Contains(version, "TiDB"), nil
}

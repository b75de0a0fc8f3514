package reshard

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// openReshard migrates the databases of dsn (named a, b, ...), records
// each one's identity and, on a, the layout of every virtual shard on a at
// epoch 1, as feedd's first start with a alone does; then it opens a
// reshard to the map of those databases with ranges (sharding.yaml's
// list). It returns the reshard and a handle on each database, closed
// when the test ends.
func openReshard(t *testing.T, dsn map[string]string, ranges string) (*Reshard, map[string]*sqlx.DB) {
	t.Helper()
	ctx := t.Context()
	engine := storetest.InboxEngine(t)
	dbs := map[string]*sqlx.DB{}
	var yaml strings.Builder
	yaml.WriteString("virtual_shards: 1024\ndatabases:\n")
	for _, name := range slices.Sorted(maps.Keys(dsn)) {
		if err := store.MigrateDatabase(ctx, name, dsn[name], engine, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		db, err := sqlx.Open("mysql", dsn[name])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs[name] = db
		if err := store.RecordIdentity(ctx, db, name); err != nil {
			t.Fatal(err)
		}
		if name == "a" {
			if err := store.RecordLayout(ctx, db, 1, shardmap.FormatLayout(slices.Repeat([]string{"a"}, 1024))); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Fprintf(&yaml, "  %s: {dsn: %q}\n", name, dsn[name])
	}
	yaml.WriteString("ranges: " + ranges + "\n")
	m, err := shardmap.Parse([]byte(yaml.String()))
	if err != nil {
		t.Fatal(err)
	}
	m.InboxEngine = string(engine)
	r, err := Open(ctx, m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, dbs
}

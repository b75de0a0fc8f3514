package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

func TestCheckLayout(t *testing.T) {
	t.Parallel()
	m := storetest.NewShardMap(t, storetest.Options{Shards: 2}) // db0: 0-511, db1: 512-1023
	open := func(ranges ...shardmap.Range) *store.Store {
		t.Helper()
		mm := *m
		if ranges != nil {
			mm.Ranges = ranges
		}
		st, err := store.Open(&mm)
		must(t, err)
		t.Cleanup(func() { st.Close() })
		must(t, st.Migrate(t.Context(), discard))
		return st
	}
	first := open()
	if got, want := first.Layout(), "1024 0-511=db0 512-1023=db1"; got != want {
		t.Fatalf("layout %q, want %q", got, want)
	}
	must(t, first.CheckLayout(t.Context())) // a first start adopts it
	must(t, first.CheckLayout(t.Context())) // and it stays in force
	for _, sh := range first.Shards() {
		if n := count(t, sh, "SELECT COUNT(*) FROM shard_map WHERE epoch = 1"); n != 1 {
			t.Errorf("database %s records %d layouts at epoch 1, want 1", sh.Name, n)
		}
	}

	// Moving ranges by editing the file is refused, naming what would move.
	moved := open(shardmap.Range{VShards: "0-767", Database: "db0"}, shardmap.Range{VShards: "768-1023", Database: "db1"})
	err := moved.CheckLayout(t.Context())
	if err == nil || !strings.Contains(err.Error(), "vshards 512-767 are on db1, the file puts them on db0") {
		t.Fatalf("moved ranges: %v", err)
	}
	// The same layout again is fine.
	must(t, open().CheckLayout(t.Context()))
}

// TestCheckLayoutIdentity: a file whose DSNs reach the wrong databases, or
// an empty one, is refused even though its layout is the one in force.
func TestCheckLayoutIdentity(t *testing.T) {
	t.Parallel()
	m := storetest.NewShardMap(t, storetest.Options{Shards: 2})
	open := func(mm *shardmap.Map) *store.Store {
		t.Helper()
		st, err := store.Open(mm)
		must(t, err)
		t.Cleanup(func() { st.Close() })
		must(t, st.Migrate(t.Context(), discard))
		return st
	}
	must(t, open(m).CheckLayout(t.Context()))

	swapped := *m
	swapped.Databases = map[string]shardmap.Database{"db0": m.Databases["db1"], "db1": m.Databases["db0"]}
	if err := open(&swapped).CheckLayout(t.Context()); err == nil || !strings.Contains(err.Error(), "reaches the database named") {
		t.Errorf("swapped DSNs: %v, want a refusal", err)
	}
	empty := *m
	empty.Databases = map[string]shardmap.Database{"db0": m.Databases["db0"], "db1": {DSN: storetest.DatabaseDSN(t)}}
	if err := open(&empty).CheckLayout(t.Context()); err == nil || !strings.Contains(err.Error(), "holds none of this deployment's data") {
		t.Errorf("an empty database: %v, want a refusal", err)
	}
	must(t, open(m).CheckLayout(t.Context()))
}

// TestWritesCarryTheirEpoch checks that a write runs under the epoch its
// method pinned before choosing a database, even on a connection opened
// after the store moved to a newer layout: the epoch the layout fence
// compares is the decision's.
func TestWritesCarryTheirEpoch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newStore(t, 1)
	must(t, st.CheckLayout(ctx))
	sh := st.Shards()[0]
	epochOf := func(ctx context.Context) int64 {
		t.Helper()
		e, err := store.WriteEpoch(ctx, sh)
		must(t, err)
		return e
	}
	pinned := st.PinEpoch(ctx)
	if e := epochOf(pinned); e != 1 {
		t.Fatalf("write epoch %d before the cut-over, want 1", e)
	}
	// A cut-over records the next epoch (the same layout will do here).
	if _, err := sh.DB.ExecContext(ctx, "INSERT INTO shard_map (epoch, layout, adopted_at) VALUES (2, ?, 0)", st.Layout()); err != nil {
		t.Fatal(err)
	}
	if changed, err := st.Refresh(ctx); err != nil || !changed || st.Epoch() != 2 {
		t.Fatalf("refresh: changed %v, epoch %d, %v", changed, st.Epoch(), err)
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		want int64
	}{
		{"a write pinned after the refresh", st.PinEpoch(ctx), 2},
		{"a write pinned before it", pinned, 1},
		{"the next write", st.PinEpoch(ctx), 2},
	} {
		if e := epochOf(c.ctx); e != c.want {
			t.Errorf("%s: epoch %d, want %d", c.name, e, c.want)
		}
	}
}

package store_test

import (
	"strings"
	"testing"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

func TestCheckLayout(t *testing.T) {
	t.Parallel()
	m := storetest.NewShardMap(t, storetest.Options{Shards: 2}) // db0: 0-511, db1: 512-1023
	open := func(ranges ...store.RangeConfig) *store.Store {
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
	moved := open(store.RangeConfig{VShards: "0-767", Database: "db0"}, store.RangeConfig{VShards: "768-1023", Database: "db1"})
	err := moved.CheckLayout(t.Context())
	if err == nil || !strings.Contains(err.Error(), "vshards 512-767 are on db1, the file puts them on db0") {
		t.Fatalf("moved ranges: %v", err)
	}
	// The same layout again is fine.
	must(t, open().CheckLayout(t.Context()))
}

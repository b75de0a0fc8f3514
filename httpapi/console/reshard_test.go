package console_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/reshard"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// TestConsoleReshard shows a reshard held in its copy phase (its progress
// callback waits), then aborts it from the page once apply has stopped.
// On TiDB, which has no triggers, apply refuses and the page says why.
func TestConsoleReshard(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	target := storetest.NewShardMap(t, storetest.Options{Shards: 2})
	inForce := *target
	inForce.Ranges = []shardmap.Range{{VShards: "0-1023", Database: "db0"}}
	st, err := store.Open(&inForce)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckLayout(ctx); err != nil {
		t.Fatal(err)
	}
	f := setupOn(t, "", st)
	for a := uint64(1); a <= 40; a++ {
		publish(t, f.svc, a, 1000+a)
	}

	reached, release := make(chan struct{}), make(chan struct{})
	var once bool
	r, err := reshard.Open(ctx, target, reshard.Options{BatchSize: 2, Progress: func(p reshard.Progress) {
		if p.Step == "copy" && !once {
			once = true
			close(reached)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if storetest.TiDB(t) {
		consoleRefusesReshard(t, f, r, st)
		return
	}
	actx, stopApply := context.WithCancel(ctx)
	applied := make(chan error, 1)
	go func() { applied <- r.Apply(actx, nil) }()
	select {
	case <-reached:
	case err := <-applied:
		t.Fatalf("apply ended before its copy: %v", err)
	}
	f.svc.CheckHealth(ctx) // the probes read the phase

	_, page := f.get(t, "/console/reshard")
	mustContain(t, page, "epoch 1", "1024 0-1023=db0", "to <code class=\"layout\">1024 0-511=db0 512-1023=db1</code>",
		"virtual shards 512-1023: db0 → db1", `id="step-db0"`, `<li class="current">copy</li>`, "Abort reshard")
	token := csrf(t, page)
	_, page = f.get(t, "/console")
	mustContain(t, page, `<a href="/console/reshard">copy</a>`)

	// Apply stops (as an operator stops it), then the page aborts.
	stopApply()
	close(release)
	<-applied
	resp, _ := f.post(t, "/console/reshard/abort", url.Values{"csrf": {token}})
	if resp.StatusCode != 303 {
		t.Fatalf("abort: %d", resp.StatusCode)
	}
	wait.For(t, "the abort ended", func() error {
		if _, page = f.get(t, "/console/reshard"); !strings.Contains(page, "last abort ended") {
			return fmt.Errorf("the reshard page:\n%s", page)
		}
		return nil
	})
	mustContain(t, page, "done", "None.")
	if under, err := store.ReshardUnderWay(ctx, st.Shards()[1].DB); err != nil || under != "" {
		t.Errorf("db1 still records a reshard to %q (%v)", under, err)
	}
}

// consoleRefusesReshard checks, on TiDB, that apply refuses before it
// marks anything and that the reshard page shows the refusal, with no
// reshard to abort.
func consoleRefusesReshard(t *testing.T, f *fixture, r *reshard.Reshard, st *store.Store) {
	ctx := t.Context()
	if err := r.Apply(ctx, nil); !errors.Is(err, reshard.ErrTiDB) || !strings.Contains(err.Error(), "database db0 is on TiDB") {
		t.Fatalf("apply on TiDB: %v, want a refusal naming db0 and %q", err, reshard.ErrTiDB)
	}
	for _, sh := range st.Shards() {
		if under, err := store.ReshardUnderWay(ctx, sh.DB); err != nil || under != "" {
			t.Errorf("%s records a reshard to %q (%v) after the refusal", sh.Name, under, err)
		}
	}
	_, page := f.get(t, "/console/reshard")
	mustContain(t, page, "epoch 1", "1024 0-1023=db0", "None. <code>feedd reshard apply</code> refuses",
		"is on TiDB: online resharding is not supported on TiDB", "add TiKV nodes")
	if strings.Contains(page, "Abort reshard") {
		t.Errorf("the page offers an abort on TiDB:\n%s", page)
	}
}

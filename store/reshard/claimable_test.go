package reshard

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// TestCatchUpDropsStaleCopies: a delivery that was done when the copy
// took it becomes claimable again when its post is deleted (the
// retraction replans it). Claimable rows move at the cut-over, so
// catch-up must not leave the target its done copy: verify would count
// that copy on the target and nothing on the source, and fail the move.
// On TiDB the reshard refuses (ErrTiDB).
func TestCatchUpDropsStaleCopies(t *testing.T) {
	ctx := t.Context()
	// The data is laid out on a alone, at epoch 1.
	r, dbs := openReshard(t, map[string]string{"a": storetest.DatabaseDSN(t), "b": storetest.DatabaseDSN(t)},
		"[{vshards: 0-511, database: a}, {vshards: 512-1023, database: b}]")
	a := dbs["a"]
	// A done delivery of an author in the half that moves to b.
	author := uint64(1)
	for shardmap.VirtualShard(author, 1024) < 512 {
		author++
	}
	const post = 77
	if _, err := a.ExecContext(ctx, `INSERT INTO deliveries (content_id, author_id, publish_time, kind, state, created_at) VALUES (?, ?, 1, 'post', 2, 1)`, post, author); err != nil {
		t.Fatal(err)
	}

	if storetest.TiDB(t) {
		// No triggers, so no capture: the reshard refuses before it
		// writes anything.
		if err := r.Apply(ctx, nil); !errors.Is(err, ErrTiDB) {
			t.Fatalf("apply on TiDB: %v, want %v", err, ErrTiDB)
		}
		if under, err := store.ReshardUnderWay(ctx, a); err != nil || under != "" {
			t.Errorf("a records a reshard to %q (%v) after the refusal", under, err)
		}
		return
	}
	step := r.stepFrom("a")
	tables, err := describeByName(ctx, r.dbs["a"])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := step.startCapture(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := step.copy(ctx); err != nil {
		t.Fatal(err)
	}
	// The post is deleted: its delivery is replanned by a writer of the
	// epoch in force, whose change the capture logs.
	conn, err := a.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"SET @feed_epoch = 1", fmt.Sprintf("UPDATE deliveries SET retract = 1, state = 0 WHERE content_id = %d", post)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	d := drained{touched: map[int]bool{}}
	if err := step.drainAll(ctx, []string{"a", "b"}, tables, &d); err != nil {
		t.Fatal(err)
	}
	if err := step.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	// The cut-over moves the replanned delivery as it is on a.
	if _, err := step.cutOver(ctx, "a", []string{"a", "b"}, tables, Report{Source: "a", Moves: step.Moves, Epoch: step.epoch + 1}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "", "b": "0 1"} {
		var got string
		err := r.dbs[name].GetContext(ctx, &got, fmt.Sprintf("SELECT CONCAT(state, ' ', retract) FROM deliveries WHERE content_id = %d", post))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("database %s: delivery (state, retract) %q, want %q", name, got, want)
		}
	}
}

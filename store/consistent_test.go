package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/sqlconn"
	"github.com/feedhq/feed/store/storetest"
)

// TestSnapshotSeesBothEngines checks what a ConsistentRead promises and a
// reshard's catch-up rests on: writers set a table in the inbox's engine
// and then an InnoDB one to the same new value in each transaction, as a
// header-first transaction writes the inbox and its trigger logs the
// change (so InnoDB commits first), and a snapshot sees every one of them
// in both tables or in neither. The writers set values rather than add to
// them, so the check rests on the snapshot alone, not also on each
// update reading the latest committed value.
func TestSnapshotSeesBothEngines(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlx.Open("mysql", storetest.DatabaseDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	engine := "InnoDB"
	if storetest.InboxEngine(t) == store.RocksDB {
		engine = "ROCKSDB"
	}
	for _, q := range []string{
		"CREATE TABLE first (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE = " + engine,
		"CREATE TABLE second (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE = InnoDB",
		"INSERT INTO first VALUES (1, 0)",
		"INSERT INTO second VALUES (1, 0)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var last atomic.Int64
	for range 3 {
		wg.Go(func() {
			for wctx.Err() == nil {
				v := last.Add(1)
				tx, err := db.BeginTxx(wctx, nil)
				if err != nil {
					return
				}
				_, err = tx.ExecContext(wctx, "UPDATE first SET v = ? WHERE id = 1", v)
				if err == nil {
					_, err = tx.ExecContext(wctx, "UPDATE second SET v = ? WHERE id = 1", v)
				}
				if err != nil {
					tx.Rollback()
					continue
				}
				tx.Commit()
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	for i := range 5000 {
		snap, err := sqlconn.OpenConsistentRead(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		var a, b int64
		err = snap.GetContext(ctx, &b, "SELECT v FROM second WHERE id = 1")
		if err == nil {
			err = snap.GetContext(ctx, &a, "SELECT v FROM first WHERE id = 1")
		}
		snap.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			// What the tables hold outside any snapshot once the writers
			// stop tells a torn snapshot from writers that left the
			// tables apart.
			stop()
			wg.Wait()
			var c, d int64
			_ = db.GetContext(ctx, &c, "SELECT v FROM first WHERE id = 1")
			_ = db.GetContext(ctx, &d, "SELECT v FROM second WHERE id = 1")
			t.Fatalf("read %d: the snapshot sees the first table set by transaction %d and the second by %d; once the writers stopped, they held %d and %d", i, a, b, c, d)
		}
	}
}

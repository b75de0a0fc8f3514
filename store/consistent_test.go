package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

// TestSnapshotSeesBothEngines checks what a ConsistentRead promises and a
// reshard's catch-up rests on: writers update a table in the inbox's
// engine and then an InnoDB one in each transaction, as a header-first
// transaction writes the inbox and its trigger logs the change (so InnoDB
// commits first), and a snapshot sees every one of them in both tables or
// in neither.
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
	for range 3 {
		wg.Go(func() {
			for wctx.Err() == nil {
				tx, err := db.BeginTxx(wctx, nil)
				if err != nil {
					return
				}
				_, err = tx.ExecContext(wctx, "UPDATE first SET v = v + 1 WHERE id = 1")
				if err == nil {
					_, err = tx.ExecContext(wctx, "UPDATE second SET v = v + 1 WHERE id = 1")
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
		snap, err := store.OpenConsistentRead(ctx, db)
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
			t.Fatalf("read %d: the snapshot sees %d updates of the first table and %d of the second", i, a, b)
		}
	}
}

package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// wantStates probes every shard and checks each is in state.
func wantStates(t *testing.T, st *store.Store, state string) {
	t.Helper()
	st.CheckHealth(t.Context(), 10*time.Second, nil)
	for _, sh := range st.Shards() {
		if h := sh.Health(); h.State != state {
			t.Fatalf("shard %s is %s (%v), want %s", sh.Name, h.State, h.Err, state)
		}
	}
}

func TestProbeAndMigrate(t *testing.T) {
	t.Parallel()

	t.Run("migrated store is ready; migrating again changes nothing", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 2)
		wantStates(t, st, store.StateUp)
		publish(t, st, 1, 10, t0)
		must(t, st.Migrate(t.Context(), discard))
		must(t, st.Migrate(t.Context(), discard))
		wantStates(t, st, store.StateUp)
		if _, err := st.GetPost(t.Context(), 1, 10); err != nil {
			t.Errorf("post lost by a second migration: %v", err)
		}
	})

	// The inbox's compact layout (see the baseline): InnoDB keeps it in
	// compressed 8 KiB pages; TiDB, whose storage is not InnoDB, parses the
	// options and ignores them.
	t.Run("inbox is compressed", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		db := st.Shards()[0].DB
		var format, options string
		must(t, db.QueryRowContext(t.Context(), `SELECT ROW_FORMAT, CREATE_OPTIONS FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox'`).Scan(&format, &options))
		if storetest.TiDB(t) || storetest.InboxEngine(t) == store.RocksDB {
			return // TiDB ignores the options; MyRocks keeps them for a conversion back
		}
		if options = strings.ToLower(options); format != "Compressed" || !strings.Contains(options, "key_block_size=8") {
			t.Fatalf("inbox row format %s, options %q: want Compressed with key_block_size=8", format, options)
		}
	})

	t.Run("unmigrated database is not ready", func(t *testing.T) {
		t.Parallel()
		st, err := store.Open(shardmap.Single(storetest.DatabaseDSN(t)))
		must(t, err)
		defer st.Close()
		wantStates(t, st, store.StateOutdated)
		// The probe wrote nothing: not even goose's version table.
		var tables int
		must(t, st.Shards()[0].DB.GetContext(t.Context(), &tables,
			`SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`))
		if tables != 0 {
			t.Fatalf("readiness probe created %d tables", tables)
		}
		must(t, st.Migrate(t.Context(), discard))
		wantStates(t, st, store.StateUp)
	})

	t.Run("migrate creates a missing database", func(t *testing.T) {
		t.Parallel()
		dsn := storetest.DatabaseDSN(t) // dropped again at cleanup
		cfg, err := mysql.ParseDSN(dsn)
		must(t, err)
		admin, err := sql.Open("mysql", storetest.ServerDSN(t))
		must(t, err)
		defer admin.Close()
		mustExec(t, admin, "DROP DATABASE `"+cfg.DBName+"`")
		st, err := store.Open(shardmap.Single(dsn))
		must(t, err)
		defer st.Close()
		must(t, st.Migrate(t.Context(), discard))
		wantStates(t, st, store.StateUp)
	})

	// Several processes may start on a fresh database together: each of
	// them must succeed (one applies the migrations, the others find them
	// applied). Four databases of four migrators each, to make a race likely.
	t.Run("concurrent migrators of one database", func(t *testing.T) {
		t.Parallel()
		const databases, migrators = 4, 4
		dsns := make([]string, databases)
		for i := range dsns {
			dsns[i] = storetest.DatabaseDSN(t)
		}
		errs := make(chan error, databases*migrators)
		for _, dsn := range dsns {
			for range migrators {
				go func() {
					st, err := store.Open(shardmap.Single(dsn))
					if err == nil {
						defer st.Close()
						err = st.Migrate(t.Context(), discard)
					}
					errs <- err
				}()
			}
		}
		for range databases * migrators {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		for _, dsn := range dsns {
			st, err := store.Open(shardmap.Single(dsn))
			must(t, err)
			defer st.Close()
			wantStates(t, st, store.StateUp)
		}
	})

	t.Run("unreachable server is unavailable", func(t *testing.T) {
		t.Parallel()
		st, err := store.Open(shardmap.Single("root@tcp(127.0.0.1:1)/feed?timeout=1s"))
		must(t, err)
		defer st.Close()
		wantStates(t, st, store.StateDown)
		_, err = st.GetPost(t.Context(), 1, 1)
		wantCode(t, err, feed.EUNAVAILABLE)
	})
}

func TestBacklog(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	// backlog also checks that Idle agrees with the counts.
	backlog := func() store.Backlog {
		t.Helper()
		b, err := st.Backlog(t.Context())
		must(t, err)
		idle, err := st.Idle(t.Context())
		must(t, err)
		if idle != b.Idle() {
			t.Errorf("Idle() = %v with backlog %+v", idle, b)
		}
		return b
	}
	if b := backlog(); !b.Idle() {
		t.Fatalf("fresh store: %+v", b)
	}
	a0, a1 := idOn(st, 0, 1), idOn(st, 1, 1)
	publish(t, st, a0, 10, t0)
	publish(t, st, a1, 11, t0)
	publish(t, st, a1, 12, t0)
	for _, u := range append(idsOn(st, 0, 100, 3), idsOn(st, 1, 100, 2)...) {
		_, err := st.Follow(t.Context(), u, a1, maxFollowing, t0)
		must(t, err)
		_, err = st.AddFollower(t.Context(), feed.Follow{UserID: u, AuthorID: a1, FollowedAt: t0}, 4)
		must(t, err)
	}
	if b := backlog(); b != (store.Backlog{Deliveries: 3, FollowEvents: 5, Switches: 1}) || b.Idle() {
		t.Errorf("backlog = %+v, want 3 deliveries, 5 follow events, 1 switch", b)
	}
	plan(t, st, a1, t0, store.PlanOptions{TaskSize: 2})
	if b := backlog(); b.Deliveries != 1 || b.Tasks != 6 {
		t.Errorf("after planning: %+v, want 1 delivery, 6 tasks", b)
	}
	runAllTasks(t, st, t0, store.BatchOptions{Size: 10})
	plan(t, st, a0, t0, store.PlanOptions{TaskSize: 2})
	if b := backlog(); b.Deliveries != 0 || b.Tasks != 0 {
		t.Errorf("after delivering: %+v", b)
	}
}

// TestConflictRetries runs a transaction that the server rolls back for a
// deadlock: it runs again, and a conflict that outlasts the tries is a 503
// the client may retry, never a 500.
func TestConflictRetries(t *testing.T) {
	t.Parallel()
	sh := newStore(t, 1).Shards()[0]
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}
	conflicts := func(times int, ran *int) func(tx *sqlx.Tx) error {
		return func(tx *sqlx.Tx) error {
			*ran++
			if _, err := tx.ExecContext(t.Context(), "UPDATE health SET probed_at = probed_at WHERE id = 0"); err != nil {
				return err
			}
			if *ran <= times {
				return deadlock
			}
			return nil
		}
	}
	counts := func(wantRetried, wantGaveUp int64) {
		t.Helper()
		if retried, gaveUp := sh.Conflicts(); retried != wantRetried || gaveUp != wantGaveUp {
			t.Fatalf("conflicts: %d retried, %d given up; want %d and %d", retried, gaveUp, wantRetried, wantGaveUp)
		}
	}
	var ran int
	if err := store.InTx(t.Context(), sh, conflicts(3, &ran)); err != nil || ran != 4 {
		t.Fatalf("three conflicts: ran %d times, %v; want 4 and success", ran, err)
	}
	counts(3, 0)
	ran = 0
	err := store.InTx(t.Context(), sh, conflicts(store.TxAttempts, &ran))
	if ran != store.TxAttempts || feed.ErrorCode(err) != feed.EUNAVAILABLE || !store.Retryable(err) {
		t.Fatalf("endless conflicts: ran %d times, %v (%s); want %d and unavailable", ran, err, feed.ErrorCode(err), store.TxAttempts)
	}
	counts(3+store.TxAttempts-1, 1)

	// A transaction whose inner one (fan-out's on another database) gave
	// up is not run again: that would run all the inner tries again.
	outer, ran := 0, 0
	err = store.InTx(t.Context(), sh, func(*sqlx.Tx) error {
		outer++
		return store.InTx(t.Context(), sh, conflicts(store.TxAttempts, &ran))
	})
	if outer != 1 || ran != store.TxAttempts || feed.ErrorCode(err) != feed.EUNAVAILABLE {
		t.Fatalf("an inner transaction gave up: the outer ran %d times, the inner %d, %v; want 1, %d and unavailable", outer, ran, err, store.TxAttempts)
	}
}

// TestStatementCutOff: a statement its context's deadline cut off, which
// the connector kills on the server, fails as EUNAVAILABLE (a 503 the
// client may retry), never as an internal error.
func TestStatementCutOff(t *testing.T) {
	t.Parallel()
	sh := newStore(t, 1).Shards()[0]
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err := store.InTx(ctx, sh, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, "SELECT SLEEP(5)")
		return err
	})
	if feed.ErrorCode(err) != feed.EUNAVAILABLE {
		t.Fatalf("a statement past its deadline: %v (%s), want unavailable", err, feed.ErrorCode(err))
	}
	for _, n := range []uint16{1317, 1969, 3024} { // killed; MariaDB's and MySQL's statement timeouts
		if err := store.Classify(&mysql.MySQLError{Number: n}); feed.ErrorCode(err) != feed.EUNAVAILABLE {
			t.Errorf("error %d: %v (%s), want unavailable", n, err, feed.ErrorCode(err))
		}
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1213}, true},                                                  // deadlock
		{&mysql.MySQLError{Number: 1205}, true},                                                  // lock wait timeout
		{&mysql.MySQLError{Number: 1020}, true},                                                  // MariaDB snapshot-isolation conflict
		{fmt.Errorf("run task batch: %w", &mysql.MySQLError{Number: 1020}), true},                // wrapped
		{&mysql.MySQLError{Number: 1062}, false},                                                 // duplicate key
		{&mysql.MySQLError{Number: 1105, Message: "pessimistic lock retry limit reached"}, true}, // TiDB
		{&mysql.MySQLError{Number: 1105, Message: "other error"}, false},
		{sql.ErrNoRows, false},
	} {
		if got := store.Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestOpenSingleShardMap(t *testing.T) {
	t.Parallel()
	st, err := store.Open(shardmap.Single("u@tcp(127.0.0.1:1)/feed"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := len(st.Shards()); n != 1 {
		t.Fatalf("%d shards, want 1", n)
	}
	for _, id := range []uint64{1, 2, 1 << 40, 1<<64 - 1} {
		if st.ShardOf(id) != st.Shards()[0] {
			t.Errorf("id %d not on the only shard", id)
		}
	}
}

func TestOpenRejectsBadDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"u@tcp(h:3306)/", "not a dsn@@"} {
		if _, err := store.Open(shardmap.Single(dsn)); err == nil {
			t.Errorf("Open(%q) succeeded", dsn)
		}
	}
}

// TestLockWaitBound checks the store's sessions wait at most 5 s for a row
// lock, unless the DSN says otherwise: a statement whose client was killed
// holds its transaction's locks while it waits.
func TestLockWaitBound(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		dsn  string
		want int
	}{
		{dsn, 5},
		{dsn + sep + "innodb_lock_wait_timeout=7", 7},
	} {
		st, err := store.Open(shardmap.Single(tc.dsn))
		if err != nil {
			t.Fatal(err)
		}
		var got int
		err = st.Shards()[0].DB.QueryRowContext(t.Context(), `SELECT @@SESSION.innodb_lock_wait_timeout`).Scan(&got)
		st.Close()
		if err != nil || got != tc.want {
			t.Errorf("%s: innodb_lock_wait_timeout = %d, %v; want %d", tc.dsn, got, err, tc.want)
		}
	}
}

package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storeload"
	"github.com/feedhq/feed/store/storetest"
)

// engineStore opens a store on database name of the server at serverDSN
// with the inbox in e; migrate says whether to migrate it.
func engineStore(t *testing.T, serverDSN, name string, e store.Engine) (*store.Store, *sqlx.DB) {
	t.Helper()
	m := shardmap.Single(serverDSN + name)
	m.InboxEngine = string(e)
	st, err := store.Open(m)
	must(t, err)
	t.Cleanup(func() { st.Close() })
	raw, err := sqlx.Open("mysql", serverDSN+name)
	must(t, err)
	t.Cleanup(func() { raw.Close() })
	return st, raw
}

// inboxDump is every inbox row, header columns included, in key order.
func inboxDump(t *testing.T, raw *sqlx.DB) []string {
	t.Helper()
	rows, err := raw.Query(`SELECT CONCAT_WS(',', user_id, publish_time, content_id, author_id, kind,
 COALESCE(last_read_at, '-'), COALESCE(active_since, '-'), COALESCE(floor_time, '-'), COALESCE(floor_id, '-'),
 COALESCE(pulls, '-'), COALESCE(follows, '-')) FROM inbox ORDER BY user_id, publish_time, content_id`)
	must(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		must(t, rows.Scan(&s))
		out = append(out, s)
	}
	must(t, rows.Err())
	return out
}

func tableEngine(t *testing.T, raw *sqlx.DB) string {
	t.Helper()
	var e string
	must(t, raw.QueryRow(`SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox'`).Scan(&e))
	return e
}

// TestInboxEngineConversion converts a populated inbox to MyRocks and back
// while writers add, trim, purge and mark it, and checks each time that it
// ends exactly as a control database that took the same writes and no
// conversion.
func TestInboxEngineConversion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := storetest.StartRocksDBServer(t)
	quiet := slog.New(slog.DiscardHandler)

	subject, subjectRaw := engineStore(t, srv.DSN, "subject", store.InnoDB)
	control, controlRaw := engineStore(t, srv.DSN, "control", store.InnoDB)
	must(t, subject.Migrate(ctx, quiet))
	must(t, control.Migrate(ctx, quiet))

	const users, authors = 300, 20
	rng := rand.New(rand.NewPCG(7, 7))
	seq := 0
	// step applies one write to both stores: entries of a followed author
	// into an inbox, and now and then a trim, a mark or an unfollow.
	step := func(ctx context.Context) error {
		seq++
		u, a := uint64(1+rng.IntN(users)), uint64(10_000+rng.IntN(authors))
		op := rng.IntN(10)
		for _, st := range []*store.Store{subject, control} {
			var err error
			switch {
			case op < 6:
				post := feed.Post{ContentID: uint64(1_000_000 + seq), AuthorID: a, PublishTime: int64(seq), Kind: "post"}
				if _, err = st.Follow(ctx, u, a, 1000, int64(seq)); err == nil {
					err = storeload.Inbox(ctx, st, u, []feed.Post{post})
				}
			case op < 8:
				_, err = st.TrimInboxes(ctx, []uint64{u}, 40)
			case op < 9:
				err = st.MarkRead(ctx, u, int64(seq), int64(seq), 0)
			default:
				err = st.Unfollow(ctx, u, a, int64(seq))
			}
			if err != nil {
				return fmt.Errorf("step %d op %d: %w", seq, op, err)
			}
		}
		return nil
	}
	for range 10_000 {
		must(t, step(ctx))
	}

	convert := func(to store.Engine) {
		t.Helper()
		// The setting alone refuses to start on a populated inbox.
		st, raw := engineStore(t, srv.DSN, "subject", to)
		if err := st.Migrate(ctx, quiet); err == nil || !strings.Contains(err.Error(), "feedd migrate") {
			t.Fatalf("migrate to %s of a populated inbox: %v, want a refusal naming feedd migrate", to, err)
		}
		if err := st.CheckEngine(ctx); err == nil {
			t.Fatalf("check engine %s with the inbox elsewhere: no error", to)
		}
		// Converting copies while the writes go on.
		stop, done := make(chan struct{}), make(chan error, 1)
		writes := 0
		go func() {
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if err := step(ctx); err != nil {
					done <- err
					return
				}
				writes++
			}
		}()
		var reports []store.ConvertProgress
		var mu sync.Mutex
		err := st.MigrateConverting(ctx, quiet, func(p store.ConvertProgress) {
			mu.Lock()
			reports = append(reports, p)
			mu.Unlock()
		})
		close(stop)
		must(t, errors.Join(err, <-done))
		must(t, st.CheckEngine(ctx))
		if got := store.Engine(strings.ToLower(tableEngine(t, raw))); got != to {
			t.Fatalf("inbox engine %s after converting to %s", got, to)
		}
		if len(reports) < 2 || !reports[len(reports)-1].Done {
			t.Fatalf("progress reports: %+v", reports)
		}
		t.Logf("to %s: %d rows copied in %d reports, %d writes beside the copy", to, reports[len(reports)-1].Rows, len(reports), writes)
		if writes == 0 {
			t.Fatal("no write ran beside the copy")
		}
		got, want := inboxDump(t, subjectRaw), inboxDump(t, controlRaw)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("to %s: the converted inbox differs from the control: %d rows against %d", to, len(got), len(want))
		}
		var leftovers int
		must(t, raw.QueryRow(`SELECT (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('inbox_convert', 'inbox_old'))
 + (SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE())`).Scan(&leftovers))
		if leftovers != 0 {
			t.Fatalf("to %s: %d tables or triggers of the conversion left", to, leftovers)
		}
	}
	convert(store.RocksDB)
	convert(store.InnoDB)
	// Nothing of the conversions is left in the database's directory.
	_, err := subjectRaw.Exec("DROP DATABASE subject")
	must(t, err)
}

// TestInboxEngineRefused: feedd must not put the inbox in MyRocks on a
// server that lacks the engine, its binary log, or the column family's
// options, and says what to do.
func TestInboxEngineRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no MyRocks", nil, "no ROCKSDB engine"},
		{"no binary log", []string{"--plugin-load-add=ha_rocksdb.so"}, "binary log"},
		{"no column family options", []string{"--plugin-load-add=ha_rocksdb.so", "--log-bin=binlog", "--binlog-format=ROW"}, "prefix_extractor=capped:12"},
		// bottommost_compression=kZSTD holds compression=kZSTD as a substring.
		{"ZSTD in the last level only", []string{"--plugin-load-add=ha_rocksdb.so", "--log-bin=binlog", "--binlog-format=ROW",
			"--rocksdb-override-cf-options=" + store.InboxFamily + "={bottommost_compression=kZSTD;prefix_extractor=capped:12;block_based_table_factory={cache_index_and_filter_blocks=0;filter_policy=bloomfilter:10:false}}"},
			"lacks compression=kZSTD:"},
		{"the options on another family", []string{"--plugin-load-add=ha_rocksdb.so", "--log-bin=binlog", "--binlog-format=ROW",
			"--rocksdb-override-cf-options=other={compression=kZSTD;bottommost_compression=kZSTD;prefix_extractor=capped:12;block_based_table_factory={cache_index_and_filter_blocks=0;filter_policy=bloomfilter:10:false}}"},
			"prefix_extractor=capped:12"},
		{"the family's override undoes a default", []string{"--plugin-load-add=ha_rocksdb.so", "--log-bin=binlog", "--binlog-format=ROW",
			"--rocksdb-default-cf-options=compression=kZSTD; bottommost_compression=kZSTD; prefix_extractor=capped:12; block_based_table_factory={cache_index_and_filter_blocks=0;filter_policy=bloomfilter:10:false}",
			"--rocksdb-override-cf-options=" + store.InboxFamily + "={compression=kLZ4Compression}"},
			"lacks compression=kZSTD:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := storetest.StartPlainServer(t, tt.args...)
			st, _ := engineStore(t, srv.DSN, "feed", store.RocksDB)
			err := st.Migrate(ctx, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "deploy/rocksdb.cnf") {
				t.Fatalf("migrate: %v, want an error with %q naming deploy/rocksdb.cnf", err, tt.want)
			}
			if feed.ErrorCode(err) != feed.EINVALID {
				t.Fatalf("code %s, want %s", feed.ErrorCode(err), feed.EINVALID)
			}
			if err := st.CheckEngine(ctx); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("check engine: %v, want %q", err, tt.want)
			}
		})
	}
}

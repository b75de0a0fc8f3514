package store_test

import (
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/migrations"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

func TestHeaderKeyIsTop(t *testing.T) {
	want := fmt.Sprintf("publish_time = %d AND content_id = %d", store.Top.PublishTime, store.Top.ContentID)
	if store.HeaderKeySQL != want {
		t.Fatalf("headerKeySQL = %q, want %q", store.HeaderKeySQL, want)
	}
}

// TestReadFeedPullMark follows the header's pull mark through the writes
// that set and clear pull bits, read by a process that knows nothing (a
// second Store on the same database): a page costs one statement while
// nothing is to be pulled, and the pull authors are never missed.
func TestReadFeedPullMark(t *testing.T) {
	t.Parallel()
	m := storetest.NewShardMap(t, storetest.Options{})
	writer := openStore(t, m)
	must(t, writer.Migrate(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil))))
	const user, pushAuthor, pullAuthor = 1, 2, 3
	publish(t, writer, pushAuthor, 100, t0)
	publish(t, writer, pullAuthor, 200, t0+1)

	read := func(step string, wantStatements int, wantPull []store.PullAuthor) {
		t.Helper()
		cold := openStore(t, m) // no hints: what a restarted process sees
		for _, st := range []*store.Store{cold, cold} {
			snap, err := st.ReadFeed(t.Context(), user, store.Top, 10)
			must(t, err)
			if !slices.Equal(snap.Pull, wantPull) {
				t.Errorf("%s: pull authors %+v, want %+v", step, snap.Pull, wantPull)
			}
			if snap.Statements != wantStatements {
				t.Errorf("%s: %d statements, want %d", step, snap.Statements, wantStatements)
			}
			// The second read of the same process is hinted.
			wantStatements = 1
		}
	}
	read("stranger", 1, nil)

	_, err := writer.Follow(t.Context(), user, pushAuthor, maxFollowing, t0)
	must(t, err)
	read("pending follow", 2, []store.PullAuthor{{AuthorID: pushAuthor, Pull: store.PullPending}})

	_, _, err = writer.Backfill(t.Context(), user, pushAuthor, 300, false)
	must(t, err)
	read("push author backfilled", 1, nil)

	_, err = writer.Follow(t.Context(), user, pullAuthor, maxFollowing, t0)
	must(t, err)
	_, _, err = writer.Backfill(t.Context(), user, pullAuthor, 300, true)
	must(t, err)
	read("pull author backfilled", 2, []store.PullAuthor{{AuthorID: pullAuthor, Pull: store.PullBelowActive}})

	must(t, writer.Unfollow(t.Context(), user, pullAuthor, t0))
	read("pull author unfollowed", 1, nil)

	must(t, storetest.ImportFollowers(t.Context(), writer, pullAuthor, []uint64{user}, t0, true))
	read("imported as a pull follower", 2, []store.PullAuthor{{AuthorID: pullAuthor, Pull: store.PullBelowActive}})
}

func openStore(t *testing.T, m *store.ShardMap) *store.Store {
	t.Helper()
	st, err := store.Open(m)
	must(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// TestMigrateUserStateToHeaders upgrades a database from the schema with a
// user_state table: every state row becomes a header row, and every user
// with a pull bit is marked, with or without a state row.
func TestMigrateUserStateToHeaders(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	db, err := sql.Open("mysql", dsn)
	must(t, err)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectMySQL, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	must(t, err)
	_, err = p.UpTo(t.Context(), 10)
	must(t, err)
	for _, q := range []string{
		"INSERT INTO user_state (user_id, last_read_at, active_since, floor_time, floor_id) VALUES (1, 500, 400, 300, 30), (2, 600, 0, NULL, NULL)",
		"INSERT INTO following (user_id, author_id, followed_at, pull) VALUES (1, 9, 0, 0), (2, 9, 0, 1), (3, 9, 0, 2)",
		"INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind) VALUES (1, 300, 30, 9, 'post')",
	} {
		_, err := db.ExecContext(t.Context(), q)
		must(t, err)
	}
	st := openStore(t, store.SingleShardMap(dsn))
	must(t, st.Migrate(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil))))

	for _, c := range []struct {
		user         uint64
		read, active int64
		floor        *feed.Key
		pull         []store.PullAuthor
	}{
		{1, 500, 400, &feed.Key{PublishTime: 300, ContentID: 30}, nil},
		{2, 600, 0, nil, []store.PullAuthor{{AuthorID: 9, Pull: store.PullBelowActive}}},
		{3, 0, 0, nil, []store.PullAuthor{{AuthorID: 9, Pull: store.PullPending}}},
	} {
		snap := snapshot(t, st, c.user)
		if snap.LastReadAt != c.read || snap.ActiveSince != c.active || !slices.Equal(snap.Pull, c.pull) ||
			(snap.Floor == nil) != (c.floor == nil) || (snap.Floor != nil && *snap.Floor != *c.floor) {
			t.Errorf("user %d after the upgrade: %+v", c.user, snap)
		}
	}
	if got := inbox(t, st, 1); !slices.Equal(got, []uint64{30}) {
		t.Errorf("user 1's inbox %v, want [30]", got)
	}
	var n int
	must(t, db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'user_state'").Scan(&n))
	if n != 0 {
		t.Error("user_state still exists")
	}
}

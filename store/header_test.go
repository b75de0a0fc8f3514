package store_test

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storeload"
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
			snap, err := st.ReadFeed(t.Context(), user, store.Top, feed.Key{}, 10, nil)
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

	must(t, storeload.Followers(t.Context(), writer, pullAuthor, []uint64{user}, t0, true))
	read("imported as a pull follower", 2, []store.PullAuthor{{AuthorID: pullAuthor, Pull: store.PullBelowActive}})
}

func openStore(t *testing.T, m *shardmap.Map) *store.Store {
	t.Helper()
	st, err := store.Open(m, store.WithTrace(observe))
	must(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// TestPageStatements checks which statement each page reads with, and that
// the statements of first pages, with and without a lower bound, and of
// pages below a cursor without one, which leave out the bounds that do not
// bound such pages, return what the general page statement returns with
// those bounds, with and without the pull authors: for a user with a
// header and more entries than the limit, one with fewer between two
// neighbours' ranges, one without a header, one with a header alone, and
// one with nothing.
func TestPageStatements(t *testing.T) {
	t.Parallel()
	cursor := feed.Key{PublishTime: t0 + 105, ContentID: 5010}
	since := feed.Key{PublishTime: t0 + 205, ContentID: 5020}
	// A page with no since reads from just above the zero key.
	for _, c := range []struct {
		before, from feed.Key
		kinds        []string
		want         int
	}{
		{store.Top, feed.Key{}, nil, store.PageFirst},
		{store.Top, feed.Key{ContentID: 1}, nil, store.PageFirst},
		{store.Top, feed.Key{ContentID: 2}, nil, store.PageSince},
		{store.Top, feed.Key{PublishTime: 1}, nil, store.PageSince},
		{store.Top, feed.Key{}, []string{"post"}, store.PageKind},
		{cursor, feed.Key{ContentID: 1}, nil, store.PageNext},
		{cursor, feed.Key{PublishTime: 1}, nil, store.PageAll},
	} {
		if got := store.PageStmtOf(c.before, c.from, c.kinds); got != c.want {
			t.Errorf("pageStmtOf(%v, %v, %v) = %d, want %d", c.before, c.from, c.kinds, got, c.want)
		}
	}
	st := newStore(t, 1)
	sh := st.Shards()[0]
	var rows [][]any
	entries := map[uint64]int{4: 30, 5: 30, 6: 3, 7: 4, 8: 0, 10: 2}
	for u, n := range entries {
		for i := range n {
			rows = append(rows, []any{u, t0 + int64(i*10+int(u)), 1000*u + uint64(i), 100 + i%3, "post"})
		}
	}
	insertRows(t, sh.DB, "INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind)", rows)
	insertRows(t, sh.DB, "INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind, last_read_at, active_since, floor_time, floor_id, pulls, follows)", [][]any{
		{5, store.Top.PublishTime, store.Top.ContentID, 0, "", t0, t0 - 5, t0, 5000, 1, 7},
		{6, store.Top.PublishTime, store.Top.ContentID, 0, "", t0, t0, nil, nil, 0, 2},
		{8, store.Top.PublishTime, store.Top.ContentID, 0, "", t0, t0, t0, 1, 1, 3},
	})
	insertRows(t, sh.DB, "INSERT INTO following (user_id, author_id, followed_at, pull)", [][]any{{5, 100, t0, 1}, {5, 101, t0, 2}, {6, 100, t0, 0}, {8, 102, t0, 3}})
	read := func(q string, args ...any) [][]any {
		t.Helper()
		rs, err := sh.DB.QueryxContext(t.Context(), q, args...)
		must(t, err)
		defer rs.Close()
		var got [][]any
		for rs.Next() {
			row, err := rs.SliceScan()
			must(t, err)
			for i, v := range row {
				if b, ok := v.([]byte); ok {
					row[i] = string(b)
				}
			}
			got = append(got, row)
		}
		must(t, rs.Err())
		// The parts of a UNION ALL come in no set order (TiDB's interleave):
		// rows compare part by part, by their first column (src).
		slices.SortStableFunc(got, func(a, b []any) int { return strings.Compare(fmt.Sprint(a[0]), fmt.Sprint(b[0])) })
		return got
	}
	for _, user := range []uint64{5, 6, 7, 8, 9} {
		for _, limit := range []int{3, 22} {
			for _, c := range []struct {
				before, from feed.Key
				q, pull      string
				args         []any
			}{
				{store.Top, feed.Key{ContentID: 1}, store.FeedFirstPageSQL, store.FeedFirstPullSQL, []any{user, limit}},
				{cursor, feed.Key{ContentID: 1}, store.FeedNextPageSQL, store.FeedNextPullSQL, []any{user, cursor.PublishTime, cursor.PublishTime, cursor.ContentID, limit}},
				{store.Top, since, store.FeedSincePageSQL, store.FeedSincePullSQL, []any{user, since.PublishTime, since.PublishTime, since.ContentID, limit}},
			} {
				b, f := c.before, c.from
				want := read(store.FeedPageSQL, user, b.PublishTime, b.PublishTime, b.ContentID, f.PublishTime, f.PublishTime, f.ContentID, limit)
				if got := read(c.q, c.args...); !reflect.DeepEqual(got, want) {
					t.Errorf("user %d, below %v from %v, limit %d: read %v, want %v", user, b, f, limit, got, want)
				}
				if b == store.Top && f == (feed.Key{ContentID: 1}) && user != 7 && user != 9 && len(want) < min(entries[user]+1, limit) {
					t.Errorf("user %d, limit %d: %d rows, want %d", user, limit, len(want), min(entries[user]+1, limit))
				}
				want = read(store.FeedPagePullSQL, user, user, b.PublishTime, b.PublishTime, b.ContentID, f.PublishTime, f.PublishTime, f.ContentID, limit)
				if got := read(c.pull, append([]any{user}, c.args...)...); !reflect.DeepEqual(got, want) {
					t.Errorf("user %d, below %v from %v, limit %d, with the pull authors: read %v, want %v", user, b, f, limit, got, want)
				}
			}
		}
	}
}

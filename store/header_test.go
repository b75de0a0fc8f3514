package store_test

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
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

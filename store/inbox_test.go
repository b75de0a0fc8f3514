package store_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

func TestReadFeed(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	for i := range uint64(30) {
		publish(t, st, 1, 100+i, t0+int64(i/4)) // equal times in fours
	}
	follow(t, st, 1, 2)
	must(t, st.MarkRead(t.Context(), 1, t0, t0+5, t0-1))

	want, err := st.InboxKeys(t.Context(), 1)
	must(t, err)
	var got []feed.Post
	before := store.Top
	for {
		snap, err := st.ReadFeed(t.Context(), 1, before, feed.Key{}, 7, nil)
		must(t, err)
		if snap.LastReadAt != t0 || snap.ActiveSince != t0+5 || snap.Floor != nil ||
			!slices.Equal(snap.Pull, []store.PullAuthor{{AuthorID: 2, Pull: store.PullPending}}) {
			t.Fatalf("snapshot state %+v", snap)
		}
		got = append(got, snap.Inbox...)
		if len(snap.Inbox) < 7 {
			break
		}
		before = snap.Inbox[len(snap.Inbox)-1].Key()
	}
	if len(want) != 30 || !slices.Equal(got, want) {
		t.Errorf("paged %d inbox entries, want the %d of InboxKeys in order", len(got), len(want))
	}

	// A lower bound stops the scan: every from between entries, including
	// one inside a run of equal times, keeps exactly the entries at or above
	// it, with the header's state still read.
	t.Run("from", func(t *testing.T) {
		t.Parallel()
		for i := range want {
			snap, err := st.ReadFeed(t.Context(), 1, store.Top, want[i].Key(), 100, nil)
			must(t, err)
			if !slices.Equal(snap.Inbox, want[:i+1]) || snap.LastReadAt != t0 || len(snap.Pull) != 1 {
				t.Fatalf("from entry %d: %d entries, state %+v", i, len(snap.Inbox), snap)
			}
		}
	})

	t.Run("unknown user", func(t *testing.T) {
		t.Parallel()
		snap, err := st.ReadFeed(t.Context(), 999, store.Top, feed.Key{}, 10, nil)
		must(t, err)
		if len(snap.Inbox) != 0 || snap.Floor != nil || len(snap.Pull) != 0 || snap.LastReadAt != 0 || snap.ActiveSince != 0 {
			t.Errorf("snapshot of a stranger: %+v", snap)
		}
	})
}

func TestTrimInboxes(t *testing.T) {
	t.Parallel()

	st := newStore(t, 1)
	// setup gives user n own posts (so n inbox entries), newest first.
	setup := func(t *testing.T, user uint64, n int) []feed.Post {
		var posts []feed.Post
		for i := range n {
			posts = append(posts, publish(t, st, user, user*1000+uint64(i), t0+int64(i/3)))
		}
		slices.SortFunc(posts, newestFirst)
		return posts
	}

	t.Run("keeps the newest and raises the floor", func(t *testing.T) {
		t.Parallel()
		posts := setup(t, 1, 50)
		n, err := st.TrimInboxes(t.Context(), []uint64{1}, 20)
		must(t, err)
		if n != 30 {
			t.Errorf("trimmed %d, want 30", n)
		}
		got, err := st.InboxKeys(t.Context(), 1)
		must(t, err)
		if !slices.Equal(got, posts[:20]) {
			t.Errorf("kept %d entries, want the newest 20", len(got))
		}
		snap := snapshot(t, st, 1)
		if want := posts[19].Key(); snap.Floor == nil || *snap.Floor != want {
			t.Errorf("floor = %v, want %v (the oldest kept)", snap.Floor, want)
		}

		// Again: nothing to do, floor unchanged; a larger limit never lowers it.
		for _, limit := range []int{20, 30} {
			n, err = st.TrimInboxes(t.Context(), []uint64{1}, limit)
			must(t, err)
			if snap := snapshot(t, st, 1); n != 0 || snap.Floor == nil || *snap.Floor != posts[19].Key() {
				t.Errorf("trim to %d: trimmed %d, floor %v", limit, n, snap.Floor)
			}
		}
		// A smaller limit raises it further.
		n, err = st.TrimInboxes(t.Context(), []uint64{1}, 5)
		must(t, err)
		if snap := snapshot(t, st, 1); n != 15 || snap.Floor == nil || *snap.Floor != posts[4].Key() {
			t.Errorf("trim to 5: trimmed %d, floor %v, want 15 and %v", n, snap.Floor, posts[4].Key())
		}
	})

	t.Run("short inbox is left alone", func(t *testing.T) {
		t.Parallel()
		setup(t, 2, 10)
		for _, limit := range []int{10, 11} {
			n, err := st.TrimInboxes(t.Context(), []uint64{2}, limit)
			must(t, err)
			if snap := snapshot(t, st, 2); n != 0 || snap.Floor != nil || len(snap.Inbox) != 10 {
				t.Errorf("limit %d: trimmed %d, floor %v, %d entries", limit, n, snap.Floor, len(snap.Inbox))
			}
		}
	})
}

// TestTrimInboxesMany trims many users of several shards in one call: more
// than one statement chunk, some over the limit and some not.
func TestTrimInboxesMany(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	const limit = 4
	want := map[uint64][]feed.Post{}
	var users []uint64
	for u := uint64(1); u <= 70; u++ {
		n := int(u % 8) // 0..7 posts: over, at and under the limit
		var posts []feed.Post
		for i := range n {
			posts = append(posts, publish(t, st, u, u*1000+uint64(i), t0+int64(i/2)))
		}
		slices.SortFunc(posts, newestFirst)
		want[u] = posts[:min(n, limit)]
		users = append(users, u, u) // duplicates are harmless
	}
	n, err := st.TrimInboxes(t.Context(), users, limit)
	must(t, err)
	var wantTrimmed int64
	for u := uint64(1); u <= 70; u++ {
		wantTrimmed += int64(max(0, int(u%8)-limit))
		got, err := st.InboxKeys(t.Context(), u)
		must(t, err)
		if !slices.Equal(got, want[u]) {
			t.Errorf("user %d kept %v, want %v", u, got, want[u])
		}
		snap := snapshot(t, st, u)
		switch {
		case int(u%8) > limit && (snap.Floor == nil || *snap.Floor != want[u][limit-1].Key()):
			t.Errorf("user %d floor %v, want %v", u, snap.Floor, want[u][limit-1].Key())
		case int(u%8) <= limit && snap.Floor != nil:
			t.Errorf("user %d floor %v, want none", u, snap.Floor)
		}
	}
	if n != wantTrimmed {
		t.Errorf("trimmed %d, want %d", n, wantTrimmed)
	}
}

func TestBackfill(t *testing.T) {
	t.Parallel()

	// Subtests share the store; setup gives each its own user and author,
	// on different shards, the author with n posts (newest first).
	shared := newStore(t, 2)
	var next atomic.Uint64
	setup := func(t *testing.T, n int) (st *store.Store, user, author uint64, posts []feed.Post) {
		st = shared
		base := next.Add(1) * 100_000
		user, author = idOn(st, 0, base), idOn(st, 1, base)
		for i := range n {
			posts = append(posts, publish(t, st, author, base+uint64(i), t0+int64(i/2)))
		}
		slices.SortFunc(posts, newestFirst)
		return st, user, author, posts
	}

	t.Run("a post deleted after the source read it is not left copied", func(t *testing.T) {
		t.Parallel()
		st, user, author, posts := setup(t, 6)
		other := user + 1
		follow(t, st, user, author)
		follow(t, st, other, author)
		src := store.NewCopySource(5, 100)
		// The first backfill reads the author's posts into src; the
		// delete then sweeps the inboxes before the second copies them.
		_, _, err := st.BackfillMany(t.Context(), st.ShardOf(other), []store.BackfillPair{{UserID: other, AuthorID: author}}, src)
		must(t, err)
		must(t, st.DeletePost(t.Context(), author, posts[1].ContentID))
		_, n, err := st.BackfillMany(t.Context(), st.ShardOf(user), []store.BackfillPair{{UserID: user, AuthorID: author}}, src)
		must(t, err)
		if n != 5 {
			t.Fatalf("copied %d rows, want 5 (from the source read before the delete)", n)
		}
		got, err := st.InboxKeys(t.Context(), user)
		must(t, err)
		if want := []feed.Post{posts[0], posts[2], posts[3], posts[4]}; !slices.Equal(got, want) {
			t.Fatalf("inbox %v, want %v: the deleted post's copy taken out", got, want)
		}
	})

	t.Run("capped copy raises the floor and settles the edge", func(t *testing.T) {
		t.Parallel()
		st, user, author, posts := setup(t, 12)
		follow(t, st, user, author)
		must(t, st.DeletePost(t.Context(), author, posts[0].ContentID))
		live := posts[1:]

		res, copied, err := st.Backfill(t.Context(), user, author, 5, false)
		must(t, err)
		if !res.Followed || res.Copied != 5 || !slices.Equal(copied, live[:5]) {
			t.Fatalf("backfill: %+v, copied %v", res, copied)
		}
		got, err := st.InboxKeys(t.Context(), user)
		must(t, err)
		if !slices.Equal(got, live[:5]) {
			t.Errorf("inbox = %v, want the newest 5 live posts", got)
		}
		snap := snapshot(t, st, user)
		if want := live[4].Key(); snap.Floor == nil || *snap.Floor != want {
			t.Errorf("floor = %v, want %v", snap.Floor, want)
		}
		if len(snap.Pull) != 0 {
			t.Errorf("pull = %+v, want the pending bit cleared", snap.Pull)
		}

		// A repeat copies nothing new.
		res, _, err = st.Backfill(t.Context(), user, author, 5, false)
		must(t, err)
		if res.Copied != 0 {
			t.Errorf("repeat copied %d", res.Copied)
		}
	})

	t.Run("short outbox: no floor", func(t *testing.T) {
		t.Parallel()
		st, user, author, posts := setup(t, 3)
		follow(t, st, user, author)
		res, _, err := st.Backfill(t.Context(), user, author, 5, false)
		must(t, err)
		if res.Copied != 3 {
			t.Errorf("copied %d, want 3", res.Copied)
		}
		snap := snapshot(t, st, user)
		if snap.Floor != nil || !slices.Equal(snap.Inbox, posts) || len(snap.Pull) != 0 {
			t.Errorf("snapshot %+v", snap)
		}
	})

	t.Run("exactly limit posts raise the floor", func(t *testing.T) {
		t.Parallel()
		st, user, author, posts := setup(t, 5)
		follow(t, st, user, author)
		_, _, err := st.Backfill(t.Context(), user, author, 5, false)
		must(t, err)
		if snap := snapshot(t, st, user); snap.Floor == nil || *snap.Floor != posts[4].Key() {
			t.Errorf("floor = %v, want %v", snap.Floor, posts[4].Key())
		}
	})

	t.Run("pull author keeps the below-active bit", func(t *testing.T) {
		t.Parallel()
		st, user, author, _ := setup(t, 3)
		follow(t, st, user, author)
		_, _, err := st.Backfill(t.Context(), user, author, 5, true)
		must(t, err)
		snap := snapshot(t, st, user)
		if !slices.Equal(snap.Pull, []store.PullAuthor{{AuthorID: author, Pull: store.PullBelowActive}}) {
			t.Errorf("pull = %+v, want below-active only", snap.Pull)
		}
	})

	t.Run("trims the inbox back to the limit", func(t *testing.T) {
		t.Parallel()
		st, user, author, posts := setup(t, 4)
		var own []feed.Post
		for i := range 4 {
			own = append(own, publish(t, st, user, user*10+uint64(i), t0+100+int64(i)))
		}
		slices.SortFunc(own, newestFirst)
		follow(t, st, user, author)
		_, _, err := st.Backfill(t.Context(), user, author, 5, false)
		must(t, err)
		want := append(own, posts[0])
		snap := snapshot(t, st, user)
		if !slices.Equal(snap.Inbox, want) || snap.Floor == nil || *snap.Floor != posts[0].Key() {
			t.Errorf("inbox %v floor %v, want %v floor %v", snap.Inbox, snap.Floor, want, posts[0].Key())
		}
	})

	t.Run("unfollowed user gets nothing", func(t *testing.T) {
		t.Parallel()
		st, user, author, _ := setup(t, 8)
		follow(t, st, user, author)
		must(t, st.Unfollow(t.Context(), user, author, t0))
		res, _, err := st.Backfill(t.Context(), user, author, 5, false)
		must(t, err)
		if res.Followed || res.Copied != 0 {
			t.Errorf("backfill after unfollow: %+v", res)
		}
		snap := snapshot(t, st, user)
		if len(snap.Inbox) != 0 || snap.Floor != nil || len(snap.Pull) != 0 {
			t.Errorf("snapshot after a backfill of an unfollowed author: %+v", snap)
		}
	})

	t.Run("removes copies of deleted posts", func(t *testing.T) {
		t.Parallel()
		st, user, author, posts := setup(t, 3)
		follow(t, st, user, author)
		_, copied, err := st.Backfill(t.Context(), user, author, 5, false)
		must(t, err)
		must(t, st.RemoveFromInbox(t.Context(), user, copied[:2]))
		if got := inbox(t, st, user); !slices.Equal(got, []uint64{posts[2].ContentID}) {
			t.Errorf("inbox = %v", got)
		}
		must(t, st.RemoveFromInbox(t.Context(), user, nil))
	})
}

// TestBackfillShowsRowsBeforeBit reads feeds while their follows'
// backfills commit: a page that finds the follow's pending bit cleared must
// find the copied posts, or it would end short of them. With the inbox in
// RocksDB each engine reads as of its own first read in the page's
// statement, and the two engines commit one after the other.
func TestBackfillShowsRowsBeforeBit(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	const author = 1
	for i := range 5 {
		publish(t, st, author, uint64(10+i), t0+int64(i))
	}
	ctx := t.Context()
	for user := uint64(1000); user < 1100; user++ {
		followPending(t, st, user, author)
		done := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					snap, err := st.ReadFeed(ctx, user, store.Top, feed.Key{}, 10, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if len(snap.Pull) == 0 && len(snap.Inbox) != 5 {
						t.Errorf("user %d: a page without the follow's pending bit holds %d of the 5 posts", user, len(snap.Inbox))
						return
					}
				}
			})
		}
		_, _, err := st.Backfill(ctx, user, author, 10, false)
		close(done)
		wg.Wait()
		must(t, err)
		if t.Failed() {
			return
		}
	}
}

// TestBackfillsClearTheMark runs two backfills of one user side by side,
// many times: each clears its follow's pending bit and recounts the user's
// pull mark, and the last must find no bit left, or every later page pays
// the pull statement for nothing. A backfill lets go of the header before
// its bit clears (it opens with InnoDB), so the recount must wait for it.
func TestBackfillsClearTheMark(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	const a, b = 1, 2
	publish(t, st, a, 10, t0)
	publish(t, st, b, 20, t0)
	for user := uint64(1000); user < 1060; user++ {
		followPending(t, st, user, a)
		followPending(t, st, user, b)
		var wg sync.WaitGroup
		for _, author := range []uint64{a, b} {
			wg.Go(func() {
				if _, _, err := st.Backfill(t.Context(), user, author, 10, false); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := count(t, sh, "SELECT pulls FROM inbox WHERE user_id = ? AND publish_time = ? AND content_id = ?", user, store.Top.PublishTime, store.Top.ContentID); n != 0 {
			t.Fatalf("user %d: both backfills done, pull mark %d", user, n)
		}
	}
}

func TestMarkRead(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	state := func(user uint64) (int64, int64) {
		snap := snapshot(t, st, user)
		return snap.LastReadAt, snap.ActiveSince
	}
	steps := []struct {
		name                             string
		now, activeSince, inactiveBefore int64
		wantRead, wantSince              int64
	}{
		{"first read starts a spell", 1000, 1100, 500, 1000, 1100},
		{"read within the window keeps the spell", 2000, 2100, 900, 2000, 1100},
		{"read right at the window edge keeps it", 3000, 3100, 2000, 3000, 1100},
		{"read after a gap starts a new spell", 10_000, 10_100, 3001, 10_000, 10_100},
		{"a late, older read never moves last_read_at back", 9000, 9100, 0, 10_000, 10_100},
	}
	for _, s := range steps {
		must(t, st.MarkRead(t.Context(), 1, s.now, s.activeSince, s.inactiveBefore))
		if read, since := state(1); read != s.wantRead || since != s.wantSince {
			t.Errorf("%s: last_read_at %d active_since %d, want %d %d", s.name, read, since, s.wantRead, s.wantSince)
		}
	}

	// A header row made by a follow has never been read: the first read
	// starts a spell.
	_, err := st.Follow(t.Context(), 2, 3, maxFollowing, t0)
	must(t, err)
	must(t, st.MarkRead(t.Context(), 2, t0, t0+50, t0-1000))
	if read, since := state(2); read != t0 || since != t0+50 {
		t.Errorf("after follow: last_read_at %d active_since %d", read, since)
	}
}

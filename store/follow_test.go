package store_test

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

func TestFollow(t *testing.T) {
	t.Parallel()

	// Subtests share the store, each with its own users.
	st := newStore(t, 2)

	t.Run("creates a pending edge and its event; repeat does nothing", func(t *testing.T) {
		t.Parallel()
		user, author := idOn(st, 0, 5000), idOn(st, 1, 5000)

		created, err := st.Follow(t.Context(), user, author, maxFollowing, t0)
		must(t, err)
		if !created {
			t.Fatal("first follow: created=false")
		}
		created, err = st.Follow(t.Context(), user, author, maxFollowing, t0+1)
		must(t, err)
		if created {
			t.Error("repeat follow: created=true")
		}
		f, err := st.GetFollowing(t.Context(), user, author)
		must(t, err)
		if f != (feed.Follow{UserID: user, AuthorID: author, FollowedAt: t0}) {
			t.Errorf("following = %+v", f)
		}
		// Reads merge the author's outbox until the backfill lands.
		snap := snapshot(t, st, user)
		if !slices.Equal(snap.Pull, []store.PullAuthor{{AuthorID: author, Pull: store.PullPending}}) {
			t.Errorf("pull authors = %+v, want %d pending", snap.Pull, author)
		}
		sh := st.ShardOf(user)
		if n := count(t, sh, "SELECT COUNT(*) FROM follow_events WHERE user_id = ? AND author_id = ? AND version = 1", user, author); n != 1 {
			t.Errorf("%d follow events at version 1, want 1", n)
		}
		// The followee list, cached by the header's version: a change of
		// the authors the user reads moves it.
		followed := func(want ...uint64) {
			t.Helper()
			version := snapshot(t, st, user).Follows
			if version == 0 {
				t.Fatal("no followee-list version in the header")
			}
			for i, wantRead := range []bool{true, false} {
				authors, _, read, err := st.FollowedAuthors(t.Context(), user, version)
				must(t, err)
				authors = slices.Sorted(slices.Values(authors)) // the list is shared
				if !slices.Equal(authors, want) || read != wantRead {
					t.Errorf("FollowedAuthors #%d at version %d = %v (read %v), want %v (read %v)", i+1, version, authors, read, want, wantRead)
				}
			}
		}
		followed(author)
		other := idOn(st, 1, author+1)
		_, err = st.Follow(t.Context(), user, other, maxFollowing, t0+2)
		must(t, err)
		followed(author, other)
		_, err = st.SetFilter(t.Context(), store.Mute, user, other, true, 10, t0+3)
		must(t, err)
		followed(author)
		_, err = st.SetFilter(t.Context(), store.Mute, user, other, false, 10, t0+4)
		must(t, err)
		followed(author, other)
		must(t, st.Unfollow(t.Context(), user, other, t0+5))
		followed(author)
		// The author's shard learns of it only through the event.
		if n := countAll(t, st, "SELECT COUNT(*) FROM followers WHERE author_id = ?", author); n != 0 {
			t.Errorf("%d followers rows before the event ran", n)
		}
	})

	t.Run("cap", func(t *testing.T) {
		t.Parallel()
		const user = 3
		for a := uint64(2); a <= 4; a++ {
			if _, err := st.Follow(t.Context(), user, a, 3, t0); err != nil {
				t.Fatal(err)
			}
		}
		_, err := st.Follow(t.Context(), user, 5, 3, t0)
		wantCode(t, err, feed.ELIMIT)
		// Following someone already followed is not over the cap.
		created, err := st.Follow(t.Context(), user, 4, 3, t0)
		if err != nil || created {
			t.Errorf("repeat at the cap: created=%v err=%v", created, err)
		}
		must(t, st.Unfollow(t.Context(), user, 2, t0))
		if _, err := st.Follow(t.Context(), user, 5, 3, t0); err != nil {
			t.Errorf("follow after an unfollow freed a place: %v", err)
		}
	})

	t.Run("concurrent follows never exceed the cap", func(t *testing.T) {
		t.Parallel()
		must(t, st.MarkRead(t.Context(), 2, t0, t0, t0)) // user 2 has a header row already
		for _, user := range []uint64{1, 2} {
			concurrentFollows(t, st, user)
		}
	})
}

// concurrentFollows races 20 follows of one user against a cap of 10: exactly
// 10 succeed, and none fails otherwise (no deadlock escapes the retries).
func concurrentFollows(t *testing.T, st *store.Store, user uint64) {
	t.Helper()
	{
		const capacity, tries = 10, 20
		var wg sync.WaitGroup
		errs := make([]error, tries)
		for i := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = st.Follow(t.Context(), user, uint64(100+i), capacity, t0)
			}()
		}
		wg.Wait()
		ok, limited := 0, 0
		for _, err := range errs {
			switch feed.ErrorCode(err) {
			case "":
				ok++
			case feed.ELIMIT:
				limited++
			default:
				t.Errorf("follow: %v", err)
			}
		}
		n := count(t, st.ShardOf(user), "SELECT COUNT(*) FROM following WHERE user_id = ?", user)
		if ok != capacity || limited != tries-capacity || n != capacity {
			t.Errorf("user %d: %d follows succeeded, %d hit the cap, %d edges; want %d, %d, %d", user, ok, limited, n, capacity, tries-capacity, capacity)
		}
	}
}

func TestUnfollow(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	user := idOn(st, 0, 1)
	a, b := idOn(st, 1, 1), idOn(st, 0, user+1)
	follow(t, st, user, a)
	follow(t, st, user, b)
	publish(t, st, a, 10, t0)
	publish(t, st, b, 20, t0+1)
	publish(t, st, user, 30, t0+2)
	publish(t, st, a, 11, t0+3)
	deliver(t, st, a, t0)
	deliver(t, st, b, t0)
	if got := inbox(t, st, user); !slices.Equal(got, []uint64{11, 30, 20, 10}) {
		t.Fatalf("inbox before = %v", got)
	}
	events := func() int {
		return count(t, st.ShardOf(user), "SELECT COALESCE(SUM(version), 0) FROM follow_events WHERE user_id = ? AND author_id = ?", user, a)
	}
	v := events()

	must(t, st.Unfollow(t.Context(), user, a, t0+10))

	if got := inbox(t, st, user); !slices.Equal(got, []uint64{30, 20}) {
		t.Errorf("inbox after = %v, want only b's and the user's own", got)
	}
	_, err := st.GetFollowing(t.Context(), user, a)
	wantCode(t, err, feed.ENOTFOUND)
	if got := events(); got != v+1 {
		t.Errorf("event version %d → %d, want a bump", v, got)
	}

	t.Run("idempotent", func(t *testing.T) {
		must(t, st.Unfollow(t.Context(), user, a, t0+11))
		if got := events(); got != v+1 {
			t.Errorf("second unfollow bumped the event to %d", got)
		}
		must(t, st.Unfollow(t.Context(), user, 999, t0+11))
		if n := count(t, st.ShardOf(user), "SELECT COUNT(*) FROM follow_events WHERE author_id = 999"); n != 0 {
			t.Errorf("unfollowing a stranger queued %d events", n)
		}
	})
}

// TestUnfollowLocksItsUserOnly holds a lock on a following row of the next
// user, as a fan-out or a backfill settling that row does: an unfollow,
// whose recount of pull bits looks at the user's rows only, goes through
// without waiting for it (a locking range read that stepped onto the next
// user's row would wait, and deadlock with writers of that row).
func TestUnfollowLocksItsUserOnly(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	user, next := uint64(5000), uint64(5001)
	followMany(t, st, 2, []uint64{user, next})
	followMany(t, st, 3, []uint64{user})

	tx, err := sh.DB.BeginTxx(t.Context(), nil)
	must(t, err)
	defer tx.Rollback()
	var locked []uint64
	must(t, tx.SelectContext(t.Context(), &locked, "SELECT user_id FROM following WHERE author_id = 2 AND user_id = ? FOR UPDATE", next))

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	must(t, st.Unfollow(ctx, user, 3, t0))
}

func TestListFollows(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	user, author := idOn(st, 0, 1), idOn(st, 1, 1)
	var authors, users []uint64
	for i := range uint64(25) {
		a, u := 1000+i*7, 5000+i*3
		authors, users = append(authors, a), append(users, u)
		if _, err := st.Follow(t.Context(), user, a, maxFollowing, t0+int64(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddFollower(t.Context(), feed.Follow{UserID: u, AuthorID: author, FollowedAt: t0 + int64(i)}, noThreshold); err != nil {
			t.Fatal(err)
		}
	}

	pageAll := func(list func(after uint64) ([]feed.Follow, error), key func(feed.Follow) uint64) []feed.Follow {
		var all []feed.Follow
		after := uint64(0)
		for {
			page, err := list(after)
			must(t, err)
			all = append(all, page...)
			if len(page) < 10 {
				return all
			}
			after = key(page[len(page)-1])
		}
	}

	t.Run("following", func(t *testing.T) {
		t.Parallel()
		got := pageAll(func(after uint64) ([]feed.Follow, error) { return st.ListFollowing(t.Context(), user, after, 10) },
			func(f feed.Follow) uint64 { return f.AuthorID })
		if len(got) != 25 {
			t.Fatalf("%d follows, want 25", len(got))
		}
		for i, f := range got {
			if f != (feed.Follow{UserID: user, AuthorID: authors[i], FollowedAt: t0 + int64(i)}) {
				t.Errorf("item %d = %+v", i, f)
			}
		}
	})

	t.Run("followers", func(t *testing.T) {
		t.Parallel()
		got := pageAll(func(after uint64) ([]feed.Follow, error) { return st.ListFollowers(t.Context(), author, after, 10) },
			func(f feed.Follow) uint64 { return f.UserID })
		if len(got) != 25 {
			t.Fatalf("%d followers, want 25", len(got))
		}
		for i, f := range got {
			if f != (feed.Follow{UserID: users[i], AuthorID: author, FollowedAt: t0 + int64(i)}) {
				t.Errorf("item %d = %+v", i, f)
			}
		}
	})

	t.Run("remove follower", func(t *testing.T) {
		t.Parallel()
		const author = 77_777
		follow(t, st, 2, author)
		follow(t, st, 3, author)
		must(t, st.RemoveFollower(t.Context(), author, 2))
		must(t, st.RemoveFollower(t.Context(), author, 2)) // idempotent
		got, err := st.ListFollowers(t.Context(), author, 0, 10)
		must(t, err)
		if len(got) != 1 || got[0].UserID != 3 {
			t.Errorf("followers = %+v, want only 3", got)
		}
		if n := count(t, st.ShardOf(author), "SELECT follower_count FROM authors WHERE author_id = ?", author); n != 1 {
			t.Errorf("follower_count = %d, want 1", n)
		}
	})
}

func TestSwitchToPull(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	const threshold = 4
	followers := append(idsOn(st, 0, 100, 3), idsOn(st, 1, 100, 4)...)
	slices.Sort(followers)
	var modes []int
	for _, u := range followers {
		_, err := st.Follow(t.Context(), u, author, maxFollowing, t0)
		must(t, err)
		mode, err := st.AddFollower(t.Context(), feed.Follow{UserID: u, AuthorID: author, FollowedAt: t0}, threshold)
		must(t, err)
		modes = append(modes, mode)
	}
	// Counting is idempotent: adding an edge twice counts it once.
	mode, err := st.AddFollower(t.Context(), feed.Follow{UserID: followers[0], AuthorID: author, FollowedAt: t0}, threshold)
	must(t, err)
	modes = append(modes, mode)
	want := []int{store.AuthorPush, store.AuthorPush, store.AuthorPush, store.AuthorPush, store.AuthorSwitching, store.AuthorSwitching, store.AuthorSwitching, store.AuthorSwitching}
	if !slices.Equal(modes, want) {
		t.Fatalf("modes = %v, want %v (switch once the count passes %d)", modes, want, threshold)
	}
	if n := count(t, st.ShardOf(author), "SELECT follower_count FROM authors WHERE author_id = ?", author); n != len(followers) {
		t.Errorf("follower_count = %d, want %d", n, len(followers))
	}
	b, err := st.Backlog(t.Context())
	must(t, err)
	if b.Switches != 1 {
		t.Errorf("backlog %+v, want one switch", b)
	}

	jobs, err := st.ClaimSwitches(t.Context(), st.ShardOf(author), t0, t0+lease, 10, newToken())
	must(t, err)
	if len(jobs) != 1 || jobs[0].AuthorID != author {
		t.Fatalf("claimed %+v", jobs)
	}
	if again, err := st.ClaimSwitches(t.Context(), st.ShardOf(author), t0, t0+lease, 10, newToken()); err != nil || len(again) != 0 {
		t.Fatalf("claimed a claimed switch: %+v %v", again, err)
	}
	batches := 0
	for done := false; !done; batches++ {
		done, err = st.RunSwitchBatch(t.Context(), &jobs[0], 3, t0+lease)
		must(t, err)
	}
	if batches != 3 {
		t.Errorf("%d batches of 3 for 7 followers, want 3", batches)
	}
	for _, u := range followers {
		snap := snapshot(t, st, u)
		if !slices.Equal(snap.Pull, []store.PullAuthor{{AuthorID: author, Pull: store.PullPending | store.PullBelowActive}}) {
			t.Errorf("user %d pull = %+v, want both bits", u, snap.Pull)
		}
	}
	mode, err = st.AddFollower(t.Context(), feed.Follow{UserID: 9999, AuthorID: author, FollowedAt: t0}, threshold)
	must(t, err)
	if mode != store.AuthorPull {
		t.Errorf("mode after the switch = %d, want pull", mode)
	}
	b, err = st.Backlog(t.Context())
	must(t, err)
	if b.Switches != 0 {
		t.Errorf("backlog %+v, want no switch", b)
	}
	// A pull author's delivery pushes to active followers only, or to
	// nobody; a task per range of 5 followers and database holding some.
	all := append(slices.Clone(followers), 9999)
	slices.Sort(all)
	wantTasks := 0
	for chunk := range slices.Chunk(all, 5) {
		dbs := map[*store.Shard]bool{}
		for _, u := range chunk {
			dbs[st.ShardOf(u)] = true
		}
		wantTasks += len(dbs)
	}
	publish(t, st, author, 1, t0)
	if res := plan(t, st, author, t0, store.PlanOptions{TaskSize: 5}); len(res) != 1 || res[0].Mode != store.ModePushActive || res[0].Tasks != wantTasks {
		t.Errorf("plan = %+v, want push_active in %d tasks", res, wantTasks)
	}
	publish(t, st, author, 2, t0)
	res := plan(t, st, author, t0, store.PlanOptions{TaskSize: 5, PullOnly: true})
	if len(res) != 1 || res[0].Mode != store.ModePull || res[0].Tasks != 0 {
		t.Errorf("plan = %+v, want pull without tasks", res)
	}
	d, err := st.GetDelivery(t.Context(), author, 2)
	must(t, err)
	if !reflect.DeepEqual(d, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePull, Recipients: 8, Delivered: 8}) {
		t.Errorf("pull delivery = %+v", d)
	}

	t.Run("stale switch token", func(t *testing.T) {
		st := newStore(t, 1)
		for u := uint64(2); u <= 4; u++ {
			if _, err := st.AddFollower(t.Context(), feed.Follow{UserID: u, AuthorID: 1, FollowedAt: t0}, 2); err != nil {
				t.Fatal(err)
			}
		}
		old, err := st.ClaimSwitches(t.Context(), st.Shards()[0], t0, t0+10, 1, newToken())
		must(t, err)
		cur, err := st.ClaimSwitches(t.Context(), st.Shards()[0], t0+11, t0+lease, 1, newToken())
		must(t, err)
		if len(old) != 1 || len(cur) != 1 {
			t.Fatalf("claims %+v then %+v, want the expired one reclaimed", old, cur)
		}
		if _, err := st.RunSwitchBatch(t.Context(), &old[0], 10, t0+lease); err != store.ErrLostClaim {
			t.Errorf("stale switch batch: %v, want ErrLostClaim", err)
		}
		if done, err := st.RunSwitchBatch(t.Context(), &cur[0], 10, t0+lease); err != nil || !done {
			t.Errorf("switch batch: done=%v err=%v", done, err)
		}
	})
}

// TestSwitchBesideRecount races switch batches, which give the author's
// followers a pull bit outside a header-locked transaction, with unfollows
// of another author, which recount each user's pull mark under the header
// lock: whatever the interleaving, every user ends with the mark, or reads
// would skip the author's posts.
func TestSwitchBesideRecount(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	other := uint64(1)
	for round := range uint64(4) {
		author := 2 + round
		users := make([]uint64, 40)
		for i := range users {
			users[i] = 1000*(round+1) + uint64(i)
			// A pending follow: a pull bit the unfollow then clears.
			followPending(t, st, users[i], other)
		}
		followMany(t, st, author, users)
		mustExec(t, sh.DB, "UPDATE authors SET mode = ? WHERE author_id = ?", store.AuthorSwitching, author)
		jobs, err := st.ClaimSwitches(t.Context(), sh, t0, t0+lease, 10, newToken())
		must(t, err)
		if len(jobs) != 1 {
			t.Fatalf("claimed %+v, want the one switch", jobs)
		}
		ops := []func() error{func() error {
			_, err := st.RunSwitchBatch(t.Context(), &jobs[0], len(users)+1, t0+lease)
			return err
		}}
		for _, u := range users {
			ops = append(ops, func() error { return st.Unfollow(t.Context(), u, other, t0) })
		}
		errs := make([]error, len(ops))
		var wg sync.WaitGroup
		for i, op := range ops {
			wg.Go(func() { errs[i] = op() })
		}
		wg.Wait()
		must(t, errors.Join(errs...))
		for _, u := range users {
			if n := count(t, sh, "SELECT pulls FROM inbox WHERE user_id = ? AND publish_time = ? AND content_id = ?", u, store.Top.PublishTime, store.Top.ContentID); n != 1 {
				t.Fatalf("round %d: user %d has a pull bit for author %d but its header pull mark is %d", round, u, author, n)
			}
		}
	}
}

func TestFinishFollowEvents(t *testing.T) {
	t.Parallel()

	finish := func(t *testing.T, st *store.Store, ev store.FollowEvent) int64 {
		t.Helper()
		released, err := st.FinishFollowEvents(t.Context(), st.Shards()[0], []store.FollowEvent{ev})
		must(t, err)
		return released
	}

	claimOne := func(t *testing.T, st *store.Store, now int64) store.FollowEvent {
		t.Helper()
		evs, err := st.ClaimFollowEvents(t.Context(), st.Shards()[0], now, now+lease, 10, newToken())
		must(t, err)
		if len(evs) != 1 {
			t.Fatalf("claimed %d events, want 1", len(evs))
		}
		return evs[0]
	}

	t.Run("unchanged event is deleted", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		_, err := st.Follow(t.Context(), 1, 2, maxFollowing, t0)
		must(t, err)
		ev := claimOne(t, st, t0)
		if ev.UserID != 1 || ev.AuthorID != 2 || ev.Version != 1 {
			t.Fatalf("event %+v", ev)
		}
		if released := finish(t, st, ev); released != 0 {
			t.Error("an unchanged event was released, not deleted")
		}
		if b, err := st.Backlog(t.Context()); err != nil || !b.Idle() {
			t.Errorf("backlog %+v %v, want idle", b, err)
		}
	})

	t.Run("changed event is released to run again", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		_, err := st.Follow(t.Context(), 1, 2, maxFollowing, t0)
		must(t, err)
		ev := claimOne(t, st, t0)
		must(t, st.Unfollow(t.Context(), 1, 2, t0+1)) // bumps the version meanwhile

		if released := finish(t, st, ev); released != 1 {
			t.Fatal("an event whose version changed was not released")
		}
		// Released: claimable at once, at the new version.
		again := claimOne(t, st, t0+2)
		if again.Version != 2 {
			t.Errorf("reclaimed version %d, want 2", again.Version)
		}
		// A stale token neither deletes nor releases it.
		if released := finish(t, st, ev); released != 0 {
			t.Errorf("a stale finish released %d events", released)
		}
		if evs, err := st.ClaimFollowEvents(t.Context(), st.Shards()[0], t0+3, t0+lease, 10, newToken()); err != nil || len(evs) != 0 {
			t.Errorf("a stale finish released the event: %+v %v", evs, err)
		}
		if released := finish(t, st, again); released != 0 {
			t.Errorf("finish released %d events, want the event deleted", released)
		}
		if b, err := st.Backlog(t.Context()); err != nil || !b.Idle() {
			t.Errorf("backlog %+v %v, want idle", b, err)
		}
	})
}

// TestFollowLeased queues follows' events claimed (store.EventLease): no
// worker claims them before the lease ends and any worker may after it
// (their taker stopped or crashed), the outcome's event finishes them, and
// a pair whose unfollow was still pending keeps that event and its claim.
func TestFollowLeased(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	held := store.EventLease{Token: newToken(), Until: t0 + lease}
	claim := func(t *testing.T, now int64) []store.FollowEvent {
		t.Helper()
		evs, err := st.ClaimFollowEvents(t.Context(), sh, now, now+lease, 10, newToken())
		must(t, err)
		return evs
	}

	// 1 follows 3, and unfollows it: the unfollow's event is pending, and
	// claimed by a worker.
	_, err := st.Follow(t.Context(), 1, 3, maxFollowing, t0)
	must(t, err)
	must(t, st.ReleaseFollowEvents(t.Context(), sh, claim(t, t0)))
	must(t, st.Unfollow(t.Context(), 1, 3, t0))
	pending := claim(t, t0)
	out := st.FollowMany(t.Context(), []store.FollowEdge{{UserID: 1, AuthorID: 2}, {UserID: 1, AuthorID: 3}, {UserID: 1, AuthorID: 2}}, maxFollowing, t0, held)
	for i, want := range []bool{true, true, false} {
		if out[i].Err != nil || out[i].Created != want || (out[i].Event != nil) != want {
			t.Fatalf("outcome %d: %+v, want created and an event %v", i, out[i], want)
		}
	}
	if ev := *out[0].Event; ev.UserID != 1 || ev.AuthorID != 2 || ev.Token != held.Token {
		t.Fatalf("leased event %+v", ev)
	}
	// Before the lease ends no claim takes either: 1→2's is leased, and
	// 1→3's keeps its worker's claim.
	if evs := claim(t, t0+1); len(evs) != 0 {
		t.Fatalf("claimed %+v before the lease ended", evs)
	}
	// The leased copy of 1→3's event finishes nothing; the worker's finish
	// sees the version the follow bumped and releases it to run again.
	if released, err := st.FinishFollowEvents(t.Context(), sh, []store.FollowEvent{*out[1].Event}); err != nil || released != 0 {
		t.Fatalf("finishing the leased event of a pending pair: released %d, %v", released, err)
	}
	if released, err := st.FinishFollowEvents(t.Context(), sh, pending); err != nil || released != 1 {
		t.Fatalf("finishing the pending event: released %d, %v; want it released", released, err)
	}
	// Its taker finishes a leased event while the lease holds.
	own := st.FollowMany(t.Context(), []store.FollowEdge{{UserID: 4, AuthorID: 5}}, maxFollowing, t0, held)
	if own[0].Event == nil {
		t.Fatalf("outcome %+v, want a leased event", own[0])
	}
	if released, err := st.FinishFollowEvents(t.Context(), sh, []store.FollowEvent{*own[0].Event}); err != nil || released != 0 {
		t.Fatalf("finishing a leased event: released %d, %v", released, err)
	}
	// Past the lease any worker takes the leased events left: 1→2's, and
	// 1→3's pending one.
	after := claim(t, held.Until+1)
	slices.SortFunc(after, func(a, b store.FollowEvent) int { return cmp.Compare(a.AuthorID, b.AuthorID) })
	if len(after) != 2 || after[0].AuthorID != 2 || after[1].AuthorID != 3 {
		t.Fatalf("claimed %+v after the lease, want 1→2's and 1→3's events", after)
	}
}

// TestFollowMany writes a batch of follows over two databases: each pair's
// outcome in order, the edges, headers and events as single follows leave
// them, the cap per user, and a mute holding for a new edge.
func TestFollowMany(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	u0, u1 := idOn(st, 0, 7000), idOn(st, 1, 7000)
	a1, a2, a3 := idOn(st, 0, 7100), idOn(st, 1, 7100), idOn(st, 1, 7200)
	_, err := st.SetFilter(t.Context(), store.Mute, u1, a2, true, 10, t0)
	must(t, err)
	from := feed.Key{PublishTime: t0 - 5, ContentID: 9}
	edges := []store.FollowEdge{
		{UserID: u0, AuthorID: a1, From: &from},
		{UserID: u1, AuthorID: a2},
		{UserID: u0, AuthorID: a2},
		{UserID: u0, AuthorID: a1}, // again: exists
		{UserID: u0, AuthorID: a3}, // third of u0: over a cap of 2
		{UserID: u1, AuthorID: a1},
	}
	out := st.FollowMany(t.Context(), edges, 2, t0, store.EventLease{})
	created := []bool{true, true, true, false, false, true}
	for i, o := range out {
		if i == 4 {
			wantCode(t, o.Err, feed.ELIMIT)
			continue
		}
		if o.Err != nil || o.Created != created[i] {
			t.Errorf("pair %d: %+v, want created %v", i, o, created[i])
		}
	}
	for _, e := range []store.FollowEdge{edges[0], edges[1], edges[2], edges[5]} {
		sh := st.ShardOf(e.UserID)
		if n := count(t, sh, "SELECT COUNT(*) FROM following WHERE user_id = ? AND author_id = ? AND pull = ?", e.UserID, e.AuthorID, store.PullPending); n != 1 {
			t.Errorf("edge %d→%d: %d pending rows", e.UserID, e.AuthorID, n)
		}
		if n := count(t, sh, "SELECT COUNT(*) FROM follow_events WHERE user_id = ? AND author_id = ? AND version = 1", e.UserID, e.AuthorID); n != 1 {
			t.Errorf("edge %d→%d: %d events at version 1", e.UserID, e.AuthorID, n)
		}
	}
	if n := count(t, st.ShardOf(u1), "SELECT COUNT(*) FROM following WHERE user_id = ? AND author_id = ? AND muted = 1", u1, a2); n != 1 {
		t.Error("the new edge of a muted pair is not muted")
	}
	if n := count(t, st.ShardOf(u0), "SELECT COUNT(*) FROM following WHERE user_id = ? AND author_id = ? AND history_time = ? AND history_id = ?", u0, a1, from.PublishTime, from.ContentID); n != 1 {
		t.Error("the bound is not stored with the edge")
	}
	snap := snapshot(t, st, u0)
	if len(snap.Pull) != 2 || snap.Follows == 0 {
		t.Errorf("u0's snapshot: pull %+v, follows version %d", snap.Pull, snap.Follows)
	}
	for _, pa := range snap.Pull {
		if want := (pa.AuthorID == a1); (pa.From == from) != want {
			t.Errorf("pull author %d: from %v", pa.AuthorID, pa.From)
		}
	}
	authors, bounds, _, err := st.FollowedAuthors(t.Context(), u0, 0)
	must(t, err)
	if len(authors) != 2 || len(bounds) != 1 || bounds[a1] != from {
		t.Errorf("followed authors %v, bounds %v", authors, bounds)
	}
	// Again: nothing is created, nothing changes.
	for i, o := range st.FollowMany(t.Context(), edges, 2, t0+1, store.EventLease{}) {
		if o.Created || (o.Err != nil) != (i == 4) {
			t.Errorf("second run, pair %d: %+v", i, o)
		}
	}
}

// TestBackfillHistoryBound copies only the posts at or above the edge's
// bound, and raises no floor when the bound, not the limit, cut the copy.
func TestBackfillHistoryBound(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	const user, author = 7300, 7301
	for i := range 10 {
		publish(t, st, author, uint64(7400+i), t0+int64(i))
	}
	from, err := st.HistoryFrom(t.Context(), author, 4)
	must(t, err)
	if from == nil || *from != (feed.Key{PublishTime: t0 + 5, ContentID: 7406}) {
		t.Fatalf("HistoryFrom(4) = %v", from)
	}
	if all, err := st.HistoryFrom(t.Context(), author, 10); err != nil || all != nil {
		t.Fatalf("HistoryFrom(10) of 10 posts = %v, %v; want no bound", all, err)
	}
	out := st.FollowMany(t.Context(), []store.FollowEdge{{UserID: user, AuthorID: author, From: from}}, maxFollowing, t0, store.EventLease{})
	must(t, out[0].Err)
	res, copied, err := st.Backfill(t.Context(), user, author, 6, false)
	must(t, err)
	if !res.Followed || len(copied) != 4 || copied[3].ContentID != 7406 {
		t.Fatalf("backfill copied %v (%+v)", copied, res)
	}
	if snap := snapshot(t, st, user); snap.Floor != nil || len(snap.Pull) != 0 {
		t.Errorf("after the backfill: floor %v, pull %+v", snap.Floor, snap.Pull)
	}
	if got := inbox(t, st, user); len(got) != 4 {
		t.Errorf("inbox %v, want the 4 newest posts", got)
	}
}

// TestUnfollowKeepingHistory keeps the author's inbox entries and records
// the pair for retractions; a plain unfollow afterwards purges them.
func TestUnfollowKeepingHistory(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	const user, author = 7500, 7501
	for i := range 3 {
		publish(t, st, author, uint64(7600+i), t0+int64(i))
	}
	follow(t, st, user, author)
	_, _, err := st.Backfill(t.Context(), user, author, 10, false)
	must(t, err)
	must(t, st.UnfollowKeepingHistory(t.Context(), user, author, t0+10))
	sh := st.ShardOf(user)
	if got := inbox(t, st, user); len(got) != 3 {
		t.Fatalf("inbox after keeping: %v", got)
	}
	if n := count(t, sh, "SELECT COUNT(*) FROM kept_history WHERE author_id = ? AND user_id = ?", author, user); n != 1 {
		t.Fatalf("%d kept_history rows", n)
	}
	if n := count(t, sh, "SELECT COUNT(*) FROM following WHERE user_id = ?", user); n != 0 {
		t.Fatalf("%d edges left", n)
	}
	must(t, st.Unfollow(t.Context(), user, author, t0+11))
	if got := inbox(t, st, user); len(got) != 0 {
		t.Fatalf("inbox after a plain unfollow: %v", got)
	}
	if n := count(t, sh, "SELECT COUNT(*) FROM kept_history WHERE author_id = ? AND user_id = ?", author, user); n != 0 {
		t.Fatalf("%d kept_history rows after the purge", n)
	}
}

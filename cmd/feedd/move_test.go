package main

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
)

// TestCrashMove SIGKILLs the worker process at random points of an account
// move whose old id follows 100 authors (muting 10 of them), has a read
// marker and F followers, then lets a last process finish. The end state
// is the one an uninterrupted move leaves: the new id follows and mutes
// what the old one did, with the same inbox and marker, every follower
// follows the new id instead, the old id is left with nothing but its
// posts, and the counts of the follows, mutes and marker are exact.
func TestCrashMove(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const (
		old, to    = 700_001, 700_002
		numAuthors = 100
		numMuted   = 10
	)
	followers, kills := 1000, 4
	if crashFull() {
		followers, kills = 10_000, 12
	}
	seed := crashSeed(t)
	t.Logf("followers=%d kills=%d seed=%d (FEED_CRASH_SEED=%d replays the kill times)", followers, kills, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	ctx := context.Background()

	bin, dsn, st, raw := crashDatabase(t)
	start := time.Now()
	now := start.UnixMilli()
	authors := make([]uint64, numAuthors)
	for i := range authors {
		authors[i] = 10_000 + uint64(i)*131
	}
	// A post by each of the first 40 authors: the muted ones' stay out of
	// both inboxes, the others' are backfilled into both.
	inParallel(t, 40, func(i int) error {
		p := feed.Post{ContentID: 8_000_000 + uint64(i), AuthorID: authors[i], PublishTime: now - int64(i)*1000, Kind: feed.KindPost}
		_, _, err := st.PublishPost(ctx, p, now)
		return err
	})
	inParallel(t, numAuthors, func(i int) error {
		_, err := st.Follow(ctx, old, authors[i], 2000, now)
		return err
	})
	for _, a := range authors[:numMuted] {
		if _, err := st.SetFilter(ctx, store.Mute, old, a, true, 1000, now); err != nil {
			t.Fatal(err)
		}
	}
	users := make([]uint64, followers)
	for i := range users {
		users[i] = 1_000_000 + uint64(i)*7919
	}
	if err := storeload.Followers(ctx, st, old, users, now-1000, false); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--mysql-dsn", dsn, "--api=false", "--workers=true",
		leaseFlag(t), "--poll-interval=20ms", "--worker-concurrency=4",
		"--push-threshold=" + strconv.Itoa(10*followers), "--soft-stop=5s"}
	// Apply the follows, plan the posts, and stop gracefully.
	p := startFeedd(t, bin, "feedd setup", args...)
	waitIdle(t, st)
	p.stop(t, 10*time.Second)
	inbox, err := st.InboxKeys(ctx, old)
	if err != nil || len(inbox) != 40-numMuted {
		t.Fatalf("old id's inbox before the move: %d entries (%v), want %d", len(inbox), err, 40-numMuted)
	}
	marker, err := st.AdvanceMarker(ctx, old, inbox[5].Key(), now)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("set up in %s", time.Since(start).Round(time.Millisecond))

	if _, started, err := st.StartMove(ctx, old, to, time.Now().UnixMilli()); err != nil || !started {
		t.Fatalf("start move: started=%v err=%v", started, err)
	}
	// Progress: edges of the new id, as follower and as followed; neither
	// ever goes down.
	total := int64(numAuthors + followers)
	progress := func() int64 {
		return count(t, raw, `SELECT COUNT(*) FROM following WHERE user_id = ?`, to) +
			count(t, raw, `SELECT COUNT(*) FROM following WHERE author_id = ?`, to)
	}
	tried := killRounds(t, rng, bin, args, kills, total, progress, nil, nil)
	p = startFeedd(t, bin, "feedd final", args...)
	wait.Within(t, finalIdle, "the system at rest", idle(st))
	p.stop(t, 10*time.Second)
	t.Logf("%d of %d kills mid-move; moved in %s", kills, tried, time.Since(start).Round(time.Millisecond))

	m, err := st.GetMove(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	want := feed.Move{From: old, To: to, State: feed.MoveDone,
		Follows: feed.MoveCount{Moved: numAuthors, Total: numAuthors}, Mutes: feed.MoveCount{Moved: numMuted, Total: numMuted},
		Marker: feed.MoveCount{Moved: 1, Total: 1}, Followers: m.Followers, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
	if m != want || m.Followers.Total != int64(followers) || m.Followers.Moved > int64(followers) {
		t.Errorf("move %+v, want %+v with followers total %d", m, want, followers)
	}
	for _, c := range []struct {
		what string
		q    string
		arg  uint64
		want int64
	}{
		{"authors the new id follows", `SELECT COUNT(*) FROM following WHERE user_id = ?`, to, numAuthors},
		{"of them muted", `SELECT COUNT(*) FROM following WHERE user_id = ? AND muted = 1`, to, numMuted},
		{"authors the new id mutes", `SELECT COUNT(*) FROM mutes WHERE user_id = ? AND muted_at IS NOT NULL`, to, numMuted},
		{"edges of the new id with pull bits", `SELECT COUNT(*) FROM following WHERE (user_id = ? OR author_id = ?) AND pull <> 0`, to, 0},
		{"followers of the new id", `SELECT COUNT(*) FROM following WHERE author_id = ?`, to, int64(followers)},
		{"followers rows of the new id", `SELECT COUNT(*) FROM followers WHERE author_id = ?`, to, int64(followers)},
		{"follower count of the new id", `SELECT COALESCE(MAX(follower_count), 0) FROM authors WHERE author_id = ?`, to, int64(followers)},
		{"authors the old id follows", `SELECT COUNT(*) FROM following WHERE user_id = ?`, old, 0},
		{"mutes rows of the old id", `SELECT COUNT(*) FROM mutes WHERE user_id = ?`, old, 0},
		{"marker of the old id", `SELECT COUNT(*) FROM markers WHERE user_id = ?`, old, 0},
		{"followers of the old id", `SELECT COUNT(*) FROM following WHERE author_id = ?`, old, 0},
		{"followers rows of the old id", `SELECT COUNT(*) FROM followers WHERE author_id = ?`, old, 0},
		{"follower count of the old id", `SELECT COALESCE(MAX(follower_count), 0) FROM authors WHERE author_id = ?`, old, 0},
	} {
		args := []any{c.arg}
		if c.what == "edges of the new id with pull bits" {
			args = append(args, c.arg)
		}
		if got := count(t, raw, c.q, args...); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	got, err := st.InboxKeys(ctx, to)
	if err != nil || !slices.Equal(got, inbox) {
		t.Errorf("new id's inbox %v (%v), the old one's was %v", got, err, inbox)
	}
	if m, ok, err := st.GetMarker(ctx, to); err != nil || !ok || m.Key != marker.Key {
		t.Errorf("new id's marker %+v (%v, %v), the old one's was %+v", m, ok, err, marker)
	}
}

// count runs a COUNT query on the test's connection.
func count(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

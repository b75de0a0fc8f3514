package service_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store/storetest"
)

// TestSoak churns publishes, follows, unfollows, deletes and live streams in
// rounds on two databases and holds every table, whichever tables the schema
// has, to the row count it had after the second round: each round publishes
// as many posts and streams as it deletes and swaps one follow of each user
// for another, so nothing may grow. Deleted posts' rows go once their tombstones expire (the
// clock jumps past the TTL each round); a post forgotten that way answers
// DELETE with 404 and its id can be published again. Each round every feed
// equals a full sort of the live posts of the authors followed.
// FEED_SOAK_ROUNDS sets the rounds (make soak runs many).
func TestSoak(t *testing.T) {
	t.Parallel()
	rounds := storetest.SoakRounds(t, 4)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	h := newHarness(t, harnessOpts{shards: 2, now: now, configured: func(c *service.Config) {
		c.TombstoneTTL = time.Minute
		c.LiveSessionTTL = time.Minute
	}})
	ctx := t.Context()
	m := newFeedModel()
	rng := rand.New(rand.NewPCG(3, 4))
	const users, authors, perRound, follows = 30, 8, 3, 3
	user := func(i int) uint64 { return uint64(1000 + i) }
	author := func(i int) uint64 { return uint64(5000 + i%authors) }
	var live, gone []feed.Post // this round's posts, the last round's
	var warm map[string]int64
	for r := range rounds {
		// In round r, user i follows authors i+r .. i+r+follows-1.
		for i := range users {
			if r == 0 {
				for k := range follows {
					m.follow(t, h, user(i), author(i+k))
				}
				continue
			}
			m.unfollow(t, h, user(i), author(i+r-1))
			m.follow(t, h, user(i), author(i+r+follows-1))
		}
		gone, live = live, nil
		for a := range authors {
			for range perRound {
				live = append(live, m.newPost(rng, author(a), now().UnixMilli()-int64(rng.IntN(1000))))
			}
		}
		m.publishAll(t, h, live)
		m.deleteAll(t, h, gone)
		// Streams churn too: each round every author ends a stream
		// (replayed to its followers) and schedules another, and last
		// round's are deleted, one ended, one never started.
		for a := range authors {
			for k := range 2 {
				id := uint64(900000 + r*100 + a*2 + k)
				at := now().Add(time.Hour).UnixMilli()
				st, _, err := h.svc.CreateStream(ctx, service.StreamInput{HostID: author(a), StreamID: id, ScheduledStart: &at})
				if err != nil {
					t.Fatal(err)
				}
				if k == 0 {
					if _, err := h.svc.StartStream(ctx, st.HostID, id, nil); err != nil {
						t.Fatal(err)
					}
					if _, err := h.svc.EndStream(ctx, st.HostID, id, nil); err != nil {
						t.Fatal(err)
					}
				}
				if r > 0 {
					if err := h.svc.DeleteStream(ctx, st.HostID, id-100); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		h.waitIdle(t)
		offset.Add(int64(2 * time.Minute)) // past the tombstones' TTL
		for i := range users {
			checkFeed(t, h, m, user(i), fmt.Sprintf("round %d", r), 7)
			// A live feed session each round, the last round's expired.
			if _, err := h.svc.LivePage(ctx, user(i), feed.Page{Limit: 5}, ""); err != nil {
				t.Fatal(err)
			}
		}
		counts := waitRows(t, h, "posts", int64(len(live)))
		t.Logf("round %d: %v", r, counts)
		if r <= 1 { // a viewer's replays list gets its floor row at its first trim
			warm = counts
			continue
		}
		for _, table := range slices.Sorted(maps.Keys(counts)) {
			if counts[table] != warm[table] {
				t.Errorf("round %d: table %s holds %d rows, %d after the first round", r, table, counts[table], warm[table])
			}
		}
	}
	// A post forgotten: DELETE says it never was, and its id is free.
	p := gone[0]
	if err := h.svc.DeletePost(ctx, p.AuthorID, p.ContentID); feed.ErrorCode(err) != feed.ENOTFOUND {
		t.Errorf("delete of a purged post: %v, want %s", err, feed.ENOTFOUND)
	}
	if _, created, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: p.AuthorID, ContentID: p.ContentID}); err != nil || !created {
		t.Errorf("publishing a purged post's id again: created=%v, %v", created, err)
	}
}

// waitRows waits until table holds want rows over every database (the
// tombstones' sweep is a worker loop) and returns every table's count.
func waitRows(t *testing.T, h *harness, table string, want int64) map[string]int64 {
	t.Helper()
	var counts map[string]int64
	wait.For(t, fmt.Sprintf("%d rows in %s", want, table), func() error {
		var err error
		counts, err = storetest.RowCounts(context.Background(), h.store)
		if err != nil {
			t.Fatal(err)
		}
		if counts[table] != want {
			return fmt.Errorf("%s holds %d rows", table, counts[table])
		}
		return nil
	})
	return counts
}

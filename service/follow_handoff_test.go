package service

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

// TestFollowHandoff: while follow loops run, a process's follows hand
// their events to them claimed, so no other worker takes them before the
// lease ends; a round applies them with the queue's own events filling the
// room they leave, releases a batch handed too long ago instead of
// starting it, and a stop releases what no loop took, for any worker at
// once. A crash leaves them to the lease's end (TestFollowLeased).
func TestFollowHandoff(t *testing.T) {
	st := storetest.NewStore(t, storetest.Options{})
	sh := st.Shards()[0]
	cfg := DefaultConfig()
	cfg.Lease = time.Hour
	s, err := New(st, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	claimable := func(t *testing.T) int {
		t.Helper()
		now := time.Now().UnixMilli()
		evs, err := st.ClaimFollowEvents(t.Context(), sh, now, now+1000, 100, 42)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.ReleaseFollowEvents(t.Context(), sh, evs); err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	follow := func(t *testing.T, pairs ...feed.FollowRequest) {
		t.Helper()
		res, err := s.FollowMany(t.Context(), pairs)
		for _, r := range res {
			if err == nil {
				err = r.Err
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	round := func(t *testing.T, want int) {
		t.Helper()
		if n, err := s.applyFollowEvents(t.Context(), t.Context(), sh, newStepSize(backfillChunk)); err != nil || n != want {
			t.Fatalf("applyFollowEvents = %d, %v; want %d events", n, err, want)
		}
	}

	// No loop runs: the events are queued for any worker.
	follow(t, feed.FollowRequest{UserID: 1, AuthorID: 2})
	if n := claimable(t); n != 1 {
		t.Fatalf("%d events claimable with no loop running, want 1", n)
	}
	s.handoff.open() // as RunWorkers does
	follow(t, feed.FollowRequest{UserID: 3, AuthorID: 2}, feed.FollowRequest{UserID: 4, AuthorID: 2})
	if n := claimable(t); n != 1 {
		t.Fatalf("%d events claimable, want only the unhanded one", n)
	}

	t.Run("late batch released", func(t *testing.T) {
		evs, _ := s.handoff.take(sh, followEventBatch)
		if len(evs) != 2 {
			t.Fatalf("took %d handed events, want 2", len(evs))
		}
		s.handoff.reserve(len(evs))
		s.handoff.put(st.ShardOf, evs, len(evs), time.Now().Add(-cfg.Lease))
		round(t, 2)
		if n := claimable(t); n != 3 {
			t.Fatalf("%d events claimable, want the 2 late ones released too", n)
		}
	})

	t.Run("handed and queued applied", func(t *testing.T) {
		follow(t, feed.FollowRequest{UserID: 5, AuthorID: 2})
		round(t, 4) // 5→2 handed, the three others claimed beside it
		if n := claimable(t); n != 0 {
			t.Fatalf("%d events left, want none", n)
		}
		followers, _, err := s.ListFollowers(t.Context(), 2, feed.Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, f := range followers {
			got = append(got, f.UserID)
		}
		if want := []uint64{1, 3, 4, 5}; !slices.Equal(got, want) {
			t.Fatalf("followers of 2: %v, want %v", got, want)
		}
	})

	t.Run("stop releases", func(t *testing.T) {
		follow(t, feed.FollowRequest{UserID: 6, AuthorID: 2})
		if n := claimable(t); n != 0 {
			t.Fatalf("%d events claimable, want 6→2's handed", n)
		}
		for shard, evs := range s.handoff.close() {
			s.releaseFollowEvents(t.Context(), shard, evs)
		}
		if n := claimable(t); n != 1 {
			t.Fatalf("%d events claimable after the stop, want 1", n)
		}
		if s.handoff.held != 0 || s.handoff.reserve(1) {
			t.Errorf("a stopped process's handoff holds %d events or takes room", s.handoff.held)
		}
	})
}

// TestFollowHandoffBounds: the handoff holds at most handoffBound events,
// room reserved included, gives back room a call did not use, and hands
// each shard's events out in order, up to the limit asked for.
func TestFollowHandoffBounds(t *testing.T) {
	h := newFollowHandoff()
	if h.reserve(1) {
		t.Fatal("reserved with no loop running")
	}
	h.open()
	if !h.reserve(handoffBound) || h.reserve(1) {
		t.Fatal("the bound does not hold")
	}
	sh := &store.Shard{}
	shardOf := func(uint64) *store.Shard { return sh }
	evs := []store.FollowEvent{{UserID: 1}, {UserID: 2}, {UserID: 3}}
	t0 := time.Now()
	h.put(shardOf, evs, handoffBound, t0)
	if !h.reserve(handoffBound-3) || h.reserve(1) {
		t.Fatal("unused room not given back")
	}
	h.put(shardOf, nil, handoffBound-3, t0)
	h.reserve(1)
	h.put(shardOf, []store.FollowEvent{{UserID: 4}}, 1, t0.Add(time.Second))
	got, claimed := h.take(sh, 2)
	if len(got) != 2 || got[0].UserID != 1 || got[1].UserID != 2 || !claimed.Equal(t0) {
		t.Fatalf("take(2) = %+v at %v", got, claimed)
	}
	got, claimed = h.take(sh, 10)
	if len(got) != 2 || got[0].UserID != 3 || got[1].UserID != 4 || !claimed.Equal(t0) {
		t.Fatalf("take(10) = %+v at %v, want the rest, claimed at the earlier time", got, claimed)
	}
	if got, _ := h.take(sh, 10); len(got) != 0 || h.held != 0 {
		t.Fatalf("take on empty = %+v, held %d", got, h.held)
	}
}

package service

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/storetest"
)

// fakeClock returns the times of a script in turn, repeating the last one.
type fakeClock struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.times[0]
	if len(c.times) > 1 {
		c.times = c.times[1:]
	}
	return t
}

// idParts splits an id into milliseconds since idEpoch, node and sequence.
func idParts(id uint64) (ms int64, node, seq uint64) {
	return int64(id >> (nodeBits + seqBits)), id >> seqBits & maxNodeID, id & maxSeq
}

func TestIDGen(t *testing.T) {
	t.Parallel()
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ms := func(d int) time.Time { return base.Add(time.Duration(d) * time.Millisecond) }
	baseMS := base.UnixMilli() - idEpoch

	tests := []struct {
		name  string
		clock []time.Time // the clock's readings, one per id; the last repeats
		n     int         // ids to draw
		// wantFirst and wantLast are the (ms offset from base, seq) of the
		// first and last id.
		wantFirst, wantLast [2]int
	}{
		{name: "one id", clock: []time.Time{ms(0)}, n: 1, wantFirst: [2]int{0, 0}, wantLast: [2]int{0, 0}},
		{name: "same millisecond counts the sequence", clock: []time.Time{ms(0)}, n: 5,
			wantFirst: [2]int{0, 0}, wantLast: [2]int{0, 4}},
		{name: "new millisecond resets the sequence", clock: []time.Time{ms(0), ms(0), ms(0), ms(1)}, n: 4,
			wantFirst: [2]int{0, 0}, wantLast: [2]int{1, 0}},
		{name: "clock going backwards keeps the last millisecond",
			clock: []time.Time{ms(10), ms(10), ms(3), ms(-5000), ms(9)}, n: 5,
			wantFirst: [2]int{10, 0}, wantLast: [2]int{10, 4}},
		{name: "clock back then forward", clock: []time.Time{ms(10), ms(2), ms(11), ms(11)}, n: 4,
			wantFirst: [2]int{10, 0}, wantLast: [2]int{11, 1}},
		{name: "1024 ids fill one millisecond", clock: []time.Time{ms(0)}, n: 1024,
			wantFirst: [2]int{0, 0}, wantLast: [2]int{0, 1023}},
		{name: "more than 1024 ids in one millisecond borrow the next", clock: []time.Time{ms(0)}, n: 3000,
			wantFirst: [2]int{0, 0}, wantLast: [2]int{2, 3000 - 2*1024 - 1}},
		{name: "stalled clock far behind never waits", clock: []time.Time{ms(60_000), ms(0)}, n: 5000,
			wantFirst: [2]int{60_000, 0}, wantLast: [2]int{60_004, 5000 - 4*1024 - 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const node = 4321
			clock := &fakeClock{times: append([]time.Time(nil), tt.clock...)}
			g := newIDGen(node, clock.now)
			ids := make([]uint64, tt.n)
			for i := range ids {
				ids[i] = g.next()
			}
			for i, id := range ids {
				if _, n, _ := idParts(id); n != node {
					t.Fatalf("id %d (#%d) has node %d, want %d", id, i, n, node)
				}
				if i > 0 && id <= ids[i-1] {
					t.Fatalf("id #%d = %d is not above #%d = %d", i, id, i-1, ids[i-1])
				}
			}
			check := func(which string, id uint64, want [2]int) {
				t.Helper()
				m, _, s := idParts(id)
				if got := [2]int{int(m - baseMS), int(s)}; got != want {
					t.Errorf("%s id: (ms offset, seq) = %v, want %v", which, got, want)
				}
			}
			check("first", ids[0], tt.wantFirst)
			check("last", ids[len(ids)-1], tt.wantLast)
		})
	}
}

// TestIDGenNodes checks that generators of different nodes never collide,
// even on the same clock reading, and that node ids land in the id.
func TestIDGenNodes(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	seen := map[uint64]int{}
	for _, node := range []int{0, 1, 2, maxNodeID} {
		g := newIDGen(node, func() time.Time { return at })
		for range 2500 {
			id := g.next()
			if other, dup := seen[id]; dup {
				t.Fatalf("nodes %d and %d both drew %d", other, node, id)
			}
			seen[id] = node
			if _, n, _ := idParts(id); n != uint64(node) {
				t.Fatalf("id %d has node %d, want %d", id, n, node)
			}
		}
	}
	for range 100 {
		if g := newIDGen(-1, time.Now); g.node > maxNodeID {
			t.Fatalf("random node %d out of range", g.node)
		}
	}
}

// TestIDGenConcurrent draws 10,000 ids from several goroutines on the real
// clock: all distinct, increasing in the order each goroutine drew them, and
// their time part within the test's run.
func TestIDGenConcurrent(t *testing.T) {
	t.Parallel()
	start := time.Now().UnixMilli() - idEpoch
	g := newIDGen(7, time.Now)
	const goroutines, each = 8, 1250
	got := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			ids := make([]uint64, each)
			for j := range ids {
				ids[j] = g.next()
			}
			got[i] = ids
		})
	}
	wg.Wait()
	end := time.Now().UnixMilli() - idEpoch
	seen := make(map[uint64]bool, goroutines*each)
	for i, ids := range got {
		for j, id := range ids {
			if seen[id] {
				t.Fatalf("id %d drawn twice", id)
			}
			seen[id] = true
			if j > 0 && id <= ids[j-1] {
				t.Fatalf("goroutine %d: id %d after %d", i, id, ids[j-1])
			}
			// 10,000 ids need at most 10 ms of sequence, so they run ahead
			// of the clock by no more than that.
			if ms, _, _ := idParts(id); ms < start || ms > end+10 {
				t.Fatalf("id %d has time %d, want within [%d, %d]", id, ms, start, end+10)
			}
		}
	}
	if len(seen) != goroutines*each {
		t.Fatalf("got %d ids, want %d", len(seen), goroutines*each)
	}
}

// TestPublishRedrawsCollidingIDs makes the generator repeat ids, as two
// processes with the same node id would: Publish must draw again past a
// live post's id and past a deleted post's id instead of failing or
// returning another post.
func TestPublishRedrawsCollidingIDs(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t, storetest.Options{})
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return at }
	cfg := DefaultConfig()
	cfg.NodeID = 5
	svc, err := New(st, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()), clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const author = 9
	publish := func() feed.Post {
		t.Helper()
		p, created, err := svc.Publish(ctx, PublishInput{AuthorID: author})
		if err != nil || !created {
			t.Fatalf("publish: %+v, created %v, err %v", p, created, err)
		}
		return p
	}
	first := publish()  // id X
	second := publish() // id X+1
	if err := svc.DeletePost(ctx, author, first.ContentID); err != nil {
		t.Fatal(err)
	}
	// A restarted process with the same node id and clock: X is a deleted
	// post, X+1 a live one, X+2 is free.
	svc.ids = newIDGen(cfg.NodeID, clock)
	third := publish()
	if third.ContentID != second.ContentID+1 {
		t.Fatalf("after collisions got id %d, want %d", third.ContentID, second.ContentID+1)
	}
	posts, err := st.ListPosts(ctx, author, feed.Key{PublishTime: 1 << 62}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(posts) != 2 || posts[0].ContentID != third.ContentID || posts[1] != second {
		t.Fatalf("posts %v, want %d and %d", posts, third.ContentID, second.ContentID)
	}
}

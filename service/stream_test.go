package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// event is one item a stream sent.
type event struct {
	post     feed.Post
	position string
}

// chanSink passes a stream's events to the test.
type chanSink struct{ events chan event }

func (s chanSink) Start() error { return nil }

func (s chanSink) Item(p feed.Post, position string) error {
	s.events <- event{p, position}
	return nil
}

func (s chanSink) Keepalive() error { return nil }

// openStream runs a stream of the user from since until the returned stop
// is called; stop returns the stream's error.
func openStream(t testing.TB, svc *service.Service, user uint64, since string) (chan event, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sink := chanSink{events: make(chan event, 10000)}
	done := make(chan error, 1)
	go func() { done <- svc.StreamFeed(ctx, user, since, 5*time.Second, sink) }()
	return sink.events, func() error { cancel(); return <-done }
}

// messageCount is a slog.Handler that counts the records with one message.
type messageCount struct {
	msg string
	n   atomic.Int64
}

func (c *messageCount) Enabled(context.Context, slog.Level) bool { return true }
func (c *messageCount) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *messageCount) WithGroup(string) slog.Handler            { return c }

func (c *messageCount) Handle(_ context.Context, r slog.Record) error {
	if r.Message == c.msg {
		c.n.Add(1)
	}
	return nil
}

// receive waits for n events. The wait only bounds a failing test.
func receive(t testing.TB, events chan event, n int) []event {
	t.Helper()
	var out []event
	timeout := time.After(wait.Deadline)
	for len(out) < n {
		select {
		case e := <-events:
			out = append(out, e)
		case <-timeout:
			t.Fatalf("got %d events, want %d", len(out), n)
		}
	}
	return out
}

// oldestFirst is the model's feed above since, oldest first.
func (m *feedModel) oldestFirst(user uint64, since feed.Key) []feed.Post {
	items := m.newerIn(user, since, store.Top)
	slices.Reverse(items)
	return items
}

// checkEvents compares the events with the posts, in order.
func checkEvents(t testing.TB, label string, got []event, want []feed.Post) {
	t.Helper()
	posts := make([]feed.Post, len(got))
	for i, e := range got {
		posts[i] = e.post
	}
	if d := diffFeed(posts, want); d != "" {
		t.Fatalf("%s: %s", label, d)
	}
}

// streamReader is a harness on shards databases whose reader follows a
// push author and a pull author (readOpts' inbox and threshold), with the
// model of their feeds.
func streamReader(t *testing.T, shards int, reader, push, pull uint64) (*harness, *feedModel) {
	t.Helper()
	h := newHarness(t, harnessOpts{shards: shards, configured: readOpts})
	m := newFeedModel()
	makePull(t, h, m, pull, fanIDs(pull*10+100, 6))
	m.follow(t, h, reader, push)
	m.follow(t, h, reader, pull)
	h.waitIdle(t)
	return h, m
}

// TestStreamOrderAndResume streams a feed with push and pull authors: the
// items above the start position come first, oldest first, then new items
// as they enter the feed, none twice; a stream opened again at the last
// event's position sends exactly what arrived meanwhile; closing the
// process's streams ends them cleanly.
func TestStreamOrderAndResume(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(26, 26))
	const reader, push, pull = 860, 861, 862
	h, m := streamReader(t, 2, reader, push, pull)
	clock := time.Now().Add(-time.Hour).UnixMilli()
	author := func() uint64 { return []uint64{push, pull, reader}[r.IntN(3)] }
	// The start: many posts at equal publish times, more than the inbox
	// keeps, so the catch-up reads below the floor.
	var posts []feed.Post
	for range 30 {
		posts = append(posts, m.newPost(r, author(), clock+int64(r.IntN(6))*1000))
	}
	m.publishAll(t, h, posts)
	h.waitIdle(t)
	clock += 10_000
	// publish adds posts one at a time, each newer than the last and in
	// every feed before the next: items enter the feed in position order.
	// (One that enters below the last position sent is not sent: positions
	// order the feed, not arrivals.)
	publish := func(n int) {
		for range n {
			clock++
			m.publish(t, h, author(), m.newID(r), clock)
			h.waitIdle(t)
		}
	}

	// From a position in the middle of the feed.
	p, err := h.svc.Feed(context.Background(), reader, feed.Page{Limit: 12})
	if err != nil {
		t.Fatal(err)
	}
	since := p.Items[11].Key()
	events, stop := openStream(t, h.svc, reader, p.Next)
	want := m.oldestFirst(reader, since)
	checkEvents(t, "catch-up", receive(t, events, len(want)), want)

	// New items as they arrive, in rounds.
	last := want[len(want)-1].Key()
	for round := range 3 {
		publish(5)
		want := m.oldestFirst(reader, last)
		got := receive(t, events, len(want))
		checkEvents(t, fmt.Sprintf("round %d", round), got, want)
		last = got[len(got)-1].post.Key()
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped stream: %v", err)
	}
	if len(events) > 0 {
		t.Fatalf("%d events after the last expected one", len(events))
	}

	// Resume from the last event's position after a disconnect.
	lastPos := ""
	{
		pg, err := h.svc.Feed(context.Background(), reader, feed.Page{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		lastPos = pg.Top
	}
	publish(7)
	events, _ = openStream(t, h.svc, reader, lastPos)
	want = m.oldestFirst(reader, last)
	checkEvents(t, "resume", receive(t, events, len(want)), want)

	// A malformed position is refused before anything is sent; closing
	// the streams ends them with no error.
	if err := h.svc.StreamFeed(context.Background(), reader, "nope", time.Second, chanSink{}); feed.ErrorCode(err) != feed.EINVALID {
		t.Fatalf("malformed since: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- h.svc.StreamFeed(context.Background(), reader, "", time.Second, chanSink{make(chan event, 1000)})
	}()
	h.svc.CloseStreams()
	if err := <-done; err != nil {
		t.Fatalf("closed stream: %v", err)
	}
}

// TestStreamCatchUpInWindows resumes streams across gaps of many windows:
// posts spread over hours, bursts in one second, and more than a window's
// worth at one millisecond, from push and pull authors and below the
// inbox floor. Every item above the position comes, oldest first, once.
func TestStreamCatchUpInWindows(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(51, 51))
	const reader, push, pull = 870, 871, 872
	h, m := streamReader(t, 1, reader, push, pull)
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	author := func() uint64 { return []uint64{push, pull}[r.IntN(2)] }
	var posts []feed.Post
	for i := range 200 { // hours apart at first, then minutes
		posts = append(posts, m.newPost(r, author(), base+int64(i)*int64(time.Minute/time.Millisecond)*int64(1+(200-i)/20)))
	}
	burst := base + int64(3*time.Hour/time.Millisecond)
	for range 150 { // one second
		posts = append(posts, m.newPost(r, author(), burst+int64(r.IntN(1000))))
	}
	same := base + int64(5*time.Hour/time.Millisecond)
	for range 2*feed.MaxPageLimit + 30 { // one millisecond
		posts = append(posts, m.newPost(r, author(), same))
	}
	m.publishAll(t, h, posts)
	h.waitIdle(t)
	// The position of the item depth items down the feed.
	positionAt := func(depth int) (string, feed.Key) {
		t.Helper()
		var p feed.FeedPage
		for left := depth; left > 0; left -= len(p.Items) {
			var err error
			if p, err = h.svc.Feed(context.Background(), reader, feed.Page{Limit: min(left, feed.MaxPageLimit), Cursor: p.Next}); err != nil {
				t.Fatal(err)
			}
		}
		return p.Next, p.Items[len(p.Items)-1].Key()
	}
	for _, depth := range []int{len(posts) - 1, len(posts) - 150, 60, 250} {
		since, from := positionAt(depth)
		events, stop := openStream(t, h.svc, reader, since)
		want := m.oldestFirst(reader, from)
		checkEvents(t, fmt.Sprintf("catch-up from %v", from), receive(t, events, len(want)), want)
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped stream: %v", err)
		}
		if len(events) > 0 {
			t.Fatalf("from %v: %d events after the last expected one", from, len(events))
		}
	}
}

// TestStreamWakesOnlyConcerned opens streams for many users and publishes
// for one: only that user's stream gets an event, and the watchers run no
// statement per stream.
func TestStreamWakesOnlyConcerned(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	t.Cleanup(h.svc.CloseStreams)
	const users = 40
	streams := make([]chan event, users)
	old := time.Now().Add(-time.Hour).UnixMilli()
	for i := range users {
		user := uint64(3000 + i)
		h.publish(t, user, uint64(10_000+i), old)
		p, err := h.svc.Feed(context.Background(), user, feed.Page{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		streams[i], _ = openStream(t, h.svc, user, p.Top)
	}
	p := h.publish(t, 3007, 77, time.Now().UnixMilli())
	got := receive(t, streams[7], 1)
	if got[0].post != p {
		t.Fatalf("event %+v, want %+v", got[0].post, p)
	}
	for i, ch := range streams {
		if i != 7 && len(ch) > 0 {
			t.Fatalf("user %d got an event for user 3007's post", 3000+i)
		}
	}
}

// TestStreamWaitsForAHungDatabase opens a stream while the database of a
// followed author hangs (SIGSTOP): the stream must not send the reader's
// own newer post before that author's older one, which it cannot read yet,
// since it would never send that one after. Once the database answers, both
// arrive in order.
func TestStreamWaitsForAHungDatabase(t *testing.T) {
	t.Parallel()
	failed := &messageCount{msg: "stream: read failed, retrying"}
	h, srv := farHarness(t, harnessOpts{log: failed, configured: func(c *service.Config) {
		c.SourceTimeout = 200 * time.Millisecond
		c.PullCacheTTL = 0
	}})
	t.Cleanup(h.svc.CloseStreams)
	reader, author := idsOnShard(h, 0, 100, 1)[0], idsOnShard(h, 1, 100, 1)[0]
	// With no worker running the follow's backfill stays pending: every
	// read merges the author's outbox on db1.
	h.follow(t, reader, author)
	base := time.Now().Add(-time.Hour).UnixMilli()
	h.publish(t, reader, 1, base)
	p, err := h.svc.Feed(context.Background(), reader, feed.Page{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	older := h.publish(t, author, 2, base+1000)

	srv.Stop()
	events, _ := openStream(t, h.svc, reader, p.Top)
	before := failed.n.Load()
	newer := h.publish(t, reader, 3, base+2000)
	// A read or two fail meanwhile: the second failure from here is of a
	// read that began after the publish.
	wait.For(t, "two stream reads failing after the publish", func() error {
		if n := failed.n.Load() - before; n < 2 {
			return fmt.Errorf("%d failed", n)
		}
		return nil
	})
	srv.Resume()
	checkEvents(t, "after the database answers", receive(t, events, 2), []feed.Post{older, newer})
}

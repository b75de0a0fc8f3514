package service_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// TestMuteAndHide checks the contract's mute and hide on two databases: a
// push author, a pull author and an author followed after the mute. The
// feed (pages of every size, unread counts) leaves an author out as soon as
// the PUT returns and brings the author back as soon as the DELETE returns,
// with no worker running between, the posts published meanwhile included;
// fan-out pushes nothing into the muted inbox; the lists and the limit hold.
func TestMuteAndHide(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(26, 26))
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true, configured: func(c *service.Config) {
		readOpts(c)
		c.MaxMuted = 3
	}})
	ctx := context.Background()
	m := newFeedModel()
	reader, push, pull, later := idsOnShard(h, 0, 100, 1)[0], idsOnShard(h, 0, 300, 1)[0], idsOnShard(h, 1, 500, 1)[0], idsOnShard(h, 1, 700, 1)[0]
	base := time.Now().Add(-time.Hour).UnixMilli()
	publish := func(author uint64, n int) {
		var posts []feed.Post
		for range n {
			posts = append(posts, m.newPost(r, author, base+int64(r.IntN(30))*1000))
		}
		m.publishAll(t, h, posts)
	}
	for _, a := range []uint64{reader, push, pull, later} {
		publish(a, 8)
	}
	stop := runWorkers(h.svc, time.Second)
	m.follow(t, h, reader, push)
	m.follow(t, h, reader, pull)
	makePull(t, h, m, pull, fanIDs(5000, 10))
	h.waitIdle(t)
	stop()
	check := func(label string) {
		t.Helper()
		checkFeed(t, h, m, reader, label, 1, 3, 20)
		mk, err := h.svc.Marker(ctx, reader)
		if err != nil {
			t.Fatal(err)
		}
		if want := len(m.feed(reader, store.Top)); mk.Unread != want {
			t.Fatalf("%s: unread %d, want %d", label, mk.Unread, want)
		}
	}
	check("before any mute")

	m.setFilter(t, h, store.Mute, reader, push, true)
	m.setFilter(t, h, store.Hide, reader, pull, true)
	check("muted and hidden, no worker run")
	if got := postsOf(inboxOf(t, h, reader), push); len(got) != 0 {
		t.Fatalf("the muted author's posts stay in the inbox: %v", got)
	}
	// Published while filtered out: fan-out skips the reader.
	publish(push, 4)
	publish(pull, 4)
	stop = runWorkers(h.svc, time.Second)
	h.waitIdle(t)
	stop()
	if got := postsOf(inboxOf(t, h, reader), push); len(got) != 0 {
		t.Fatalf("fan-out pushed %d posts of a muted author", len(got))
	}
	check("filtered out, at rest")

	// A mute holds for a follow made after it.
	m.setFilter(t, h, store.Mute, reader, later, true)
	m.follow(t, h, reader, later)
	check("muted before the follow, no worker run")
	stop = runWorkers(h.svc, time.Second)
	h.waitIdle(t)
	stop()
	check("muted before the follow, backfill run")

	// Both marks on one pair: lifting one keeps the author out.
	m.setFilter(t, h, store.Hide, reader, push, true)
	m.setFilter(t, h, store.Mute, reader, push, false)
	check("still hidden")
	for _, a := range []uint64{push, pull, later} {
		m.setFilter(t, h, store.Mute, reader, a, false)
		m.setFilter(t, h, store.Hide, reader, a, false)
	}
	check("lifted, no worker run")
	stop = runWorkers(h.svc, time.Second)
	h.waitIdle(t)
	stop()
	check("lifted, backfills run")
	if got := postsOf(inboxOf(t, h, reader), push); len(got) == 0 {
		t.Fatal("unmute backfilled nothing")
	}

	t.Run("limits and lists", func(t *testing.T) {
		if err := h.svc.Mute(ctx, reader, reader, true); feed.ErrorCode(err) != feed.EINVALID {
			t.Fatalf("self-mute: %v, want %s", err, feed.EINVALID)
		}
		if err := h.svc.Hide(ctx, reader, reader, true); feed.ErrorCode(err) != feed.EINVALID {
			t.Fatalf("self-hide: %v, want %s", err, feed.EINVALID)
		}
		muted := []uint64{9001, 9002, 9003}
		for _, a := range append(muted, muted[0]) {
			if err := h.svc.Mute(ctx, reader, a, true); err != nil {
				t.Fatalf("mute %d: %v", a, err)
			}
		}
		if err := h.svc.Mute(ctx, reader, 9004, true); feed.ErrorCode(err) != feed.ELIMIT {
			t.Fatalf("mute past the limit: %v, want %s", err, feed.ELIMIT)
		}
		// Hides do not count against the reader's mutes.
		if err := h.svc.Hide(ctx, 9005, reader, true); err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for cursor := ""; ; {
			page, next, err := h.svc.ListMuted(ctx, reader, feed.Page{Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range page {
				got = append(got, x.AuthorID)
			}
			if cursor = next; next == "" {
				break
			}
		}
		if !slices.Equal(got, muted) {
			t.Fatalf("muted list %v, want %v", got, muted)
		}
		stop := runWorkers(h.svc, time.Second)
		h.waitIdle(t)
		stop()
		hidden, _, err := h.svc.ListHiddenFrom(ctx, 9005, feed.Page{Limit: 10})
		if err != nil || len(hidden) != 1 || hidden[0].UserID != reader {
			t.Fatalf("hidden_from list of 9005: %+v, %v; want the reader", hidden, err)
		}
		if err := h.svc.Hide(ctx, 9005, reader, false); err != nil {
			t.Fatal(err)
		}
		stop = runWorkers(h.svc, time.Second)
		h.waitIdle(t)
		stop()
		if hidden, _, err := h.svc.ListHiddenFrom(ctx, 9005, feed.Page{Limit: 10}); err != nil || len(hidden) != 0 {
			t.Fatalf("hidden_from list after the unhide: %+v, %v", hidden, err)
		}
	})
}

package service_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// TestMarkerUnreadExact holds unread counts to the model's feed above the
// marker while posts of push and pull authors arrive (some at the marker's
// own publish time, some below it), posts are deleted and an author is
// unfollowed; checks the marker only moves forward; and that counts stop at
// the cap.
func TestMarkerUnreadExact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(25, 25))
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	m := newFeedModel()
	ctx := context.Background()
	const reader, push, pull = 850, 851, 852
	readPage(t, h, reader, 1, "")
	makePull(t, h, m, pull, fanIDs(940, 6))
	m.follow(t, h, reader, push)
	m.follow(t, h, reader, pull)
	h.waitIdle(t)
	clock := time.Now().Add(-time.Hour).UnixMilli()
	publish := func(n int, at func() int64) {
		var posts []feed.Post
		for range n {
			posts = append(posts, m.newPost(r, []uint64{push, pull, reader}[r.IntN(3)], at()))
		}
		m.publishAll(t, h, posts)
		h.waitIdle(t)
	}
	publish(40, func() int64 { return clock + int64(r.IntN(8))*1000 })

	var marker feed.Key // zero: no marker, every item unread
	check := func(label string) feed.Marker {
		t.Helper()
		got, err := h.svc.Marker(ctx, reader)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		if want := len(m.newerIn(reader, marker, store.Top)); got.Unread != want || got.Capped {
			t.Fatalf("%s: unread %d (capped %v), want %d", label, got.Unread, got.Capped, want)
		}
		return got
	}
	if got := check("no marker"); got.Cursor != "" || got.UpdatedAt != 0 {
		t.Fatalf("no marker: %+v", got)
	}
	// The marker at the 13th item of the feed: its position is the next
	// cursor of a page of 13.
	p, err := h.svc.Feed(ctx, reader, feed.Page{Limit: 13})
	if err != nil {
		t.Fatal(err)
	}
	set, err := h.svc.SetMarker(ctx, reader, p.Next)
	if err != nil {
		t.Fatal(err)
	}
	marker = p.Items[12].Key()
	if set.Cursor != p.Next || set.UpdatedAt == 0 || set.Unread != 12 {
		t.Fatalf("set marker: %+v, want cursor %s and 12 unread", set, p.Next)
	}
	check("marker set")

	// Backwards: an older position leaves the marker.
	older, err := h.svc.Feed(ctx, reader, feed.Page{Limit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.svc.SetMarker(ctx, reader, older.Next); err != nil || got != set {
		t.Fatalf("marker moved back: %+v, %v; want %+v", got, err, set)
	}

	// Arrivals at the marker's time (above or below it by id), newer and
	// older ones; deletes above the marker; an unfollow.
	publish(20, func() int64 { return marker.PublishTime + int64(r.IntN(3)-1)*1000 })
	check("after arrivals")
	var gone []feed.Post
	for _, p := range m.newerIn(reader, marker, store.Top) {
		if r.IntN(3) == 0 {
			gone = append(gone, p)
		}
	}
	m.deleteAll(t, h, gone)
	h.waitIdle(t)
	check("after deletes")
	m.unfollow(t, h, reader, push)
	check("after unfollow")
	m.unfollow(t, h, reader, pull)
	check("after unfollowing the pull author")

	// The cap: more than UnreadCap own posts.
	const many = 1234
	var posts []feed.Post
	for i := range many {
		posts = append(posts, m.newPost(r, reader, clock+10_000+int64(i)))
	}
	m.publishAll(t, h, posts)
	got, err := h.svc.Marker(ctx, reader)
	if err != nil || got.Unread != feed.UnreadCap || !got.Capped {
		t.Fatalf("past the cap: %+v, %v", got, err)
	}
	p, err = h.svc.Feed(ctx, reader, feed.Page{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.svc.SetMarker(ctx, reader, p.Next); err != nil || got.Unread != 4 || got.Capped {
		t.Fatalf("marker near the top: %+v, %v", got, err)
	}
	if _, err := h.svc.SetMarker(ctx, reader, "nope"); feed.ErrorCode(err) != feed.EINVALID {
		t.Fatalf("malformed position: %v", err)
	}
}

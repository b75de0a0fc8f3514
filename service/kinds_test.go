package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// TestFeedKinds walks filtered feeds against a brute-force filter of the
// model's feed: push and pull authors, a small inbox so that walks go below
// its floor, ties on publish_time, deletes, a muted author, filters of
// common and rare kinds and page sizes from 1. Every page is full unless it
// is the last, which has no cursor, however rare the kind and however deep
// the page; every cursor continues the walk exactly.
func TestFeedKinds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(27, 27))
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	m := newFeedModel()
	reader := uint64(4000)
	authors := []uint64{4101, 4102, 4103, 4104, 4105}
	kinds := []string{"post", "post", "post", "photo", "photo", "video", "rare"}
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []feed.Post
	for _, a := range append(slices.Clone(authors), reader) {
		for range 220 + r.IntN(60) {
			p := m.newPost(r, a, base+int64(r.IntN(200))*1000)
			p.Kind = kinds[r.IntN(len(kinds))]
			if a == authors[0] && r.IntN(3) == 0 {
				p.Kind = "rare"
			}
			posts = append(posts, p)
		}
	}
	m.publishAll(t, h, posts)
	for _, a := range authors {
		m.follow(t, h, reader, a)
	}
	makePull(t, h, m, authors[1], fanIDs(6000, 10))
	h.waitIdle(t)
	m.deleteRandom(t, h, r, authors, 8)
	m.setFilter(t, h, store.Mute, reader, authors[2], true)
	h.waitIdle(t)

	for _, filter := range [][]string{{"post"}, {"photo", "video"}, {"rare"}, {"rare", "post", "photo", "video"}, {"none"}} {
		for _, limit := range []int{1, 7, 20, 100} {
			checkKinds(t, h, m, reader, filter, limit)
		}
	}
	for _, bad := range [][]string{{}, {""}, {"Post"}, {"a,b"}, {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}} {
		if _, err := h.svc.Feed(context.Background(), reader, feed.Page{Limit: 5, Kinds: bad}); feed.ErrorCode(err) != feed.EINVALID {
			t.Fatalf("kinds %q: %v, want %s", bad, err, feed.EINVALID)
		}
	}
}

// checkKinds walks the user's feed filtered to kinds in pages of limit and
// compares it with the model's feed so filtered: every page but the last is
// full, and the last has no cursor.
func checkKinds(t testing.TB, h *harness, m *feedModel, user uint64, kinds []string, limit int) {
	t.Helper()
	var want, got []feed.Post
	for _, p := range m.feed(user, store.Top) {
		if slices.Contains(kinds, p.Kind) {
			want = append(want, p)
		}
	}
	label := fmt.Sprintf("user %d, kinds %v, limit %d", user, kinds, limit)
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := h.svc.Feed(context.Background(), user, feed.Page{Limit: limit, Cursor: cursor, Kinds: kinds})
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		if len(p.Items) > limit {
			t.Fatalf("%s: page of %d items", label, len(p.Items))
		}
		got = append(got, p.Items...)
		if p.Next == "" {
			break
		}
		if len(p.Items) < limit {
			t.Fatalf("%s: short page %d (%d items) with a cursor", label, pages, len(p.Items))
		}
		if pages > 10000 {
			t.Fatalf("%s: the walk does not end", label)
		}
		cursor = p.Next
	}
	if d := diffFeed(got, want); d != "" {
		t.Fatalf("%s: %s", label, d)
	}
}

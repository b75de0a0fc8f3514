package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// sinceClient is a reader that refreshes above its top with since and pages
// down each gap with next_cursor, as the contract tells clients to.
type sinceClient struct {
	user uint64
	top  feed.Key // the newest item seen; the zero key before the first read
	pos  string   // top as a position
	seen map[uint64]bool
	// late holds posts that entered the feed below the client's top: since
	// never returns them, by definition.
	late map[uint64]bool
}

// newerIn returns the model's feed items strictly between since and before.
func (m *feedModel) newerIn(user uint64, since, before feed.Key) []feed.Post {
	all := m.feed(user, before)
	for i, p := range all {
		if !since.Less(p.Key()) {
			return all[:i]
		}
	}
	return all
}

// refresh reads everything above the client's top: the first since page,
// then the gap down to the old top, each page checked against the model as
// it is when the page is read. between runs after each page that has a next
// one and may change the feed through the model (the caller settles it).
func (c *sinceClient) refresh(t testing.TB, h *harness, m *feedModel, limit int, label string, between func()) {
	t.Helper()
	since, sincePos := c.top, c.pos
	before, cursor := store.Top, ""
	for page := 1; ; page++ {
		want := m.newerIn(c.user, since, before)
		p, err := h.svc.Feed(context.Background(), c.user, feed.Page{Limit: limit, Cursor: cursor, Since: sincePos})
		if err != nil {
			t.Fatalf("%s: since page %d: %v", label, page, err)
		}
		if d := diffFeed(p.Items, want[:min(limit, len(want))]); d != "" {
			t.Fatalf("%s: user %d, since page %d of size %d below %v: %s", label, c.user, page, limit, before, d)
		}
		if more := len(want) > limit; more != (p.Next != "") {
			t.Fatalf("%s: user %d, since page %d: next cursor %q, but %d items remain in the gap", label, c.user, page, p.Next, len(want)-len(p.Items))
		}
		// A wrong top cursor fails the client's next refresh, which reads
		// above it.
		if (len(p.Items) == 0) != (p.Top == "") {
			t.Fatalf("%s: %d items with top cursor %q", label, len(p.Items), p.Top)
		}
		for _, it := range p.Items {
			if c.seen[it.ContentID] {
				t.Fatalf("%s: user %d: post %d returned twice", label, c.user, it.ContentID)
			}
			c.seen[it.ContentID] = true
		}
		if page == 1 && len(p.Items) > 0 {
			// The client holds its new top from here on: what enters
			// the feed below it while the gap is read is late.
			c.top, c.pos = p.Items[0].Key(), p.Top
		}
		if p.Next == "" {
			return
		}
		before, cursor = p.Items[len(p.Items)-1].Key(), p.Next
		between()
	}
}

// TestFeedSinceExactBruteForce holds since pages and their gaps to a full
// sort of the model's feed while the feed changes under the readers: posts
// of push and pull authors arrive between rounds and between the pages of
// one gap walk, many at equal publish times; posts are deleted; edges are
// dropped and added. Every since page must be what the sort gives strictly
// above the client's top, next_cursor must be set exactly when the gap holds
// more, and across all rounds a client sees no item twice and misses none
// except those that entered the feed below its top.
func TestFeedSinceExactBruteForce(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			runSinceBruteForce(t, seed)
		})
	}
}

func runSinceBruteForce(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x51ce))
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	m := newFeedModel()
	const bigA, bigB = 700, 701
	authors := []uint64{bigA, bigB, 702, 703, 704, 705}
	readers := []*sinceClient{{user: 800}, {user: 801}, {user: 802}}
	for _, c := range readers {
		c.seen, c.late = map[uint64]bool{}, map[uint64]bool{}
	}
	// Two readers are active before anything is published, so the pull
	// authors push to them; the third reads only through since pages.
	readPage(t, h, readers[0].user, 1, "")
	readPage(t, h, readers[1].user, 1, "")
	makePull(t, h, m, bigA, fanIDs(920, 6))
	makePull(t, h, m, bigB, fanIDs(930, 6))
	for _, c := range readers {
		for _, a := range authors {
			if r.IntN(4) > 0 {
				m.follow(t, h, c.user, a)
			}
		}
	}
	h.waitIdle(t)
	clock := time.Now().Add(-2 * time.Hour).UnixMilli()
	// publish adds posts at the clock, which moves on by 0 or 1 s: many
	// posts share a publish time, some of them below a client's top.
	publish := func(n int) {
		var posts []feed.Post
		for range n {
			clock += int64(r.IntN(2)) * 1000
			a := authors[r.IntN(len(authors))]
			if r.IntN(5) == 0 {
				a = readers[r.IntN(len(readers))].user // an own post
			}
			posts = append(posts, m.newPost(r, a, clock))
		}
		m.publishAll(t, h, posts)
		for _, c := range readers {
			for _, p := range posts {
				if !c.top.Less(p.Key()) && (p.AuthorID == c.user || m.following(c.user, p.AuthorID)) {
					c.late[p.ContentID] = true
				}
			}
		}
	}
	publish(60) // more than an inbox keeps: floors and deep scroll
	h.waitIdle(t)

	for round := range 5 {
		for i, c := range readers {
			limit := readPageSizes[(round+i)%len(readPageSizes)]
			label := fmt.Sprintf("seed %d, round %d, reader %d, limit %d", seed, round, c.user, limit)
			c.refresh(t, h, m, limit, label, func() {
				if r.IntN(5) == 0 {
					publish(1 + r.IntN(3)) // arrivals between the pages of a gap
					h.waitIdle(t)
				}
			})
		}
		// Between rounds: arrivals, deletes, an unfollow and a follow.
		publish(5 + r.IntN(20))
		m.deleteRandom(t, h, r, authors, 10)
		c := readers[r.IntN(len(readers))]
		a := authors[r.IntN(len(authors))]
		if m.following(c.user, a) {
			m.unfollow(t, h, c.user, a)
		} else {
			m.follow(t, h, c.user, a)
			// The backfill brings older posts, below the top.
			for _, p := range m.posts[a] {
				if !c.top.Less(p.Key()) {
					c.late[p.ContentID] = true
				}
			}
		}
		h.waitIdle(t)
	}
	for _, c := range readers {
		c.refresh(t, h, m, 7, "final", func() {})
		for _, p := range m.feed(c.user, store.Top) {
			if !c.seen[p.ContentID] && !c.late[p.ContentID] {
				t.Fatalf("reader %d never saw post %+v, which entered the feed above its top", c.user, p)
			}
		}
	}
	if len(readers[2].seen) == 0 {
		t.Fatal("the since-only reader saw nothing")
	}
}

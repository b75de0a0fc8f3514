package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
)

// TestFeedDeepScrollManyFollowees walks, page by page and against a full
// sort of the posts it should hold, the feed of a reader who follows 1,990
// authors over two databases, below an inbox of 30 entries: nearly every
// page is a deep scroll merging every followee's outbox. Publish times
// repeat (each millisecond used is shared by about ten posts), and between
// pages posts are deleted (among them the posts just below the cursor, the
// heads the next page's threshold read starts from), authors are followed
// (backfills pending, then done) and unfollowed, and posts are published
// backdated below the cursor through another process, which voids what
// this one kept of the outboxes of that database. Each page must read
// about a row per followee (its edge, its head) and a page of posts, as
// the service's feed_read_rows reports, never a page per followee.
func TestFeedDeepScrollManyFollowees(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 21))
	const (
		inboxLimit = 30
		followees  = 1990
		reader     = 7
	)
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) {
		readOpts(c)
		c.InboxLimit = inboxLimit
		c.PushThreshold = 1000 // no author switches to pull: this is about deep scroll
	}})
	m := newFeedModel()
	ctx := context.Background()
	authors := fanIDs(100_000, followees+3)
	imported, later := authors[:followees], authors[followees:]
	base := time.Now().Add(-48 * time.Hour).UnixMilli()
	at := func() int64 { return base + int64(r.IntN(400))*60_000 }

	// Up to two posts per author (some have none: no head), 150 for one,
	// 20 of the reader's own, loaded as published and fanned out long ago.
	var posts []feed.Post
	for i, a := range append(authors, reader) {
		n := r.IntN(3)
		switch {
		case i == 0:
			n = 150
		case a == reader:
			n = 20
		}
		for range n {
			p := m.newPost(r, a, at())
			m.add(p)
			posts = append(posts, p)
		}
	}
	if err := storeload.Posts(ctx, h.store, posts, base); err != nil {
		t.Fatal(err)
	}
	if err := storeload.Following(ctx, h.store, reader, imported, base); err != nil {
		t.Fatal(err)
	}
	for _, a := range imported {
		m.addFollow(reader, a)
	}
	// The inbox as fan-out and trimming left it: the feed's newest entries
	// down to the floor.
	kept := m.feed(reader, store.Top)[:inboxLimit]
	floor := kept[inboxLimit-1].Key()
	now := time.Now().UnixMilli()
	if err := storeload.Inbox(ctx, h.store, reader, kept); err != nil {
		t.Fatal(err)
	}
	if err := storeload.Activity(ctx, h.store, []uint64{reader}, now, now, &floor); err != nil {
		t.Fatal(err)
	}

	// deleteNext deletes the next n items of the scroll below last and one
	// older post, and waits for the retractions to clear the inbox.
	deleteNext := func(last feed.Key, n int) {
		rest := m.feed(reader, last)
		for _, p := range rest[:min(n, len(rest))] {
			m.delete(t, h, p)
		}
		if len(rest) > n {
			m.delete(t, h, rest[n+r.IntN(len(rest)-n)])
		}
		h.waitIdle(t)
	}
	other, _ := h.startProcess(t)
	var maxRows float64
	deep := 0
	for _, limit := range []int{20, 50} {
		rows := histogramSum(t, h.reg, "feed_read_rows")
		label := fmt.Sprintf("%d followees, limit %d", followees, limit)
		scrollChecked(t, h, m, reader, limit, label, func(page int, last feed.Key) {
			// The page just read: a row per followee at most twice (its
			// edge and its head), its inbox part and header, and posts of
			// about limit+1 outboxes, a few times over when deleted heads
			// make the read go on below its first bound.
			read := histogramSum(t, h.reg, "feed_read_rows") - rows
			if bound := float64(2*(len(m.follows[reader])+1) + 8*(limit+1)); read > bound {
				t.Errorf("%s: page %d read %.0f rows, want at most %.0f", label, page, read, bound)
			}
			if read > float64(followees) {
				deep++
			}
			maxRows = max(maxRows, read)
			switch page % 8 {
			case 2:
				deleteNext(last, 2)
			case 3:
				m.follow(t, h, reader, later[page%len(later)]) // backfill pending: merged from the outbox
			case 4:
				if last.Less(floor) {
					// Backdated below the cursor, through another process:
					// what this one knows of that outbox is void.
					p := m.newPost(r, imported[r.IntN(followees)], last.PublishTime-1)
					if _, _, err := other.Publish(ctx, service.PublishInput{AuthorID: p.AuthorID, ContentID: p.ContentID, PublishTime: &p.PublishTime}); err != nil {
						t.Fatal(err)
					}
					m.add(p)
				}
			case 5:
				m.unfollow(t, h, reader, imported[r.IntN(followees)])
			case 6:
				m.unfollow(t, h, reader, later[(page-3)%len(later)])
				h.waitIdle(t) // backfills and retractions done
			}
			rows = histogramSum(t, h.reg, "feed_read_rows")
		})
	}
	if deep < 50 {
		t.Fatalf("only %d pages read the followees' outboxes", deep)
	}
	t.Logf("%d deep pages, at most %.0f rows a page", deep, maxRows)
}

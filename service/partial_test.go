package service_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

// farHarness is a harness, without workers, on two databases whose second
// (db1) runs on a server of its own that the test can hang (SIGSTOP).
func farHarness(t *testing.T, opt harnessOpts) (*harness, *storetest.Server) {
	t.Helper()
	srv := storetest.StartServer(t)
	shards := storetest.NewShardMap(t, storetest.Options{Shards: 2})
	far := shards.Databases["db1"]
	far.DSN = srv.DSN + "feed"
	shards.Databases["db1"] = far
	opt.shardMap, opt.noWorkers = shards, true
	return newHarness(t, opt), srv
}

// TestFeedPartial reads a feed while the database of some followed authors
// hangs (SIGSTOP): every page comes from the reader's own database and the
// authors that answer, names the others, and the walk is exactly what was
// reachable; below the inbox floor the deep scroll names the hung
// database's authors too. Without partial reads the page fails. Once the
// database answers again the very next walk is complete, so the authors left
// out were never cached as having no posts.
func TestFeedPartial(t *testing.T) {
	t.Parallel()
	h, srv := farHarness(t, harnessOpts{configured: func(c *service.Config) {
		c.InboxLimit = 3
		c.PullCacheTTL = 2 * time.Second
		// Long enough for the reader's own database on a loaded machine:
		// each page with db1 hung waits it out once.
		c.SourceTimeout = time.Second
	}})
	ctx := context.Background()
	near, hung := idsOnShard(h, 0, 100, 2), idsOnShard(h, 1, 100, 2)
	reader, author := near[0], near[1]
	pulled, backfilled := hung[0], hung[1]

	r := rand.New(rand.NewPCG(31, 31))
	m := newFeedModel()
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []feed.Post
	for _, a := range []uint64{author, pulled, backfilled, reader} {
		for range 6 {
			posts = append(posts, m.newPost(r, a, base+int64(r.IntN(20))*1000))
		}
	}
	m.publishAll(t, h, posts)
	// Followed while workers run, author and backfilled are backfilled past
	// the inbox limit: the inbox gets a floor, below which pages scroll the
	// outboxes. Followed with no worker running, pulled stays pending, and
	// every page merges its outbox.
	stop := runWorkers(h.svc, time.Second)
	m.follow(t, h, reader, author)
	m.follow(t, h, reader, backfilled)
	h.waitIdle(t)
	stop()
	m.follow(t, h, reader, pulled)
	snap, err := h.store.ReadFeed(ctx, reader, store.Top, feed.Key{}, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Floor == nil {
		t.Fatal("the reader's inbox has no floor: no page would scroll the outboxes")
	}
	// Reachable with db1 hung: every post of the authors on the reader's
	// database and the reader's own, and what the inbox holds of the others
	// at and above its floor.
	inInbox := map[uint64]bool{}
	for _, p := range snap.Inbox {
		inInbox[p.ContentID] = !p.Key().Less(*snap.Floor)
	}
	var reachable []feed.Post
	for _, p := range m.feed(reader, store.Top) {
		if p.AuthorID == reader || p.AuthorID == author || inInbox[p.ContentID] {
			reachable = append(reachable, p)
		}
	}

	srv.Stop()
	const limit = 2
	var got []feed.Post
	deep := false
	for page, cursor := 1, ""; ; page++ {
		p, err := h.svc.Feed(ctx, reader, feed.Page{Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatalf("page %d with db1 hung: %v", page, err)
		}
		switch {
		case slices.Equal(p.MissingAuthors, []uint64{pulled}):
		case slices.Equal(p.MissingAuthors, hung):
			deep = true
		default:
			t.Fatalf("page %d: missing authors %v, want [%d] (pulled), or %v below the floor", page, p.MissingAuthors, pulled, hung)
		}
		checkPage(t, p.Items, p.Next, limit, page == 1)
		got = append(got, p.Items...)
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if d := diffFeed(got, reachable); d != "" {
		t.Fatalf("walk with db1 hung: %s", d)
	}
	if !deep {
		t.Fatal("no page scrolled below the floor")
	}
	cfg := h.cfg
	cfg.PartialReads = false
	strict, err := service.New(h.store, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), service.NewMetrics(prometheus.NewRegistry()), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Feed(ctx, reader, feed.Page{Limit: limit}); feed.ErrorCode(err) != feed.EUNAVAILABLE {
		t.Fatalf("page without partial reads with db1 hung: %v, want %s", err, feed.EUNAVAILABLE)
	}

	srv.Resume()
	// Within the cache's ttl of the last partial page: an entry for pulled
	// would be one without posts.
	scrollChecked(t, h, m, reader, limit, "db1 answering again", nil)
	checkFeed(t, h, m, reader, "db1 answering again")
}

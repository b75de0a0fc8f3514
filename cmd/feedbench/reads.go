package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
)

// pageLimit is the page size every reader asks for (the contract's default).
const pageLimit = feed.DefaultPageLimit

// Reader classes of phase C, by how many pull authors they follow.
const (
	pullFew  = 10
	pullMany = 50
)

// session is one reader's walk through a feed: the first page, then next
// pages by cursor, up to opt.Pages, then another user.
type session struct {
	user   uint64
	page   int
	cursor string    // service and HTTP readers
	key    feed.Key  // raw readers
	conn   *httpConn // the client's own connection (HTTP load generator)
}

// pager reads the page the session is at and moves it to the next one;
// more=false ends the session early (the feed ended).
type pager func(ctx context.Context, s *session) (more bool, err error)

// sessions turns a pager into a closed-loop operation over random users.
// Each run (and each slice of it) draws its own users: runs that took turns
// over the same users would find in memory what the run before them read
// from disk, and the first would pay every disk read.
func (b *bench) sessions(users []uint64, read pager, run, slice int) func(client int) func(context.Context) error {
	return func(client int) func(context.Context) error {
		rng := rand.New(rand.NewPCG(b.opt.Seed, uint64(slice)<<32|uint64(run)<<16|uint64(client)))
		s := &session{}
		return func(ctx context.Context) error {
			if s.page == 0 {
				*s = session{user: users[rng.IntN(len(users))], key: store.Top, conn: s.conn}
			}
			more, err := read(ctx, s)
			if err != nil {
				return fmt.Errorf("read feed of user %d, page %d: %w", s.user, s.page+1, err)
			}
			s.page++
			if !more || s.page >= b.opt.Pages {
				s.page = 0
			}
			return nil
		}
	}
}

// reads runs phase C.
func (b *bench) reads(ctx context.Context) error {
	r := b.opt.ReaderUsers
	inboxOnly := b.data.users[:r]
	fewPull := b.data.users[r : 2*r]
	manyPull := b.data.users[2*r : 3*r]
	if err := b.setupReaders(ctx, inboxOnly, fewPull, manyPull); err != nil {
		return err
	}
	// Readers who mute authors: the inbox-only readers' class of readers
	// beyond the three others, each muting mutedAuthors authors they do not
	// follow, so their feeds are the inbox-only ones'.
	muting := b.data.users[3*r : 4*r]
	if err := storeload.Mutes(ctx, b.st, muting, mutedAuthorBase, mutedAuthors, time.Now().UnixMilli()); err != nil {
		return err
	}

	rawPagers := make([]pager, 2)
	for i, headerProbe := range []bool{false, true} {
		raw, err := prepareInboxPage(ctx, b.db, headerProbe)
		if err != nil {
			return err
		}
		defer raw.close()
		rawPagers[i] = func(ctx context.Context, s *session) (bool, error) {
			posts, err := raw.page(ctx, s.user, s.key, pageLimit+1)
			if err != nil || len(posts) <= pageLimit {
				return false, err
			}
			s.key = posts[pageLimit-1].Key()
			return true, nil
		}
	}
	storePager := func(ctx context.Context, s *session) (bool, error) {
		snap, err := b.st.ReadFeed(ctx, s.user, s.key, feed.Key{}, pageLimit+1, nil)
		if err != nil || len(snap.Inbox) <= pageLimit {
			return false, err
		}
		s.key = snap.Inbox[pageLimit-1].Key()
		return true, nil
	}
	svc := b.stack.svc
	servicePager := func(ctx context.Context, s *session) (bool, error) {
		page, err := svc.Feed(ctx, s.user, feed.Page{Limit: pageLimit, Cursor: s.cursor})
		s.cursor = page.Next
		return page.Next != "", err
	}
	load := newHTTPLoad(b.stack.addr)
	defer load.close()
	httpPager := load.pager("")
	api := b.stack.api
	clientPager := func(ctx context.Context, s *session) (bool, error) {
		page, err := api.Feed(ctx, s.user, pageLimit, s.cursor)
		if err != nil || page.NextCursor == nil {
			return false, err
		}
		s.cursor = *page.NextCursor
		return true, nil
	}

	// An unread count is one request whatever the count, so a session is
	// one count.
	unreadPager := load.unreadPager(b.markerDepth() - 1)

	type runSpec struct {
		key        string
		name       string
		users      []uint64
		read       pager
		fixedQ     float64 // statements per page when the service does not run
		diagnostic bool
	}
	runs := []runSpec{
		{key: readRaw, name: "ceiling: raw keyset SELECT on inbox, prepared once per connection (database/sql Stmt)", users: inboxOnly, read: rawPagers[0], fixedQ: 1},
		{key: readProbe, name: "diagnostic: the raw SELECT widened to one header key above every post (`… OR (publish_time, content_id) = (max, max)`): the shape of a one-block page, not the service's", users: inboxOnly, read: rawPagers[1], fixedQ: 1, diagnostic: true},
		{key: readStore, name: "diagnostic: store.ReadFeed, the page's one statement (for these readers a range scan of the inbox from the user's header row), no HTTP", users: inboxOnly, read: storePager, fixedQ: 1, diagnostic: true},
		{key: readService, name: "diagnostic: service.Feed in-process, no HTTP", users: inboxOnly, read: servicePager, diagnostic: true},
		{key: readInbox, name: "inbox-only readers, HTTP", users: inboxOnly, read: httpPager},
		{key: readClient, name: "diagnostic: inbox-only readers, HTTP through the typed Go client (httpapi/client: net/http transport, every item decoded by encoding/json)", users: inboxOnly, read: clientPager, diagnostic: true},
		{key: readFew, name: fmt.Sprintf("readers following %d pull authors, HTTP", pullFew), users: fewPull, read: httpPager},
		{key: readMany, name: fmt.Sprintf("readers following %d pull authors, HTTP", pullMany), users: manyPull, read: httpPager},
		{key: readKinds, name: "inbox-only readers, HTTP, `?kinds=photo` (one feed item in ten)", users: inboxOnly, read: load.pager("kinds=photo")},
		{key: readRareKind, name: fmt.Sprintf("inbox-only readers, HTTP, `?kinds=video` (one feed item in %d)", rareKindEvery), users: inboxOnly, read: load.pager("kinds=video")},
		{key: readMuted, name: fmt.Sprintf("inbox-only readers muting %d authors, HTTP", mutedAuthors), users: muting, read: httpPager},
		{key: readUnread, name: fmt.Sprintf("unread counts, marker %d items down, inbox-only readers, HTTP", b.markerDepth()), users: inboxOnly, read: unreadPager},
		{key: readUnreadFew, name: fmt.Sprintf("unread counts, marker %d items down, readers following %d pull authors, HTTP", b.markerDepth(), pullFew), users: fewPull, read: unreadPager},
	}
	// The runs take turns in short slices, so a burst of other load on a
	// shared machine falls on all of them alike rather than on one.
	type acc struct {
		res        closedLoopResult
		qSum, pSum float64
		rSum       float64
		pages      uint64
		warmed     bool
		cost       pageCost
	}
	accs := make([]acc, len(runs))
	nSlices := max(1, b.opt.Slices)
	for slice := range nSlices {
		for i, rs := range runs {
			if rs.diagnostic && !b.opt.Diagnostics {
				continue
			}
			a := &accs[i]
			warm := b.opt.Warmup
			if a.warmed {
				warm = min(b.opt.Warmup, 200*time.Millisecond)
			}
			a.warmed = true
			qSum0, qCount0 := b.stack.histogram("feed_read_queries")
			pSum0, _ := b.stack.histogram("feed_read_pull_authors")
			rSum0, _ := b.stack.histogram("feed_read_rows")
			cost0 := b.costNow(ctx)
			res, err := closedLoop(ctx, b.opt.Clients, warm, b.opt.Duration/time.Duration(nSlices), b.sessions(rs.users, rs.read, i, slice))
			a.cost.add(cost0, b.costNow(ctx), res.All)
			load.release() // the slice's sessions are over; the next ones reuse their connections
			if err != nil {
				return fmt.Errorf("C %s: %w", rs.name, err)
			}
			qSum1, qCount1 := b.stack.histogram("feed_read_queries")
			pSum1, _ := b.stack.histogram("feed_read_pull_authors")
			rSum1, _ := b.stack.histogram("feed_read_rows")
			a.res.Ops += res.Ops
			a.res.Window += res.Window
			a.res.Latency = append(a.res.Latency, res.Latency...)
			a.qSum += qSum1 - qSum0
			a.pSum += pSum1 - pSum0
			a.rSum += rSum1 - rSum0
			a.pages += qCount1 - qCount0
		}
		b.log.Info("feedbench: C slice done", "slice", slice+1, "of", nSlices)
	}
	for i, rs := range runs {
		if rs.diagnostic && !b.opt.Diagnostics {
			continue
		}
		a := accs[i]
		slices.Sort(a.res.Latency)
		rr := readResult{Key: rs.key, Name: rs.name, Diagnostic: rs.diagnostic, closedLoopResult: a.res, QueriesPerPage: rs.fixedQ, Cost: a.cost}
		if a.pages > 0 {
			rr.QueriesPerPage = a.qSum / float64(a.pages)
			rr.PullAuthorsPerPage = a.pSum / float64(a.pages)
			rr.RowsPerPage = a.rSum / float64(a.pages)
			rr.FromMetrics = true
		}
		b.rep.Reads = append(b.rep.Reads, rr)
		b.log.Info("feedbench: C reads", "run", rs.key, "pages_per_second", int(a.res.Rate()),
			"p50_ms", ms(percentile(a.res.Latency, 0.5)), "p99_ms", ms(percentile(a.res.Latency, 0.99)),
			"queries_per_page", rr.QueriesPerPage, "server_cpu_us_per_page", rr.Cost.ServerCPU(), "disk_reads_per_page", rr.Cost.DiskReads())
	}
	return nil
}

// setupReaders gives phase C its social graph. Every reader follows the
// authors of its loaded inbox rows (push authors: their posts are in the
// inbox). The pull classes also follow pull authors: pullMany authors with
// opt.PullPosts posts each over the loaded rows' time span, published before
// they have any follower (so no fan-out runs), then followed in pull mode.
// Readers of those classes are active, in a spell that starts after every
// post, so each page must merge every pull author's outbox; inbox-only
// readers are active too. Activity is recorded up front so no read of the
// run writes a header row.
func (b *bench) setupReaders(ctx context.Context, inboxOnly, fewPull, manyPull []uint64) error {
	start := time.Now()
	readers := slices.Sorted(slices.Values(slices.Concat(inboxOnly, fewPull, manyPull)))
	b.log.Info("feedbench: C following the inbox authors", "readers", len(readers), "authors", inboxAuthors)
	for a := range inboxAuthors {
		if err := storeload.Followers(ctx, b.st, inboxAuthorBase+uint64(a), readers, b.data.t0, false); err != nil {
			return err
		}
	}
	b.log.Info("feedbench: C publishing pull authors' posts", "authors", pullMany, "posts_each", b.opt.PullPosts)
	type job struct {
		author uint64
		at     int64
	}
	jobs := make(chan job)
	var g group
	for range 4 {
		g.Go(func() error {
			for j := range jobs {
				at := j.at
				if _, _, err := b.stack.svc.Publish(ctx, service.PublishInput{AuthorID: j.author, PublishTime: &at}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	span := b.data.t1 - b.data.t0
	for a := range pullMany {
		for range b.opt.PullPosts {
			jobs <- job{author: pullAuthorBase + uint64(a), at: b.data.t0 + b.rng.Int64N(span)}
		}
	}
	close(jobs)
	if err := g.Wait(); err != nil {
		return err
	}
	if err := b.stack.waitIdle(ctx, time.Minute); err != nil {
		return err
	}
	now := time.Now()
	followedAt := now.Add(-loadSpan).UnixMilli()
	for a := range pullMany {
		followers := manyPull
		if a < pullFew {
			followers = slices.Sorted(slices.Values(slices.Concat(fewPull, manyPull)))
		}
		if err := storeload.Followers(ctx, b.st, pullAuthorBase+uint64(a), followers, followedAt, true); err != nil {
			return err
		}
	}
	if err := storeload.Activity(ctx, b.st, inboxOnly, now.UnixMilli(), now.Add(-24*time.Hour).UnixMilli(), nil); err != nil {
		return err
	}
	if err := storeload.Activity(ctx, b.st, slices.Concat(fewPull, manyPull), now.UnixMilli(), now.Add(24*time.Hour).UnixMilli(), nil); err != nil {
		return err
	}
	// The store learns that a reader pulls from the reader's first page;
	// one read each leaves the measured pages those of a process that has
	// served the readers before.
	for _, u := range slices.Concat(fewPull, manyPull) {
		if _, err := b.st.ReadFeed(ctx, u, store.Top, feed.Key{}, 1, nil); err != nil {
			return err
		}
	}
	// Unread counts are measured for readers a few pages behind: each
	// marker sits at the markerDepth-th item of the reader's feed.
	for _, u := range slices.Concat(inboxOnly, fewPull) {
		page, err := b.stack.svc.Feed(ctx, u, feed.Page{Limit: b.markerDepth()})
		if err != nil {
			return err
		}
		if page.Next == "" {
			return fmt.Errorf("reader %d has fewer than %d items for a marker", u, b.markerDepth())
		}
		if _, err := b.stack.svc.SetMarker(ctx, u, page.Next); err != nil {
			return err
		}
	}
	b.log.Info("feedbench: C pull authors and markers ready", "seconds", time.Since(start).Seconds())
	return nil
}

// mutedAuthors is how many authors each reader of the muting class mutes.
const mutedAuthors = 100

// markerDepth is how far below the top of their feeds the readers of the
// unread-count runs have their markers: two pages, or half the loaded inbox
// if that is less.
func (b *bench) markerDepth() int {
	return min(2*pageLimit, b.opt.InboxRows/2)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

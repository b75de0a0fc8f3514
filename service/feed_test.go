package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// readPageSizes are the page sizes every exactness check scrolls with.
var readPageSizes = []int{1, 3, 7, 20, 100}

// feedModel is the brute-force truth of a feed: every live post by author
// and every follow edge. A user's feed is all live posts of the authors the
// user follows now and the user's own, sorted newest first.
type feedModel struct {
	posts   map[uint64][]feed.Post         // by author
	follows map[uint64]map[uint64]struct{} // user → authors
	ids     map[uint64]struct{}            // content ids ever used
	// filters holds, per user, the authors the user mutes (store.Mute)
	// and those who hide from the user (store.Hide).
	filters map[uint64]map[uint64]map[store.Filter]bool
	// history holds, per user, the oldest key of each author followed
	// with a copy limit that the feed shows.
	history map[uint64]map[uint64]feed.Key
	// kept holds, per user, the content ids of each author unfollowed
	// with keep_history that the feed still shows (while live).
	kept map[uint64]map[uint64]map[uint64]bool
}

func newFeedModel() *feedModel {
	return &feedModel{posts: map[uint64][]feed.Post{}, follows: map[uint64]map[uint64]struct{}{}, ids: map[uint64]struct{}{},
		filters: map[uint64]map[uint64]map[store.Filter]bool{}, history: map[uint64]map[uint64]feed.Key{},
		kept: map[uint64]map[uint64]map[uint64]bool{}}
}

// setFilter mutes or hides (on) or lifts it, through the service and in
// the model.
func (m *feedModel) setFilter(t testing.TB, h *harness, f store.Filter, user, author uint64, on bool) {
	t.Helper()
	var err error
	if f == store.Mute {
		err = h.svc.Mute(context.Background(), user, author, on)
	} else {
		err = h.svc.Hide(context.Background(), author, user, on)
	}
	if err != nil {
		t.Fatalf("filter %d of %d by %d (on %v): %v", author, user, f, on, err)
	}
	if on {
		delete(m.kept[user], author) // the mark purges what an unfollow kept
	}
	if m.filters[user] == nil {
		m.filters[user] = map[uint64]map[store.Filter]bool{}
	}
	if m.filters[user][author] == nil {
		m.filters[user][author] = map[store.Filter]bool{}
	}
	m.filters[user][author][f] = on
}

// filtered says whether the user's feed leaves the author out.
func (m *feedModel) filtered(user, author uint64) bool {
	return m.filters[user][author][store.Mute] || m.filters[user][author][store.Hide]
}

// newID draws an unused random content id.
func (m *feedModel) newID(r *rand.Rand) uint64 {
	for {
		id := r.Uint64N(1<<50) + 1
		if _, ok := m.ids[id]; !ok {
			m.ids[id] = struct{}{}
			return id
		}
	}
}

func (m *feedModel) add(p feed.Post) {
	m.ids[p.ContentID] = struct{}{}
	m.posts[p.AuthorID] = append(m.posts[p.AuthorID], p)
}

func (m *feedModel) remove(p feed.Post) {
	m.posts[p.AuthorID] = slices.DeleteFunc(m.posts[p.AuthorID], func(q feed.Post) bool { return q.ContentID == p.ContentID })
}

func (m *feedModel) addFollow(user, author uint64) {
	if m.follows[user] == nil {
		m.follows[user] = map[uint64]struct{}{}
	}
	m.follows[user][author] = struct{}{}
}

// newPost returns a post of the author at the time with an unused id.
func (m *feedModel) newPost(r *rand.Rand, author uint64, at int64) feed.Post {
	return feed.Post{ContentID: m.newID(r), AuthorID: author, PublishTime: at, Kind: feed.KindPost}
}

// publishAll publishes the posts concurrently.
func (m *feedModel) publishAll(t testing.TB, h *harness, posts []feed.Post) {
	t.Helper()
	ops := make([]func() error, len(posts))
	for i, p := range posts {
		m.add(p)
		ops[i] = func() error {
			_, _, err := h.svc.Publish(context.Background(), service.PublishInput{AuthorID: p.AuthorID, ContentID: p.ContentID, PublishTime: &p.PublishTime, Kind: p.Kind})
			return err
		}
	}
	runConcurrently(t, ops)
}

// deleteAll deletes the posts concurrently.
func (m *feedModel) deleteAll(t testing.TB, h *harness, posts []feed.Post) {
	t.Helper()
	ops := make([]func() error, len(posts))
	for i, p := range posts {
		m.remove(p)
		ops[i] = func() error { return h.svc.DeletePost(context.Background(), p.AuthorID, p.ContentID) }
	}
	runConcurrently(t, ops)
}

// deleteRandom deletes about one in n of the authors' posts, concurrently.
func (m *feedModel) deleteRandom(t testing.TB, h *harness, r *rand.Rand, authors []uint64, n int) {
	t.Helper()
	var gone []feed.Post
	for _, a := range authors {
		for _, p := range m.posts[a] {
			if r.IntN(n) == 0 {
				gone = append(gone, p)
			}
		}
	}
	m.deleteAll(t, h, gone)
}

func (m *feedModel) publish(t testing.TB, h *harness, author, id uint64, at int64) feed.Post {
	t.Helper()
	p := h.publish(t, author, id, at)
	m.add(p)
	return p
}

func (m *feedModel) delete(t testing.TB, h *harness, p feed.Post) {
	t.Helper()
	if err := h.svc.DeletePost(context.Background(), p.AuthorID, p.ContentID); err != nil {
		t.Fatalf("delete %d: %v", p.ContentID, err)
	}
	m.remove(p)
}

func (m *feedModel) follow(t testing.TB, h *harness, user, author uint64) {
	t.Helper()
	h.follow(t, user, author)
	m.addFollow(user, author)
}

func (m *feedModel) unfollow(t testing.TB, h *harness, user, author uint64) {
	t.Helper()
	if err := h.svc.Unfollow(context.Background(), user, author); err != nil {
		t.Fatalf("unfollow %d→%d: %v", user, author, err)
	}
	delete(m.follows[user], author)
	delete(m.history[user], author)
	delete(m.kept[user], author)
}

func (m *feedModel) following(user, author uint64) bool {
	_, ok := m.follows[user][author]
	return ok
}

func (m *feedModel) followers(author uint64) int {
	n := 0
	for _, as := range m.follows {
		if _, ok := as[author]; ok {
			n++
		}
	}
	return n
}

// feed is the user's whole feed strictly older than before, newest first.
func (m *feedModel) feed(user uint64, before feed.Key) []feed.Post {
	var out []feed.Post
	for _, a := range append(slices.Collect(maps.Keys(m.follows[user])), user) {
		if m.filtered(user, a) {
			continue
		}
		from, bounded := m.history[user][a]
		for _, p := range m.posts[a] {
			if p.Key().Less(before) && !(bounded && p.Key().Less(from)) {
				out = append(out, p)
			}
		}
	}
	for a, ids := range m.kept[user] {
		if m.following(user, a) || m.filtered(user, a) {
			continue
		}
		for _, p := range m.posts[a] {
			if ids[p.ContentID] && p.Key().Less(before) {
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b feed.Post) int {
		switch {
		case b.Key().Less(a.Key()):
			return -1
		case a.Key().Less(b.Key()):
			return 1
		}
		return 0
	})
	return out
}

// readPage reads one feed page.
func readPage(t testing.TB, h *harness, user uint64, limit int, cursor string) ([]feed.Post, string) {
	t.Helper()
	items, next, err := feedPosts(h.svc)(context.Background(), user, feed.Page{Limit: limit, Cursor: cursor})
	if err != nil {
		t.Fatalf("feed of %d (limit %d): %v", user, limit, err)
	}
	return items, next
}

// checkPage checks the page rules every page obeys: no page is short while
// items follow it (deleted or deduped rows must not eat into a page), and
// the last page is empty only if the whole feed is.
func checkPage(t testing.TB, items []feed.Post, next string, limit int, first bool) {
	t.Helper()
	switch {
	case len(items) > limit:
		t.Fatalf("page has %d items, limit %d", len(items), limit)
	case next != "" && len(items) != limit:
		t.Fatalf("page has %d items, limit %d, and a next cursor: a short page in mid-feed", len(items), limit)
	case next == "" && len(items) == 0 && !first:
		t.Fatalf("an empty last page: the previous page's next cursor promised more")
	}
}

// scrollChecked pages through the user's whole feed and checks each page
// against the brute force as it is when the page is read: the model's feed
// below the last key of the previous page, cut at limit. between runs after
// each page that has a next one (page numbers from 1) and may change posts
// and edges, through the model. It returns every item read.
func scrollChecked(t testing.TB, h *harness, m *feedModel, user uint64, limit int, label string, between func(page int, last feed.Key)) []feed.Post {
	t.Helper()
	var all []feed.Post
	before, cursor := store.Top, ""
	for page := 1; ; page++ {
		want := m.feed(user, before)
		items, next := readPage(t, h, user, limit, cursor)
		checkPage(t, items, next, limit, page == 1)
		if d := diffFeed(items, want[:min(limit, len(want))]); d != "" {
			t.Fatalf("%s: user %d, page %d of size %d below %v: %s", label, user, page, limit, before, d)
		}
		if more := len(want) > limit; more != (next != "") {
			t.Fatalf("%s: user %d, page %d of size %d: next cursor %q, but %d items remain", label, user, page, limit, next, len(want)-len(items))
		}
		all = append(all, items...)
		if next == "" {
			return all
		}
		before, cursor = items[len(items)-1].Key(), next
		if between != nil {
			between(page, before)
		}
	}
}

// diffFeed describes how got differs from want, or returns "".
func diffFeed(got, want []feed.Post) string {
	seen := map[uint64]int{}
	for i, p := range got {
		if j, ok := seen[p.ContentID]; ok {
			return fmt.Sprintf("content id %d at positions %d and %d", p.ContentID, j, i)
		}
		seen[p.ContentID] = i
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d of %d (want %d): got %+v, want %+v",
				i, len(got), len(want), got[i], want[i])
		}
	}
	if len(got) != len(want) {
		if len(got) > len(want) {
			return fmt.Sprintf("%d items, want %d: extra from %+v", len(got), len(want), got[len(want)])
		}
		return fmt.Sprintf("%d items, want %d: missing from %+v", len(got), len(want), want[len(got)])
	}
	return ""
}

// checkFeed scrolls the user's whole feed with each page size (all of
// readPageSizes if none) and compares every page with the brute force.
func checkFeed(t testing.TB, h *harness, m *feedModel, user uint64, label string, sizes ...int) {
	t.Helper()
	if len(sizes) == 0 {
		sizes = readPageSizes
	}
	for _, limit := range sizes {
		scrollChecked(t, h, m, user, limit, label, nil)
	}
}

// TestFeedExactBruteForce builds random social graphs and checks every
// user's feed, page by page and with several page sizes, against a full sort
// of the posts it should hold. The graph mixes what the merged read has to
// combine: authors above the push threshold (pull mode, pushed only to
// active readers), push authors, readers active before the posts and
// readers who never read, many equal publish times, deleted posts, and an
// inbox limit small enough that trimming and capped backfills put floors in
// most inboxes, so deep scrolls run below them.
func TestFeedExactBruteForce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		seed       uint64
		activeDays int
	}{
		{1, 7}, {2, 7},
		{3, 0}, // pure pull: authors above the threshold push to nobody
	} {
		t.Run(fmt.Sprintf("seed%d_active%dd", tt.seed, tt.activeDays), func(t *testing.T) {
			t.Parallel()
			runFeedBruteForce(t, tt.seed, tt.activeDays)
		})
	}
}

func runFeedBruteForce(t *testing.T, seed uint64, activeDays int) {
	t.Logf("seed %d, active days %d", seed, activeDays)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	const (
		numUsers  = 30
		numBig    = 3
		threshold = 5
	)
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) {
		c.InboxLimit = 20
		c.PushThreshold = threshold
		c.ActiveDays = activeDays
		// Wake-ups drive the workers; polling is only their fallback, and
		// a slower one leaves the database to the reads.
		c.PollInterval = 100 * time.Millisecond
	}})
	m := newFeedModel()
	users := make([]uint64, numUsers)
	for i := range users {
		users[i] = uint64(1000 + i*37)
	}
	big, normal := users[:numBig], users[numBig:]
	base := time.Now().Add(-3 * time.Hour).UnixMilli()
	// A small set of publish times: most posts share theirs with others.
	at := func(shift int64) int64 { return base + shift + int64(r.IntN(6))*1000 }

	// Writes of one phase run concurrently, as many clients' would; the
	// model takes them in at once, since only the state at rest is checked.
	ctx := context.Background()
	var ops []func() error
	run := func() {
		t.Helper()
		runConcurrently(t, ops)
		ops = nil
	}
	follow := func(user, author uint64) {
		m.addFollow(user, author)
		ops = append(ops, func() error { return h.svc.Follow(ctx, user, author) })
	}

	// Active readers read before anything is published, so selective push
	// reaches them; the others never read until the checks.
	active := map[uint64]bool{}
	for _, u := range users {
		if r.IntN(2) == 0 {
			active[u] = true
			ops = append(ops, func() error { _, err := h.svc.Feed(ctx, u, feed.Page{Limit: 5}); return err })
		}
	}
	run()
	// Old posts, published before the follows: only backfills bring them.
	var posts []feed.Post
	for _, a := range users {
		n := 1 + r.IntN(5)
		if slices.Contains(big, a) {
			n = 15 + r.IntN(10)
		}
		for range n {
			p := m.newPost(r, a, at(0))
			p.Kind = randomKind(r)
			posts = append(posts, p)
		}
	}
	m.publishAll(t, h, posts)
	// The graph: every big author gets more followers than the threshold,
	// normal authors stay at or below it.
	for _, b := range big {
		for _, u := range r.Perm(numUsers)[:threshold+2+r.IntN(6)] {
			if users[u] != b {
				follow(users[u], b)
			}
		}
	}
	for _, u := range users {
		for range 1 + r.IntN(4) {
			a := normal[r.IntN(len(normal))]
			if a != u && !m.following(u, a) && m.followers(a) < threshold {
				follow(u, a)
			}
		}
	}
	run()
	h.waitIdle(t) // backfills done, big authors switched to pull
	for _, b := range big {
		if n := m.followers(b); n <= threshold {
			t.Fatalf("big author %d has only %d followers", b, n)
		}
	}
	// New posts: pushed (selectively for the big authors), some at the same
	// times as the old ones, some newer.
	pulled := map[uint64]bool{} // the big authors' posts published in pull mode
	posts = nil
	for _, a := range users {
		n := r.IntN(4)
		if slices.Contains(big, a) {
			n = 6 + r.IntN(6)
		}
		for range n {
			p := m.newPost(r, a, at(int64(r.IntN(2))*3000))
			p.Kind = randomKind(r)
			posts = append(posts, p)
			if slices.Contains(big, a) {
				pulled[p.ContentID] = true
			}
		}
	}
	m.publishAll(t, h, posts)
	// Delete about one post in six, and change a few edges, one at a time:
	// the same edge may change twice.
	m.deleteRandom(t, h, r, users, 6)
	for range 8 {
		u, a := users[r.IntN(numUsers)], users[r.IntN(numUsers)]
		switch {
		case u == a:
		case m.following(u, a):
			m.unfollow(t, h, u, a)
		case slices.Contains(big, a) || m.followers(a) < threshold:
			m.follow(t, h, u, a)
		}
	}
	// Mutes and hides, set and lifted, mostly of followed authors (push
	// and pull, below the floor or not).
	for range 16 {
		u := users[r.IntN(numUsers)]
		a := users[r.IntN(numUsers)]
		if r.IntN(4) > 0 && len(m.follows[u]) > 0 {
			a = slices.Sorted(maps.Keys(m.follows[u]))[r.IntN(len(m.follows[u]))]
		}
		if u != a {
			m.setFilter(t, h, store.Filter(r.IntN(2)), u, a, r.IntN(3) > 0)
		}
	}
	h.waitIdle(t)

	// The graph must exercise what the merge combines: the big authors'
	// posts went out as push_active (or pull), some readers' feeds need
	// them from the outboxes, and most inboxes have a floor.
	wantMode := feed.ModePushActive
	if activeDays == 0 {
		wantMode = feed.ModePull
	}
	missing, floors := 0, 0
	for _, u := range users {
		want := m.feed(u, store.Top)
		inbox := inboxOf(t, h, u)
		for _, p := range want {
			if pulled[p.ContentID] && !slices.Contains(inbox, p) {
				missing++
				if d := deliveryOf(t, h, p.AuthorID, p.ContentID); d.Mode != wantMode {
					t.Fatalf("post %d of big author %d: delivery %+v, want mode %s", p.ContentID, p.AuthorID, d, wantMode)
				}
			}
		}
		snap, err := h.store.ReadFeed(context.Background(), u, store.Top, feed.Key{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Floor != nil {
			floors++
		}
	}
	filtered := 0
	for u, as := range m.follows {
		for a := range as {
			if m.filtered(u, a) && len(m.posts[a]) > 0 {
				filtered++
			}
		}
	}
	if missing == 0 || floors < numUsers/3 || filtered < 3 {
		t.Fatalf("weak graph: %d feed items only in outboxes, %d of %d inboxes with a floor, %d followed authors filtered out",
			missing, floors, numUsers, filtered)
	}
	t.Logf("%d feed items only in outboxes, %d of %d inboxes with a floor, %d followed authors filtered out", missing, floors, numUsers, filtered)

	for i, u := range users {
		label := fmt.Sprintf("seed %d, active days %d, active reader %v", seed, activeDays, active[u])
		// Page size 1 costs a read per item: a third of the users get it.
		sizes := readPageSizes[1:]
		if i%3 == 0 {
			sizes = readPageSizes
		}
		checkFeed(t, h, m, u, label, sizes...)
		if i%3 == 1 {
			checkKinds(t, h, m, u, []string{"photo"}, 3)
		}
	}
}

// randomKind draws a post's kind: one in four a photo.
func randomKind(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return "photo"
	}
	return feed.KindPost
}

// inboxOf returns the user's inbox rows, newest first.
func inboxOf(t testing.TB, h *harness, user uint64) []feed.Post {
	t.Helper()
	rows, err := h.store.InboxKeys(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// deliveryOf returns the fan-out status of a post.
func deliveryOf(t testing.TB, h *harness, author, id uint64) feed.Delivery {
	t.Helper()
	d, err := h.svc.Delivery(context.Background(), author, id)
	if err != nil {
		t.Fatalf("delivery of %d by %d: %v", id, author, err)
	}
	return d
}

// runConcurrently runs the operations on a few goroutines and fails the
// test if any of them failed.
func runConcurrently(t testing.TB, ops []func() error) {
	t.Helper()
	errs := make([]error, len(ops))
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				errs[i] = ops[i]()
			}
		})
	}
	for i := range ops {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// readOpts is the configuration of the scenario tests: a small inbox, so
// trims and capped backfills put floors under most inboxes, and a push
// threshold of 5.
func readOpts(c *service.Config) {
	c.InboxLimit = 20
	c.PushThreshold = 5
	c.PollInterval = 100 * time.Millisecond
}

// makePull gives the author fans enough to pass the push threshold of
// readOpts; the caller waits for the switch with waitIdle.
func makePull(t testing.TB, h *harness, m *feedModel, author uint64, fans []uint64) {
	t.Helper()
	for _, f := range fans {
		m.follow(t, h, f, author)
	}
}

// fanIDs returns n user ids from first on that only exist to follow.
func fanIDs(first uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

// postsOf returns the items of the list by the author.
func postsOf(items []feed.Post, author uint64) []feed.Post {
	var out []feed.Post
	for _, p := range items {
		if p.AuthorID == author {
			out = append(out, p)
		}
	}
	return out
}

// TestFeedFollowUnfollowMidScroll changes the reader's edges between the
// pages of one scroll: after an unfollow no later page holds the author's
// posts; after a follow, later pages hold the author's posts older than the
// cursor, first from the outbox (backfill pending), then from the inbox.
func TestFeedFollowUnfollowMidScroll(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 11))
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	m := newFeedModel()
	const reader = 500
	const push1, push2, pull, laterPush, laterPull = 601, 602, 603, 604, 605
	readPage(t, h, reader, 1, "") // active: pull authors push to the reader
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	at := func() int64 { return base + int64(r.IntN(8))*1000 }
	var posts []feed.Post
	for _, a := range []uint64{push1, push2, pull, laterPush, laterPull, reader} {
		n := 12
		if a == pull || a == laterPull {
			n = 25
		}
		for range n {
			posts = append(posts, m.newPost(r, a, at()))
		}
	}
	m.publishAll(t, h, posts)
	makePull(t, h, m, pull, fanIDs(900, 6))
	makePull(t, h, m, laterPull, fanIDs(900, 6))
	for _, a := range []uint64{push1, push2, pull} {
		m.follow(t, h, reader, a)
	}
	h.waitIdle(t)
	for _, a := range []uint64{pull, laterPull} { // pushed: the reader is active
		m.publish(t, h, a, m.newID(r), at())
	}
	h.waitIdle(t)

	for _, limit := range []int{3, 7} {
		var lastKey feed.Key
		var afterFollow []feed.Post
		got := scrollChecked(t, h, m, reader, limit, fmt.Sprintf("limit %d", limit), func(page int, last feed.Key) {
			switch page {
			case 1:
				m.unfollow(t, h, reader, push1)
			case 2:
				m.follow(t, h, reader, laterPush) // backfill pending: merged from the outbox
				lastKey = last
			case 3:
				h.waitIdle(t) // backfilled, the floor may have risen
			case 4:
				m.follow(t, h, reader, laterPull)
			case 5:
				m.unfollow(t, h, reader, pull)
			case 6:
				h.waitIdle(t)
			}
		})
		for _, p := range got {
			if p.Key().Less(lastKey) {
				afterFollow = append(afterFollow, p)
			}
		}
		if len(postsOf(afterFollow, laterPush)) == 0 || len(postsOf(afterFollow, laterPull)) == 0 {
			t.Fatalf("limit %d: the authors followed mid-scroll never showed: %d and %d posts",
				limit, len(postsOf(afterFollow, laterPush)), len(postsOf(afterFollow, laterPull)))
		}
		// Back to the starting graph for the next page size.
		m.follow(t, h, reader, push1)
		m.follow(t, h, reader, pull)
		m.unfollow(t, h, reader, laterPush)
		m.unfollow(t, h, reader, laterPull)
		h.waitIdle(t)
		checkFeed(t, h, m, reader, fmt.Sprintf("limit %d, restored", limit), 20)
	}
}

// TestFeedNewPostsMidScroll publishes between the pages of a scroll. Posts
// newer than the cursor (fan-out still running) never show later in the
// same scroll and displace nothing; posts older than the cursor show once
// their fan-out is done, exactly where they sort.
func TestFeedNewPostsMidScroll(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(12, 12))
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	m := newFeedModel()
	const activeReader, freshReader = 510, 511
	const push, pull = 611, 612
	readPage(t, h, activeReader, 1, "")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	at := func() int64 { return base + int64(r.IntN(6))*1000 }
	makePull(t, h, m, pull, fanIDs(910, 6))
	for _, u := range []uint64{activeReader, freshReader} {
		m.follow(t, h, u, push)
		m.follow(t, h, u, pull)
	}
	h.waitIdle(t)
	var posts []feed.Post
	for _, a := range []uint64{push, pull, activeReader, freshReader} {
		for range 10 {
			posts = append(posts, m.newPost(r, a, at()))
		}
	}
	m.publishAll(t, h, posts)
	h.waitIdle(t)

	newer := time.Now().Add(-time.Hour).UnixMilli() // above every post of the scroll
	for _, sc := range []struct {
		reader uint64
		limit  int
	}{{freshReader, 2}, {activeReader, 3}, {freshReader, 5}} {
		h.waitIdle(t) // the last scroll's posts are fanned out
		var newPosts []feed.Post
		label := fmt.Sprintf("reader %d, limit %d", sc.reader, sc.limit)
		got := scrollChecked(t, h, m, sc.reader, sc.limit, label, func(page int, last feed.Key) {
			newer++
			a := []uint64{push, pull, sc.reader}[page%3]
			newPosts = append(newPosts, m.publish(t, h, a, m.newID(r), newer))
			if page%4 == 0 {
				// Backdated below the cursor: it belongs to the rest of
				// this scroll once fanned out.
				for _, a := range []uint64{push, pull} {
					m.publish(t, h, a, m.newID(r), last.PublishTime-1-int64(r.IntN(3))*1000)
				}
				h.waitIdle(t)
			}
		})
		for _, p := range newPosts {
			if slices.Contains(got, p) {
				t.Fatalf("%s: post %d, published above the cursor mid-scroll, showed later in the scroll", label, p.ContentID)
			}
		}
	}
	h.waitIdle(t)
	checkFeed(t, h, m, freshReader, "at rest", 7, 100)
}

// TestFeedDeletedPullPostsFillPages deletes most posts of a pull author. A
// reader who pulls them gets full pages at once (pull reads skip deleted
// posts, no retraction needed); a reader they were pushed to gets full
// pages once the retractions ran.
func TestFeedDeletedPullPostsFillPages(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 13))
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	m := newFeedModel()
	const pullReader, pushedReader = 520, 521
	const pull, push = 621, 622
	readPage(t, h, pushedReader, 1, "")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	makePull(t, h, m, pull, fanIDs(920, 6))
	for _, u := range []uint64{pullReader, pushedReader} {
		m.follow(t, h, u, pull)
		m.follow(t, h, u, push)
	}
	posts := []feed.Post{m.newPost(r, pullReader, base)}
	for range 8 {
		posts = append(posts, m.newPost(r, push, base+int64(r.IntN(20))*1000))
	}
	m.publishAll(t, h, posts)
	h.waitIdle(t)
	posts, gone := nil, []feed.Post(nil)
	for i := range 60 {
		p := m.newPost(r, pull, base+int64(i/3)*1000)
		posts = append(posts, p)
		if i%6 != 0 {
			gone = append(gone, p)
		}
	}
	m.publishAll(t, h, posts)
	m.deleteAll(t, h, gone)
	// The pull reader's view of the author comes from the outbox alone.
	pulled, err := h.store.PullPosts(context.Background(), []store.PullSource{{AuthorID: pull, Before: store.Top}}, 7, 0)
	live, n := pulled.Posts, pulled.Queries
	if err != nil || n != 1 || len(live) != 7 || len(pulled.Missing) != 0 {
		t.Fatalf("PullPosts = %d posts, %d queries, missing %v, %v; want 7 live posts in 1 query", len(live), n, pulled.Missing, err)
	}
	if d := diffFeed(live, m.feed(pull, store.Top)[:7]); d != "" {
		t.Fatalf("PullPosts of a mostly deleted outbox: %s", d)
	}
	checkFeed(t, h, m, pullReader, "before retractions", 1, 3, 7, 20)
	h.waitIdle(t)
	checkFeed(t, h, m, pullReader, "at rest", 1, 3, 7, 20)
	checkFeed(t, h, m, pushedReader, "at rest", 1, 3, 7, 20)
}

// TestFeedPendingFollowNoWorkers reads right after Follow with no worker
// running: every edge is pending, no post was pushed or backfilled, and the
// feed is the followees' outboxes merged at read time, exactly.
func TestFeedPendingFollowNoWorkers(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(14, 14))
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true, configured: readOpts})
	m := newFeedModel()
	const reader, a, b, c = 530, 631, 632, 633
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []feed.Post
	for _, author := range []uint64{a, b, c, reader} {
		for range 10 + r.IntN(20) {
			posts = append(posts, m.newPost(r, author, base+int64(r.IntN(5))))
		}
	}
	m.publishAll(t, h, posts)
	for _, author := range []uint64{a, b, c} {
		m.follow(t, h, reader, author)
	}
	snap, err := h.store.ReadFeed(context.Background(), reader, store.Top, feed.Key{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Pull) != 3 || snap.Floor != nil {
		t.Fatalf("snapshot: pull %+v, floor %v; want 3 pending authors and no floor", snap.Pull, snap.Floor)
	}
	for _, pa := range snap.Pull {
		if pa.Pull&store.PullPending == 0 {
			t.Fatalf("author %d: pull bits %d, want pending", pa.AuthorID, pa.Pull)
		}
	}
	checkFeed(t, h, m, reader, "pending")
	m.unfollow(t, h, reader, b)
	checkFeed(t, h, m, reader, "pending, after an unfollow", 3, 100)

	// Malformed cursors and limits are refused before anything is read.
	for _, page := range []feed.Page{
		{Limit: 5, Cursor: "%%%"},
		{Limit: 5, Cursor: "AQ"},
		{Limit: 5, Cursor: h.postsCursor(t, a)},
		{Limit: 0},
		{Limit: -1},
	} {
		_, err := h.svc.Feed(context.Background(), reader, page)
		if feed.ErrorCode(err) != feed.EINVALID {
			t.Fatalf("Feed(%+v): %v, want %s", page, err, feed.EINVALID)
		}
	}
}

// postsCursor returns a next cursor of the author's post list, which the
// feed must refuse.
func (h *harness) postsCursor(t testing.TB, author uint64) string {
	t.Helper()
	_, next, err := h.svc.ListPosts(context.Background(), author, feed.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("list posts of %d: cursor %q, %v", author, next, err)
	}
	return next
}

// manualClock is the wall clock moved by the test: advance jumps it
// forward, freeze stops it at a chosen instant until thaw. It keeps ticking
// otherwise, so worker leases still run out and a failed worker step is
// retried as in production.
type manualClock struct {
	mu     sync.Mutex
	offset time.Duration
	fixed  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fixed.IsZero() {
		return c.fixed
	}
	return time.Now().Add(c.offset)
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func (c *manualClock) freeze(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fixed = at
}

func (c *manualClock) thaw() { c.freeze(time.Time{}) }

// TestFeedReactivation lets a reader lapse: inactive for more than
// ActiveDays, it misses the pull author's selective pushes, yet its feed
// shows every post as soon as it reads again, and the pushes resume. One
// post sits at the edge of the clock-skew allowance: its publish_time is
// exactly the start of the active spell the returning reader opens.
func TestFeedReactivation(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(15, 15))
	clock := &manualClock{}
	h := newHarness(t, harnessOpts{shards: 2, now: clock.now, configured: readOpts})
	m := newFeedModel()
	const steady, lapsed, fresh = 540, 541, 542 // fresh never reads before the checks
	const pull, push = 641, 642
	day := 24 * time.Hour
	window := time.Duration(h.cfg.ActiveDays) * day
	readPage(t, h, steady, 1, "")
	readPage(t, h, lapsed, 1, "")
	makePull(t, h, m, pull, fanIDs(940, 6))
	for _, u := range []uint64{steady, lapsed, fresh} {
		m.follow(t, h, u, pull)
		m.follow(t, h, u, push)
	}
	h.waitIdle(t)
	publishAround := func(author uint64, n int) []feed.Post {
		var out []feed.Post
		now := clock.now().UnixMilli()
		for range n {
			out = append(out, m.publish(t, h, author, m.newID(r), now-int64(r.IntN(4))*60_000))
		}
		return out
	}
	inInbox := func(user uint64, posts []feed.Post) int {
		n := 0
		for _, p := range inboxOf(t, h, user) {
			if slices.Contains(posts, p) {
				n++
			}
		}
		return n
	}
	first := publishAround(pull, 8)
	publishAround(push, 4)
	h.waitIdle(t)
	if got := inInbox(lapsed, first); got != len(first) {
		t.Fatalf("active reader: %d of %d pull posts pushed", got, len(first))
	}
	if got := inInbox(fresh, first); got != 0 {
		t.Fatalf("reader who never read: %d pull posts pushed", got)
	}

	clock.advance(window / 2)
	readPage(t, h, steady, 1, "")
	clock.advance(window/2 + day)
	readPage(t, h, steady, 1, "")
	second := publishAround(pull, 8)
	edgeTime := clock.now().Add(h.cfg.ClockSkew)
	edge := m.publish(t, h, pull, m.newID(r), edgeTime.UnixMilli())
	second = append(second, edge)
	publishAround(push, 4)
	h.waitIdle(t)
	if d := deliveryOf(t, h, pull, edge.ContentID); d.Mode != feed.ModePushActive {
		t.Fatalf("delivery of a pull author's post: %+v, want mode %s", d, feed.ModePushActive)
	}
	if got := inInbox(steady, second); got != len(second) {
		t.Fatalf("steady reader: %d of %d pull posts pushed", got, len(second))
	}
	if got := inInbox(lapsed, second); got != 0 {
		t.Fatalf("lapsed reader: %d of %d pull posts pushed", got, len(second))
	}
	// The returning readers read at the instant that dates the edge post at
	// the very limit of the clock-skew allowance (now + clock skew).
	clock.freeze(edgeTime.Add(-h.cfg.ClockSkew))
	for _, u := range []uint64{lapsed, fresh, steady} {
		checkFeed(t, h, m, u, fmt.Sprintf("reader %d back after %s", u, window+day))
	}
	clock.thaw()
	third := publishAround(pull, 5)
	h.waitIdle(t)
	if got := inInbox(lapsed, third); got != len(third) {
		t.Fatalf("reactivated reader: %d of %d pull posts pushed", got, len(third))
	}
	for _, u := range []uint64{lapsed, fresh, steady} {
		checkFeed(t, h, m, u, fmt.Sprintf("reader %d active again", u), 3, 20)
	}
}

// idsOnShard returns n ids from first on that live on the store's shard i.
func idsOnShard(h *harness, i int, first uint64, n int) []uint64 {
	var out []uint64
	for id := first; len(out) < n; id++ {
		if h.store.ShardOf(id) == h.store.Shards()[i] {
			out = append(out, id)
		}
	}
	return out
}

// TestFeedPullQueriesPerShard bounds the statements a page costs: pull
// authors are read with one UNION ALL statement per shard (and per 64
// authors), not one per author. A first page above any floor costs the
// snapshot plus one statement per shard holding pull authors; a deep scroll
// adds the followed-authors lookup and one statement per shard.
func TestFeedPullQueriesPerShard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true, configured: readOpts})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UnixMilli()
	shard0, shard1 := idsOnShard(h, 0, 10_000, 70), idsOnShard(h, 1, 10_000, 10)
	for i, a := range append(slices.Clone(shard0[:10]), shard1...) {
		h.publish(t, a, uint64(100_000+2*i), base+int64(i))
		h.publish(t, a, uint64(100_001+2*i), base+int64(i))
	}
	for i, a := range shard0[10:] {
		h.publish(t, a, uint64(200_000+i), base)
	}
	sources := func(authors []uint64) []store.PullSource {
		out := make([]store.PullSource, len(authors))
		for i, a := range authors {
			out[i] = store.PullSource{AuthorID: a, Before: store.Top}
		}
		return out
	}
	for _, tt := range []struct {
		name    string
		authors []uint64
		queries int
		posts   int
	}{
		{"10 authors on one shard", shard0[:10], 1, 10},
		{"10 authors on each shard", append(slices.Clone(shard0[:10]), shard1...), 2, 20},
		{"70 authors on one shard", shard0, 2, 70},
		{"no authors", nil, 0, 0},
	} {
		pulled, err := h.store.PullPosts(ctx, sources(tt.authors), 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pulled.Missing) != 0 {
			t.Fatalf("%s: authors %v missing: %v", tt.name, pulled.Missing, pulled.Err)
		}
		if n, posts := pulled.Queries, pulled.Posts; n != tt.queries || len(posts) != tt.posts {
			t.Errorf("%s: PullPosts ran %d statements for %d posts, want %d for %d", tt.name, n, len(posts), tt.queries, tt.posts)
		}
	}

	// The same through Feed, counted by the service's own metric.
	reg := prometheus.NewRegistry()
	svc, err := service.New(h.store, h.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), service.NewMetrics(reg), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	const reader = 550
	for _, a := range append(slices.Clone(shard0[:10]), shard1...) {
		if err := svc.Follow(ctx, reader, a); err != nil {
			t.Fatal(err)
		}
	}
	before := feedQueries(t, reg)
	items, _, err := feedPosts(svc)(ctx, reader, feed.Page{Limit: 5})
	if err != nil || len(items) != 5 {
		t.Fatalf("feed: %d items, %v", len(items), err)
	}
	if got := feedQueries(t, reg) - before; got != 3 {
		t.Fatalf("a page with 20 pull authors on 2 shards ran %v statements, want 3 (snapshot + one per shard)", got)
	}
	// Within the pull cache's ttl the same authors cost nothing more: the
	// next page is the snapshot alone, and equals a cache-free read.
	before = feedQueries(t, reg)
	_, cursor, err := feedPosts(svc)(ctx, reader, feed.Page{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := feedPosts(svc)(ctx, reader, feed.Page{Limit: 5, Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	if got := feedQueries(t, reg) - before; got != 2 {
		t.Fatalf("two cached pages ran %v statements, want 2 (one snapshot each)", got)
	}
	noCache := h.cfg
	noCache.PullCacheTTL = 0
	plain, err := service.New(h.store, noCache, slog.New(slog.NewTextHandler(io.Discard, nil)), service.NewMetrics(prometheus.NewRegistry()), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := feedPosts(plain)(ctx, reader, feed.Page{Limit: 5, Cursor: cursor})
	if err != nil || !slices.Equal(next, want) {
		t.Fatalf("cached page %v, uncached %v (%v)", next, want, err)
	}
}

// feedQueries returns the total of the feed_read_queries histogram.
func feedQueries(t testing.TB, reg *prometheus.Registry) float64 {
	t.Helper()
	return histogramSum(t, reg, "feed_read_queries")
}

// histogramSum returns the sum of the samples of a histogram of reg.
func histogramSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	return 0
}

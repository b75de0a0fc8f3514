package service_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// userRange returns n consecutive ids from first.
func userRange(first uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

// followAll makes every user follow author through the service, a few
// calls at a time.
func followAll(t testing.TB, h *harness, users []uint64, author uint64) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(users))
	next := make(chan uint64)
	for range 8 {
		wg.Go(func() {
			for u := range next {
				if err := h.svc.Follow(context.Background(), u, author); err != nil {
					errs <- fmt.Errorf("follow %d→%d: %w", u, author, err)
				}
			}
		})
	}
	for _, u := range users {
		next <- u
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// publishAll publishes the posts, a few at a time.
func publishAll(t testing.TB, h *harness, posts []feed.Post) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(posts))
	next := make(chan feed.Post)
	for range 8 {
		wg.Go(func() {
			for p := range next {
				got, created, err := h.svc.Publish(context.Background(), service.PublishInput{
					AuthorID: p.AuthorID, ContentID: p.ContentID, PublishTime: &p.PublishTime, Kind: p.Kind})
				if err != nil || !created || got != p {
					errs <- fmt.Errorf("publish %+v: got %+v, created %v, err %v", p, got, created, err)
				}
			}
		})
	}
	for _, p := range posts {
		next <- p
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// wantDelivery checks a post's delivery status.
func wantDelivery(t testing.TB, h *harness, author, id uint64, want feed.Delivery) {
	t.Helper()
	if got := h.delivery(t, author, id); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivery of %d: %+v, want %+v", id, got, want)
	}
}

// TestFanoutThousandFollowers publishes to 1,000 followers on two shards:
// 100 followed through the service, the others are seeded in bulk.
func TestFanoutThousandFollowers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) { c.TaskSize = 300; c.BatchSize = 128 }})
	const author = 1
	users := userRange(1000, 1000)
	h.seedFollowers(t, author, users[100:])
	followAll(t, h, users[:100], author)
	h.waitIdle(t)

	p := h.publish(t, author, 1_000_001, time.Now().UnixMilli())
	h.waitIdle(t)
	wantDelivery(t, h, author, p.ContentID, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: 1000, Delivered: 1000})
	h.checkDelivered(t, users, p.ContentID)
	wantRecipients(t, h, users, author, p.ContentID)
	for _, u := range []uint64{users[0], users[499], users[999]} {
		if got := h.feedAll(t, u, 20); !slices.Equal(got, []feed.Post{p}) {
			t.Fatalf("user %d's feed %v", u, got)
		}
	}
}

// TestRetention pushes 400 posts of several authors to one reader with an
// inbox limit of 50.
//
// Trimming is probabilistic: each push into an inbox checks it with
// probability 1/TrimEvery (InboxLimit × InboxSlack%: 5 here) and a check
// cuts it back to InboxLimit. So once full, an inbox holds InboxLimit plus the
// pushes since its last check: exceeding InboxLimit + k needs k pushes in a
// row without a check, probability (1 - 1/trimEvery)^k ≈ e^(-k/trimEvery).
// The bound asserted, k = 20*trimEvery = 100, fails with probability
// 0.8^100 ≈ 2e-10 per inbox: a flake-free test of a tail that shrinks
// exponentially (the mean overshoot is TrimEvery-1).
func TestRetention(t *testing.T) {
	t.Parallel()
	const limit = 50
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) { c.InboxLimit, c.InboxSlack = limit, 10 }})
	trimEvery := h.svc.Config().TrimEvery()
	const reader = 500
	authors := []uint64{501, 502, 503, 504, 505}
	for _, a := range authors {
		h.follow(t, reader, a)
	}
	h.waitIdle(t)

	rng := rand.New(rand.NewPCG(3, 4))
	base := time.Now().Add(-time.Hour).UnixMilli()
	var want []feed.Post
	for i := range 400 {
		// Times mostly rise, with ties and a few posts back-dated; posts are
		// published a few at a time, so they also arrive out of order.
		want = append(want, feed.Post{
			ContentID:   uint64(50_000 + i),
			AuthorID:    authors[rng.IntN(len(authors))],
			PublishTime: base + int64(i/2)*1000 - int64(rng.IntN(3))*1000,
			Kind:        feed.KindPost,
		})
	}
	publishAll(t, h, want)
	want = newestFirst(want)
	h.waitIdle(t)

	inbox := h.inbox(t, reader)
	if n := len(inbox); n < limit || n > limit+20*trimEvery {
		t.Fatalf("inbox holds %d entries, want %d..%d", n, limit, limit+20*trimEvery)
	}
	// The kept entries are the newest ones.
	if !slices.Equal(inbox[:limit], want[:limit]) {
		t.Fatalf("inbox's newest %d entries %v, want %v", limit, contentIDs(inbox[:limit]), contentIDs(want[:limit]))
	}
	for _, pageSize := range []int{7, 100} {
		if got := h.feedAll(t, reader, pageSize); !slices.Equal(got, want) {
			t.Fatalf("page size %d: feed of %d posts differs from the %d published (first difference at %d)",
				pageSize, len(got), len(want), firstDiff(got, want))
		}
	}
	// The authors' own inboxes are bounded too (checked with a looser
	// bound, 0.8^100 ≈ 2e-10, as there are five of them), and their feeds
	// still hold all their own posts.
	for _, a := range authors {
		own := postsBy(want, a)
		if n := len(h.inbox(t, a)); len(own) > limit && (n < limit || n > limit+20*trimEvery) {
			t.Errorf("author %d (%d posts): own inbox holds %d entries, want %d..%d", a, len(own), n, limit, limit+20*trimEvery)
		}
		if got := h.feedAll(t, a, 30); !slices.Equal(got, own) {
			t.Errorf("author %d: feed of %d posts, want their %d posts (first difference at %d)", a, len(got), len(own), firstDiff(got, own))
		}
	}
}

// readMarked pages through the user's feed, again until a read has marked
// the user active, and returns the first read's posts. A read does not wait
// long for its mark (a best-effort write), so on a loaded machine one read
// may leave the user unmarked, and fan-out would skip the user.
func readMarked(t testing.TB, h *harness, user uint64, limit int) []feed.Post {
	t.Helper()
	got := h.feedAll(t, user, limit)
	for range 100 {
		lastRead, _, err := h.store.Activity(t.Context(), user)
		if err != nil {
			t.Fatal(err)
		}
		if lastRead != 0 {
			return got
		}
		h.feedAll(t, user, limit)
	}
	t.Fatalf("100 reads of user %d's feed did not mark the user active", user)
	return nil
}

// firstDiff returns the first index where the lists differ.
func firstDiff(a, b []feed.Post) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSelectivePush checks an author above the push threshold: new posts go
// to the inboxes of active followers only, and every follower's feed shows
// them.
func TestSelectivePush(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(-time.Hour).UnixMilli()

	t.Run("push_active", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) { c.PushThreshold = 3; c.ActiveDays = 7 }})
		const author = 600
		users := userRange(601, 6)
		active, inactive := users[:2], users[2:]
		early := h.publish(t, author, 60_000, base) // while still a push author
		followAll(t, h, users, author)
		h.waitIdle(t) // the sixth follower passed the threshold; the switch ran
		for _, u := range active {
			readMarked(t, h, u, 20) // a read marks the reader active
		}
		p := h.publish(t, author, 60_001, base+1)
		h.waitIdle(t)
		wantDelivery(t, h, author, p.ContentID, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePushActive, Recipients: 6, Delivered: 6})
		for _, u := range active {
			if !hasPost(h.inbox(t, u), p.ContentID) {
				t.Errorf("active follower %d's inbox lacks the post", u)
			}
		}
		for _, u := range inactive {
			if hasPost(h.inbox(t, u), p.ContentID) {
				t.Errorf("inactive follower %d's inbox got the post", u)
			}
		}
		want := []feed.Post{p, early}
		for _, u := range users {
			if got := readMarked(t, h, u, 1); !slices.Equal(got, want) {
				t.Errorf("follower %d's feed %v, want %v", u, contentIDs(got), contentIDs(want))
			}
		}
		// Having read, the formerly inactive followers are active now: the
		// next post reaches every inbox.
		q := h.publish(t, author, 60_002, base+2)
		h.waitIdle(t)
		for _, u := range users {
			if !hasPost(h.inbox(t, u), q.ContentID) {
				t.Errorf("follower %d (read since) did not get the next post", u)
			}
		}
		// A new follower of a pull author sees its posts too.
		h.follow(t, 700, author)
		want = []feed.Post{q, p, early}
		if got := h.feedAll(t, 700, 2); !slices.Equal(got, want) {
			t.Errorf("new follower's feed right after Follow %v, want %v", contentIDs(got), contentIDs(want))
		}
		h.waitIdle(t)
		if got := h.feedAll(t, 700, 2); !slices.Equal(got, want) {
			t.Errorf("new follower's feed at rest %v, want %v", contentIDs(got), contentIDs(want))
		}
	})

	t.Run("pull", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) { c.PushThreshold = 3; c.ActiveDays = 0 }})
		const author = 800
		users := userRange(801, 6)
		followAll(t, h, users, author)
		h.waitIdle(t)
		h.feedAll(t, users[0], 20)
		p := h.publish(t, author, 80_001, base+1)
		h.waitIdle(t)
		wantDelivery(t, h, author, p.ContentID, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePull, Recipients: 6, Delivered: 6})
		for _, u := range users {
			if got := h.inbox(t, u); len(got) > 0 {
				t.Errorf("follower %d's inbox %v, want empty", u, contentIDs(got))
			}
			if got := h.feedAll(t, u, 20); !slices.Equal(got, []feed.Post{p}) {
				t.Errorf("follower %d's feed %v, want [%d]", u, contentIDs(got), p.ContentID)
			}
		}
		// A delete of a pull post leaves every feed as well.
		if err := h.svc.DeletePost(context.Background(), author, p.ContentID); err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			if got := h.feedAll(t, u, 20); len(got) > 0 {
				t.Errorf("follower %d's feed after the delete %v", u, contentIDs(got))
			}
		}
	})
}

// world is the model of a randomized run: who follows whom and every post,
// as the test made them.
type world struct {
	users, authors []uint64
	follows        map[uint64]map[uint64]bool // user → authors
	posts          map[uint64]feed.Post
	deleted        map[uint64]bool
	log            []string
}

func (w *world) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

// live returns the posts of the author that are not deleted.
func (w *world) live(author uint64) []feed.Post {
	var out []feed.Post
	for id, p := range w.posts {
		if p.AuthorID == author && !w.deleted[id] {
			out = append(out, p)
		}
	}
	return out
}

// wantFeed is the brute-force feed of a user: every live post of the
// authors the user follows now, and the user's own, newest first.
func (w *world) wantFeed(user uint64) []feed.Post {
	all := w.live(user)
	for a := range w.follows[user] {
		all = append(all, w.live(a)...)
	}
	return newestFirst(all)
}

// TestRandomInterleavings runs random sequences of follows, unfollows,
// re-follows, publishes (often at equal times) and deletes while the workers
// run, and checks every inbox and feed against a model once the system is
// at rest. Inboxes are large enough (300) that nothing is trimmed, so an
// inbox must hold every live post of each push author the user follows.
// With pushThreshold 2 the authors switch to pull mode along the way and
// the inbox check is skipped (inactive readers get no pushes), but feeds must
// still be exact.
func TestRandomInterleavings(t *testing.T) {
	t.Parallel()
	for _, variant := range []struct {
		name      string
		threshold int64
		seeds     []uint64
	}{
		{"push", service.PushThresholdDefault, []uint64{1, 2, 3, 4}},
		{"switching to pull", 2, []uint64{5, 6}},
	} {
		t.Run(variant.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) {
				c.InboxLimit = 300
				c.PushThreshold = variant.threshold
			}})
			for _, seed := range variant.seeds {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					t.Parallel()
					runWorld(t, h, seed, variant.threshold == service.PushThresholdDefault)
				})
			}
		})
	}
}

func runWorld(t *testing.T, h *harness, seed uint64, checkInboxes bool) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	w := &world{follows: map[uint64]map[uint64]bool{}, posts: map[uint64]feed.Post{}, deleted: map[uint64]bool{}}
	w.users = userRange(seed*100+1, 6)
	w.authors = w.users[:4]
	for _, u := range w.users {
		w.follows[u] = map[uint64]bool{}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d; operations:\n%s", seed, strings.Join(w.log, "\n"))
		}
	})
	base := time.Now().Add(-time.Hour).UnixMilli()
	nextID := seed * 1_000_000
	pick := func(ids []uint64) uint64 { return ids[rng.IntN(len(ids))] }
	followed := func() (u, a uint64, ok bool) {
		var pairs [][2]uint64
		for _, u := range w.users {
			for a := range w.follows[u] {
				pairs = append(pairs, [2]uint64{u, a})
			}
		}
		if len(pairs) == 0 {
			return 0, 0, false
		}
		slices.SortFunc(pairs, func(x, y [2]uint64) int {
			if x[0] != y[0] {
				return int(x[0]) - int(y[0])
			}
			return int(x[1]) - int(y[1])
		})
		p := pairs[rng.IntN(len(pairs))]
		return p[0], p[1], true
	}
	follow := func(u, a uint64) {
		w.logf("follow %d→%d", u, a)
		h.follow(t, u, a)
		w.follows[u][a] = true
	}
	unfollow := func(u, a uint64) {
		w.logf("unfollow %d→%d", u, a)
		if err := h.svc.Unfollow(ctx, u, a); err != nil {
			t.Fatalf("unfollow %d→%d: %v", u, a, err)
		}
		delete(w.follows[u], a)
	}

	for range 150 {
		switch op := rng.IntN(100); {
		case op < 30: // publish; times collide often
			a := pick(w.authors)
			nextID++
			at := base + int64(rng.IntN(25))*1000
			w.logf("publish %d by %d at %d", nextID, a, at)
			w.posts[nextID] = h.publish(t, a, nextID, at)
		case op < 35: // publish a post again
			if len(w.posts) == 0 {
				continue
			}
			id := nextID - uint64(rng.IntN(len(w.posts)))
			p := w.posts[id]
			w.logf("republish %d", id)
			got, created, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: p.AuthorID, ContentID: id, PublishTime: &p.PublishTime})
			switch {
			case w.deleted[id] && feed.ErrorCode(err) != feed.ECONFLICT:
				t.Fatalf("republish of deleted %d: err %v, want conflict", id, err)
			case !w.deleted[id] && (err != nil || created || got != p):
				t.Fatalf("republish of %d: %+v, created %v, err %v", id, got, created, err)
			}
		case op < 55:
			u := pick(w.users)
			if a := pick(w.authors); a != u {
				follow(u, a)
			}
		case op < 67:
			if u, a, ok := followed(); ok {
				unfollow(u, a)
			}
		case op < 75: // re-follow at once
			if u, a, ok := followed(); ok {
				unfollow(u, a)
				follow(u, a)
			}
		case op < 85: // delete a post, sometimes one already deleted
			if len(w.posts) == 0 {
				continue
			}
			id := nextID - uint64(rng.IntN(len(w.posts)))
			w.logf("delete %d", id)
			if err := h.svc.DeletePost(ctx, w.posts[id].AuthorID, id); err != nil {
				t.Fatalf("delete %d: %v", id, err)
			}
			w.deleted[id] = true
		case op < 95: // read while the workers run
			u := pick(w.users)
			w.logf("read %d", u)
			checkFeedNow(t, h, w, u)
		default:
			w.logf("wait idle")
			h.waitIdle(t)
		}
	}

	h.waitIdle(t)
	for _, u := range w.users {
		inbox := h.inbox(t, u)
		held := map[uint64]bool{}
		for _, p := range inbox {
			held[p.ContentID] = true
			want, known := w.posts[p.ContentID]
			switch {
			case !known:
				t.Errorf("user %d: inbox holds unknown post %+v", u, p)
			case p != want:
				t.Errorf("user %d: inbox entry %+v, post is %+v", u, p, want)
			case w.deleted[p.ContentID]:
				t.Errorf("user %d: inbox holds deleted post %d", u, p.ContentID)
			case p.AuthorID != u && !w.follows[u][p.AuthorID]:
				t.Errorf("user %d: inbox holds post %d of %d, not followed", u, p.ContentID, p.AuthorID)
			}
		}
		sources := []uint64{u}
		if checkInboxes {
			sources = append(sources, slices.Sorted(maps.Keys(w.follows[u]))...)
		}
		for _, a := range sources {
			for _, p := range w.live(a) {
				if !held[p.ContentID] {
					t.Errorf("user %d: inbox lacks post %d of %d", u, p.ContentID, a)
				}
			}
		}
		want := w.wantFeed(u)
		for _, limit := range []int{1 + rng.IntN(5), 20} {
			if got := h.feedAll(t, u, limit); !slices.Equal(got, want) {
				t.Errorf("user %d, page size %d: feed\n%v\nwant\n%v", u, limit, contentIDs(got), contentIDs(want))
			}
		}
	}
	for id, p := range w.posts {
		if d := h.delivery(t, p.AuthorID, id); d.State != feed.DeliveryDone {
			t.Errorf("post %d: delivery %+v at rest", id, d)
		}
	}
}

// checkFeedNow checks what holds while work is in flight: the feed is
// strictly ordered, shows only the user's own posts and those of authors
// followed now (deleted ones may linger until their retraction runs), and
// holds every live post of the user's own.
func checkFeedNow(t *testing.T, h *harness, w *world, u uint64) {
	t.Helper()
	got := h.feedAll(t, u, 1+len(w.posts)%7)
	for i, p := range got {
		if i > 0 && !p.Key().Less(got[i-1].Key()) {
			t.Fatalf("user %d: feed out of order or repeated at %d: %v", u, i, contentIDs(got))
		}
		if p.AuthorID != u && !w.follows[u][p.AuthorID] {
			t.Fatalf("user %d: feed shows post %d of %d, not followed", u, p.ContentID, p.AuthorID)
		}
		if want, ok := w.posts[p.ContentID]; !ok || want != p {
			t.Fatalf("user %d: feed shows %+v, published %+v", u, p, want)
		}
		if p.AuthorID == u && w.deleted[p.ContentID] {
			t.Fatalf("user %d: feed shows own deleted post %d", u, p.ContentID)
		}
	}
	for _, p := range w.live(u) {
		if !hasPost(got, p.ContentID) {
			t.Fatalf("user %d: feed lacks own post %d", u, p.ContentID)
		}
	}
}

// wantRecipients checks that exactly the users and the author hold the post
// in their inboxes, once each.
func wantRecipients(t testing.TB, h *harness, users []uint64, author, contentID uint64) {
	t.Helper()
	got := h.recipients(t, contentID)
	for _, u := range append([]uint64{author}, users...) {
		if n := got[u]; n != 1 {
			t.Fatalf("user %d holds %d entries of post %d, want 1", u, n, contentID)
		}
		delete(got, u)
	}
	if len(got) > 0 {
		t.Fatalf("%d other inboxes hold post %d: %v", len(got), contentID, got)
	}
}

// progress returns how many followers a running delivery has covered, or -1
// once it is done.
func progress(t testing.TB, h *harness, author, id uint64) (feed.Delivery, int64) {
	t.Helper()
	d := h.delivery(t, author, id)
	if d.State == feed.DeliveryDone {
		return d, -1
	}
	return d, d.Delivered
}

// TestFanoutSurvivesStops stops the workers of one process again and again
// in the middle of a 5,000-follower fan-out, alternately aborting batches in
// flight (soft stop 0: their transactions are cut off, other shards' writes
// may have committed) and stopping gracefully, and restarts them. Before the
// first start a "dead worker" claims a task, runs one batch of it and
// vanishes without releasing it, as a SIGKILL would leave it: the workers
// must take it over when its lease ends. At the end every follower has the
// post once and the delivery counted each follower exactly once.
func TestFanoutSurvivesStops(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true, configured: func(c *service.Config) {
		c.TaskSize, c.BatchSize = 1000, 100
		c.PushThreshold = 1 << 40
	}})
	ctx := context.Background()
	const author, n = 2, 5000
	users := userRange(20_000, n)
	h.seedFollowers(t, author, users)
	p := h.publish(t, author, 2_000_001, time.Now().UnixMilli())

	// The dead worker plans the delivery, claims a task and runs one batch.
	home := h.store.ShardOf(author)
	now, until := time.Now().UnixMilli(), time.Now().Add(h.cfg.Lease).UnixMilli()
	jobs, err := h.store.ClaimDeliveries(ctx, home, now, until, 8, 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim delivery: %v, %v", jobs, err)
	}
	if _, err := h.store.PlanDelivery(ctx, jobs[0], store.PlanOptions{TaskSize: h.cfg.TaskSize}); err != nil {
		t.Fatal(err)
	}
	if task, res, err := h.store.RunNextTask(ctx, home, now, 1, store.BatchOptions{Size: h.cfg.BatchSize, LeaseUntil: until}); err != nil || task == nil || res.TaskDone {
		t.Fatalf("dead worker's first batch: %+v, %+v, %v", task, res, err)
	}

	stops := 0
	for round := 0; ; round++ {
		softStop := time.Second
		if round%2 == 0 {
			softStop = 0 // abort whatever is in flight
		}
		stop := runWorkers(h.svc, softStop)
		t.Cleanup(stop)
		// Stop once the workers covered another slice of the followers.
		target := int64(round+1) * 600
		wait.For(t, fmt.Sprintf("round %d: %d followers covered", round, target), func() error {
			if d, covered := progress(t, h, author, p.ContentID); covered >= 0 && covered < target {
				return fmt.Errorf("delivery %+v", d)
			}
			return nil
		})
		stop()
		if _, covered := progress(t, h, author, p.ContentID); covered < 0 {
			break
		}
		stops++
	}
	t.Logf("stopped the workers %d times mid-fan-out", stops)
	if stops < 3 {
		t.Errorf("fan-out finished after %d stops, want at least 3 (make the fan-out longer)", stops)
	}
	t.Cleanup(runWorkers(h.svc, time.Second))
	h.waitIdle(t)
	wantDelivery(t, h, author, p.ContentID, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: n, Delivered: n})
	wantRecipients(t, h, users, author, p.ContentID)
}

// counterSum returns the sum of a counter family's series in a registry.
func counterSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestFanoutTwoProcesses runs the workers of two Service instances, each
// with its own pools as separate processes would have, on one store: a post
// to 20,000 followers in tasks of 500 reaches every follower exactly once
// and its delivery finishes with every follower counted once.
func TestFanoutTwoProcesses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) {
		c.TaskSize = 500
		c.PushThreshold = 1 << 40
	}})
	_, reg := h.startProcess(t)
	const author, n = 3, 20_000
	users := userRange(100_000, n)
	h.seedFollowers(t, author, users)
	p := h.publish(t, author, 3_000_001, time.Now().UnixMilli())
	h.waitIdle(t)
	wantDelivery(t, h, author, p.ContentID, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: n, Delivered: n})
	wantRecipients(t, h, users, author, p.ContentID)
	t.Logf("the second process wrote %.0f of %d inbox rows", counterSum(t, reg, "feed_fanout_inbox_rows_total"), n)
}

// TestDeleteDuringFanout deletes a post while its fan-out to 3,000
// followers runs: the running tasks turn into removals, and at rest no
// inbox holds the post.
func TestDeleteDuringFanout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) {
		c.TaskSize, c.BatchSize = 500, 50
		c.PushThreshold = 1 << 40
	}})
	const author, n = 4, 3000
	users := userRange(300_000, n)
	h.seedFollowers(t, author, users)
	keep := h.publish(t, author, 4_000_001, time.Now().UnixMilli()-1)
	gone := h.publish(t, author, 4_000_002, time.Now().UnixMilli())
	wait.For(t, "a quarter of the followers covered", func() error {
		d, covered := progress(t, h, author, gone.ContentID)
		if covered >= 0 && covered < n/4 {
			h.failIfRefused(t)
			return fmt.Errorf("delivery %+v", d)
		}
		t.Logf("deleting with the delivery at %+v", d)
		return nil
	})
	if err := h.svc.DeletePost(context.Background(), author, gone.ContentID); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)
	if got := h.recipients(t, gone.ContentID); len(got) > 0 {
		t.Fatalf("%d inboxes still hold the deleted post", len(got))
	}
	if d := h.delivery(t, author, gone.ContentID); d.State != feed.DeliveryDone {
		t.Fatalf("retraction %+v, want done", d)
	}
	wantRecipients(t, h, users, author, keep.ContentID)
	for _, u := range []uint64{users[0], users[n/2], users[n-1]} {
		if got := h.feedAll(t, u, 10); !slices.Equal(got, []feed.Post{keep}) {
			t.Fatalf("user %d's feed %v, want [%d]", u, contentIDs(got), keep.ContentID)
		}
	}
}

// TestFollowEventsSurviveStops follows through the service while the
// workers are stopped and restarted again and again, aborting whatever is
// in flight: at rest every follow is applied once (followers list, follower
// count, backfilled inbox).
func TestFollowEventsSurviveStops(t *testing.T) {
	t.Parallel()
	const author, n = 5, 150
	// A follower counted twice would pass the threshold and switch the
	// author to pull mode.
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true, configured: func(c *service.Config) { c.PushThreshold = n }})
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []feed.Post
	for i := range 5 {
		posts = append(posts, h.publish(t, author, uint64(5_000_000+i), base+int64(i)))
	}
	posts = newestFirst(posts)
	users := userRange(500_000, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		followAll(t, h, users, author)
	}()
	rounds := 0
	for stopped := false; !stopped; rounds++ {
		stop := runWorkers(h.svc, 0)
		t.Cleanup(stop)
		// Let the workers apply a few events, then cut them off.
		applied := len(followersOf(t, h.svc, author))
		want := min(applied+30, n)
		wait.For(t, fmt.Sprintf("%d follow events applied", want), func() error {
			if got := len(followersOf(t, h.svc, author)); got < want {
				b, _ := h.store.Backlog(context.Background())
				return fmt.Errorf("%d followers, backlog %+v", got, b)
			}
			return nil
		})
		stop()
		select {
		case <-done:
			stopped = len(followersOf(t, h.svc, author)) == n
		default:
		}
	}
	t.Logf("stopped the workers %d times", rounds)
	t.Cleanup(runWorkers(h.svc, time.Second))
	h.waitIdle(t)
	if all := followersOf(t, h.svc, author); !slices.Equal(all, users) {
		t.Fatalf("author has %d followers, want %d", len(all), n)
	}
	for _, u := range users {
		if got := h.inbox(t, u); !slices.Equal(got, posts) {
			t.Fatalf("user %d's inbox %v, want %v", u, contentIDs(got), contentIDs(posts))
		}
	}
	// Each follower is counted once.
	p := h.publish(t, author, 5_000_100, base+100)
	h.waitIdle(t)
	wantDelivery(t, h, author, p.ContentID, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: n, Delivered: n})
}

package store_test

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

func TestPublishPost(t *testing.T) {
	t.Parallel()

	// Subtests share the store; each uses its own author and ids.
	st := newStore(t, 1)

	t.Run("creates the post, its delivery and the own inbox entry", func(t *testing.T) {
		t.Parallel()
		p := publish(t, st, 6, 60, t0)

		got, err := st.GetPost(t.Context(), 6, 60)
		must(t, err)
		if got != p {
			t.Errorf("GetPost = %+v, want %+v", got, p)
		}
		if ids := inbox(t, st, 6); !slices.Equal(ids, []uint64{60}) {
			t.Errorf("author's inbox = %v, want [60]", ids)
		}
		d, err := st.GetDelivery(t.Context(), 6, 60)
		must(t, err)
		if !reflect.DeepEqual(d, feed.Delivery{State: feed.DeliveryPending, Mode: feed.ModePush}) {
			t.Errorf("delivery = %+v, want pending push", d)
		}
		if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM deliveries WHERE author_id = 6 AND state = 0"); n != 1 {
			t.Errorf("%d pending deliveries, want 1", n)
		}
	})

	t.Run("same id again returns the stored post", func(t *testing.T) {
		t.Parallel()
		p := publish(t, st, 7, 100, t0)

		got, created, err := st.PublishPost(t.Context(), p, t0+5)
		must(t, err)
		if created || got != p {
			t.Errorf("repeat: got %+v created=%v, want the stored post, created=false", got, created)
		}
		// Other fields: the stored post comes back for the caller to judge.
		other := p
		other.PublishTime, other.Kind = t0+1000, "story"
		got, created, err = st.PublishPost(t.Context(), other, t0+5)
		must(t, err)
		if created || got != p {
			t.Errorf("conflicting repeat: got %+v created=%v, want %+v, created=false", got, created, p)
		}
		if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM posts WHERE author_id = 7"); n != 1 {
			t.Errorf("%d posts rows, want 1", n)
		}
		if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM deliveries WHERE author_id = 7"); n != 1 {
			t.Errorf("%d deliveries rows, want 1", n)
		}
		if ids := inbox(t, st, 7); !slices.Equal(ids, []uint64{100}) {
			t.Errorf("author's inbox = %v, want [100]", ids)
		}
	})

	t.Run("id of a deleted post is a conflict", func(t *testing.T) {
		t.Parallel()
		p := publish(t, st, 8, 800, t0)
		must(t, st.DeletePost(t.Context(), 8, 800))

		_, _, err := st.PublishPost(t.Context(), p, t0)
		wantCode(t, err, feed.ECONFLICT)
		if ids := inbox(t, st, 8); len(ids) != 0 {
			t.Errorf("author's inbox = %v, want empty", ids)
		}
	})
}

func TestDeletePost(t *testing.T) {
	t.Parallel()

	// Subtests that claim nothing share this store.
	st := newStore(t, 2)

	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		author := idOn(st, 0, 1)
		sameShard, otherShard := idOn(st, 0, author+1), idOn(st, 1, 1)
		publish(t, st, author, 100, t0)

		wantCode(t, st.DeletePost(t.Context(), author, 999), feed.ENOTFOUND)
		wantCode(t, st.DeletePost(t.Context(), sameShard, 100), feed.ENOTFOUND)
		wantCode(t, st.DeletePost(t.Context(), otherShard, 100), feed.ENOTFOUND)
		if _, err := st.GetPost(t.Context(), author, 100); err != nil {
			t.Errorf("post gone after foreign deletes: %v", err)
		}
		_, err := st.GetDelivery(t.Context(), sameShard, 100)
		wantCode(t, err, feed.ENOTFOUND)
	})

	t.Run("idempotent; own inbox entry removed", func(t *testing.T) {
		t.Parallel()
		author := idOn(st, 1, 50)
		publish(t, st, author, 500, t0)
		publish(t, st, author, 501, t0+1)

		must(t, st.DeletePost(t.Context(), author, 500))
		must(t, st.DeletePost(t.Context(), author, 500))

		_, err := st.GetPost(t.Context(), author, 500)
		wantCode(t, err, feed.ENOTFOUND)
		if ids := inbox(t, st, author); !slices.Equal(ids, []uint64{501}) {
			t.Errorf("author's inbox = %v, want [501]", ids)
		}
		posts, err := st.ListPosts(t.Context(), author, store.Top, 10)
		must(t, err)
		if len(posts) != 1 || posts[0].ContentID != 501 {
			t.Errorf("ListPosts = %+v, want only 501", posts)
		}
		del, err := st.DeletedSince(t.Context(), map[uint64]int64{author: 0})
		must(t, err)
		if !maps.Equal(del, map[uint64]bool{500: true}) {
			t.Errorf("DeletedSince = %v, want 500", del)
		}
	})

	t.Run("pending delivery becomes a retraction", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		publish(t, st, 7, 100, t0)
		follow(t, st, 8, 7)
		must(t, st.DeletePost(t.Context(), 7, 100))

		state, retract := deliveryRow(t, st, 7, 100)
		if state != 0 || !retract {
			t.Fatalf("delivery state=%d retract=%v, want pending retraction", state, retract)
		}
		// Planned as removals over every follower: a backfill may have
		// copied the post anywhere.
		res := plan(t, st, 7, t0, store.PlanOptions{TaskSize: 10})
		if len(res) != 1 || res[0].Tasks != 1 {
			t.Fatalf("plan = %+v, want one task", res)
		}
		if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM fanout_tasks WHERE content_id = 100 AND retract = 1"); n != 1 {
			t.Errorf("%d retraction tasks, want 1", n)
		}
	})

	t.Run("planned delivery is planned again as a retraction", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		publish(t, st, 7, 100, t0)
		for u := uint64(10); u < 16; u++ {
			follow(t, st, u, 7)
		}
		plan(t, st, 7, t0, store.PlanOptions{TaskSize: 3}) // (0,12] and (12,∞)
		tasks, err := st.ClaimTasks(t.Context(), st.Shards()[0], t0, t0+lease, 10, newToken())
		must(t, err)
		if len(tasks) != 2 {
			t.Fatalf("claimed %d tasks, want 2", len(tasks))
		}
		slices.SortFunc(tasks, func(a, b store.Task) int { return cmp.Compare(a.Seq, b.Seq) })
		// Task 0 finishes; task 1 delivers one batch and is still running.
		for done := false; !done; {
			res, err := st.RunTaskBatch(t.Context(), &tasks[0], store.BatchOptions{Size: 2, LeaseUntil: t0 + lease})
			must(t, err)
			done = res.TaskDone
		}
		_, err = st.RunTaskBatch(t.Context(), &tasks[1], store.BatchOptions{Size: 2, LeaseUntil: t0 + lease})
		must(t, err)
		if got := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 100 AND user_id <> 7"); got != 5 {
			t.Fatalf("%d follower inboxes hold the post, want 5", got)
		}

		must(t, st.DeletePost(t.Context(), 7, 100))

		// The tasks are dropped and the delivery goes back to planning, as
		// a retraction.
		if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM fanout_tasks WHERE content_id = 100"); n != 0 {
			t.Errorf("%d tasks left after the delete, want none", n)
		}
		if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM deliveries WHERE content_id = 100 AND state = 0 AND retract = 1"); n != 1 {
			t.Errorf("the delivery is not pending as a retraction")
		}
		// The worker still pushing task 1 loses its claim and writes nothing.
		_, err = st.RunTaskBatch(t.Context(), &tasks[1], store.BatchOptions{Size: 2, LeaseUntil: t0 + lease})
		if !errors.Is(err, store.ErrLostClaim) {
			t.Fatalf("stale pusher: err = %v, want ErrLostClaim", err)
		}
		if got := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 100"); got != 5 {
			t.Fatalf("stale pusher wrote: %d inboxes hold the post, want still 5", got)
		}
		must(t, st.ReleaseTask(t.Context(), &tasks[1]))

		// Planned again, the removals empty every inbox.
		plan(t, st, 7, t0+1, store.PlanOptions{TaskSize: 3})
		runAllTasks(t, st, t0+1, store.BatchOptions{Size: 2})
		if got := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 100"); got != 0 {
			t.Errorf("%d inboxes still hold the deleted post", got)
		}
		d, err := st.GetDelivery(t.Context(), 7, 100)
		must(t, err)
		if d.State != feed.DeliveryDone {
			t.Errorf("delivery = %+v, want done", d)
		}
	})

	t.Run("done delivery is planned again as a retraction", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 2)
		author := idOn(st, 0, 1)
		followers := append(idsOn(st, 0, 1000, 3), idsOn(st, 1, 1000, 3)...)
		for _, u := range followers {
			follow(t, st, u, author)
		}
		publish(t, st, author, 100, t0)
		deliver(t, st, author, t0)
		if got := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 100"); got != 7 {
			t.Fatalf("%d inboxes hold the post, want 7", got)
		}

		must(t, st.DeletePost(t.Context(), author, 100))
		state, retract := deliveryRow(t, st, author, 100)
		if state != 0 || !retract {
			t.Fatalf("delivery state=%d retract=%v, want pending retraction", state, retract)
		}
		deliver(t, st, author, t0+1)
		if got := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 100"); got != 0 {
			t.Errorf("%d inboxes still hold the deleted post", got)
		}
		d, err := st.GetDelivery(t.Context(), author, 100)
		must(t, err)
		if d.State != feed.DeliveryDone || d.Recipients != 6 || d.Delivered != 6 {
			t.Errorf("delivery = %+v, want done 6/6", d)
		}
	})
}

// deliveryRow reads a delivery's raw state and retract flag.
func deliveryRow(t *testing.T, st *store.Store, author, id uint64) (state int, retract bool) {
	t.Helper()
	var r struct {
		State   int  `db:"state"`
		Retract bool `db:"retract"`
	}
	must(t, st.ShardOf(author).DB.GetContext(t.Context(), &r, "SELECT state, retract FROM deliveries WHERE content_id = ?", id))
	return r.State, r.Retract
}

func TestListPosts(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)

	// 60 posts over 4 distinct publish times, ids in random order; another
	// author's posts interleave in the same table. One more is deleted.
	var want, other []feed.Post
	for i, id := range rand.Perm(60) {
		want = append(want, feed.Post{ContentID: uint64(1000 + id), AuthorID: 7, PublishTime: t0 + int64(i%4), Kind: feed.KindPost})
		other = append(other, feed.Post{ContentID: uint64(5000 + i), AuthorID: 8, PublishTime: t0 + int64(i%4), Kind: feed.KindPost})
	}
	insertPosts(t, st, append(want, other...))
	publish(t, st, 7, 999, t0+2)
	must(t, st.DeletePost(t.Context(), 7, 999))
	slices.SortFunc(want, newestFirst)

	for _, limit := range []int{1, 7, 20, 59, 100} {
		var got []feed.Post
		before := store.Top
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("paging does not end")
			}
			page, err := st.ListPosts(t.Context(), 7, before, limit)
			must(t, err)
			if len(page) > limit {
				t.Fatalf("page of %d > limit %d", len(page), limit)
			}
			got = append(got, page...)
			if len(page) < limit {
				break
			}
			before = page[len(page)-1].Key()
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: paged %d posts, want %d in newest-first order", limit, len(got), len(want))
		}
	}
}

func TestPullPosts(t *testing.T) {
	t.Parallel()
	st := newStore(t, 3)

	// Four authors on each of three shards, five posts each, some at equal
	// times.
	var authors []uint64
	var all []feed.Post
	posts := map[uint64][]feed.Post{} // newest first
	for i := range 3 {
		for _, a := range idsOn(st, i, 100, 4) {
			authors = append(authors, a)
			for j := range 5 {
				p := feed.Post{ContentID: a*100 + uint64(j), AuthorID: a, PublishTime: t0 + int64(j%3), Kind: feed.KindPost}
				posts[a] = append(posts[a], p)
				all = append(all, p)
			}
			slices.SortFunc(posts[a], newestFirst)
		}
	}
	insertPosts(t, st, all)
	// A deleted post (the author's newest) never comes back.
	gone := publish(t, st, authors[0], 1, t0+10)
	must(t, st.DeletePost(t.Context(), authors[0], gone.ContentID))

	t.Run("per-author limit, bound, one query per shard", func(t *testing.T) {
		t.Parallel()
		var sources []store.PullSource
		want := map[uint64][]feed.Post{}
		for i, a := range authors {
			before := store.Top
			if i%2 == 1 { // below the author's second newest post
				before = posts[a][1].Key()
			}
			sources = append(sources, store.PullSource{AuthorID: a, Before: before})
			for _, p := range posts[a] {
				if p.Key().Less(before) && len(want[a]) < 2 {
					want[a] = append(want[a], p)
				}
			}
		}
		got, queries := pull(t, st, sources, 2)
		if queries != 3 {
			t.Errorf("%d queries for authors on 3 shards, want 3", queries)
		}
		byAuthor := map[uint64][]feed.Post{}
		for _, p := range got {
			byAuthor[p.AuthorID] = append(byAuthor[p.AuthorID], p)
		}
		for _, a := range authors {
			if !slices.Equal(byAuthor[a], want[a]) {
				t.Errorf("author %d: got %+v, want %+v", a, byAuthor[a], want[a])
			}
		}
		for _, p := range got {
			if p.ContentID == gone.ContentID {
				t.Errorf("deleted post %d pulled", p.ContentID)
			}
		}
	})

	t.Run("authors on one shard cost one query", func(t *testing.T) {
		t.Parallel()
		sources := []store.PullSource{{AuthorID: authors[4], Before: store.Top}, {AuthorID: authors[5], Before: store.Top}}
		got, queries := pull(t, st, sources, 10)
		if queries != 1 || len(got) != 10 {
			t.Errorf("%d posts in %d queries, want 10 in 1", len(got), queries)
		}
	})

	t.Run("no sources", func(t *testing.T) {
		t.Parallel()
		got, queries := pull(t, st, nil, 10)
		if len(got) != 0 || queries != 0 {
			t.Errorf("got %d posts in %d queries", len(got), queries)
		}
	})

	t.Run("64 authors a statement", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 2)
		// 130 authors on shard 0 (3 statements), 10 on shard 1 (1).
		many := append(idsOn(st, 0, 10_000, 130), idsOn(st, 1, 10_000, 10)...)
		var sources []store.PullSource
		var posts []feed.Post
		for _, a := range many {
			posts = append(posts, feed.Post{ContentID: a, AuthorID: a, PublishTime: t0, Kind: feed.KindPost})
			sources = append(sources, store.PullSource{AuthorID: a, Before: store.Top})
		}
		insertPosts(t, st, posts)
		got, queries := pull(t, st, sources, 5)
		if queries != 4 {
			t.Errorf("%d queries, want 4", queries)
		}
		var ids []uint64
		for _, p := range got {
			ids = append(ids, p.ContentID)
		}
		slices.Sort(ids)
		want := slices.Clone(many)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("pulled %d posts, want one of each of %d authors", len(ids), len(want))
		}
	})
}

// pull runs PullPosts on databases that all answer and returns the posts
// and the statements run.
func pull(t *testing.T, st *store.Store, sources []store.PullSource, limit int) ([]feed.Post, int) {
	t.Helper()
	got, err := st.PullPosts(t.Context(), sources, limit, 0)
	must(t, err)
	if got.Missing != nil || got.Err != nil {
		t.Fatalf("authors %v missing: %v", got.Missing, got.Err)
	}
	return got.Posts, got.Queries
}

// TestPullPostsDatabaseDown pulls from two databases of which the second
// refuses connections or hangs: the first's posts come back with the
// second's authors missing, a hung database costs the shard timeout, and
// once its probe could not read it, it is not asked at all. The end of the
// caller's own context fails the whole read instead.
func TestPullPostsDatabaseDown(t *testing.T) {
	t.Parallel()
	m := storetest.NewShardMap(t, storetest.Options{Shards: 2})
	healthy := openStore(t, m)
	must(t, healthy.Migrate(t.Context(), discard))
	up, down := idsOn(healthy, 0, 100, 3), idsOn(healthy, 1, 100, 2)
	var posts []feed.Post
	var sources []store.PullSource
	for i, a := range append(slices.Clone(up), down...) {
		posts = append(posts, feed.Post{ContentID: uint64(1000 + i), AuthorID: a, PublishTime: t0 + int64(i), Kind: feed.KindPost})
		sources = append(sources, store.PullSource{AuthorID: a, Before: store.Top})
	}
	insertPosts(t, healthy, posts)
	wantUp := posts[:len(up)]
	// withSecond opens the databases of m with the second one at dsn.
	withSecond := func(dsn string) *store.Store {
		broken := *m
		broken.Databases = maps.Clone(m.Databases)
		cfg := broken.Databases["db1"]
		cfg.DSN = dsn
		broken.Databases["db1"] = cfg
		return openStore(t, &broken)
	}
	// The shard timeout: what a hung database costs, and long enough for
	// the healthy one's read on a machine busy with other suites.
	const shardTimeout = 2 * time.Second
	check := func(what string, got store.Pulled, queries int) {
		t.Helper()
		slices.SortFunc(got.Posts, func(a, b feed.Post) int { return cmp.Compare(a.ContentID, b.ContentID) })
		if !slices.Equal(got.Posts, wantUp) || !slices.Equal(got.Missing, down) || got.Queries != queries {
			t.Errorf("%s: posts %v, missing %v, %d statements; want %v, %v, %d", what, got.Posts, got.Missing, got.Queries, wantUp, down, queries)
		}
		wantCode(t, got.Err, feed.EUNAVAILABLE)
	}

	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		st := withSecond("root@tcp(127.0.0.1:1)/x?timeout=1s")
		got, err := st.PullPosts(t.Context(), sources, 10, 0)
		must(t, err)
		check("refused", got, 1)
	})

	t.Run("hung", func(t *testing.T) {
		t.Parallel()
		addr, accepted := hungServer(t)
		st := withSecond("root@tcp(" + addr + ")/x")
		got, err := st.PullPosts(t.Context(), sources, 10, shardTimeout)
		must(t, err)
		check("hung, not flagged", got, 1)
		if accepted.Load() == 0 {
			t.Fatal("the hung database was not asked")
		}

		st.CheckHealth(t.Context(), shardTimeout, nil)
		if h := st.Shards()[1].Health(); h.State != store.StateDown || !h.Unreadable {
			t.Fatalf("probe of the hung database: %+v, want down and unreadable", h)
		}
		asked := accepted.Load()
		// No shard timeout: asking the hung database would wait for ctx.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		got, err = st.PullPosts(ctx, sources, 10, 0)
		must(t, err)
		check("hung, flagged down", got, 1)
		if n := accepted.Load(); n != asked {
			t.Errorf("a database its probe found unreadable was asked (%d connections, %d before)", n, asked)
		}
	})

	// The threshold read of a process that caches heads first reads each
	// database's backdate sequence: a database that hangs then costs the
	// timeout once, and is not asked again by the read.
	t.Run("newest, hung, cached", func(t *testing.T) {
		t.Parallel()
		addr, accepted := hungServer(t)
		st := withSecond("root@tcp(" + addr + ")/x")
		st.CacheHeads(time.Minute, time.Now)
		got, err := st.PullNewest(t.Context(), sources, 1, shardTimeout)
		must(t, err)
		if newest := newestOf(got.Posts, 1); !slices.Equal(newest, wantUp[len(wantUp)-1:]) || !slices.Equal(got.Missing, down) {
			t.Errorf("newest %v, missing %v; want %v, %v", newest, got.Missing, wantUp[len(wantUp)-1:], down)
		}
		wantCode(t, got.Err, feed.EUNAVAILABLE)
		if n := accepted.Load(); n != 1 {
			t.Errorf("the hung database was asked on %d connections, want 1", n)
		}
	})

	// With every source on the failed database, the read has nothing to
	// ask after the sequences: the sources come back missing.
	t.Run("newest, refused, cached, all down", func(t *testing.T) {
		t.Parallel()
		st := withSecond("root@tcp(127.0.0.1:1)/x?timeout=1s")
		st.CacheHeads(time.Minute, time.Now)
		var only []store.PullSource
		for _, a := range down {
			only = append(only, store.PullSource{AuthorID: a, Before: store.Top})
		}
		got, err := st.PullNewest(t.Context(), only, 0, shardTimeout)
		must(t, err)
		if len(got.Posts) != 0 || !slices.Equal(got.Missing, down) {
			t.Errorf("posts %v, missing %v; want none, %v", got.Posts, got.Missing, down)
		}
		wantCode(t, got.Err, feed.EUNAVAILABLE)
	})

	t.Run("caller's deadline", func(t *testing.T) {
		t.Parallel()
		addr, _ := hungServer(t)
		st := withSecond("root@tcp(" + addr + ")/x")
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		got, err := st.PullPosts(ctx, sources, 10, 0)
		if err == nil {
			t.Fatalf("read past the caller's deadline: %+v, want an error", got)
		}
		wantCode(t, err, feed.EUNAVAILABLE)
	})
}

// hungServer listens and accepts connections but never answers, as a
// frozen host does; it counts the connections it accepted.
func hungServer(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	accepted = new(atomic.Int64)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String(), accepted
}

// A content id names one post in the whole service: with several shards
// the posts unique key covers only one database, so publish claims the id
// on the id's own shard first.
func TestPublishPostContentIDUniqueAcrossShards(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t, storetest.Options{Shards: 3})
	ctx := context.Background()
	var authors []uint64
	for id := uint64(1); len(authors) < 3; id++ {
		if !slices.ContainsFunc(authors, func(a uint64) bool { return st.ShardOf(a) == st.ShardOf(id) }) {
			authors = append(authors, id)
		}
	}
	for content := uint64(9000); content < 9010; content++ {
		first := feed.Post{AuthorID: authors[0], ContentID: content, PublishTime: 1000, Kind: "post"}
		if _, created, err := st.PublishPost(ctx, first, 1); err != nil || !created {
			t.Fatalf("publish %d: created=%v err=%v", content, created, err)
		}
		for _, other := range authors[1:] {
			p := first
			p.AuthorID = other
			_, created, err := st.PublishPost(ctx, p, 1)
			if created || feed.ErrorCode(err) != feed.ECONFLICT {
				t.Fatalf("author %d reusing content id %d: created=%v err=%v, want conflict", other, content, created, err)
			}
		}
		// The owner's retry is still the same post.
		if stored, created, err := st.PublishPost(ctx, first, 2); err != nil || created || stored != first {
			t.Fatalf("retry of %d: %+v created=%v err=%v", content, stored, created, err)
		}
	}
}

// TestDeleteRunningSweepsEveryDatabase: a follow not yet in the followers
// list, on a database the push has no task for, gets the post by its
// backfill while the push runs; deleting the post then removes it there
// too, since the retraction is planned afresh over every database.
func TestDeleteRunningSweepsEveryDatabase(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	onHome := idsOn(st, 0, 100, 3)
	late := idOn(st, 1, 5000)
	followMany(t, st, author, onHome)  // listed followers, all on the author's database
	followPending(t, st, late, author) // an edge on the other database, not listed yet
	publish(t, st, author, 42, t0)
	plan(t, st, author, t0, store.PlanOptions{TaskSize: 1000})
	if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM fanout_tasks WHERE target = ?", st.Shards()[1].Name); n != 0 {
		t.Fatalf("%d push tasks for the other database, want none", n)
	}
	if _, _, err := st.Backfill(t.Context(), late, author, 300, false); err != nil {
		t.Fatal(err)
	}
	if got := inbox(t, st, late); !slices.Contains(got, 42) {
		t.Fatalf("the backfill did not copy the post: %v", got)
	}
	must(t, st.DeletePost(t.Context(), author, 42)) // the push is still running
	plan(t, st, author, t0, store.PlanOptions{TaskSize: 1000})
	runAllTasks(t, st, t0, store.BatchOptions{Size: 1000})
	for _, u := range append(onHome, late) {
		if got := inbox(t, st, u); slices.Contains(got, 42) {
			t.Errorf("user %d keeps the deleted post: %v", u, got)
		}
	}
}

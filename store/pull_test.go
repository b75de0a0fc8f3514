package store_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
	"github.com/feedhq/feed/store/storetest"
)

// outboxes is the brute-force truth of PullNewest: every post of a set of
// authors, with which are deleted.
type outboxes struct {
	posts   []feed.Post
	deleted map[uint64]bool
}

// load writes the posts, marking deleted those of deleted.
func (o outboxes) load(t *testing.T, st *store.Store) {
	t.Helper()
	insertPosts(t, st, o.posts)
	byShard := map[*store.Shard][]any{}
	for _, p := range o.posts {
		if o.deleted[p.ContentID] {
			sh := st.ShardOf(p.AuthorID)
			byShard[sh] = append(byShard[sh], p.ContentID)
		}
	}
	for sh, ids := range byShard {
		for part := range slices.Chunk(ids, 500) {
			q := "UPDATE posts SET deleted = 1 WHERE content_id IN (?" + strings.Repeat(",?", len(part)-1) + ")"
			mustExec(t, sh.DB, q, part...)
		}
	}
}

// newest is what a full sort gives: the newest limit live posts of all the
// sources together, each in its own range.
func (o outboxes) newest(sources []store.PullSource, limit int) []feed.Post {
	bySource := map[uint64][]store.PullSource{}
	for _, src := range sources {
		bySource[src.AuthorID] = append(bySource[src.AuthorID], src)
	}
	var out []feed.Post
	for _, p := range o.posts {
		if o.deleted[p.ContentID] {
			continue
		}
		for _, src := range bySource[p.AuthorID] {
			if p.Key().Less(src.Before) && !p.Key().Less(src.From) && (src.Kinds == nil || slices.Contains(src.Kinds, p.Kind)) {
				out = append(out, p)
				break
			}
		}
	}
	slices.SortFunc(out, newestFirst)
	return out[:min(limit, len(out))]
}

// newestOf sorts what a pull read returned and keeps the newest limit, as
// the merge of a page does.
func newestOf(posts []feed.Post, limit int) []feed.Post {
	posts = slices.Clone(posts)
	slices.SortFunc(posts, newestFirst)
	posts = slices.CompactFunc(posts, func(a, b feed.Post) bool { return a.ContentID == b.ContentID })
	return posts[:min(limit, len(posts))]
}

// randomOutboxes gives authors 0 to maxPosts posts each; dense authors post
// within 60 ms (ties on publish_time at every millisecond), the others
// within 20 s. About one post in six is deleted, and so is the newest post
// of every fifth author: a head that stands above its author's live posts.
func randomOutboxes(rng *rand.Rand, authors []uint64, maxPosts int) outboxes {
	o := outboxes{deleted: map[uint64]bool{}}
	id := uint64(1_000_000)
	for i, a := range authors {
		span := 20_000
		if i%2 == 0 {
			span = 60
		}
		var newest feed.Post
		for range rng.IntN(maxPosts + 1) {
			id++
			p := feed.Post{ContentID: id, AuthorID: a, PublishTime: t0 + int64(rng.IntN(span)), Kind: feed.KindPost}
			o.posts = append(o.posts, p)
			if rng.IntN(6) == 0 {
				o.deleted[p.ContentID] = true
			}
			if newest.Key().Less(p.Key()) {
				newest = p
			}
		}
		if i%5 == 0 && newest.ContentID != 0 {
			o.deleted[newest.ContentID] = true
		}
	}
	return o
}

// twoProcesses opens two stores on the same two fresh databases, as two
// processes would: the second keeps what it reads of outboxes.
func twoProcesses(t *testing.T) (plain, cached *store.Store) {
	t.Helper()
	m := storetest.NewShardMap(t, storetest.Options{Shards: 2})
	plain = openStore(t, m)
	must(t, plain.Migrate(t.Context(), discard))
	cached = openStore(t, m)
	cached.CacheHeads(time.Minute, time.Now)
	return plain, cached
}

// TestPullNewest checks the threshold read against a full sort of every
// source's live posts, over two databases with more sources on each than
// one heads statement takes: with ties on publish_time, deleted posts
// (deleted heads among them), bounds that differ per source, lower bounds,
// and a scroll whose every cursor is the last item of the page before.
func TestPullNewest(t *testing.T) {
	t.Parallel()
	st, cached := twoProcesses(t)
	rng := rand.New(rand.NewPCG(7, 11))
	authors := append(idsOn(st, 0, 100, 600), idsOn(st, 1, 100, 150)...)
	o := randomOutboxes(rng, authors, 12)
	o.load(t, st)

	check := func(t *testing.T, st *store.Store, sources []store.PullSource, limit int) []feed.Post {
		t.Helper()
		got, err := st.PullNewest(t.Context(), sources, limit, 0)
		must(t, err)
		if got.Missing != nil {
			t.Fatalf("authors %v missing: %v", got.Missing, got.Err)
		}
		want := o.newest(sources, limit)
		if have := newestOf(got.Posts, limit); !slices.Equal(have, want) {
			t.Fatalf("limit %d: newest %v\nwant %v", limit, have, want)
		}
		return want
	}
	randomKey := func() feed.Key {
		return feed.Key{PublishTime: t0 + int64(rng.IntN(20_000)), ContentID: 1_000_000 + rng.Uint64N(uint64(len(o.posts)))}
	}

	t.Run("bounds per source", func(t *testing.T) {
		for _, limit := range []int{1, 5, 21, 101} {
			var sources []store.PullSource
			for _, a := range authors {
				src := store.PullSource{AuthorID: a, Before: store.Top}
				switch rng.IntN(4) {
				case 0:
					src.Before = randomKey()
				case 1:
					src.From = randomKey()
				case 2:
					src.Before, src.From = randomKey(), randomKey()
				}
				sources = append(sources, src)
			}
			check(t, st, sources, limit)
			check(t, cached, sources, limit)
		}
	})

	t.Run("scroll", func(t *testing.T) {
		for _, sc := range []struct {
			st    *store.Store
			limit int
		}{{st, 3}, {st, 21}, {cached, 3}, {cached, 21}, {cached, 21}} {
			limit := sc.limit
			before := store.Top
			var from feed.Key
			if limit == 3 {
				from = feed.Key{PublishTime: t0 + 19_000} // a since position: the newest sparse posts only
			}
			for page := 0; ; page++ {
				sources := make([]store.PullSource, len(authors))
				for i, a := range authors {
					sources[i] = store.PullSource{AuthorID: a, Before: before, From: from}
				}
				items := check(t, sc.st, sources, limit)
				if len(items) < limit {
					break
				}
				if page > 2000 {
					t.Fatal("scroll did not end")
				}
				before = items[len(items)-1].Key()
			}
		}
	})
}

// sourcesBelow asks for the authors' posts older than before, of the
// kinds when not nil.
func sourcesBelow(authors []uint64, before feed.Key, kinds []string) []store.PullSource {
	sources := make([]store.PullSource, len(authors))
	for i, a := range authors {
		sources[i] = store.PullSource{AuthorID: a, Before: before, Kinds: kinds}
	}
	return sources
}

// scrollPage reads the page of a scroll over the authors' outboxes below
// before (of the kinds when not nil) through st, checks it against a full
// sort, and returns what the read cost and the page.
func scrollPage(t *testing.T, st *store.Store, o outboxes, authors []uint64, before feed.Key, kinds []string, limit int) (store.Pulled, []feed.Post) {
	t.Helper()
	sources := sourcesBelow(authors, before, kinds)
	got, err := st.PullNewest(t.Context(), sources, limit, 0)
	must(t, err)
	want := o.newest(sources, limit)
	if have := newestOf(got.Posts, limit); !slices.Equal(have, want) {
		t.Fatalf("below %v: newest %v\nwant %v", before, have, want)
	}
	return got, want
}

// TestPullNewestRows bounds what a deep page reads: with 3,000 sources of
// 25 posts each, every page of a scroll returns a head per source and about
// a page of posts, where reading each source's newest posts would return
// sources × limit rows; and the heads cost a statement per 500 sources.
func TestPullNewestRows(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	rng := rand.New(rand.NewPCG(3, 5))
	authors := append(idsOn(st, 0, 100, 2000), idsOn(st, 1, 100, 1000)...)
	var o outboxes
	id := uint64(1_000_000)
	for _, a := range authors {
		for range 25 {
			id++
			o.posts = append(o.posts, feed.Post{ContentID: id, AuthorID: a, PublishTime: t0 + rng.Int64N(100_000_000), Kind: feed.KindPost})
		}
	}
	o.load(t, st)
	const limit = 21
	before := store.Top
	for page := range 20 {
		got, want := scrollPage(t, st, o, authors, before, nil, limit)
		// A head per source, and posts from about limit+1 of them.
		if maxRows := len(authors) + 4*limit; got.Rows > maxRows {
			t.Errorf("page %d read %d rows, want at most %d (heads of %d sources + 4 × limit)", page, got.Rows, maxRows, len(authors))
		}
		// Heads: 4 statements on the first database, 2 on the second;
		// then one or two for the posts.
		if got.Queries > 6+2*2 {
			t.Errorf("page %d ran %d statements, want at most 10", page, got.Queries)
		}
		if page == 0 {
			t.Logf("page %d: %d rows, %d statements", page, got.Rows, got.Queries)
		}
		before = want[limit-1].Key()
	}
}

// TestPullNewestCache scrolls deep pages through a store that keeps what it
// reads of outboxes, while another process on the same databases writes:
// each page equals a full sort, later pages of the scroll read few heads
// from the database, a backdated post published through the other process
// below the cursor shows on the next page (its database's backdate
// sequence moved, so that page reads the heads of that database again),
// and neither a deleted head nor a post published at the current time
// costs that; a source that joins the list or leaves it midway counts from
// the next page on. A scroll of one kind beside it keeps what it learns apart
// (heads of photos are not an author's heads) and holds to the same.
func TestPullNewestCache(t *testing.T) {
	t.Parallel()
	writer, reader := twoProcesses(t)
	rng := rand.New(rand.NewPCG(9, 9))
	authors := append(idsOn(writer, 0, 100, 300), idsOn(writer, 1, 100, 300)...)
	late := idOn(writer, 1, 50_000) // an author whose posts join the scroll's sources midway
	var o outboxes
	o.deleted = map[uint64]bool{}
	id := uint64(1_000_000)
	kindOf := func(id uint64) string {
		if id%3 == 0 {
			return "photo"
		}
		return feed.KindPost
	}
	for _, a := range append(authors, late) {
		for range 6 {
			id++
			o.posts = append(o.posts, feed.Post{ContentID: id, AuthorID: a, PublishTime: t0 + rng.Int64N(1_000_000), Kind: kindOf(id)})
		}
	}
	must(t, storeload.Posts(t.Context(), writer, o.posts, t0))
	// Publishes through the writer at the real time, which tells backdated
	// posts from others.
	publishNow := func(author, id uint64, tm int64, kind string) feed.Post {
		t.Helper()
		p := feed.Post{ContentID: id, AuthorID: author, PublishTime: tm, Kind: kind}
		_, created, err := writer.PublishPost(t.Context(), p, time.Now().UnixMilli())
		if err != nil || !created {
			t.Fatalf("publish %+v: created %v, %v", p, created, err)
		}
		return p
	}
	const limit = 21
	photos := []string{"photo"}
	before, beforePhoto := store.Top, store.Top
	for page := range 30 {
		got, want := scrollPage(t, reader, o, authors, before, nil, limit)
		gotPhoto, wantPhoto := scrollPage(t, reader, o, authors, beforePhoto, photos, limit)
		for _, sc := range []struct {
			view  string
			got   store.Pulled
			heads int // at least, of the 300 authors of a database
		}{{"every kind", got, 300}, {"photos", gotPhoto, 200}} {
			switch {
			case page == 0:
				if sc.got.Rows < len(authors) {
					t.Errorf("%s, page %d read %d rows, want a head per author (%d) at least", sc.view, page, sc.got.Rows, len(authors))
				}
			case page == 11:
				// After the backdated posts: the heads of one database again
				// (of the authors with posts in range: most of its 300).
				if sc.got.Rows < sc.heads || sc.got.Rows > 300+4*limit {
					t.Errorf("%s, page %d read %d rows, want the heads of one database (%d to 300) and a few pages at most", sc.view, page, sc.got.Rows, sc.heads)
				}
			case sc.got.Rows > 4*limit:
				t.Errorf("%s, page %d read %d rows: the heads of the page before were not reused", sc.view, page, sc.got.Rows)
			}
		}
		before, beforePhoto = want[limit-1].Key(), wantPhoto[limit-1].Key()
		switch page {
		case 5: // the next pages' newest posts are deleted
			for _, p := range []feed.Post{o.newest(sourcesBelow(authors, before, nil), 1)[0], o.newest(sourcesBelow(authors, beforePhoto, photos), 1)[0]} {
				must(t, writer.DeletePost(t.Context(), p.AuthorID, p.ContentID))
				o.deleted[p.ContentID] = true
			}
		case 7: // a post at the current time: above every page of the scroll
			id++
			publishNow(authors[3], id, time.Now().UnixMilli(), "photo")
		case 10: // backdated, just below the cursors, on one database
			db0 := authors[:300]
			id++
			o.posts = append(o.posts, publishNow(db0[rng.IntN(len(db0))], id, before.PublishTime-1, feed.KindPost))
			id++
			o.posts = append(o.posts, publishNow(db0[rng.IntN(len(db0))], id, beforePhoto.PublishTime-1, "photo"))
		case 13: // a source joins the list (a follow), with posts below the cursors
			authors = append(slices.Clip(authors), late)
		case 16: // and one leaves it (an unfollow)
			authors = authors[1:]
		}
	}

	// Recent outboxes, whose posts are all younger than the backdate
	// margin: a post stamped a minute ago is not backdated, and it shows
	// below the cursor of a scroll in that range all the same, since no
	// read kept what it learned there.
	recent := append(idsOn(writer, 0, 10_000, 30), idsOn(writer, 1, 10_000, 30)...)
	silent := recent[:5] // no post until the one below the cursor
	now := time.Now().UnixMilli()
	var fresh []feed.Post
	for _, a := range recent[5:] {
		for range 3 {
			id++
			fresh = append(fresh, feed.Post{ContentID: id, AuthorID: a, PublishTime: now - 60_000 - rng.Int64N(240_000), Kind: feed.KindPost})
		}
	}
	must(t, storeload.Posts(t.Context(), writer, fresh, now))
	o.posts = append(o.posts, fresh...)
	before = store.Top
	for page := range 4 {
		_, want := scrollPage(t, reader, o, recent, before, nil, limit)
		before = want[limit-1].Key()
		if page == 1 {
			id++
			o.posts = append(o.posts, publishNow(silent[0], id, before.PublishTime-1, feed.KindPost))
		}
	}
}

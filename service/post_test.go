package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
)

// contentIDs lists the posts' content ids in order.
func contentIDs(posts []feed.Post) []uint64 {
	out := make([]uint64, len(posts))
	for i, p := range posts {
		out[i] = p.ContentID
	}
	return out
}

// hasPost reports whether the list holds the content id.
func hasPost(posts []feed.Post, id uint64) bool {
	return slices.ContainsFunc(posts, func(p feed.Post) bool { return p.ContentID == id })
}

// newestFirst sorts posts as every feed orders them: publish_time
// descending, then content_id descending.
func newestFirst(posts []feed.Post) []feed.Post {
	out := slices.Clone(posts)
	slices.SortFunc(out, func(a, b feed.Post) int {
		switch {
		case a.PublishTime != b.PublishTime:
			return int(b.PublishTime - a.PublishTime)
		case a.ContentID > b.ContentID:
			return -1
		case a.ContentID < b.ContentID:
			return 1
		}
		return 0
	})
	return out
}

// listAll pages through the author's post list.
func listAll(t testing.TB, svc *service.Service, author uint64, limit int) []feed.Post {
	t.Helper()
	return pageAll(t, "post list", svc.ListPosts, author, limit)
}

// authorsOnShards returns two ids on the same shard and one on another.
func authorsOnShards(t testing.TB, h *harness, from uint64) (a, sameShard, otherShard uint64) {
	t.Helper()
	a = from
	for id := from + 1; sameShard == 0 || otherShard == 0; id++ {
		if id > from+10000 {
			t.Fatal("no ids on two shards; is the harness sharded?")
		}
		if h.store.ShardOf(id) == h.store.ShardOf(a) {
			if sameShard == 0 {
				sameShard = id
			}
		} else if otherShard == 0 {
			otherShard = id
		}
	}
	return a, sameShard, otherShard
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if got := feed.ErrorCode(err); got != code {
		t.Fatalf("error %v has code %q, want %q", err, got, code)
	}
}

// TestPublish checks the write side of the contract that needs no worker:
// a harness without workers proves it.
func TestPublish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UnixMilli()

	t.Run("own post in feed and post list when publish returns", func(t *testing.T) {
		t.Parallel()
		const author = 100
		var want []feed.Post
		for i := range 5 {
			p := h.publish(t, author, uint64(1000+i), base+int64(i%3)) // equal times too
			want = append([]feed.Post{p}, want...)
			// No worker runs: the feed shows the post from the publish
			// transaction itself.
			if got := h.feedAll(t, author, 20); len(got) == 0 || got[0].ContentID != newestFirst(want)[0].ContentID {
				t.Fatalf("after publishing %d the author's feed is %v", p.ContentID, contentIDs(got))
			}
			if got := listAll(t, h.svc, author, 20); !hasPost(got, p.ContentID) {
				t.Fatalf("after publishing %d the post list is %v", p.ContentID, contentIDs(got))
			}
		}
		want = newestFirst(want)
		if got := h.feedAll(t, author, 2); !slices.Equal(got, want) {
			t.Fatalf("feed %v, want %v", got, want)
		}
		if got := listAll(t, h.svc, author, 2); !slices.Equal(got, want) {
			t.Fatalf("post list %v, want %v", got, want)
		}
		d := h.delivery(t, author, 1000)
		if d.State != feed.DeliveryPending {
			t.Fatalf("delivery without workers %+v, want pending", d)
		}
	})

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		before := time.Now().UnixMilli()
		p, created, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: 101, ContentID: 2000})
		if err != nil || !created {
			t.Fatalf("publish: created %v, err %v", created, err)
		}
		if p.Kind != feed.KindPost || p.AuthorID != 101 || p.PublishTime < before || p.PublishTime > time.Now().UnixMilli() {
			t.Fatalf("published %+v, want kind post and publish_time now", p)
		}
		got := h.feedAll(t, 101, 20)
		if !slices.Equal(got, []feed.Post{p}) {
			t.Fatalf("feed %v, want [%v]", got, p)
		}
	})

	t.Run("idempotent", func(t *testing.T) {
		t.Parallel()
		at := base + 7
		in := service.PublishInput{AuthorID: 102, ContentID: 3000, PublishTime: &at, Kind: "photo"}
		first, created, err := h.svc.Publish(ctx, in)
		if err != nil || !created {
			t.Fatalf("first publish: created %v, err %v", created, err)
		}
		for _, again := range []service.PublishInput{
			in,
			{AuthorID: 102, ContentID: 3000, Kind: "photo"}, // publish_time omitted: the stored one stands
		} {
			p, created, err := h.svc.Publish(ctx, again)
			if err != nil || created || p != first {
				t.Fatalf("publish %+v again: %+v, created %v, err %v; want %+v, false, nil", again, p, created, err, first)
			}
		}
		if got := h.feedAll(t, 102, 20); !slices.Equal(got, []feed.Post{first}) {
			t.Fatalf("feed after repeats %v, want one post", got)
		}
	})

	t.Run("same id with other fields conflicts", func(t *testing.T) {
		t.Parallel()
		author, sameShard, otherShard := authorsOnShards(t, h, 110)
		at, other := base+1, base+2
		h.publish(t, author, 4000, at)
		for name, in := range map[string]service.PublishInput{
			"other publish_time":           {AuthorID: author, ContentID: 4000, PublishTime: &other},
			"other kind":                   {AuthorID: author, ContentID: 4000, PublishTime: &at, Kind: "video"},
			"other kind, no time":          {AuthorID: author, ContentID: 4000, Kind: "video"},
			"other author, same shard":     {AuthorID: sameShard, ContentID: 4000, PublishTime: &at},
			"other author, other shard":    {AuthorID: otherShard, ContentID: 4000, PublishTime: &at},
			"other author, other shard, 2": {AuthorID: otherShard, ContentID: 4000},
		} {
			t.Run(name, func(t *testing.T) {
				_, created, err := h.svc.Publish(ctx, in)
				if created {
					t.Fatalf("publish %+v created a second post with content id 4000", in)
				}
				wantCode(t, err, feed.ECONFLICT)
			})
		}
		if got := listAll(t, h.svc, otherShard, 20); len(got) != 0 {
			t.Fatalf("author %d has posts %v", otherShard, got)
		}
	})

	t.Run("deleted id conflicts", func(t *testing.T) {
		t.Parallel()
		at := base + 3
		h.publish(t, 103, 5000, at)
		if err := h.svc.DeletePost(ctx, 103, 5000); err != nil {
			t.Fatal(err)
		}
		for _, in := range []service.PublishInput{
			{AuthorID: 103, ContentID: 5000, PublishTime: &at},
			{AuthorID: 103, ContentID: 5000},
		} {
			_, created, err := h.svc.Publish(ctx, in)
			if created {
				t.Fatalf("publish %+v revived a deleted post", in)
			}
			wantCode(t, err, feed.ECONFLICT)
		}
		if got := h.feedAll(t, 103, 20); len(got) != 0 {
			t.Fatalf("feed %v, want empty", got)
		}
	})

	t.Run("invalid input", func(t *testing.T) {
		t.Parallel()
		future := time.Now().Add(h.cfg.ClockSkew + time.Minute).UnixMilli()
		negative := int64(-1)
		for name, in := range map[string]service.PublishInput{
			"kind with upper case": {AuthorID: 104, ContentID: 6000, Kind: "Post"},
			"kind too long":        {AuthorID: 104, ContentID: 6000, Kind: "a234567890123456789012345678901234"},
			"time beyond skew":     {AuthorID: 104, ContentID: 6000, PublishTime: &future},
			"negative time":        {AuthorID: 104, ContentID: 6000, PublishTime: &negative},
		} {
			if _, _, err := h.svc.Publish(ctx, in); feed.ErrorCode(err) != feed.EINVALID {
				t.Errorf("%s: error %v, want %s", name, err, feed.EINVALID)
			}
		}
		if got := listAll(t, h.svc, 104, 20); len(got) != 0 {
			t.Fatalf("invalid publishes stored %v", got)
		}
	})

	t.Run("server-assigned ids", func(t *testing.T) {
		t.Parallel()
		const author, n = 105, 300
		var ids []uint64
		for range n {
			p, created, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: author})
			if err != nil || !created {
				t.Fatalf("publish: created %v, err %v", created, err)
			}
			if len(ids) > 0 && p.ContentID <= ids[len(ids)-1] {
				t.Fatalf("id %d after %d", p.ContentID, ids[len(ids)-1])
			}
			ids = append(ids, p.ContentID)
		}
		got := contentIDs(listAll(t, h.svc, author, 100))
		// Newest first: the later publish has the later (or equal) time and
		// the larger id.
		slices.Reverse(got)
		if !slices.Equal(got, ids) {
			t.Fatalf("post list holds %d posts, want the %d published in order", len(got), n)
		}
	})
}

// TestDeletePost checks that a delete leaves the author's own feed and post
// list at once and every follower's feed once the retraction ran.
func TestDeletePost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UnixMilli()
	const author = 200
	followers := []uint64{201, 202, 203, 204, 205, 206, 207, 208}
	for _, u := range followers {
		h.follow(t, u, author)
	}
	var posts []feed.Post
	for i := range 6 {
		posts = append(posts, h.publish(t, author, uint64(7000+i), base+int64(i)))
	}
	h.waitIdle(t)
	for _, u := range followers {
		if got := h.feedAll(t, u, 20); len(got) != len(posts) {
			t.Fatalf("follower %d sees %v before any delete", u, contentIDs(got))
		}
	}

	// One post is deleted after its fan-out finished, one while its fan-out
	// may still run, one before its delivery was planned.
	deleted := map[uint64]bool{7001: true}
	if err := h.svc.DeletePost(ctx, author, 7001); err != nil {
		t.Fatal(err)
	}
	late := h.publish(t, author, 7100, base+100)
	posts = append(posts, late)
	deleted[7100] = true
	if err := h.svc.DeletePost(ctx, author, 7100); err != nil {
		t.Fatal(err)
	}
	deleted[7003] = true
	if err := h.svc.DeletePost(ctx, author, 7003); err != nil {
		t.Fatal(err)
	}
	var live []feed.Post
	for _, p := range posts {
		if !deleted[p.ContentID] {
			live = append(live, p)
		}
	}
	live = newestFirst(live)

	// The author's own views change when DeletePost returns.
	if got := h.feedAll(t, author, 3); !slices.Equal(got, live) {
		t.Fatalf("author's feed right after the deletes %v, want %v", contentIDs(got), contentIDs(live))
	}
	if got := listAll(t, h.svc, author, 3); !slices.Equal(got, live) {
		t.Fatalf("author's post list right after the deletes %v, want %v", contentIDs(got), contentIDs(live))
	}

	h.waitIdle(t)
	for _, u := range followers {
		if got := h.feedAll(t, u, 4); !slices.Equal(got, live) {
			t.Errorf("follower %d's feed %v, want %v", u, contentIDs(got), contentIDs(live))
		}
		for _, p := range h.inbox(t, u) {
			if deleted[p.ContentID] {
				t.Errorf("follower %d's inbox still holds deleted post %d", u, p.ContentID)
			}
		}
	}
	for id := range deleted {
		if d := h.delivery(t, author, id); d.State != feed.DeliveryDone {
			t.Errorf("retraction of %d: %+v, want done", id, d)
		}
	}

	t.Run("again and unknown", func(t *testing.T) {
		if err := h.svc.DeletePost(ctx, author, 7001); err != nil {
			t.Fatalf("deleting again: %v, want nil", err)
		}
		wantCode(t, h.svc.DeletePost(ctx, author, 7999), feed.ENOTFOUND)
		// Another author's post is not found either.
		wantCode(t, h.svc.DeletePost(ctx, 201, 7000), feed.ENOTFOUND)
		if got := h.feedAll(t, author, 20); !slices.Equal(got, live) {
			t.Fatalf("feed %v, want %v", contentIDs(got), contentIDs(live))
		}
	})
}

// TestServerIDsLiveWithTheirAuthor checks that server-assigned content ids
// hash to the author's own database, so a publish needs no other one.
func TestServerIDsLiveWithTheirAuthor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 4})
	for author := uint64(1); author <= 20; author++ {
		p, _, err := h.svc.Publish(t.Context(), service.PublishInput{AuthorID: author})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := h.store.ShardOf(p.ContentID), h.store.ShardOf(author); got != want {
			t.Errorf("author %d's post %d lives on %s, want the author's %s", author, p.ContentID, got.Name, want.Name)
		}
	}
}

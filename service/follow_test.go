package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// postsBy returns the posts of the author in the list.
func postsBy(posts []feed.Post, author uint64) []feed.Post {
	var out []feed.Post
	for _, p := range posts {
		if p.AuthorID == author {
			out = append(out, p)
		}
	}
	return out
}

// followersOf returns the author's whole followers list as the service
// shows it.
func followersOf(t testing.TB, svc *service.Service, author uint64) []uint64 {
	t.Helper()
	var out []uint64
	cursor := ""
	for {
		list, next, err := svc.ListFollowers(context.Background(), author, feed.Page{Limit: 100, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range list {
			out = append(out, f.UserID)
		}
		if cursor = next; cursor == "" {
			return out
		}
	}
}

// TestFollowBeforeWorkers proves that the read-time merge alone shows a new
// followee's older posts: no worker runs until the end.
func TestFollowBeforeWorkers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true})
	base := time.Now().Add(-time.Hour).UnixMilli()
	const user, author, other = 300, 301, 302
	var want []feed.Post
	for i := range 8 {
		want = append(want, h.publish(t, author, uint64(10_000+i), base+int64(i/2)))
	}
	h.publish(t, other, 10_100, base+3) // not followed
	own := h.publish(t, user, 10_200, base+5)
	want = newestFirst(append(want, own))

	h.follow(t, user, author)
	for _, limit := range []int{1, 3, 20} {
		if got := h.feedAll(t, user, limit); !slices.Equal(got, want) {
			t.Fatalf("limit %d: feed right after Follow %v, want %v", limit, contentIDs(got), contentIDs(want))
		}
	}
	// A post published after the follow but before any worker ran shows too.
	later := h.publish(t, author, 10_300, base+10)
	want = newestFirst(append(want, later))
	if got := h.feedAll(t, user, 4); !slices.Equal(got, want) {
		t.Fatalf("feed %v, want %v", contentIDs(got), contentIDs(want))
	}
	if got := h.inbox(t, user); !slices.Equal(got, []feed.Post{own}) {
		t.Fatalf("inbox before workers %v, want only the user's own post", contentIDs(got))
	}

	// Once the workers ran, the backfill and fan-out put the posts into the
	// inbox and the feed is unchanged.
	t.Cleanup(runWorkers(h.svc, time.Second))
	h.waitIdle(t)
	if got := h.inbox(t, user); !slices.Equal(got, want) {
		t.Fatalf("inbox after workers %v, want %v", contentIDs(got), contentIDs(want))
	}
	if got := h.feedAll(t, user, 3); !slices.Equal(got, want) {
		t.Fatalf("feed after workers %v, want %v", contentIDs(got), contentIDs(want))
	}
	if got := followersOf(t, h.svc, author); !slices.Equal(got, []uint64{user}) {
		t.Fatalf("followers %v, want [%d]", got, user)
	}
}

func TestFollow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) { c.MaxFollowing = 3 }})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UnixMilli()

	t.Run("follow, unfollow, re-follow", func(t *testing.T) {
		t.Parallel()
		const user, author = 400, 401
		var posts []feed.Post
		for i := range 6 {
			posts = append(posts, h.publish(t, author, uint64(20_000+i), base+int64(i)))
		}
		posts = newestFirst(posts)
		check := func(when string, want []feed.Post, inboxToo bool) {
			t.Helper()
			if got := h.feedAll(t, user, 4); !slices.Equal(got, want) {
				t.Fatalf("%s: feed %v, want %v", when, contentIDs(got), contentIDs(want))
			}
			if inboxToo {
				if got := h.inbox(t, user); !slices.Equal(got, want) {
					t.Fatalf("%s: inbox %v, want %v", when, contentIDs(got), contentIDs(want))
				}
			}
		}

		h.follow(t, user, author)
		check("right after Follow", posts, false)
		h.waitIdle(t)
		check("after Follow, at rest", posts, true)

		if err := h.svc.Unfollow(ctx, user, author); err != nil {
			t.Fatal(err)
		}
		check("right after Unfollow", nil, true)
		h.waitIdle(t)
		check("after Unfollow, at rest", nil, true)
		if got := followersOf(t, h.svc, author); slices.Contains(got, user) {
			t.Fatalf("followers after unfollow %v still hold %d", got, user)
		}

		// Posts published while not following stay out, and show with the
		// rest on re-follow.
		posts = newestFirst(append(posts, h.publish(t, author, 20_100, base+50)))
		h.waitIdle(t)
		check("unfollowed, new post", nil, true)
		h.follow(t, user, author)
		check("right after re-follow", posts, false)
		h.waitIdle(t)
		check("after re-follow, at rest", posts, true)
	})

	t.Run("unfollow during fan-out", func(t *testing.T) {
		t.Parallel()
		const author = 410
		var users []uint64
		for u := uint64(411); u < 431; u++ {
			users = append(users, u)
			h.follow(t, u, author)
		}
		h.waitIdle(t)
		leaver := users[7]
		for i := range 30 {
			h.publish(t, author, uint64(21_000+i), base+int64(i))
		}
		if err := h.svc.Unfollow(ctx, leaver, author); err != nil {
			t.Fatal(err)
		}
		// Fan-out of the burst is still running; no read that starts now
		// may show the author.
		for range 20 {
			if got := postsBy(h.feedAll(t, leaver, 10), author); len(got) > 0 {
				t.Fatalf("feed after Unfollow shows %v", contentIDs(got))
			}
		}
		h.waitIdle(t)
		if got := h.inbox(t, leaver); len(got) > 0 {
			t.Fatalf("inbox after Unfollow holds %v", contentIDs(got))
		}
		for _, u := range users {
			if u == leaver {
				continue
			}
			if got := h.feedAll(t, u, 100); len(got) != 30 {
				t.Fatalf("follower %d sees %d posts, want 30", u, len(got))
			}
		}
	})

	t.Run("backfill beyond the inbox limit", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) { c.InboxLimit = 10 }})
		const user, author = 440, 441
		var posts []feed.Post
		for i := range 25 {
			posts = append(posts, h.publish(t, author, uint64(22_000+i), base+int64(i)))
		}
		posts = newestFirst(posts)
		h.follow(t, user, author)
		if got := h.feedAll(t, user, 7); !slices.Equal(got, posts) {
			t.Fatalf("right after Follow: feed %v, want %v", contentIDs(got), contentIDs(posts))
		}
		h.waitIdle(t)
		inbox := h.inbox(t, user)
		if !slices.Equal(inbox, posts[:10]) {
			t.Fatalf("inbox %v, want the newest 10 posts", contentIDs(inbox))
		}
		if got := h.feedAll(t, user, 7); !slices.Equal(got, posts) {
			t.Fatalf("at rest: feed %v, want %v", contentIDs(got), contentIDs(posts))
		}
	})

	t.Run("rules", func(t *testing.T) {
		t.Parallel()
		const user = 450
		wantCode(t, h.svc.Follow(ctx, user, user), feed.EINVALID)
		wantCode(t, h.svc.Unfollow(ctx, user, user), feed.EINVALID)
		if err := h.svc.Unfollow(ctx, user, 451); err != nil {
			t.Fatalf("unfollowing an author not followed: %v", err)
		}
		for _, a := range []uint64{451, 452, 453} {
			h.follow(t, user, a)
		}
		h.follow(t, user, 452) // idempotent, even at the cap
		wantCode(t, h.svc.Follow(ctx, user, 454), feed.ELIMIT)
		if err := h.svc.Unfollow(ctx, user, 451); err != nil {
			t.Fatal(err)
		}
		h.follow(t, user, 454)
		list, _, err := h.svc.ListFollowing(ctx, user, feed.Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, f := range list {
			got = append(got, f.AuthorID)
		}
		if want := []uint64{452, 453, 454}; !slices.Equal(got, want) {
			t.Fatalf("following %v, want %v", got, want)
		}
	})
}

// followLimited makes user follow author with a copy limit, through the
// service and in the model: the feed shows the author's n newest live posts
// published so far and every later one.
func (m *feedModel) followLimited(t testing.TB, h *harness, user, author uint64, n int) {
	t.Helper()
	if err := h.svc.FollowWith(context.Background(), feed.FollowRequest{UserID: user, AuthorID: author, CopyLimit: &n}); err != nil {
		t.Fatalf("follow %d→%d with copy limit %d: %v", user, author, n, err)
	}
	m.setHistory(user, author, &n)
	m.addFollow(user, author)
}

// setHistory records in the model the history bound of a new follow of the
// author with copy limit n (nil: none), and drops what an unfollow kept.
func (m *feedModel) setHistory(user, author uint64, n *int) {
	delete(m.kept[user], author)
	if m.history[user] == nil {
		m.history[user] = map[uint64]feed.Key{}
	}
	delete(m.history[user], author)
	posts := newestFirst(m.posts[author])
	if n == nil || len(posts) <= *n {
		return
	}
	k := posts[*n].Key()
	m.history[user][author] = feed.Key{PublishTime: k.PublishTime, ContentID: k.ContentID + 1}
}

// unfollowKeeping unfollows with keep_history, through the service and in
// the model: the posts of the author the feed shows stay. The caller makes
// sure the inbox holds them all (backfill done, no trim below them).
func (m *feedModel) unfollowKeeping(t testing.TB, h *harness, user, author uint64) {
	t.Helper()
	ids := map[uint64]bool{}
	for _, p := range postsOf(m.feed(user, store.Top), author) {
		ids[p.ContentID] = true
	}
	if err := h.svc.UnfollowKeepingHistory(context.Background(), user, author); err != nil {
		t.Fatalf("unfollow %d→%d keeping history: %v", user, author, err)
	}
	delete(m.follows[user], author)
	delete(m.history[user], author)
	if m.kept[user] == nil {
		m.kept[user] = map[uint64]map[uint64]bool{}
	}
	m.kept[user][author] = ids
}

// TestFollowCopyLimitExact follows authors with copy limits and checks every
// page against a full sort of exactly what the limits let in: the author's
// n newest posts from before the follow and every later one, while the
// backfill is pending (no workers run), after it, and on deep scrolls
// below an inbox floor that another follow's capped backfill raised. A post
// backdated below a bound after the follow stays out too.
func TestFollowCopyLimitExact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(46, 3))
	h := newHarness(t, harnessOpts{shards: 2, noWorkers: true, configured: readOpts})
	m := newFeedModel()
	const reader, limited, few, none, whole, pullAuthor = 4600, 4601, 4602, 4603, 4604, 4605
	const small = 4606 // follows the limited author only: an inbox with no floor
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []feed.Post
	for author, n := range map[uint64]int{limited: 40, few: 4, none: 12, whole: 45, pullAuthor: 30, reader: 5} {
		for range n {
			posts = append(posts, m.newPost(r, author, base+int64(r.IntN(200))))
		}
	}
	m.publishAll(t, h, posts)

	// Limits outside 0..InboxLimit are refused, and nothing changes.
	for _, n := range []int{-1, h.cfg.InboxLimit + 1} {
		err := h.svc.FollowWith(context.Background(), feed.FollowRequest{UserID: reader, AuthorID: limited, CopyLimit: &n})
		if feed.ErrorCode(err) != feed.EINVALID {
			t.Fatalf("copy limit %d: %v, want %s", n, err, feed.EINVALID)
		}
	}
	if list, _, err := h.svc.ListFollowing(context.Background(), reader, feed.Page{Limit: 10}); err != nil || len(list) != 0 {
		t.Fatalf("following after refused follows: %v, %v", list, err)
	}

	m.followLimited(t, h, reader, limited, 7)
	m.followLimited(t, h, reader, few, 10) // fewer posts than the limit: all
	m.followLimited(t, h, reader, none, 0)
	m.follow(t, h, reader, whole)
	m.followLimited(t, h, small, limited, 3)
	checkFeed(t, h, m, reader, "pending backfills")
	// A repeated follow with another limit changes nothing.
	n := 1
	if err := h.svc.FollowWith(context.Background(), feed.FollowRequest{UserID: reader, AuthorID: limited, CopyLimit: &n}); err != nil {
		t.Fatal(err)
	}
	checkFeed(t, h, m, reader, "after a repeated follow", 7)

	stop := runWorkers(h.svc, time.Second)
	defer stop()
	h.waitIdle(t)
	if inbox := h.inbox(t, reader); len(inbox) < h.cfg.InboxLimit {
		t.Fatalf("inbox of %d entries, want a full one (a floor under it)", len(inbox))
	}
	checkFeed(t, h, m, reader, "backfilled, deep scroll below the floor")

	// New posts arrive; one backdated below the limited author's bound
	// does not.
	now := time.Now().UnixMilli()
	m.publishAll(t, h, []feed.Post{
		m.newPost(r, limited, now), m.newPost(r, none, now-1), m.newPost(r, few, now-2),
		m.newPost(r, limited, base-1000), m.newPost(r, none, base-1000),
	})
	h.waitIdle(t)
	checkFeed(t, h, m, reader, "after new and backdated posts")
	checkFeed(t, h, m, small, "after new and backdated posts, no floor")

	// A pull author followed with a limit: its posts at or before the
	// reader's active spell are merged from its outbox, bounded too.
	makePull(t, h, m, pullAuthor, fanIDs(4700, 6))
	h.waitIdle(t)
	m.followLimited(t, h, reader, pullAuthor, 5)
	checkFeed(t, h, m, reader, "pull author, pending", 3, 20)
	h.waitIdle(t)
	checkFeed(t, h, m, reader, "pull author, backfilled")
}

// TestUnfollowKeepingHistory unfollows with keep_history: the posts the
// inbox held stay in their places, no new ones arrive, a later delete of
// one still removes it (its retraction reaches the kept inbox), and a
// follow afterwards behaves as a follow, its copy limit included.
func TestUnfollowKeepingHistory(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(46, 4))
	h := newHarness(t, harnessOpts{shards: 2})
	m := newFeedModel()
	const reader, author, other = 4610, 4611, 4612
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []feed.Post
	for _, a := range []uint64{author, other, reader} {
		for range 15 {
			posts = append(posts, m.newPost(r, a, base+int64(r.IntN(50))))
		}
	}
	m.publishAll(t, h, posts)
	m.follow(t, h, reader, author)
	m.follow(t, h, reader, other)
	h.waitIdle(t)

	m.unfollowKeeping(t, h, reader, author)
	checkFeed(t, h, m, reader, "kept")
	if len(postsOf(h.feedAll(t, reader, 100), author)) != 15 {
		t.Fatal("the kept posts are not all in the feed")
	}

	m.publish(t, h, author, 46_000, time.Now().UnixMilli())
	h.waitIdle(t)
	checkFeed(t, h, m, reader, "no new posts after the unfollow")

	kept := newestFirst(m.posts[author])
	m.delete(t, h, kept[3])
	m.delete(t, h, kept[9])
	h.waitIdle(t)
	checkFeed(t, h, m, reader, "deleted kept posts leave")

	// A follow with a copy limit shows what the limit says, not the rest
	// of what was kept.
	m.followLimited(t, h, reader, author, 4)
	checkFeed(t, h, m, reader, "re-followed, pending")
	h.waitIdle(t)
	checkFeed(t, h, m, reader, "re-followed, backfilled")

	// Kept again, then a plain unfollow purges it all.
	m.unfollowKeeping(t, h, reader, author)
	checkFeed(t, h, m, reader, "kept again", 3, 100)
	m.unfollow(t, h, reader, author)
	checkFeed(t, h, m, reader, "unfollowed", 3, 100)
	if got := postsOf(h.inbox(t, reader), author); len(got) != 0 {
		t.Fatalf("inbox holds %d posts of the unfollowed author", len(got))
	}
}

// TestFollowMany follows in batches: each pair's outcome in order (created,
// exists, or its own error, the others going through), a second run of the
// same batch changes nothing, and the feeds equal those of single follows.
func TestFollowMany(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(46, 5))
	h := newHarness(t, harnessOpts{shards: 2, configured: func(c *service.Config) {
		readOpts(c)
		c.MaxFollowing = 4
	}})
	m := newFeedModel()
	users := idsOnShard(h, 0, 4620, 3)
	users = append(users, idsOnShard(h, 1, 4620, 3)...)
	authors := fanIDs(4650, 6)
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []feed.Post
	for _, a := range authors {
		for range 10 + r.IntN(30) {
			posts = append(posts, m.newPost(r, a, base+int64(r.IntN(100))))
		}
	}
	m.publishAll(t, h, posts)

	two, bad := 2, h.cfg.InboxLimit+1
	var reqs []feed.FollowRequest
	want := map[int]string{} // index → the error code of a pair that fails
	for i, u := range users {
		for j, a := range authors[:3] {
			req := feed.FollowRequest{UserID: u, AuthorID: a}
			if (i+j)%2 == 0 {
				req.CopyLimit = &two
			}
			reqs = append(reqs, req)
		}
	}
	reqs = append(reqs, reqs[0]) // twice in one batch: exists
	want[len(reqs)] = feed.EINVALID
	reqs = append(reqs, feed.FollowRequest{UserID: users[1], AuthorID: users[1]})
	want[len(reqs)] = feed.EINVALID
	reqs = append(reqs, feed.FollowRequest{UserID: users[1], AuthorID: authors[5], CopyLimit: &bad})
	reqs = append(reqs, feed.FollowRequest{UserID: users[2], AuthorID: authors[3]}) // the 4th: at the cap
	want[len(reqs)] = feed.ELIMIT
	reqs = append(reqs, feed.FollowRequest{UserID: users[2], AuthorID: authors[4]}) // the 5th: over it

	for run := 1; run <= 2; run++ {
		// The model's bounds are those of the first run, before which no
		// pair existed.
		if run == 1 {
			for i, req := range reqs {
				if _, fails := want[i]; fails || m.following(req.UserID, req.AuthorID) {
					continue
				}
				m.setHistory(req.UserID, req.AuthorID, req.CopyLimit)
				m.addFollow(req.UserID, req.AuthorID)
			}
		}
		res, err := h.svc.FollowMany(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[[2]uint64]bool{}
		for i, got := range res {
			pair := [2]uint64{reqs[i].UserID, reqs[i].AuthorID}
			switch code, fails := want[i]; {
			case fails:
				if feed.ErrorCode(got.Err) != code {
					t.Errorf("run %d, pair %d %v: %v, want %s", run, i, pair, got.Err, code)
				}
			case got.Err != nil:
				t.Errorf("run %d, pair %d %v: %v", run, i, pair, got.Err)
			case got.Created != (run == 1 && !seen[pair]):
				t.Errorf("run %d, pair %d %v: created %v", run, i, pair, got.Created)
			}
			seen[pair] = true
		}
		checkFeed(t, h, m, users[0], fmt.Sprintf("run %d, pending", run), 3, 20)
		h.waitIdle(t)
		for _, u := range users {
			checkFeed(t, h, m, u, fmt.Sprintf("run %d, backfilled", run), 3, 20)
		}
	}
	for _, a := range authors[:3] {
		if got := followersOf(t, h.svc, a); len(got) != len(users) {
			t.Errorf("author %d has %d followers, want %d", a, len(got), len(users))
		}
	}
	if _, err := h.svc.FollowMany(context.Background(), nil); feed.ErrorCode(err) != feed.EINVALID {
		t.Errorf("empty batch: %v", err)
	}
	if _, err := h.svc.FollowMany(context.Background(), make([]feed.FollowRequest, service.MaxFollowBatch+1)); feed.ErrorCode(err) != feed.ETOOLARGE {
		t.Errorf("batch of %d: %v", service.MaxFollowBatch+1, err)
	}
}

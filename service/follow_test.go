package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
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

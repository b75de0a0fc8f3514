package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// TestOneShardDown runs feedd on two databases, a (virtual shards 0-511) on
// the shared test server and b (512-1023) on a throwaway one, and takes b
// down under load: SIGKILL (a crashed host), then SIGSTOP (a hung host, its
// connections open and silent). Each time the users on a keep reading, a's
// authors' posts reach their followers on a, readiness names b down but
// stays 200, users on b get 503 within their deadline; after b returns every
// post is delivered exactly once and every feed equals a full sort.
func TestOneShardDown(t *testing.T) {
	t.Parallel()
	srvB := storetest.StartServer(t)
	path := twoDatabases(t, storetest.DatabaseDSN(t), srvB.DSN+"feed_b")
	m, _ := startMain(t, "serve", "--sharding", path, "--http-addr", "127.0.0.1:0", "--poll-interval", "20ms",
		"--probe-interval", "200ms", "--probe-timeout", "500ms", "--read-deadline", "1s", "--write-deadline", "2s",
		"--push-threshold", "15", "--lease", "3s")
	base := "http://" + m.Addr()
	c := client.New(base, "", &http.Client{Timeout: 20 * time.Second})
	ctx := t.Context()

	// Ids by database: the first n ids from start whose virtual shard is
	// on a (onA) or on b.
	ids := func(onA bool, start uint64, n int) []uint64 {
		var out []uint64
		for id := start; len(out) < n; id++ {
			if (shardmap.VirtualShard(id, 1024) < 512) == onA {
				out = append(out, id)
			}
		}
		return out
	}
	usersA, usersB := ids(true, 1000, 6), ids(false, 1000, 6)
	authorsA, pushB, big := ids(true, 5000, 2), ids(false, 5000, 1)[0], ids(false, 6000, 1)[0]
	extra := ids(true, 7000, 8)
	follows := map[uint64][]uint64{} // user → authors
	follow := func(u, a uint64) {
		must(t, c.Follow(ctx, u, a))
		follows[u] = append(follows[u], a)
	}
	for _, u := range append(slices.Clone(usersA), usersB...) {
		for _, a := range append(slices.Clone(authorsA), pushB, big) {
			follow(u, a)
		}
	}
	for _, u := range extra { // big passes the push threshold: a pull author
		follow(u, big)
	}

	// Posts get server-assigned ids, which live on their author's database:
	// a publish needs that database only. publish_time orders them.
	var (
		mu    sync.Mutex
		posts = map[uint64][]client.Post{} // author → acknowledged posts
		next  atomic.Int64
	)
	publish := func(author uint64) (client.Post, error) {
		p, _, err := c.Publish(ctx, author, client.PublishRequest{PublishTime: 1_700_000_000_000 + next.Add(1)})
		if err == nil {
			mu.Lock()
			posts[author] = append(posts[author], p)
			mu.Unlock()
		}
		return p, err
	}
	for _, a := range append(slices.Clone(authorsA), pushB, big) {
		_, err := publish(a)
		must(t, err)
	}
	wait.For(t, "the big author in pull mode", func() error {
		p, err := publish(big)
		must(t, err)
		var d client.Delivery
		wait.For(t, fmt.Sprintf("the delivery of %s planned", p.ContentID), func() error {
			d, err = c.Delivery(ctx, big, parseID(t, p.ContentID))
			must(t, err)
			if d.State == "pending" {
				return fmt.Errorf("delivery %+v", d)
			}
			return nil
		})
		if d.Mode != "push_active" {
			return fmt.Errorf("post %s delivered in mode %s", p.ContentID, d.Mode)
		}
		return nil
	})

	for _, round := range []struct {
		name     string
		down, up func()
	}{
		{"SIGKILL", srvB.Kill, func() { srvB.Restart(t) }},
		{"SIGSTOP", srvB.Stop, srvB.Resume},
	} {
		t.Logf("round %s", round.name)
		// Load: publishes by every author and reads by every user, from
		// several goroutines, through the outage.
		lctx, stopLoad := context.WithCancel(ctx)
		var load sync.WaitGroup
		for _, a := range append(slices.Clone(authorsA), pushB, big) {
			load.Go(func() {
				for lctx.Err() == nil {
					_, _ = publish(a)
					time.Sleep(50 * time.Millisecond) // paces the load: not a wait
				}
			})
		}
		load.Go(func() {
			for lctx.Err() == nil {
				for _, u := range usersA {
					if _, err := c.Feed(lctx, u, 20, ""); err != nil && lctx.Err() == nil {
						t.Errorf("%s: feed of user %d on a: %v", round.name, u, err)
					}
				}
			}
		})

		round.down()
		waitReady(t, base, http.StatusOK, `{"status":"ready","databases":{"a":"up","b":"down"}}`)
		// A post by an author on a reaches the followers on a while b's
		// share waits, and the delivery says which database it waits for.
		author := authorsA[0]
		p, err := publish(author)
		must(t, err)
		id := p.ContentID
		for _, u := range usersA {
			wait.For(t, fmt.Sprintf("%s: post %s of an author on a in the feed of user %d on a", round.name, id, u), func() error {
				return feedHas(ctx, c, u, id)
			})
		}
		d, err := c.Delivery(ctx, author, parseID(t, id))
		must(t, err)
		if d.State != "running" || !slices.Equal(d.PendingDatabases, []string{"b"}) {
			t.Errorf("%s: delivery %+v, want running with b pending", round.name, d)
		}
		// Readers on a whose pull author lives on b get partial pages
		// naming it (once the outbox cache's second has passed).
		wait.For(t, "a partial page naming the pull author on b", func() error {
			page, err := c.Feed(ctx, usersA[1], 20, "")
			must(t, err)
			if !page.Partial || !slices.Equal(page.MissingAuthors, []string{strconv.FormatUint(big, 10)}) {
				return fmt.Errorf("page partial %v, missing authors %v", page.Partial, page.MissingAuthors)
			}
			return nil
		})
		// Users on b: 503 within the deadline.
		for _, u := range usersB {
			_, err := c.Feed(ctx, u, 20, "")
			wantAPIError(t, err, http.StatusServiceUnavailable, "unavailable")
		}
		// A follow across databases is accepted on the user's and applied
		// once b is back.
		follow(usersA[0], ids(false, 8000, 1)[0])

		round.up()
		waitReady(t, base, http.StatusOK, `{"status":"ready","databases":{"a":"up","b":"up"}}`)
		stopLoad()
		load.Wait()
	}

	// Every acknowledged post, exactly once, in every follower's feed, in
	// the order of a full sort.
	for u, authors := range follows {
		var all []client.Post
		for _, a := range append(slices.Clone(authors), u) {
			all = append(all, posts[a]...)
		}
		slices.SortFunc(all, func(x, y client.Post) int { return int(y.PublishTime - x.PublishTime) }) // times are unique
		want := make([]string, len(all))
		for i, p := range all {
			want[i] = p.ContentID
		}
		wait.For(t, fmt.Sprintf("the feed of user %d complete", u), func() error {
			var got []string
			for p, err := range client.All(ctx, 100, func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error) {
				return c.Feed(ctx, u, limit, cursor)
			}) {
				if err != nil {
					return err
				}
				got = append(got, p.ContentID)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("feed %v, want %v", got, want)
			}
			return nil
		})
	}
}

// feedHas returns nil when the first page of u's feed holds content id id,
// else what the page held.
func feedHas(ctx context.Context, c *client.Client, u uint64, id string) error {
	page, err := c.Feed(ctx, u, 100, "")
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(page.Items, func(p client.Post) bool { return p.ContentID == id }) {
		return fmt.Errorf("first page %v", page.Items)
	}
	return nil
}

func parseID(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	must(t, err)
	return n
}

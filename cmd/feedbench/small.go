package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
)

// smallAudiences are the followers per post of phase M's scenarios.
var smallAudiences = []int{1, 10, 100}

// smallAuthorBase is where phase M's authors start: scenario i's authors are
// smallAuthorBase + i*smallAuthorStride + k.
const (
	smallAuthorBase   = 10_000
	smallAuthorStride = 20_000
)

// smallResult is one scenario of phase M.
type smallResult struct {
	Followers    int // per post
	Authors      int
	Posts        int
	Accepting    time.Duration // first publish to the last publish's reply
	Delivering   time.Duration // first publish to the system at rest
	Lag          time.Duration // the last publish's reply to the system at rest
	CeilingRows  int64
	CeilingTime  time.Duration
	WorkerErrors int64
}

func (r smallResult) accepted() float64  { return float64(r.Posts) / r.Accepting.Seconds() }
func (r smallResult) delivered() float64 { return float64(r.Posts) / r.Delivering.Seconds() }

// ceiling is the raw writer's rate in posts/s: its rows/s over the rows of
// one post.
func (r smallResult) ceiling() float64 {
	return float64(r.CeilingRows) / r.CeilingTime.Seconds() / float64(r.Followers)
}

// smallPosts runs phase M: many authors with a few followers each publish
// through the API as fast as the clients go, and the run times how soon
// every post is in every follower's inbox.
func (b *bench) smallPosts(ctx context.Context) error {
	for i, f := range smallAudiences {
		r, err := b.smallScenario(ctx, i, f)
		if err != nil {
			return fmt.Errorf("M %d followers per post: %w", f, err)
		}
		b.rep.Small = append(b.rep.Small, r)
	}
	return nil
}

func (b *bench) smallScenario(ctx context.Context, i, followers int) (smallResult, error) {
	o := b.opt
	res := smallResult{Followers: followers, Authors: o.SmallAuthors, Posts: min(o.SmallPosts, o.SmallRows/followers)}
	now := time.Now()
	audiences := make([][]uint64, o.SmallAuthors)
	for k := range audiences {
		audiences[k] = b.sample(b.data.users, followers)
		if err := storeload.Followers(ctx, b.st, smallAuthor(i, k), audiences[k], now.Add(-loadSpan).UnixMilli(), false); err != nil {
			return res, err
		}
	}
	if err := b.stack.waitIdle(ctx, time.Minute); err != nil {
		return res, err
	}
	b.log.Info("feedbench: M publishing", "followers_per_post", followers, "authors", o.SmallAuthors, "posts", res.Posts)

	errs0 := b.stack.counter("feed_worker_errors_total")
	var last atomic.Int64 // unix ns of the latest publish reply
	start := time.Now()
	if err := spread(o.Clients, res.Posts, func(n int) error {
		if _, _, err := b.stack.api.Publish(ctx, smallAuthor(i, n%o.SmallAuthors), client.PublishRequest{}); err != nil {
			return err
		}
		t := time.Now().UnixNano()
		for {
			l := last.Load()
			if t <= l || last.CompareAndSwap(l, t) {
				return nil
			}
		}
	}); err != nil {
		return res, err
	}
	if err := b.stack.waitIdle(ctx, 10*time.Minute); err != nil {
		return res, err
	}
	atRest := time.Now()
	lastReply := time.Unix(0, last.Load())
	res.Accepting, res.Delivering, res.Lag = lastReply.Sub(start), atRest.Sub(start), atRest.Sub(lastReply)
	res.WorkerErrors = int64(b.stack.counter("feed_worker_errors_total") - errs0)
	b.log.Info("feedbench: M delivered", "followers_per_post", followers,
		"accepted_per_s", int(res.accepted()), "delivered_per_s", int(res.delivered()), "lag_ms", ms(res.Lag))

	if err := b.smallCeiling(ctx, i, audiences, &res); err != nil {
		return res, err
	}
	return res, nil
}

func smallAuthor(scenario, k int) uint64 {
	return smallAuthorBase + uint64(scenario*smallAuthorStride+k)
}

// smallCeiling writes the scenario's inbox rows again, as raw multi-row
// INSERT IGNOREs of a thousand rows over Workers connections, with content
// ids of their own, then deletes them outside the clock.
func (b *bench) smallCeiling(ctx context.Context, scenario int, audiences [][]uint64, res *smallResult) error {
	t := time.Now().UnixMilli()
	posts := make([]feed.Post, res.Posts)
	var rows []store.InboxRow
	for n := range posts {
		k := n % len(audiences)
		posts[n] = feed.Post{ContentID: b.nextCeilingPost(), AuthorID: smallAuthor(scenario, k), PublishTime: t, Kind: feed.KindPost}
		for _, u := range audiences[k] {
			rows = append(rows, store.InboxRow{UserID: u, Post: posts[n]})
		}
	}
	const chunk = 1000
	var written atomic.Int64
	start := time.Now()
	if err := spread(b.opt.Workers, (len(rows)+chunk-1)/chunk, func(c int) error {
		n, err := insertInboxRows(ctx, b.db, rows[c*chunk:min((c+1)*chunk, len(rows))])
		written.Add(n)
		return err
	}); err != nil {
		return err
	}
	res.CeilingTime, res.CeilingRows = time.Since(start), written.Load()
	return spread(b.opt.Workers, len(posts), func(n int) error {
		_, err := retractFromFollowers(ctx, b.db, posts[n])
		return err
	})
}

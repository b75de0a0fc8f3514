package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/store/storeload"
)

// pollInterval is the pause between two feed reads of a polled follower:
// it bounds the resolution of the visible time.
const pollInterval = 2 * time.Millisecond

// latencyScenario is one author of phase B.
type latencyScenario struct {
	name      string
	author    uint64
	followers []uint64 // ascending
	reps      int
	pull      bool // the author is above the push threshold: push_active
	// undo deletes each post from the followers' inboxes once timed. The
	// big audiences' inboxes are below the limit, so no trim holds them:
	// without it their posts would add millions of rows and the table
	// would outgrow the buffer pool halfway through the scenario.
	undo bool
}

// latency runs phase B: publish over HTTP, then poll two followers' feeds
// over HTTP until the post shows: the last follower in user_id order (the
// last task's last batch writes it) and a random one.
func (b *bench) latency(ctx context.Context) error {
	o := b.opt
	big := make([]uint64, o.FollowersBig)
	for k := range big {
		big[k] = extraUser(k)
	}
	scenarios := []latencyScenario{
		{name: fmt.Sprintf("%s followers, push", count(o.FollowersSmall)), author: latencyAuthorBase,
			followers: b.sample(b.data.users, o.FollowersSmall), reps: o.RepsSmall},
		{name: fmt.Sprintf("%s followers, push to all (push threshold raised above it)", count(o.FollowersBig)),
			author: latencyAuthorBase + 1, followers: big, reps: o.RepsBig, undo: true},
		{name: fmt.Sprintf("%s followers, push_active (default threshold; every follower active)", count(o.FollowersBig)),
			author: latencyAuthorBase + 2, followers: big, reps: o.RepsBig, pull: true, undo: true},
	}
	for _, sc := range scenarios {
		r, err := b.latencyScenario(ctx, sc)
		if err != nil {
			return fmt.Errorf("B %s: %w", sc.name, err)
		}
		b.rep.Latency = append(b.rep.Latency, r)
	}
	return nil
}

func (b *bench) latencyScenario(ctx context.Context, sc latencyScenario) (res latencyResult, err error) {
	now := time.Now()
	if sc.pull {
		// Active readers in a spell that began before the post: it reaches
		// them only by push.
		if err := storeload.Activity(ctx, b.st, sc.followers, now.UnixMilli(), now.Add(-24*time.Hour).UnixMilli(), nil); err != nil {
			return latencyResult{}, err
		}
	}
	if err := storeload.Followers(ctx, b.st, sc.author, sc.followers, now.Add(-loadSpan).UnixMilli(), sc.pull); err != nil {
		return latencyResult{}, err
	}
	res = latencyResult{Name: sc.name, Followers: len(sc.followers), N: sc.reps}
	errs0 := b.stack.counter("feed_worker_errors_total")
	defer func() { res.WorkerErrors = int64(b.stack.counter("feed_worker_errors_total") - errs0) }()
	last := sc.followers[len(sc.followers)-1]
	api := b.stack.api
	for rep := range sc.reps {
		random := sc.followers[b.rng.IntN(len(sc.followers))]
		start := time.Now()
		p, _, err := api.Publish(ctx, sc.author, client.PublishRequest{})
		if err != nil {
			return res, err
		}
		res.Publish = append(res.Publish, time.Since(start))
		var lastT, randomT time.Duration
		var g group
		g.Go(func() (err error) { lastT, err = b.waitVisible(ctx, last, p.ContentID, start); return err })
		g.Go(func() (err error) { randomT, err = b.waitVisible(ctx, random, p.ContentID, start); return err })
		if err := g.Wait(); err != nil {
			return res, err
		}
		res.Last = append(res.Last, lastT)
		res.Random = append(res.Random, randomT)
		// The next post starts with the system at rest.
		if err := b.stack.waitIdle(ctx, 5*time.Minute); err != nil {
			return res, err
		}
		d, err := api.Delivery(ctx, sc.author, parseID(p.ContentID))
		if err != nil {
			return res, err
		}
		res.Mode = d.Mode
		if sc.undo {
			if err := b.undo(ctx, [][]uint64{sc.followers}, []feed.Post{{ContentID: parseID(p.ContentID), AuthorID: sc.author, PublishTime: p.PublishTime}}); err != nil {
				return res, err
			}
			if err := b.quiesce(ctx); err != nil {
				return res, err
			}
		}
		b.log.Info("feedbench: B post visible", "author", sc.name, "rep", rep+1, "of", sc.reps,
			"last_follower_ms", ms(lastT), "random_follower_ms", ms(randomT), "mode", d.Mode, "delivered", d.Delivered)
	}
	for _, l := range [][]time.Duration{res.Publish, res.Last, res.Random} {
		slices.Sort(l)
	}
	return res, nil
}

// waitVisible reads the user's first feed page until it holds the post and
// returns the time since start.
func (b *bench) waitVisible(ctx context.Context, user uint64, contentID string, start time.Time) (time.Duration, error) {
	deadline := start.Add(2 * time.Minute)
	for {
		page, err := b.stack.api.Feed(ctx, user, pageLimit, "")
		if err != nil {
			return 0, err
		}
		for _, it := range page.Items {
			if it.ContentID == contentID {
				return time.Since(start), nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("post %s not in the feed of user %d after %s", contentID, user, time.Since(start))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// Phase I's second part follows the imported authors through the service,
// in process, from new users: the same number of edges once as batches
// of POST /v1/follows (service.FollowMany) and once as single follows
// (service.Follow), with the workers running, until every follow event is
// applied (followers rows added, backfills copied); and once as an import
// of a file of those follows (service.Import, what feedd import runs),
// which does the same work: the anchor batch follows are held to.

// followRate is one way of following.
type followRate struct {
	Way      string
	Clients  int
	Edges    int
	Accepted time.Duration // until every call returned
	Applied  time.Duration // until no follow event was left
}

const (
	followUsers     = 1000 // new users per way
	followsPerUser  = 20
	followBatch     = 1000 // pairs per FollowMany call
	batchClients    = 4
	singleClients   = 32 // as many as the clients of issue 46's measurement
	followIdleLimit = 10 * time.Minute
)

// followEdges returns the pairs of users first..first+followUsers-1, each
// following followsPerUser distinct imported authors (1..authors), drawn
// as the import file draws them.
func followEdges(first uint64, authors int) []feed.FollowRequest {
	r := rand.New(rand.NewPCG(first, 2))
	var out []feed.FollowRequest
	for u := first; u < first+followUsers; u++ {
		seen := map[uint64]bool{}
		for len(seen) < followsPerUser {
			a := 1 + uint64(float64(authors)*r.Float64()*r.Float64())
			if !seen[a] {
				seen[a] = true
				out = append(out, feed.FollowRequest{UserID: u, AuthorID: a})
			}
		}
	}
	return out
}

// followRates measures both ways on st, whose authors 1..authors were
// imported; reg holds svc's metrics.
func (b *bench) followRates(ctx context.Context, st *store.Store, svc *service.Service, reg *prometheus.Registry, authors int) ([]followRate, error) {
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.RunWorkers(wctx, time.Second) }()
	defer func() { stop(); <-done }()
	base := uint64(authors) + 1
	batched := followEdges(base, authors)
	singles := followEdges(base+followUsers, authors)
	imported, err := importEdges(ctx, svc, followEdges(base+2*followUsers, authors))
	if err != nil {
		return nil, err
	}
	b.log.Info("feedbench: I follows", "way", imported.Way, "edges", imported.Edges, "applied_seconds", imported.Applied.Seconds())
	out := []followRate{imported}
	for _, way := range []struct {
		name    string
		clients int
		calls   [][]feed.FollowRequest
		call    func(context.Context, []feed.FollowRequest) error
	}{
		{"batches of 1,000 (`POST /v1/follows`)", batchClients, chunks(batched, followBatch), func(ctx context.Context, reqs []feed.FollowRequest) error {
			res, err := svc.FollowMany(ctx, reqs)
			for _, r := range res {
				if err == nil && r.Err != nil {
					err = r.Err
				}
			}
			return err
		}},
		{"single follows (`PUT …/following/{author_id}`)", singleClients, chunks(singles, 1), func(ctx context.Context, reqs []feed.FollowRequest) error {
			return svc.Follow(ctx, reqs[0].UserID, reqs[0].AuthorID)
		}},
	} {
		applied := counterOf(reg, appliedMetric) + float64(len(way.calls)*len(way.calls[0]))
		start := time.Now()
		if err := runCalls(ctx, way.clients, way.calls, way.call); err != nil {
			return nil, fmt.Errorf("%s: %w", way.name, err)
		}
		accepted := time.Since(start)
		if err := waitApplied(ctx, reg, st, applied); err != nil {
			return nil, fmt.Errorf("%s: %w", way.name, err)
		}
		fr := followRate{Way: way.name, Clients: way.clients, Edges: len(way.calls) * len(way.calls[0]), Accepted: accepted, Applied: time.Since(start)}
		b.log.Info("feedbench: I follows", "way", fr.Way, "edges", fr.Edges, "accepted_seconds", fr.Accepted.Seconds(), "applied_seconds", fr.Applied.Seconds())
		out = append(out, fr)
	}
	return out, nil
}

// appliedMetric counts the follow events the service applied.
const appliedMetric = "feed_follow_events_applied_total"

// waitApplied waits until the service counts applied events and then until
// no work is queued: the count is read in process, where polling the
// queues would take server time from the work it waits on (a look at the
// follow events' queue walks the rows deleted and not yet purged).
func waitApplied(ctx context.Context, reg *prometheus.Registry, st *store.Store, applied float64) error {
	deadline := time.Now().Add(followIdleLimit)
	for counterOf(reg, appliedMetric) < applied && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return waitIdle(ctx, st, time.Until(deadline))
}

// importEdges imports a file of the edges' follow records and returns how
// long it took.
func importEdges(ctx context.Context, svc *service.Service, edges []feed.FollowRequest) (followRate, error) {
	var data []byte
	for _, e := range edges {
		data = append(feed.Record{Type: feed.RecordFollow, UserID: e.UserID, AuthorID: e.AuthorID}.AppendJSON(data), '\n')
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	start := time.Now()
	check, err := svc.CheckImport(bytes.NewReader(data))
	if err == nil {
		_, err = svc.Import(ctx, check, open, service.ImportOptions{})
	}
	d := time.Since(start)
	return followRate{Way: "import of a file of these follows (`feedd import`)", Clients: 1, Edges: len(edges), Accepted: d, Applied: d}, err
}

func chunks(reqs []feed.FollowRequest, n int) [][]feed.FollowRequest {
	var out [][]feed.FollowRequest
	for i := 0; i < len(reqs); i += n {
		out = append(out, reqs[i:min(i+n, len(reqs))])
	}
	return out
}

// runCalls makes the calls from clients goroutines and returns the first
// error.
func runCalls(ctx context.Context, clients int, calls [][]feed.FollowRequest, call func(context.Context, []feed.FollowRequest) error) error {
	next := make(chan []feed.FollowRequest)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for reqs := range next {
				if err := call(ctx, reqs); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, c := range calls {
		next <- c
	}
	close(next)
	wg.Wait()
	return first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// perSecond is the way's edges applied per second.
func (f followRate) perSecond() float64 { return rate(int64(f.Edges), f.Applied) }

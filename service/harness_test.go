package service_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

// harness is a service on fresh databases with its workers running.
type harness struct {
	svc   *service.Service
	store *store.Store
	cfg   service.Config
}

type harnessOpts struct {
	shards     int
	noWorkers  bool
	configured func(*service.Config)
	now        func() time.Time
}

// newHarness starts a service with fast polling and short leases; workers
// stop when the test ends.
func newHarness(t testing.TB, opt harnessOpts) *harness {
	t.Helper()
	st := storetest.NewStore(t, storetest.Options{Shards: opt.shards})
	cfg := service.DefaultConfig()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Lease = 2 * time.Second
	if opt.configured != nil {
		opt.configured(&cfg)
	}
	now := opt.now
	if now == nil {
		now = time.Now
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(st, cfg, log, service.NewMetrics(prometheus.NewRegistry()), now)
	if err != nil {
		t.Fatal(err)
	}
	if !opt.noWorkers {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); svc.RunWorkers(ctx, time.Second) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return &harness{svc: svc, store: st, cfg: cfg}
}

// waitIdle waits until no work is queued on any shard.
func (h *harness) waitIdle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := h.store.Backlog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if b.Idle() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("work still queued after 20s: %+v", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// feedAll pages through the user's whole feed with the given page size.
func (h *harness) feedAll(t testing.TB, user uint64, limit int) []feed.Post {
	t.Helper()
	var all []feed.Post
	cursor := ""
	for range 10000 {
		items, next, err := h.svc.Feed(context.Background(), user, feed.Page{Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, items...)
		if next == "" {
			return all
		}
		cursor = next
	}
	t.Fatal("feed did not end")
	return nil
}

// publish publishes a post with the given id and time.
func (h *harness) publish(t testing.TB, author, id uint64, at int64) feed.Post {
	t.Helper()
	p, _, err := h.svc.Publish(context.Background(), service.PublishInput{AuthorID: author, ContentID: id, PublishTime: &at})
	if err != nil {
		t.Fatalf("publish %d by %d: %v", id, author, err)
	}
	return p
}

// follow makes user follow author.
func (h *harness) follow(t testing.TB, user, author uint64) {
	t.Helper()
	if err := h.svc.Follow(context.Background(), user, author); err != nil {
		t.Fatalf("follow %d→%d: %v", user, author, err)
	}
}

package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store/storeload"
	"github.com/feedhq/feed/store/storetest"
)

// BenchmarkFeedPage reads phase C's inbox-only pages, 8 readers at a time,
// through each layer of the read path: phase C's raw keyset SELECT,
// service.Feed in-process, HTTP through the wrk-style load generator, and
// HTTP through the typed Go client. It reports allocations and the
// process's CPU time per page (cpu-µs/op: readers and server, not the
// database), which say more than wall time on a shared machine; with
// -cpuprofile it shows where a page's time goes above the service.
func BenchmarkFeedPage(b *testing.B) {
	// Cancellable, as phase C's: database/sql watches such a context.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := storetest.NewStore(b, storetest.Options{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const users, rows = 50, 100
	bn := &bench{opt: options{Pages: 3, Seed: 1}, log: log, st: st, data: newDataset(users, time.Now())}
	if _, err := bn.loadInboxes(ctx, st, bn.data.users, rows); err != nil {
		b.Fatal(err)
	}
	for a := range inboxAuthors {
		if err := storeload.Followers(ctx, st, inboxAuthorBase+uint64(a), bn.data.users, bn.data.t0, false); err != nil {
			b.Fatal(err)
		}
	}
	now := time.Now()
	if err := storeload.Activity(ctx, st, bn.data.users, now.UnixMilli(), now.Add(-24*time.Hour).UnixMilli(), nil); err != nil {
		b.Fatal(err)
	}
	stk, err := startStack(st, service.DefaultConfig(), 0, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stk.close() })
	load := newHTTPLoad(stk.addr)
	b.Cleanup(load.close)

	raw, err := prepareInboxPage(ctx, st.Shards()[0].DB, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.close() })

	pagers := []struct {
		name string
		read pager
	}{
		{"raw", func(ctx context.Context, s *session) (bool, error) {
			posts, err := raw.page(ctx, s.user, s.key, pageLimit+1)
			if err != nil || len(posts) <= pageLimit {
				return false, err
			}
			s.key = posts[pageLimit-1].Key()
			return true, nil
		}},
		{"service", func(ctx context.Context, s *session) (bool, error) {
			page, err := stk.svc.Feed(ctx, s.user, feed.Page{Limit: pageLimit, Cursor: s.cursor})
			s.cursor = page.Next
			return page.Next != "", err
		}},
		{"http", load.pager("")},
		{"client", func(ctx context.Context, s *session) (bool, error) {
			page, err := stk.api.Feed(ctx, s.user, pageLimit, s.cursor)
			if err != nil || page.NextCursor == nil {
				return false, err
			}
			s.cursor = *page.NextCursor
			return true, nil
		}},
	}
	for _, p := range pagers {
		b.Run(p.name, func(b *testing.B) {
			clients := bn.sessions(bn.data.users, p.read, 0, 0)
			var next atomic.Int32
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.Cleanup(func() {
				b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
			b.SetParallelism(4) // 8 clients on 2 CPUs, as in phase C
			b.RunParallel(func(pb *testing.PB) {
				read := clients(int(next.Add(1)))
				for pb.Next() {
					if err := read(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// processCPU is the CPU time (user and system) the process has used: the
// benchmark's clients and the server are in it, the database is not.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

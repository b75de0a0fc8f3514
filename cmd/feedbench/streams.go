package main

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/feedhq/feed/httpapi/client"
)

// streamResult is what phase S measured.
type streamResult struct {
	Streams int
	Idle    time.Duration // the window with every stream open and nothing published
	// Statements the service ran per second in the idle window: the
	// watchers' and the streams' feed reads.
	IdleQueriesPerSecond float64
	// CPUPerSecond is CPU seconds per second of the whole benchmark process
	// (service, HTTP server and the streams' clients) in the idle window.
	CPUPerSecond float64
	// HeapPerStream is the Go heap the open streams added, server and
	// client side together, per stream.
	HeapPerStream  float64
	Event, Visible []time.Duration // publish → event, publish → on the first page
}

// streamsPhase runs phase S: opt.Streams streams open on the in-process
// service, each a user's own feed; the cost of holding them while nothing
// happens; then posts published one at a time, each timed from the start
// of its POST to its event on the author's own stream and to its showing
// on the author's first feed page.
func (b *bench) streamsPhase(ctx context.Context) error {
	users := b.data.users[len(b.data.users)-b.opt.Streams:]
	heap0 := heapInUse()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	api := client.New("http://"+b.stack.addr, "", &http.Client{Transport: &http.Transport{}})
	events := make(map[uint64]<-chan client.Event, len(users))
	for _, u := range users {
		ch, err := api.StreamFeed(sctx, u, client.StreamRequest{})
		if err != nil {
			return fmt.Errorf("S open stream of user %d: %w", u, err)
		}
		events[u] = ch
	}
	// Every stream's first read (the feed's top) is done within a poll or
	// two of opening; the idle window starts after.
	time.Sleep(2 * time.Second)
	res := streamResult{Streams: len(users), Idle: b.opt.StreamIdle, HeapPerStream: (heapInUse() - heap0) / float64(len(users))}
	q0 := b.stack.counter("feed_stream_watch_queries_total")
	r0, _ := b.stack.histogram("feed_read_queries")
	cpu0 := cpuTime()
	time.Sleep(b.opt.StreamIdle)
	q1 := b.stack.counter("feed_stream_watch_queries_total")
	r1, _ := b.stack.histogram("feed_read_queries")
	res.IdleQueriesPerSecond = (q1 - q0 + r1 - r0) / b.opt.StreamIdle.Seconds()
	res.CPUPerSecond = (cpuTime() - cpu0).Seconds() / b.opt.StreamIdle.Seconds()
	b.log.Info("feedbench: S streams open", "streams", len(users), "idle_queries_per_second", res.IdleQueriesPerSecond,
		"cpu_per_second", res.CPUPerSecond, "heap_bytes_per_stream", int(res.HeapPerStream))

	for rep := range b.opt.StreamPosts {
		// A random pause first: posts timed back to back would each start
		// just after the watchers' poll that found the last one.
		time.Sleep(time.Duration(b.rng.Int64N(int64(streamPollSpread))))
		u := users[b.rng.IntN(len(users))]
		start := time.Now()
		p, _, err := b.stack.api.Publish(ctx, u, client.PublishRequest{})
		if err != nil {
			return err
		}
		var eventT, visibleT time.Duration
		var g group
		g.Go(func() (err error) { eventT, err = waitEvent(events[u], p.ContentID, start); return err })
		g.Go(func() (err error) { visibleT, err = b.waitVisible(ctx, u, p.ContentID, start); return err })
		if err := g.Wait(); err != nil {
			return fmt.Errorf("S post %d: %w", rep+1, err)
		}
		res.Event = append(res.Event, eventT)
		res.Visible = append(res.Visible, visibleT)
	}
	slices.Sort(res.Event)
	slices.Sort(res.Visible)
	b.log.Info("feedbench: S latency", "posts", b.opt.StreamPosts,
		"event_p50_ms", ms(percentile(res.Event, 0.5)), "event_p99_ms", ms(percentile(res.Event, 0.99)),
		"visible_p50_ms", ms(percentile(res.Visible, 0.5)), "visible_p99_ms", ms(percentile(res.Visible, 0.99)))
	b.rep.Streams = &res
	return nil
}

// streamPollSpread spreads the timed posts over a watcher's poll interval.
const streamPollSpread = 250 * time.Millisecond

// waitEvent waits for the post's event on a stream and returns the time
// since start.
func waitEvent(events <-chan client.Event, contentID string, start time.Time) (time.Duration, error) {
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return 0, fmt.Errorf("stream ended before post %s", contentID)
			}
			if e.Post.ContentID == contentID {
				return time.Since(start), nil
			}
		case <-timeout:
			return 0, fmt.Errorf("no event for post %s after %s", contentID, time.Since(start))
		}
	}
}

// heapInUse is the Go heap in use after a collection, in bytes.
func heapInUse() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse)
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (r *report) renderStreams(p func(string, ...any)) {
	s := r.Streams
	if !r.section(p, 'S', s != nil) {
		return
	}
	p("%s streams (`GET /v1/users/{id}/feed/stream`) open on the in-process service through the typed Go", count(s.Streams))
	p("client, one per loaded user. With nothing published for %s:", s.Idle)
	p("")
	p("| streams | statements/s (watchers + feed reads) | CPU s/s (whole process) | Go heap per stream (server + client) |")
	p("|---:|---:|---:|---:|")
	heap := "— (below the noise of a collection)"
	if s.HeapPerStream > 0 {
		heap = bytesIEC(int64(s.HeapPerStream))
	}
	p("| %s | %.0f | %.2f | %s |", count(s.Streams), s.IdleQueriesPerSecond, s.CPUPerSecond, heap)
	p("")
	p("Then %d posts, one at a time, each by a user with a stream open, timed from the start of the POST", len(s.Event))
	p("to the event on the author's stream and to the post on the author's first page (polled every %s):", pollInterval)
	p("")
	p("| N | publish → event p50 | p99 | publish → visible p50 | p99 |")
	p("|---:|---:|---:|---:|---:|")
	p("| %d | %s | %s | %s | %s |", len(s.Event), msStr(percentile(s.Event, 0.5)), p99(s.Event),
		msStr(percentile(s.Visible, 0.5)), p99(s.Visible))
	p("")
	p("One watcher per database polls every 250 ms with one statement per 64 watched users, so the idle")
	p("statements grow with the users watched, not with a query per stream per second; an event waits")
	p("for the next poll, then one feed read (docs/DESIGN.md, Streams).")
	p("")
}

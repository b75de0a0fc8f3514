package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"
)

// poissonArrivals returns the start times, from 0, of the requests of an
// open-loop Poisson process of rate requests per second over d: the gaps
// between them are exponential with mean 1/rate, whatever the responses do.
func poissonArrivals(rng *rand.Rand, rate float64, d time.Duration) []time.Duration {
	var out []time.Duration
	t := 0.0
	for {
		t += rng.ExpFloat64() / rate
		at := time.Duration(t * float64(time.Second))
		if at >= d {
			return out
		}
		out = append(out, at)
	}
}

// openLoopTimeout is the client's timeout of one request of the open-loop
// load: a request still unanswered then counts as a timeout.
const openLoopTimeout = 10 * time.Second

// openLoop runs op for every arrival at its scheduled time, each on a
// goroutine of its own holding a connection of pool, so a slow response
// never delays the requests scheduled after it (no coordinated omission).
// It returns, for each arrival, the time from its schedule to the end of
// its op: time waiting for the server counts, whatever held it up.
func openLoop(ctx context.Context, pool *connPool, arrivals []time.Duration, op func(ctx context.Context, i int, c *httpConn) error) ([]time.Duration, error) {
	lats := make([]time.Duration, len(arrivals))
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, at := range arrivals {
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return nil, ctx.Err()
			case <-time.After(d):
			}
		}
		wg.Go(func() {
			c, err := pool.take(ctx)
			if err == nil {
				err = op(ctx, i, c)
				pool.put(c)
			}
			lats[i] = time.Since(start.Add(at))
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lats, firstErr
}

// connPool holds keep-alive connections to addr: one per request in
// flight, dialed when none is idle, so the client never queues requests.
type connPool struct {
	addr string

	mu    sync.Mutex
	idle  []*httpConn
	open  int
	peak  int // most connections open at once
	dials int
}

// take returns an idle connection, or dials one.
func (p *connPool) take(ctx context.Context) (*httpConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.open++
	p.dials++
	p.peak = max(p.peak, p.open)
	p.mu.Unlock()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
		return nil, err
	}
	return &httpConn{c: nc, r: bufio.NewReaderSize(nc, 16<<10)}, nil
}

// put returns c to the pool, or closes it if it failed or the server
// closes it (c.closed).
func (p *connPool) put(c *httpConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.closed || c.broken {
		c.c.Close()
		p.open--
		return
	}
	p.idle = append(p.idle, c)
}

// close closes the idle connections.
func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.c.Close()
	}
	p.open -= len(p.idle)
	p.idle = nil
}

// request sends one request on c and returns its status and body; a
// transport error (a timeout included) marks c broken.
func (c *httpConn) request(method, path string, body []byte, timeout time.Duration) (int, []byte, error) {
	code, resp, err := c.do(method, path, body, time.Now().Add(timeout))
	if err != nil {
		c.broken = true
	}
	return code, resp, err
}

// isTimeout says whether err is a request's deadline passing.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// call sends one request on a connection of the pool and fails unless the
// status is want.
func (p *connPool) call(ctx context.Context, method, path string, body []byte, timeout time.Duration, want int) ([]byte, error) {
	c, err := p.take(ctx)
	if err != nil {
		return nil, err
	}
	defer p.put(c)
	code, resp, err := c.request(method, path, body, timeout)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if code != want {
		return nil, fmt.Errorf("%s %s: status %d: %.300s", method, path, code, resp)
	}
	return resp, nil
}

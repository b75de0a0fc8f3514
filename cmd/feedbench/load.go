package main

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// group runs goroutines and keeps the first error, like errgroup without
// the context.
type group struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs error
}

func (g *group) Go(fn func() error) {
	g.wg.Go(func() {
		if err := fn(); err != nil {
			g.mu.Lock()
			if g.errs == nil {
				g.errs = err
			}
			g.mu.Unlock()
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	return g.errs
}

// spread calls fn(i) for every i in [0, n) on workers goroutines, each
// taking the next i when it is free, and returns the first error; after
// one, each goroutine stops at its next call.
func spread(workers, n int, fn func(i int) error) error {
	var next atomic.Int64
	var g group
	for range workers {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return nil
				}
				if err := fn(i); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// closedLoopResult is what a closed-loop run measured.
type closedLoopResult struct {
	Ops     int             // operations completed inside the measured window
	Window  time.Duration   // the measured window
	Latency []time.Duration // of those operations, ascending
	All     int             // every operation the run completed, warm-up included: the divisor of counters sampled around it
}

// Rate is operations per second in the window.
func (r closedLoopResult) Rate() float64 { return float64(r.Ops) / r.Window.Seconds() }

// closedLoop runs clients goroutines, each calling its own op back to back
// (a closed loop: a client sends its next request when the last one
// returned) for warmup, then for measure. Only operations that start and
// end inside the measured window count. The first error stops the run.
func closedLoop(ctx context.Context, clients int, warmup, measure time.Duration, newOp func(client int) func(context.Context) error) (closedLoopResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := time.Now().Add(warmup)
	to := from.Add(measure)
	lats := make([][]time.Duration, clients)
	all := make([]int, clients)
	var g group
	for c := range clients {
		op := newOp(c)
		g.Go(func() error {
			for ctx.Err() == nil {
				t := time.Now()
				if !t.Before(to) {
					return nil
				}
				if err := op(ctx); err != nil {
					cancel()
					return err
				}
				all[c]++
				end := time.Now()
				if !t.Before(from) && end.Before(to) {
					lats[c] = append(lats[c], end.Sub(t))
				}
			}
			return ctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return closedLoopResult{}, err
	}
	res := closedLoopResult{Window: measure, Latency: slices.Concat(lats...)}
	res.Ops = len(res.Latency)
	for _, n := range all {
		res.All += n
	}
	slices.Sort(res.Latency)
	return res, nil
}

// percentile returns the nearest-rank q-quantile (0 < q <= 1) of sorted
// durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

package main

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPoissonArrivals(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rate, d = 1000.0, 20 * time.Second
	at := poissonArrivals(rng, rate, d)
	// 20,000 expected; the count's standard deviation is sqrt(20,000) ≈ 141.
	if n := float64(len(at)); math.Abs(n-rate*d.Seconds()) > 5*math.Sqrt(rate*d.Seconds()) {
		t.Fatalf("%d arrivals, want about %.0f", len(at), rate*d.Seconds())
	}
	var prev time.Duration
	var sum, sumSq float64
	for _, a := range at {
		if a < prev || a >= d {
			t.Fatalf("arrival %s out of order or past %s", a, d)
		}
		gap := (a - prev).Seconds()
		sum += gap
		sumSq += gap * gap
		prev = a
	}
	// Exponential gaps: the mean and the standard deviation are both 1/rate.
	n := float64(len(at))
	mean := sum / n
	sd := math.Sqrt(sumSq/n - mean*mean)
	if math.Abs(mean*rate-1) > 0.05 || math.Abs(sd*rate-1) > 0.05 {
		t.Fatalf("gaps: mean %.3g s, sd %.3g s; want both %.3g", mean, sd, 1/rate)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 500, 0.99: 990, 0.999: 999, 1: 1000} {
		if got := percentile(d, q); got != want {
			t.Errorf("percentile(%g) = %d, want %d", q, got, want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing should be 0")
	}
}

func TestFollowerCounts(t *testing.T) {
	for _, tc := range []struct{ n, mean int }{{1500, 100}, {200, 20}, {10000, 50}} {
		c := followerCounts(tc.n, tc.mean)
		sum := 0
		for r, d := range c {
			if d < 1 || d > tc.n-1 {
				t.Fatalf("n=%d: count %d of rank %d out of 1..n-1", tc.n, d, r)
			}
			if r > 0 && d > c[r-1] {
				t.Fatalf("n=%d: counts rise at rank %d", tc.n, r)
			}
			sum += d
		}
		if want := tc.n * tc.mean; math.Abs(float64(sum-want)) > 0.01*float64(want) {
			t.Errorf("n=%d: %d follows, want about %d", tc.n, sum, want)
		}
		if want := int(math.Round(topFollowedShare * float64(tc.n-1))); c[0] != want {
			t.Errorf("n=%d: the top author has %d followers, want %d", tc.n, c[0], want)
		}
		// The pull authors stand above the third.
		if c[pullAuthors-1] <= c[pullAuthors] {
			t.Errorf("n=%d: counts %v do not separate the top %d", tc.n, c[:pullAuthors+1], pullAuthors)
		}
	}
}

func TestMixGraph(t *testing.T) {
	g := newMixGraph(rand.New(rand.NewPCG(3, 4)), 300, 30)
	for u, fs := range g.followees {
		for i, a := range fs {
			if a == u || (i > 0 && fs[i-1] >= a) {
				t.Fatalf("user %d follows %v: a self-follow or a repeat", u, fs)
			}
		}
	}
	above := 0
	for a, n := range g.followers {
		if n > g.pushThreshold {
			above++
		}
		got := 0
		for _, fs := range g.followees {
			for _, x := range fs {
				if x == a {
					got++
				}
			}
		}
		if got != n {
			t.Fatalf("author %d: %d followers in the edges, %d counted", a, got, n)
		}
	}
	if above != pullAuthors {
		t.Errorf("%d authors above the push threshold %d, want %d", above, g.pushThreshold, pullAuthors)
	}
}

func TestServerHistQuantile(t *testing.T) {
	h := serverHist{bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, cum: []uint64{50, 90, 99, 100}}
	earlier := serverHist{bounds: h.bounds, cum: []uint64{0, 0, 0, 0}}
	d := h.since(earlier)
	for _, tc := range []struct {
		q      float64
		lo, hi float64
	}{{0.5, 0, 0.001}, {0.9, 0.001, 0.002}, {0.99, 0.002, 0.004}, {0.999, 0.004, math.Inf(1)}} {
		if lo, hi := d.quantile(tc.q); lo != tc.lo || hi != tc.hi {
			t.Errorf("quantile(%g) = (%g, %g], want (%g, %g]", tc.q, lo, hi, tc.lo, tc.hi)
		}
	}
	if d := h.since(h); d.count() != 0 {
		t.Errorf("a histogram since itself has %d observations", d.count())
	}
}

func TestParseWrk(t *testing.T) {
	out := `Running 10s test @ http://127.0.0.1:8080
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.10ms    2.01ms  40.12ms   90.00%
    Req/Sec     2.60k   200.00     3.00k    70.00%
  Latency Distribution
     50%  812.00us
     75%    3.50ms
     90%    5.00ms
     99%   12.34ms
  52000 requests in 10.01s, 40.00MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 3
Requests/sec:   5194.81
Transfer/sec:      4.00MB
`
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkRun{Requests: 52000, Seconds: 10.01, P50: 812 * time.Microsecond, P99: 12340 * time.Microsecond, Errors: 6}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
	if _, err := parseWrk("Running 1s test"); err == nil {
		t.Error("a report without a summary should fail")
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
)

// mixOptions are phase O's settings.
type mixOptions struct {
	MixUsers     int
	MixFollowees int // mean followees per user
	MixSeeds     int // posts each user publishes before the mix
	MixRates     string
	MixDuration  time.Duration
	MixCheck     int // feeds sampled by the check at the end
}

func (o *mixOptions) flags(fs *flag.FlagSet) {
	fs.IntVar(&o.MixUsers, "mix-users", 1500, "O: users of the power-law follow graph")
	fs.IntVar(&o.MixFollowees, "mix-followees", 100, "O: mean followees per user")
	fs.IntVar(&o.MixSeeds, "mix-seeds", 3, "O: posts each user publishes before the mix")
	fs.StringVar(&o.MixRates, "mix-rates", "250,500,1000,1500", "O: open-loop rates, operations per second, comma-separated")
	fs.DurationVar(&o.MixDuration, "mix-duration", 40*time.Second, "O: duration of each rate's run")
	fs.IntVar(&o.MixCheck, "mix-check", 300, "O: feeds whose first page the check at the end compares with a full sort")
}

// rates parses MixRates.
func (o mixOptions) rates() ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(o.MixRates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-mix-rates takes positive rates, got %q", f)
		}
		out = append(out, r)
	}
	return out, nil
}

func (o mixOptions) validate() error {
	if _, err := o.rates(); err != nil {
		return err
	}
	switch {
	case o.MixUsers <= pullAuthors+1 || o.MixFollowees < 1 || o.MixFollowees >= o.MixUsers:
		return fmt.Errorf("-mix-users must be > %d and -mix-followees in 1..-mix-users-1", pullAuthors+1)
	case o.MixSeeds < 0 || o.MixCheck < 0 || o.MixDuration <= 0:
		return fmt.Errorf("-mix-seeds and -mix-check must be >= 0, -mix-duration > 0")
	}
	return nil
}

// The operations of phase O's mix.
type mixOp int

const (
	opFirstPage mixOp = iota
	opNextPage
	opPost
	opFollow
	opUnfollow
	opDelete
	mixOps
)

var mixOpNames = [mixOps]string{"read, first page", "read, next page", "post", "follow", "unfollow", "delete"}

// mixWeights are the shares of the operations, in percent: reads 96 (70 %
// of them first pages, 30 % next pages), posts 1.5, follows 1, unfollows
// and deletes 0.5 each.
var mixWeights = [mixOps]float64{96 * 0.7, 96 * 0.3, 1.5, 1, 0.5, 0.5}

// mixWarmup is the unmeasured run's length: 20 s, or the measured runs'
// if shorter.
func mixWarmup(d time.Duration) time.Duration { return min(d, 20*time.Second) }

// drawOp draws an operation by mixWeights.
func drawOp(rng *rand.Rand) mixOp {
	x := rng.Float64() * 100
	for op, w := range mixWeights {
		if x < w {
			return mixOp(op)
		}
		x -= w
	}
	return opFirstPage
}

// Phase O's targets, read p99 ≤ 10 ms and p99.9 ≤ 50 ms at targetMixRate,
// and what a rate must meet to count as held.
const (
	targetMixRate      = 1000
	targetMixReadP99   = 10 * time.Millisecond
	targetMixReadP999  = 50 * time.Millisecond
	heldMixReadP99     = 50 * time.Millisecond
	heldMixPostP99     = 100 * time.Millisecond
	mixVisibleInterval = time.Second           // one post's publish → visible is sampled this often
	mixVisiblePoll     = 10 * time.Millisecond // the follower's first page is read this often
	mixCheckLimit      = pageLimit
	mixQuiesceTimeout  = 5 * time.Minute // for feedd's queues to empty
)

// mixTarget is one server phase O drives: feedd or the Redis anchor.
type mixTarget struct {
	name     string
	addr     string
	server   *child
	storePID int // mariadbd or redis-server; 0 if not found
	state    *mixState
	// load gives the target the graph's follows and the seeds.
	load func(ctx context.Context, g *mixGraph, seeds [][]mixPost) error
	// quiesce waits until the server's background work is done.
	quiesce func(ctx context.Context) error
	// histograms, for feedd: its feed_http_request_seconds by route.
	histograms func(ctx context.Context) (map[string]serverHist, error)
}

// The routes whose server-side latency phase O reports, keyed as in
// mixTarget.histograms.
const (
	histRead = "GET /v1/users/:id/feed"
	histPost = "POST /v1/users/:id/posts"
)

// opStats are one operation's outcomes over a run.
type opStats struct {
	Latency  []time.Duration // of the answered requests, ascending
	Statuses map[int]int     // answered requests by status
	Timeouts int             // unanswered within openLoopTimeout
	Failed   int             // transport errors other than a timeout
}

func (s opStats) count(pred func(code int) bool) int {
	n := 0
	for code, k := range s.Statuses {
		if pred(code) {
			n += k
		}
	}
	return n
}

// mixRateResult is one target's run at one rate.
type mixRateResult struct {
	Target    string
	Rate      float64
	Window    time.Duration
	Offered   int
	Ops       [mixOps]opStats
	Skipped   int                      // operations the state had nothing for (no cursor, no post), run as first pages
	Server    map[string][2]serverHist // by route: before and after
	Visible   []time.Duration          // publish → visible of sampled posts, ascending
	NotSeen   int                      // sampled posts not seen within openLoopTimeout
	ServerCPU float64                  // seconds, the server process
	StoreCPU  float64                  // seconds, mariadbd or redis-server (0 when not found)
	PeakConns int
	Failure   string // the first transport error other than a timeout
}

// held says whether the run met what a held rate must: read p99 ≤ 50 ms,
// post p99 ≤ 100 ms, no 5xx and no timeout.
func (r mixRateResult) held() bool {
	reads := r.reads()
	post := r.Ops[opPost]
	bad := 0
	for _, s := range r.Ops {
		bad += s.count(func(c int) bool { return c >= 500 }) + s.Timeouts + s.Failed
	}
	return bad == 0 && percentile(reads.Latency, 0.99) <= heldMixReadP99 && percentile(post.Latency, 0.99) <= heldMixPostP99
}

// reads merges first and next pages.
func (r mixRateResult) reads() opStats {
	s := opStats{Statuses: map[int]int{}}
	for _, op := range []mixOp{opFirstPage, opNextPage} {
		o := r.Ops[op]
		s.Latency = append(s.Latency, o.Latency...)
		for c, n := range o.Statuses {
			s.Statuses[c] += n
		}
		s.Timeouts += o.Timeouts
		s.Failed += o.Failed
	}
	slices.Sort(s.Latency)
	return s
}

// mixCheck is the exactness check of one target's sampled feeds.
type mixCheck struct {
	Sampled, Exact, Uncertain int
	Diffs                     []string // the first few mismatches
}

// mixResult is phase O.
type mixResult struct {
	Users, Edges, MeanFollowees, Seeds int
	TopFollowers                       []int // the most followed authors' counts
	PushThreshold                      int
	Runs                               []mixRateResult
	Checks                             map[string]mixCheck
	Duration                           time.Duration
}

// mixPhase runs phase O: the graph built through each target's API, then
// the open-loop mix at each rate against feedd and the Redis anchor in
// turn, then the check of sampled feeds.
func (b *bench) mixPhase(ctx context.Context) error {
	o := b.opt
	rng := rand.New(rand.NewPCG(o.Seed, 0x6d6978))
	g := newMixGraph(rng, o.MixUsers, o.MixFollowees)
	res := &mixResult{Users: o.MixUsers, Edges: g.edges(), MeanFollowees: o.MixFollowees, Seeds: o.MixSeeds,
		PushThreshold: g.pushThreshold, Duration: o.MixDuration,
		Checks: map[string]mixCheck{}}
	for _, a := range g.rank[:min(5, len(g.rank))] {
		res.TopFollowers = append(res.TopFollowers, g.followers[a])
	}
	b.rep.Mix = res
	targets, stop, err := b.mixTargets(ctx, &g)
	defer stop()
	if err != nil {
		return err
	}
	seeds := planSeeds(&g, o.MixSeeds, rand.New(rand.NewPCG(o.Seed, 1)))
	for _, t := range targets {
		start := time.Now()
		if err := t.load(ctx, &g, seeds); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		loaded := time.Since(start)
		if err := t.quiesce(ctx); err != nil {
			return err
		}
		t.state = newMixState(&g, seeds)
		b.log.Info("feedbench: O graph loaded", "target", t.name, "users", len(g.users), "follows", res.Edges,
			"load_seconds", loaded.Seconds(), "settle_seconds", (time.Since(start) - loaded).Seconds())
	}
	rates, _ := o.rates()
	// An unmeasured run at the first rate first: a server as it serves,
	// its caches filled and the import's background work (InnoDB's
	// flushing and purge) behind it.
	for _, t := range targets {
		if _, err := b.mixRun(ctx, t, rates[0], 1<<16, mixWarmup(o.MixDuration)); err != nil {
			return fmt.Errorf("%s warming up: %w", t.name, err)
		}
		if err := t.quiesce(ctx); err != nil {
			return err
		}
	}
	for i, rate := range rates {
		for _, t := range targets {
			r, err := b.mixRun(ctx, t, rate, uint64(i), o.MixDuration)
			if err != nil {
				return fmt.Errorf("%s at %g ops/s: %w", t.name, rate, err)
			}
			res.Runs = append(res.Runs, r)
			rd := r.reads()
			b.log.Info("feedbench: O run", "target", t.name, "rate", rate, "ops", r.Offered,
				"read_p50_ms", ms(percentile(rd.Latency, 0.5)), "read_p99_ms", ms(percentile(rd.Latency, 0.99)),
				"read_p999_ms", ms(percentile(rd.Latency, 0.999)), "timeouts", rd.Timeouts, "peak_conns", r.PeakConns, "first_failure", r.Failure)
			if err := t.quiesce(ctx); err != nil {
				return err
			}
		}
	}
	for _, t := range targets {
		c, err := checkFeeds(ctx, t, o.MixCheck, rand.New(rand.NewPCG(o.Seed, 2)))
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		res.Checks[t.name] = c
		b.log.Info("feedbench: O check", "target", t.name, "sampled", c.Sampled, "exact", c.Exact, "uncertain", c.Uncertain)
	}
	return nil
}

// mixTargets starts feedd on a database of its own and the Redis anchor
// on keys of their own; stop ends both and drops what they stored.
func (b *bench) mixTargets(ctx context.Context, g *mixGraph) ([]*mixTarget, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	cfg := *b.server
	cfg.DBName = b.rep.Database + "_mix"
	dsn := cfg.FormatDSN()
	f, err := b.startFeedd(ctx, dsn, "--push-threshold", strconv.Itoa(g.pushThreshold))
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() {
		if err := f.stop(); err != nil {
			b.log.Warn("feedbench: feedd", "err", err)
		}
		b.dropDatabase(cfg.DBName)
	})
	st, err := store.Open(shardmap.Single(dsn))
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { st.Close() })
	feeddT := &mixTarget{name: "feedd", addr: f.url[len("http://"):], server: f.child, storePID: dbServerPID(ctx, b.db),
		load: func(ctx context.Context, g *mixGraph, seeds [][]mixPost) error {
			bin, err := b.feeddBinary()
			if err != nil {
				return err
			}
			dir, err := b.tempDir()
			if err != nil {
				return err
			}
			return importGraph(ctx, bin, dsn, g.pushThreshold, g, seeds, dir)
		},
		quiesce: func(ctx context.Context) error { return waitIdle(ctx, st, mixQuiesceTimeout) },
		histograms: func(ctx context.Context) (map[string]serverHist, error) {
			mfs, err := f.metrics(ctx)
			if err != nil {
				return nil, err
			}
			return map[string]serverHist{
				histRead: routeHist(mfs, "feed_http_request_seconds", "/v1/users/:id/feed", "GET"),
				histPost: routeHist(mfs, "feed_http_request_seconds", "/v1/users/:id/posts", "POST"),
			}, nil
		}}
	a, err := b.startAnchor(ctx, "mix")
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, a.close)
	anchorT := &mixTarget{name: "Redis anchor", addr: a.addr, server: a.child, storePID: a.redisPID,
		load: func(ctx context.Context, g *mixGraph, seeds [][]mixPost) error {
			if err := buildGraph(ctx, a.addr, g); err != nil {
				return err
			}
			return seedPosts(ctx, a.addr, g, seeds)
		},
		quiesce: func(context.Context) error { return nil }}
	return []*mixTarget{feeddT, anchorT}, stop, nil
}

// dropDatabase drops a database of the run's own on the benchmark's server.
func (b *bench) dropDatabase(name string) {
	if b.opt.Keep {
		return
	}
	// A schema name cannot be a placeholder; it is the run's own
	// [a-z0-9_] name with a suffix.
	if _, err := b.db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		b.log.Warn("feedbench: drop database", "database", name, "err", err)
	}
}

// mixRun drives the open-loop mix at rate against t for the phase's
// duration.
func (b *bench) mixRun(ctx context.Context, t *mixTarget, rate float64, run uint64, window time.Duration) (mixRateResult, error) {
	seed := b.opt.Seed
	arrivals := poissonArrivals(rand.New(rand.NewPCG(seed, 100+run)), rate, window)
	ops := make([]mixOp, len(arrivals))
	opRng := rand.New(rand.NewPCG(seed, 200+run))
	for i := range ops {
		ops[i] = drawOp(opRng)
	}
	res := mixRateResult{Target: t.name, Rate: rate, Window: window, Offered: len(arrivals), Server: map[string][2]serverHist{}}
	outcomes := make([]mixOutcome, len(arrivals))
	var before map[string]serverHist
	if t.histograms != nil {
		var err error
		if before, err = t.histograms(ctx); err != nil {
			return res, err
		}
	}
	cpu0, store0 := t.server.cpu(), storeCPU(t.storePID)
	pool := &connPool{addr: t.addr}
	defer pool.close()
	probes := &visibility{target: t, addr: t.addr}
	var rngs sync.Pool
	var streams atomic.Uint64
	rngs.New = func() any { return rand.New(rand.NewPCG(seed, 300+run<<20+streams.Add(1))) }
	lats, err := openLoop(ctx, pool, arrivals, func(ctx context.Context, i int, c *httpConn) error {
		rng := rngs.Get().(*rand.Rand)
		defer rngs.Put(rng)
		outcomes[i] = t.do(ctx, c, ops[i], rng, probes)
		return nil
	})
	if err != nil {
		return res, err
	}
	res.ServerCPU = t.server.cpu() - cpu0
	res.StoreCPU = storeCPU(t.storePID) - store0
	probes.wait()
	res.Visible, res.NotSeen = probes.result()
	res.PeakConns = pool.peak
	if t.histograms != nil {
		after, err := t.histograms(ctx)
		if err != nil {
			return res, err
		}
		for k, h := range after {
			res.Server[k] = [2]serverHist{before[k], h}
		}
	}
	for i := range res.Ops {
		res.Ops[i].Statuses = map[int]int{}
	}
	for i, oc := range outcomes {
		s := &res.Ops[oc.op]
		if oc.skipped {
			res.Skipped++
		}
		switch {
		case oc.timeout:
			s.Timeouts++
			continue
		case oc.failed:
			s.Failed++
			if res.Failure == "" {
				res.Failure = oc.detail
			}
			continue
		}
		s.Statuses[oc.status]++
		s.Latency = append(s.Latency, lats[i])
	}
	for i := range res.Ops {
		slices.Sort(res.Ops[i].Latency)
	}
	return res, nil
}

// storeCPU is the CPU seconds of the store's process so far (0 if unknown).
func storeCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	s, _, err := pidCPU(pid)
	if err != nil {
		return 0
	}
	return s
}

// mixOutcome is what one request of the mix got.
type mixOutcome struct {
	op       mixOp // what ran: a draw with nothing to act on runs as a first page
	skipped  bool
	status   int
	timeout  bool
	failed   bool
	detail   string
	response []byte
}

// do runs one operation of the mix on c and records its acknowledged
// effect in the target's state.
func (t *mixTarget) do(ctx context.Context, c *httpConn, op mixOp, rng *rand.Rand, probes *visibility) mixOutcome {
	s := t.state
	users := s.g.users
	send := func(op mixOp, method, path string, body []byte) mixOutcome {
		code, resp, err := c.request(method, path, body, openLoopTimeout)
		oc := mixOutcome{op: op, status: code, response: resp}
		switch {
		case isTimeout(err):
			oc.timeout = true
		case err != nil:
			oc.failed, oc.detail = true, err.Error()
		}
		return oc
	}
	read := func(op mixOp, user int, cursor string) mixOutcome {
		oc := send(op, "GET", feedPath(users[user], cursor), nil)
		if oc.status == 200 {
			next, _, err := scanPage(oc.response)
			if err != nil {
				oc.status = 0
				oc.failed, oc.detail = true, err.Error()
				return oc
			}
			s.setCursor(user, next)
		}
		return oc
	}
	id := func(i int) string { return strconv.FormatUint(users[i], 10) }
	switch op {
	case opNextPage:
		if u, cur, ok := s.cursor(rng); ok {
			return read(opNextPage, u, cur)
		}
	case opPost:
		author := rng.IntN(len(users))
		oc := send(opPost, "POST", "/v1/users/"+id(author)+"/posts", []byte("{}"))
		p, err := parsePost(oc.response)
		ok := oc.status == 201 && err == nil
		s.published(author, p, ok)
		if ok {
			probes.maybe(ctx, rng, author, p, time.Now())
		}
		return oc
	case opFollow, opUnfollow:
		follow := op == opFollow
		u, a, ok := s.startFollowChange(rng, follow)
		if !ok {
			break
		}
		method := "PUT"
		if !follow {
			method = "DELETE"
		}
		oc := send(op, method, "/v1/users/"+id(u)+"/following/"+id(a), nil)
		s.endFollowChange(u, a, follow, oc.status == 204)
		return oc
	case opDelete:
		a, p, ok := s.takePost(rng)
		if !ok {
			break
		}
		oc := send(opDelete, "DELETE", "/v1/users/"+id(a)+"/posts/"+strconv.FormatUint(p.ID, 10), nil)
		if oc.status != 204 {
			s.uncertainAuthor(a)
		}
		return oc
	}
	oc := read(opFirstPage, rng.IntN(len(users)), "")
	oc.skipped = op != opFirstPage
	return oc
}

// visibility samples publish → visible: one acknowledged post a
// mixVisibleInterval, whose follower's first page is read every
// mixVisiblePoll on a connection of its own until the post shows.
type visibility struct {
	target *mixTarget
	addr   string

	mu      sync.Mutex
	last    time.Time
	wg      sync.WaitGroup
	visible []time.Duration
	notSeen int
}

// maybe starts a probe of post p by author, acknowledged at acked, if the
// last one started mixVisibleInterval ago or more.
func (v *visibility) maybe(ctx context.Context, rng *rand.Rand, author int, p mixPost, acked time.Time) {
	v.mu.Lock()
	if acked.Sub(v.last) < mixVisibleInterval {
		v.mu.Unlock()
		return
	}
	v.last = acked
	v.mu.Unlock()
	reader, ok := v.target.state.follower(rng, author)
	if !ok {
		return
	}
	want := []byte(`"content_id":"` + strconv.FormatUint(p.ID, 10) + `"`)
	path := feedPath(v.target.state.g.users[reader], "")
	v.wg.Go(func() {
		pool := &connPool{addr: v.addr}
		defer pool.close()
		for time.Since(acked) < openLoopTimeout && ctx.Err() == nil {
			body, err := pool.call(ctx, "GET", path, nil, openLoopTimeout, 200)
			if err == nil && bytes.Contains(body, want) {
				v.mu.Lock()
				v.visible = append(v.visible, time.Since(acked))
				v.mu.Unlock()
				return
			}
			time.Sleep(mixVisiblePoll)
		}
		v.mu.Lock()
		v.notSeen++
		v.mu.Unlock()
	})
}

func (v *visibility) wait() { v.wg.Wait() }

func (v *visibility) result() ([]time.Duration, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := slices.Clone(v.visible)
	slices.Sort(out)
	return out, v.notSeen
}

// checkFeeds compares the first pages of n sampled users with a full sort
// of the acknowledged state, the target at rest.
func checkFeeds(ctx context.Context, t *mixTarget, n int, rng *rand.Rand) (mixCheck, error) {
	var c mixCheck
	pool := &connPool{addr: t.addr}
	defer pool.close()
	users := t.state.g.users
	for _, u := range rng.Perm(len(users))[:min(n, len(users))] {
		want, ok := t.state.expectedFirstPage(u, mixCheckLimit)
		if !ok {
			c.Uncertain++
			continue
		}
		body, err := pool.call(ctx, "GET", feedPath(users[u], ""), nil, time.Minute, 200)
		if err != nil {
			return c, fmt.Errorf("check feeds: %w", err)
		}
		got, err := pageIDs(body)
		if err != nil {
			return c, err
		}
		c.Sampled++
		if d := firstDiff(got, want); d != "" {
			if len(c.Diffs) < 3 {
				c.Diffs = append(c.Diffs, fmt.Sprintf("user %d: %s", users[u], d))
			}
			continue
		}
		c.Exact++
	}
	return c, nil
}

// pageIDs reads the content ids of a feed page's items.
func pageIDs(body []byte) ([]uint64, error) {
	var page struct {
		Items []struct {
			ContentID string `json:"content_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("not a feed page: %.200q", body)
	}
	ids := make([]uint64, len(page.Items))
	for i, it := range page.Items {
		ids[i] = parseID(it.ContentID)
	}
	return ids, nil
}

// firstDiff describes where a page's ids differ from the expected posts'
// ("" if they are the same).
func firstDiff(got []uint64, want []mixPost) string {
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return fmt.Sprintf("page has %d items, a full sort %d", len(got), len(want))
		case i >= len(want):
			return fmt.Sprintf("page has %d items, a full sort %d", len(got), len(want))
		case got[i] != want[i].ID:
			return fmt.Sprintf("item %d is post %d, a full sort gives %d", i+1, got[i], want[i].ID)
		}
	}
	return ""
}

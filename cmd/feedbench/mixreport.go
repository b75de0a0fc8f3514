package main

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"
)

// renderMix writes phase O's section.
func (r *report) renderMix(p func(string, ...any)) {
	x := r.Mix
	if !r.section(p, 'O', x != nil) {
		return
	}
	p("A follow graph of %s users: %s follows (mean %d", count(x.Users), count(x.Edges), x.MeanFollowees)
	p("followees), followers per author a power law of exponent %.3f (Kwak et al. 2010) in rank form,", kwakExponent)
	p("the most followed author followed by %.0f%% of the others (the five most followed: %s followers);",
		100*topFollowedShare, joinInts(x.TopFollowers))
	p("feedd runs with `--push-threshold %d`, so the %d most followed authors push only to active", x.PushThreshold, pullAuthors)
	p("followers. Each user has %d posts (publish times over the last day). feedd gets the follows and", x.Seeds)
	p("posts with `feedd import`, as an app adopting it would; the anchor through its API (`POST")
	p("/v1/follows`, then each post). Both servers run")
	p("as processes of their own: `feedd serve` (built from ./cmd/feedd, workers on, on a database of")
	p("its own) and the Redis anchor (a minimal net/http server over Redis sorted sets, the same paths")
	p("and JSON; phase W). Each first serves an unmeasured %s at the first rate, then at each rate", mixWarmup(x.Duration))
	p("the two take turns: an **open-loop** Poisson schedule for %s,", x.Duration)
	p("reads %.0f %% (%.0f %% first pages, %.0f %% next pages continuing the user's last cursor), posts %.1f %%,",
		mixWeights[opFirstPage]+mixWeights[opNextPage], 70.0, 30.0, mixWeights[opPost])
	p("follows %.0f %%, unfollows %.1f %%, deletes %.1f %%, each request on a connection of its own (the client", mixWeights[opFollow], mixWeights[opUnfollow], mixWeights[opDelete])
	p("opens one more whenever all are busy) and its latency counted from its **scheduled** time, so a")
	p("slow response delays nothing and a queue shows in the figures (no coordinated omission). A")
	p("request unanswered in %s is a timeout. Server CPU is the server process's and the store's", openLoopTimeout)
	p("(mariadbd or redis-server) from /proc over the run; the machine has %d CPUs. %s", runtime.NumCPU(), serverProcs(r.Opt.ServerProcs))
	p("")
	p("| server | rate (ops/s) | op | n | p50 | p99 | p99.9 | max | 4xx | 5xx | timeouts | other errors |")
	p("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, run := range x.Runs {
		for op := range mixOps {
			s := run.Ops[op]
			n := len(s.Latency) + s.Timeouts + s.Failed
			if n == 0 {
				continue
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %d | %d |", run.Target, count(int(run.Rate)), mixOpNames[op], count(n),
				msStr(percentile(s.Latency, 0.5)), msStr(percentile(s.Latency, 0.99)), msStr(percentile(s.Latency, 0.999)),
				msStr(percentile(s.Latency, 1)), s.count(func(c int) bool { return c >= 400 && c < 500 }),
				s.count(func(c int) bool { return c >= 500 }), s.Timeouts, s.Failed)
		}
	}
	p("")
	p("| server | rate (ops/s) | ops sent | read p99 / p99.9 | server-side read p50 / p99 / p99.9 | server-side post p99 | publish → visible p50 / max (n) | server CPU µs/op | store CPU µs/op | peak connections | rate held |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, run := range x.Runs {
		rd := run.reads()
		vis := "—"
		if len(run.Visible) > 0 || run.NotSeen > 0 {
			vis = fmt.Sprintf("%s / %s (%d", msStr(percentile(run.Visible, 0.5)), msStr(percentile(run.Visible, 1)), len(run.Visible))
			if run.NotSeen > 0 {
				vis += fmt.Sprintf(", **%d not seen in %s**", run.NotSeen, openLoopTimeout)
			}
			vis += ")"
		}
		perOp := func(cpu float64) string {
			if cpu == 0 {
				return "—"
			}
			return fmt.Sprintf("%.0f", cpu*1e6/float64(run.Offered))
		}
		held := "yes"
		if !run.held() {
			held = "no"
		}
		p("| %s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %d | %s |", run.Target, count(int(run.Rate)), count(run.Offered),
			msStr(percentile(rd.Latency, 0.99)), msStr(percentile(rd.Latency, 0.999)),
			serverQuantiles(run.Server[histRead], 0.5, 0.99, 0.999), serverQuantiles(run.Server[histPost], 0.99),
			vis, perOp(run.ServerCPU), perOp(run.StoreCPU), run.PeakConns, held)
	}
	p("")
	p("Server-side figures are feedd's own `feed_http_request_seconds` over the run (its buckets after")
	p("minus before), so each is a bucket: \"2–4 ms\" is above 2 ms and at most 4 ms. A rate is held when")
	p("read p99 ≤ %s, post p99 ≤ %s and no request got a 5xx or timed out.", msStr(heldMixReadP99), msStr(heldMixPostP99))
	p("")
	p("| figure | value | target | verdict |")
	p("|---|---:|---:|---|")
	for _, name := range []string{"feedd", "Redis anchor"} {
		p("| highest rate held, %s | %s | — | (reported) |", name, heldRate(x.Runs, name))
	}
	var at *mixRateResult
	for i := range x.Runs {
		if x.Runs[i].Target == "feedd" && x.Runs[i].Rate == targetMixRate {
			at = &x.Runs[i]
		}
	}
	if at == nil {
		p("| feedd read p99 / p99.9 at %s ops/s | not run (-mix-rates lacks it) | ≤ %s / ≤ %s | — |", count(targetMixRate), msStr(targetMixReadP99), msStr(targetMixReadP999))
	} else {
		rd := at.reads()
		p99, p999 := percentile(rd.Latency, 0.99), percentile(rd.Latency, 0.999)
		p("| feedd read p99 at %s ops/s | %s | ≤ %s | %s |", count(targetMixRate), msStr(p99), msStr(targetMixReadP99), latencyVerdict(p99, targetMixReadP99))
		p("| feedd read p99.9 at %s ops/s | %s | ≤ %s | %s |", count(targetMixRate), msStr(p999), msStr(targetMixReadP999), latencyVerdict(p999, targetMixReadP999))
	}
	p("")
	p("At the end, with each server at rest (feedd's queues empty), the first pages of up to %d sampled", r.Opt.MixCheck)
	p("users were compared with a full sort of what the API acknowledged: the user's own posts and those")
	p("of the authors they follow, not deleted (no user mutes anyone here). A user whose follow or whose")
	p("followee's post or delete failed or timed out is left out: its state is not known.")
	p("")
	p("| server | feeds compared | exact | left out (uncertain) | mismatches |")
	p("|---|---:|---:|---:|---|")
	for _, name := range []string{"feedd", "Redis anchor"} {
		c, ok := x.Checks[name]
		if !ok {
			continue
		}
		diffs := "none"
		if len(c.Diffs) > 0 {
			diffs = "**" + strings.Join(c.Diffs, "; ") + "**"
		}
		p("| %s | %d | %d | %d | %s |", name, c.Sampled, c.Exact, c.Uncertain, diffs)
	}
	p("")
}

// serverQuantiles renders the buckets of a server histogram's quantiles.
func serverQuantiles(h [2]serverHist, qs ...float64) string {
	d := h[1].since(h[0])
	if d.count() == 0 {
		return "—"
	}
	var parts []string
	for _, q := range qs {
		lo, hi := d.quantile(q)
		if math.IsInf(hi, 1) {
			parts = append(parts, fmt.Sprintf("> %s", msStr(time.Duration(lo*float64(time.Second)))))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s–%s", trimMs(lo), msStr(time.Duration(hi*float64(time.Second)))))
	}
	return strings.Join(parts, " / ")
}

// trimMs renders seconds as milliseconds without a unit.
func trimMs(s float64) string {
	return strings.TrimSuffix(msStr(time.Duration(s*float64(time.Second))), " ms")
}

// heldRate is the highest rate the server held, "none" if it held none.
func heldRate(runs []mixRateResult, target string) string {
	best := -1.0
	for _, run := range runs {
		if run.Target == target && run.held() {
			best = max(best, run.Rate)
		}
	}
	if best < 0 {
		return "none of the rates run"
	}
	return count(int(best)) + " ops/s"
}

// latencyVerdict is "met" when d is at most target.
func latencyVerdict(d, target time.Duration) string {
	if d <= target {
		return "met"
	}
	return fmt.Sprintf("**MISSED** (%s > %s)", msStr(d), msStr(target))
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = count(n)
	}
	return strings.Join(s, ", ")
}

// renderPageCost writes phase W's section.
func (r *report) renderPageCost(p func(string, ...any)) {
	x := r.PageCost
	if !r.section(p, 'W', x != nil) {
		return
	}
	p("The external load generator wrk (%s; %d threads, %d connections, a Lua script drawing a random", x.Version, wrkThreads, wrkConnections)
	p("user of %s for each request) reads first pages of %d items from feedd (`feedd serve` as a", count(x.Users), pageLimit)
	p("process of its own on the loaded database, these users following the %d authors of their %d",
		inboxAuthors, x.Entries)
	p("loaded entries, all active: inbox-only pages) and from the Redis anchor, a minimal Go net/http")
	p("server paging a Redis sorted set per user holding the same %d entries, with the same JSON. The", x.Entries)
	p("two take turns in %d slices of %s each, after an unmeasured warm-up each. CPU per request is the", r.Opt.WrkSlices, r.Opt.WrkDuration)
	p("server process's and its store's (mariadbd, redis-server) from /proc over the slices; wrk's own")
	p("CPU is in neither. p50 and p99 are wrk's (`--latency`), the mean over the slices. %s", serverProcs(r.Opt.ServerProcs))
	p("")
	p("| server | requests | requests/s | p50 | p99 | errors | server CPU µs/request | store CPU µs/request |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range x.Sides {
		store := "—"
		if s.StoreCPU > 0 {
			store = fmt.Sprintf("%.0f", s.perRequest(s.StoreCPU))
		}
		p("| %s | %s | **%s** | %s | %s | %d | %.0f | %s |", s.Name, count(int(s.requests())), count(int(s.rate())),
			msStr(s.meanOf(func(r wrkRun) time.Duration { return r.P50 })), msStr(s.meanOf(func(r wrkRun) time.Duration { return r.P99 })),
			s.errors(), s.perRequest(s.ServerCPU), store)
	}
	p("")
	ratio := x.Sides[0].rate() / x.Sides[1].rate()
	p("| ratio | value | target | verdict |")
	p("|---|---:|---:|---|")
	p("| feedd / Redis anchor, first pages/s | %.2f | ≥ %.1f (goal 1.0) | %s |", ratio, targetPageCost, verdict(ratio, targetPageCost))
	p("")
}

// serverProcs says which GOMAXPROCS the two servers ran with (-server-procs).
func serverProcs(procs int) string {
	if procs == 0 {
		return fmt.Sprintf("Both servers run with Go's default GOMAXPROCS (%d, the machine's CPUs).", runtime.NumCPU())
	}
	return fmt.Sprintf("Both servers run with GOMAXPROCS=%d (`-server-procs %d`).", procs, procs)
}

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/feedhq/feed/store/reshard"
	"github.com/feedhq/feed/store/shardmap"
)

// Targets the figures are judged against.
const (
	targetFanout    = 0.7 // fan-out rows/s vs raw insert rows/s
	targetInboxRead = 0.7 // inbox-only HTTP pages/s vs raw SELECT
	targetPullRead  = 0.5 // 10-pull-author pages/s vs inbox-only
	// targetUnread: unread counts/s vs the same readers' pages/s. A count
	// of two pages' unread items reads its marker and those items, about
	// what one page of the same readers costs.
	targetUnread = 0.5
	// targetKinds: pages/s of a kind of one item in ten vs unfiltered
	// pages of the same readers: a filtered page at most twice the cost.
	targetKinds = 0.5
	// targetRareKind: the same for a kind of one item in 500, whose pages
	// read the whole inbox: at most three times the cost.
	targetRareKind = 0.33
	// Many small posts (up to smallTargetFollowers followers each):
	// delivered posts/s vs accepted, and the last post visible this soon
	// after the last publish.
	targetSmallKeepUp    = 0.95
	targetSmallLag       = 2 * time.Second
	smallTargetFollowers = 10
)

// Keys of the reader runs of phase C.
const (
	readRaw     = "raw"
	readProbe   = "probe"
	readStore   = "store"
	readService = "service"
	readInbox   = "inbox"
	readClient  = "client"
	readFew     = "pull10"
	readMany    = "pull50"
	// Unread counts against the same readers' pages.
	readUnread    = "unread"
	readUnreadFew = "unread10"
	// Filtered pages and readers with mutes against inbox-only pages.
	readKinds    = "kinds"
	readRareKind = "rare"
	readMuted    = "muted"
)

// keepMarker ends the generated part of the report: text below it is
// written by hand (analysis, proposals) and kept across runs.
const keepMarker = "<!-- feedbench: end of generated report; text below this line is kept across runs -->"

type loadResult struct {
	Rows    int64
	Elapsed time.Duration
}

// writerStats is what one writer of phase A did over all rounds.
type writerStats struct {
	Rows         int64
	Time         time.Duration
	Trimmed      int64   // feed_inbox_trimmed_rows_total
	BatchSeconds float64 // feed_fanout_batch_seconds sum
	Batches      int64
	WorkerErrors int64    // feed_worker_errors_total
	CPU          cpuTimes // used during the measured windows
}

func (w writerStats) Rate() float64 { return rate(w.Rows, w.Time) }

// addCPU adds the CPU used since from to the writer's.
func (w *writerStats) addCPU(from cpuTimes) { w.CPU.addSpan(from, readCPUTimes()) }

// cpuPer100k is the CPU seconds a writer used per 100,000 rows: the
// database server's and this process's (service, workers and clients).
func (w writerStats) cpuPer100k() string {
	if w.Rows == 0 || w.CPU.DB == 0 {
		return "— | —"
	}
	k := 100_000 / float64(w.Rows)
	return fmt.Sprintf("%.2f | %.2f", w.CPU.DB*k, w.CPU.Self*k)
}

type fanoutResult struct {
	Authors, Followers, Rounds, Workers, Batch, InboxLimit, InboxSlack int
	TrimEvery                                                          int   // sampled retention checks an inbox once per TrimEvery pushes
	Overshoot                                                          int64 // rows added to bring the inboxes to retention's steady state

	RoomRows int // rows loaded into each inbox with room

	Fanout      writerStats
	Room        writerStats // the same workers, into inboxes below their limit
	RoomCeiling writerStats // the ceiling's INSERTs into those inboxes
	NoTrim      writerStats // diagnostic: same workers, retention never trims
	NoTrimRun   bool
	Ceiling     writerStats
	// diagnostic: the ceiling's INSERTs with range DELETEs of as many old
	// entries spread among them (run with NoTrim)
	CeilingRetain writerStats
}

type latencyResult struct {
	Name      string
	Followers int
	N         int
	Mode      string
	Publish   []time.Duration // POST latency, ascending
	Last      []time.Duration // publish → visible for the last follower, ascending
	Random    []time.Duration // same for a random follower, ascending

	WorkerErrors int64 // feed_worker_errors_total over the scenario
}

type readResult struct {
	closedLoopResult
	Key                string
	Name               string
	Diagnostic         bool
	QueriesPerPage     float64
	PullAuthorsPerPage float64
	RowsPerPage        float64 // feed_read_rows
	FromMetrics        bool
	Cost               pageCost
}

type footprintResult struct {
	When string
	tableFootprint
	Unavailable string // why the server could not measure it; empty if it did
}

// sharedServer summarises the samples of other databases' active sessions.
type sharedServer struct {
	mu      sync.Mutex
	samples int
	busy    int // samples with at least one
	max     int

	hostMean, hostPeak float64 // cores used by other processes
	hostSamples        int
}

func (s *sharedServer) setHost(mean, peak float64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hostMean, s.hostPeak, s.hostSamples = mean, peak, n
}

func (s *sharedServer) add(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if n > 0 {
		s.busy++
	}
	s.max = max(s.max, n)
}

type report struct {
	Start    time.Time
	Elapsed  time.Duration
	Args     []string
	Opt      options
	Addr     string
	Database string
	Server   serverInfo
	Shared   sharedServer

	PullCacheTTL time.Duration // the service's, for the read phase's description

	Load       loadResult
	Fanout     *fanoutResult
	Latency    []latencyResult
	Small      []smallResult
	Reads      []readResult
	Footprints []footprintResult
	Steady     *steadyResult
	Reshard    *reshardResult
	Import     *importResult
	Streams    *streamResult
	Deep       *deepResult
	Live       *liveResult
	Mix        *mixResult
	PageCost   *wrkResult
	// Unavailable holds, by phase letter, why a phase asked for could not
	// run on the server.
	Unavailable map[byte]string
}

func newReport(opt options, args []string, addr, database string) *report {
	return &report{Start: time.Now(), Args: args, Opt: opt, Addr: addr, Database: database, Unavailable: map[byte]string{}}
}

// write renders the report into path, keeping any hand-written text below
// keepMarker of the file it replaces.
func (r *report) write(path string) error {
	var kept string
	if old, err := os.ReadFile(path); err == nil {
		if _, after, ok := strings.Cut(string(old), keepMarker); ok {
			kept = after
		}
	}
	var b bytes.Buffer
	r.render(&b)
	b.WriteString("\n" + keepMarker)
	if kept != "" {
		b.WriteString(kept)
	} else {
		b.WriteString("\n")
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func (r *report) render(w *bytes.Buffer) {
	o := r.Opt
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	cmd := "go run ./cmd/feedbench"
	if len(r.Args) > 0 {
		cmd += " " + strings.Join(r.Args, " ")
	}
	p("# Benchmarks")
	p("")
	p("cmd/feedbench writes the sections of this file, each from one run of one command; each ratio")
	p("compares two figures of that run on the same tables of the same server:")
	p("")
	p("| sections | command | where |")
	p("|---|---|---|")
	p("| this header and a section per phase (`go run ./cmd/feedbench -help` lists them) | `make bench` | above the marker that ends the generated report |")
	p("| K, the inbox in InnoDB and in MyRocks on disk | `make bench-disk` | between the `feedbench -disk` markers |")
	p("| T, the same service on TiDB | `make bench-tidb` | between the `feedbench -tidb` markers |")
	p("")
	p("Each run rewrites its own sections and keeps the rest of the file. Below each generated part, the")
	p("analysis of the run it comes from is written by hand; earlier runs and their analyses are in git")
	p("history.")
	p("")
	p("| | |")
	p("|---|---|")
	p("| command | `make bench` → `%s` |", cmd)
	p("| date | %s (run took %s) |", r.Start.UTC().Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second))
	p("| machine | %s |", machine())
	p("| server | %s at %s: innodb_buffer_pool_size %s, innodb_flush_log_at_trx_commit %d |",
		r.Server.Version, r.Addr, bytesIEC(r.Server.BufferPoolBytes), r.Server.FlushLogAtTrxCommit)
	p("| client | %s, service and HTTP server in the benchmark process (in-process stack, loopback TCP; phase C's HTTP readers use a wrk-style load generator, phase B the typed Go client) |", runtime.Version())
	p("| shared machine | %s |", r.Shared.describe())
	if r.Load.Rows > 0 {
		p("| data | %s users × %d inbox rows loaded in publish-time order (%s rows in %.0f s, %s rows/s); one shard |",
			count(o.Users), o.InboxRows, count(int(r.Load.Rows)), r.Load.Elapsed.Seconds(), count(int(rate(r.Load.Rows, r.Load.Elapsed))))
	} else {
		p("| data | none loaded: no phase of A–D ran (phase R loads databases of its own) |")
	}
	p("")
	p("## How to read this")
	p("")
	p("* Absolute rates depend on the machine, the server settings and whatever else the server is doing;")
	p("  compare the **ratios**, which set the service against a raw-SQL ceiling measured minutes apart on")
	p("  the same tables. The service, its workers, the HTTP server and the benchmark clients share the")
	p("  machine's cores with the database server, as on a small single-host deployment.")
	p("* Latencies are client-side wall time per request (p50 and p99 by nearest rank). Where N is small,")
	p("  p99 is the maximum of N samples: read it as \"worst of N\".")
	p("* A missed target is printed as **MISSED** with the figure; nothing is rounded up to meet one.")
	p("* \"diagnostic\" rows are not targets: they time the layers between the ceiling and the HTTP reader")
	p("  so the cost of each layer can be read off.")
	p("* Phases W and O set feedd against another server instead of a raw-SQL ceiling: the Redis anchor, a")
	p("  minimal Go server over Redis sorted sets with feedd's paths and JSON, holding the same feeds. Both")
	p("  run as processes of their own (`feedd serve` built from ./cmd/feedd), so the CPU each figure")
	p("  charges them is theirs and not the load generator's. W is closed-loop throughput under wrk; O is")
	p("  what users see at given rates of a social mix, latency counted from each request's scheduled time.")
	p("")
	r.renderFanout(p)
	r.renderLatency(p)
	r.renderSmall(p)
	r.renderReads(p)
	r.renderPageCost(p)
	r.renderMix(p)
	r.renderDeep(p)
	r.renderStreams(p)
	r.renderLive(p)
	r.renderFootprint(p)
	r.renderReshard(p)
	r.renderImport(p)
}

func (r *report) renderFanout(p func(string, ...any)) {
	f := r.Fanout
	if !r.section(p, 'A', f != nil) {
		return
	}
	p("%d authors, each followed by %s users drawn at random from the loaded ones, publish one post per",
		f.Authors, count(f.Followers))
	p("round; %d rounds of %s inbox rows per writer, each row a random insert into a full inbox. Every",
		f.Rounds, count(f.Authors*f.Followers))
	p("writer meets the inboxes as sampled retention keeps them at its steady state: the limit (%d) plus",
		f.InboxLimit)
	p("the overshoot of the pushes since the inbox's last trim check, a geometric number of entries with")
	p("mean %d, the slack (the loaded %d rows each and %s extra ones in all, below them). The writers that do not",
		f.TrimEvery-1, r.Opt.InboxRows, count(int(f.Overshoot)))
	p("trim have their rows deleted after their clocks stop, so they leave the inboxes as they found them;")
	p("the fan-out's trims therefore cut about one row per row it writes, as at steady state. Rounds")
	p("reverse the order of the writers. A second set of %d authors, each followed by %s of %s other",
		f.Authors, count(f.Followers), count(r.Opt.Users))
	p("users loaded with %d rows each, prices the fan-out where retention is not due: the same service",
		f.RoomRows)
	p("pushes into those inboxes, below the limit, its sampled trim checks finding nothing to cut, and")
	p("both writers' rows there are deleted after their clocks stop. Fan-out time runs from the first")
	p("publish to the commit of the last batch. CPU columns: seconds")
	p("of CPU per 100,000 rows used during the writer's windows by the database server processes on this")
	p("machine and by the benchmark process (service, workers, HTTP server and clients); the machine has")
	p("%d CPUs, so rows/s is bounded by what the two together spend per row.", runtime.NumCPU())
	p("")
	p("| writer | rows | seconds | rows/s | batches (mean) | rows trimmed | worker errors | server CPU s / 100k rows | benchmark CPU s / 100k rows |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	batches := func(w writerStats) string {
		if w.Batches == 0 {
			return "—"
		}
		return fmt.Sprintf("%s (%.1f ms)", count(int(w.Batches)), w.BatchSeconds/float64(w.Batches)*1000)
	}
	p("| **fan-out workers** (`service.RunWorkers`, %d fan-out goroutines, task and batch size %d, inbox limit %d, slack %d%%) | %s | %.2f | **%s** | %s | %s | %d | %s |",
		f.Workers, f.Batch, f.InboxLimit, f.InboxSlack, count(int(f.Fanout.Rows)), f.Fanout.Time.Seconds(), count(int(f.Fanout.Rate())),
		batches(f.Fanout), count(int(f.Fanout.Trimmed)), f.Fanout.WorkerErrors, f.Fanout.cpuPer100k())
	p("| **fan-out workers into inboxes with room** (the same workers; inboxes of %d rows, below the limit) | %s | %.2f | **%s** | %s | %s | %d | %s |",
		f.RoomRows, count(int(f.Room.Rows)), f.Room.Time.Seconds(), count(int(f.Room.Rate())),
		batches(f.Room), count(int(f.Room.Trimmed)), f.Room.WorkerErrors, f.Room.cpuPer100k())
	p("| ceiling into inboxes with room: the same raw INSERTs into those inboxes | %s | %.2f | **%s** | — | — | — | %s |",
		count(int(f.RoomCeiling.Rows)), f.RoomCeiling.Time.Seconds(), count(int(f.RoomCeiling.Rate())), f.RoomCeiling.cpuPer100k())
	if f.NoTrimRun {
		p("| diagnostic: the same workers with retention off (inbox limit 2^30: sampled trims never fire) | %s | %.2f | %s | %s | %s | %d | %s |",
			count(int(f.NoTrim.Rows)), f.NoTrim.Time.Seconds(), count(int(f.NoTrim.Rate())),
			batches(f.NoTrim), count(int(f.NoTrim.Trimmed)), f.NoTrim.WorkerErrors, f.NoTrim.cpuPer100k())
	}
	p("| ceiling: raw `INSERT IGNORE INTO inbox … VALUES (…),(…)`, %d rows per statement, %d connections, same users | %s | %.2f | **%s** | — | — | — | %s |",
		f.Batch, f.Workers, count(int(f.Ceiling.Rows)), f.Ceiling.Time.Seconds(), count(int(f.Ceiling.Rate())), f.Ceiling.cpuPer100k())
	if f.NoTrimRun {
		p("| diagnostic: ceiling with retention: those INSERTs, with cuts spread among them (for 64 users at a time, a SELECT of each one's oldest entries down to its cut, then the range DELETE trims use) that cut as many entries as the round adds, %d of one user's oldest at a time as a sampled trim cuts | %s | %.2f | %s | — | %s | — | %s |",
			f.TrimEvery, count(int(f.CeilingRetain.Rows)), f.CeilingRetain.Time.Seconds(), count(int(f.CeilingRetain.Rate())),
			count(int(f.CeilingRetain.Trimmed)), f.CeilingRetain.cpuPer100k())
	}
	p("")
	p("| ratio | value | target | verdict |")
	p("|---|---:|---:|---|")
	ratio := f.Fanout.Rate() / f.Ceiling.Rate()
	p("| fan-out / ceiling, full inboxes (each pushed row costs a trimmed one) | %.2f | ≥ %.1f | %s |", ratio, targetFanout, verdict(ratio, targetFanout))
	ratio = f.Room.Rate() / f.RoomCeiling.Rate()
	p("| fan-out / ceiling, inboxes with room (retention not due) | %.2f | ≥ %.1f | %s |", ratio, targetFanout, verdict(ratio, targetFanout))
	if f.NoTrimRun {
		p("| diagnostic: fan-out without trims / ceiling (the push path alone) | %.2f | — | (reported) |", f.NoTrim.Rate()/f.Ceiling.Rate())
		p("| diagnostic: ceiling with retention / ceiling (what cutting a row per row written costs raw SQL) | %.2f | — | (reported) |", f.CeilingRetain.Rate()/f.Ceiling.Rate())
		p("| diagnostic: fan-out / ceiling with retention (same rows written, as many cut) | %.2f | — | (reported) |", f.Fanout.Rate()/f.CeilingRetain.Rate())
	}
	p("")
	p("Batches and trimmed rows come from `feed_fanout_batch_seconds` and `feed_inbox_trimmed_rows_total`;")
	p("worker errors from `feed_worker_errors_total` (steps that failed after the store's own retries).")
	p("The ceiling neither checks the follow edge, nor keeps task progress, nor trims. The ceiling with")
	p("retention writes the same rows and deletes as many with raw statements and none of the fan-out's")
	p("bookkeeping: each of its statements cuts 64 inboxes, where a batch's trims cut the few it samples,")
	p("and it finds where a cut falls by reading the entries it cuts, from the oldest, where a trim ranks")
	p("the inbox from its newest (it does not know how many entries there are). It cuts in the trims'")
	p("size: an inbox cut by a few entries at a time costs the server about twice as much per entry.")
	p("")
}

func (r *report) renderLatency(p func(string, ...any)) {
	if !r.section(p, 'B', len(r.Latency) > 0) {
		return
	}
	p("`POST /v1/users/{id}/posts` over HTTP, then `GET /v1/users/{id}/feed?limit=20` over HTTP every")
	p("%s for two followers until the post is on the page: the last follower in user_id order (the", pollInterval)
	p("last batch of the last task writes it) and one drawn at random. Posts are timed one at a time,")
	p("with the system at rest before each. Times are from the start of the POST. After a big-audience")
	p("post is timed it is deleted from its followers' inboxes (and InnoDB's purge waited out): nothing")
	p("trims those inboxes, and %d posts to %s users would otherwise outgrow the buffer pool.",
		2*r.Opt.RepsBig, count(r.Opt.FollowersBig))
	p("")
	p("| author | N | POST p50 | last follower p50 | last follower p99 | random follower p50 | random follower p99 | worker errors |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range r.Latency {
		p("| %s (mode `%s`) | %d | %s | %s | %s | %s | %s | %d |", l.Name, l.Mode, l.N,
			msStr(percentile(l.Publish, 0.5)), msStr(percentile(l.Last, 0.5)), p99(l.Last),
			msStr(percentile(l.Random, 0.5)), p99(l.Random), l.WorkerErrors)
	}
	p("")
	p("p99 is the ⌈0.99·N⌉-th smallest of the N times: the second worst with N = 200 or 100, the worst")
	p("below N = 100 (marked max). The big audiences are %s users outside the loaded ones, with",
		count(r.Opt.FollowersBig))
	p("nearly empty inboxes (loading %s full inboxes would not fit the time budget), so their inserts are",
		count(r.Opt.FollowersBig))
	p("cheaper than phase A's; the small author's followers are loaded users with full inboxes. Worker")
	p("errors (`feed_worker_errors_total`) are steps that failed after the store's retries; the worker")
	p("backs off and a later step redoes the batch, so they cost time, not rows.")
	p("")
}

func (r *report) renderSmall(p func(string, ...any)) {
	if !r.section(p, 'M', len(r.Small) > 0) {
		return
	}
	p("%d authors, each followed by 1, 10 or 100 users drawn at random from the loaded ones (a set of", r.Opt.SmallAuthors)
	p("authors per audience size), publish through `POST /v1/users/{id}/posts` from %d clients as fast as", r.Opt.Clients)
	p("the service takes them (the typed Go client), the authors in turn: %s posts per audience size,", count(r.Opt.SmallPosts))
	p("fewer where that would exceed %s inbox rows. *Accepted* is posts over the time from the first", count(r.Opt.SmallRows))
	p("publish to the last reply; *delivered* is posts over the time from the first publish until no")
	p("delivery or task is left (every post in every follower's inbox); *lag* is the time from the last")
	p("reply to that moment. The ceiling writes the same inbox rows again with raw multi-row INSERT IGNORE")
	p("of a thousand rows over %d connections (no publish, no follow check, no bookkeeping), reported in", r.Opt.Workers)
	p("posts/s; its rows are deleted afterwards.")
	p("")
	p("| followers per post | posts | accepted posts/s | delivered posts/s | ceiling posts/s | delivered / accepted | lag after the last publish | delivered / ceiling | worker errors |")
	p("|---:|---:|---:|---:|---:|---|---|---:|---:|")
	for _, x := range r.Small {
		keep := x.delivered() / x.accepted()
		keepS, lagS := fmt.Sprintf("%.2f", keep), msStr(x.Lag)
		// The targets are for small audiences; a hundred followers
		// a post is reported beside them.
		if x.Followers <= smallTargetFollowers {
			lag := "met"
			if x.Lag > targetSmallLag {
				lag = "**MISSED**"
			}
			keepS += fmt.Sprintf(" (≥ %.2f: %s)", targetSmallKeepUp, verdict(keep, targetSmallKeepUp))
			lagS += fmt.Sprintf(" (≤ %s: %s)", targetSmallLag, lag)
		}
		p("| %d | %s | %s | %s | %s | %s | %s | %.2f | %d |", x.Followers, count(x.Posts),
			count(int(x.accepted())), count(int(x.delivered())), count(int(x.ceiling())),
			keepS, lagS, x.delivered()/x.ceiling(), x.WorkerErrors)
	}
	p("")
}

func (r *report) renderReads(p func(string, ...any)) {
	if !r.section(p, 'C', len(r.Reads) > 0) {
		return
	}
	o := r.Opt
	p("%d concurrent clients in a closed loop, %s measured per row after a %s warm-up; the rows take turns",
		o.Clients, o.Duration, o.Warmup)
	p("in %d slices of %s each (a short unmeasured ramp before each), so a burst of other load on the", o.Slices, o.Duration/time.Duration(o.Slices))
	p("machine falls on every row alike. A client reads a random user's first page (limit 20), then next")
	p("pages by cursor, %d pages in all, then picks another user. Each class has its own %s users with", o.Pages, count(o.ReaderUsers))
	p("%d-row inboxes, and every reader follows the %d push authors its inbox rows come from. Pull", o.InboxRows, inboxAuthors)
	p("readers also follow their pull authors (in pull mode, %d posts each over the inboxes' time span)", o.PullPosts)
	p("and are in an active spell that began after every post, so every page merges every pull author's")
	p("outbox. Every reader was marked active before the run, so no read writes its header row. Queries")
	p("per page come from the service's `feed_read_queries` histogram (sum / count over the run). The")
	p("service runs with its defaults, including its per-process cache of pull authors' newest posts")
	p("(TTL %s), as a production process would. HTTP rows are driven the way wrk drives a server: each", r.PullCacheTTL)
	p("client owns a keep-alive connection, writes a request in one call and reads the response on the")
	p("same goroutine, checking the status, the framing, the item count and next_cursor without decoding")
	p("the items (`cmd/feedbench/httpload.go`). The load generator shares the server's CPUs here, so a")
	p("heavier client is charged to the server: the diagnostic row read through the typed Go client")
	p("(`httpapi/client`, which decodes every item) shows by how much. One loaded row in ten is a `photo`,")
	p("one in %d a `video` (the others `post`): the `?kinds=` rows page the inbox-only readers' feeds", rareKindEvery)
	p("filtered to one of them, a page of 20 photos reading about 200 inbox entries, which the server")
	p("filters, a page of videos the whole inbox (a fifth of the readers have 3, the others none), and")
	p("both the followees' outboxes by kind below the inbox, where these authors have no posts. A fourth")
	p("class of readers, loaded as the inbox-only one, mutes %d authors it does not follow.", mutedAuthors)
	p("")
	p("The last three columns are what a page cost, over every page of the row's runs (warm-ups included):")
	p("the CPU time of the database server and of this process (readers, and the service for its rows),")
	p("and the pages and blocks the server's engines read from disk (InnoDB's buffer pool misses, MyRocks's")
	p("block cache misses; — where the server does not report them, as TiDB).")
	p("")
	p("| reader | pages/s | p50 | p99 | queries/page | pull authors/page | server CPU µs/page | bench CPU µs/page | disk reads/page |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, rr := range r.Reads {
		pulls := "—"
		if rr.FromMetrics {
			pulls = fmt.Sprintf("%.1f", rr.PullAuthorsPerPage)
		}
		name := rr.Name
		if !rr.Diagnostic && rr.Key != readRaw {
			name = "**" + name + "**"
		}
		p("| %s | %s | %s | %s | %.2f | %s | %s |", name, count(int(rr.Rate())),
			msStr(percentile(rr.Latency, 0.5)), msStr(percentile(rr.Latency, 0.99)), rr.QueriesPerPage, pulls, rr.Cost.columns())
	}
	p("")
	p("| ratio | value | target | verdict |")
	p("|---|---:|---:|---|")
	ratio := func(name, a, b string, target float64) {
		ra, okA := r.read(a)
		rb, okB := r.read(b)
		if !okA || !okB || rb.Rate() == 0 {
			return
		}
		v := ra.Rate() / rb.Rate()
		if target > 0 {
			p("| %s | %.2f | ≥ %g | %s |", name, v, target, verdict(v, target))
		} else {
			p("| %s | %.2f | — | (reported) |", name, v)
		}
	}
	ratio("inbox-only HTTP / raw SELECT", readInbox, readRaw, targetInboxRead)
	ratio(fmt.Sprintf("%d-pull HTTP / inbox-only HTTP", pullFew), readFew, readInbox, targetPullRead)
	ratio(fmt.Sprintf("%d-pull HTTP / inbox-only HTTP", pullMany), readMany, readInbox, 0)
	ratio("unread counts / pages, inbox-only readers, HTTP", readUnread, readInbox, targetUnread)
	ratio(fmt.Sprintf("unread counts / pages, %d-pull readers, HTTP", pullFew), readUnreadFew, readFew, targetUnread)
	ratio("`?kinds=photo` pages (one item in ten) / unfiltered pages, inbox-only readers, HTTP", readKinds, readInbox, targetKinds)
	ratio(fmt.Sprintf("`?kinds=video` pages (one item in %d) / unfiltered pages, inbox-only readers, HTTP", rareKindEvery), readRareKind, readInbox, targetRareKind)
	ratio(fmt.Sprintf("pages of readers muting %d authors / inbox-only pages, HTTP", mutedAuthors), readMuted, readInbox, 0)
	ratio("diagnostic: store.ReadFeed / raw SELECT", readStore, readRaw, 0)
	ratio("diagnostic: one-block page shape / raw SELECT", readProbe, readRaw, 0)
	ratio("diagnostic: service.Feed / raw SELECT", readService, readRaw, 0)
	ratio("diagnostic: inbox-only HTTP / service.Feed", readInbox, readService, 0)
	ratio("diagnostic: inbox-only HTTP, typed Go client / raw SELECT", readClient, readRaw, 0)
	p("")
}

func (r *report) renderFootprint(p func(string, ...any)) {
	if !r.section(p, 'D', len(r.Footprints) > 0) {
		return
	}
	p("Clustered `inbox` (`PRIMARY KEY (user_id, publish_time, content_id)`, no secondary index, `ROW_FORMAT=COMPRESSED`")
	p("`KEY_BLOCK_SIZE=8`):")
	p("`information_schema.TABLES` DATA_LENGTH + INDEX_LENGTH after `ANALYZE TABLE`, over `COUNT(*)`.")
	if r.Server.TiDB {
		p("**Bytes on disk are not available on TiDB:** it takes no ROW_FORMAT, and its DATA_LENGTH and")
		p("INDEX_LENGTH are estimates from the table's statistics (rows × average row size), not bytes stored.")
	}
	p("")
	p("| when | rows | data | index | bytes/row |")
	p("|---|---:|---:|---:|---:|")
	for _, f := range r.Footprints {
		if f.Unavailable != "" {
			p("| %s | not available: %s | | | |", f.When, f.Unavailable)
			continue
		}
		p("| %s | %s | %s | %s | **%.1f** |", f.When, count(int(f.Rows)), bytesIEC(f.DataBytes), bytesIEC(f.IndexBytes), f.BytesPerRow())
	}
	p("")
	p("\"As loaded\" is the table after %s users × %d rows arrived slot by slot in publish-time order, the",
		count(r.Opt.Users), r.Opt.InboxRows)
	p("order fan-out writes them; \"at the end\" adds phase A's and B's writes and trims.")
	if x := r.Steady; x != nil {
		p("The last rows are a database of their own where only the service's fan-out and retention write")
		p("the inbox: %s users, each following %d of %d authors drawn at random and %d authors followed by",
			count(x.Users), x.Follows, x.Authors, steadyBigAuthors)
		p("all (their posts take the task path, the others' the batched one), inbox limit %d, slack %d%%.", x.Limit, x.Slack)
		p("Every author publishes a post per round until each inbox holds the limit (\"filled\"), then")
		p("%d times as many rounds again (turnovers: each inbox's entries replaced by new ones, %s rows", x.Turnovers, count(int(x.Rows)))
		p("written in all and %s cut by sampled trims, in %s). The last turnover's figure is taken right after", count(int(x.Trimmed)), x.Elapsed.Round(time.Second))
		p("it; \"settled\" is the same database once the engine's background work on that churn is done")
		p("(InnoDB's purge; MyRocks's compactions, by its own schedule), as a service at steady state keeps it.")
	}
	p("")
}

func (r *report) renderReshard(p func(string, ...any)) {
	x := r.Reshard
	if !r.section(p, 'R', x != nil) {
		return
	}
	p("A source database holds all %d virtual shards (the one-database layout, recorded at epoch 1 by",
		shardmap.DefaultVirtualShards)
	p("`Store.CheckLayout`) and a deployment at rest: %s users with %d inbox rows each and a header row",
		count(x.Users), x.InboxRows)
	p("(phase C's and D's loader), each following the %d authors of those rows (%s edges in `following`",
		inboxAuthors, count(x.Users*inboxAuthors))
	p("and in `followers`), and those authors' %s posts with their finished deliveries; `content_ids`",
		count(x.InboxRows*inboxAuthors))
	p("is empty, as publishing leaves it with one database, and so are `fanout_tasks` and `follow_events`.")
	p("Loading took %.0f s. `reshard.Apply`, what `feedd reshard apply` runs, moves virtual shards %d–%d",
		x.Load.Seconds(), reshardFirstMoved, shardmap.DefaultVirtualShards-1)
	p("to a second, empty database on the same server with its default batch size; `reshard.Cleanup`")
	p("then deletes the moved rows from the source. The steps are told apart by `reshard.Options.Progress`")
	p("reports: the set-up runs from the apply's start to the copy's first report (the marks, the fences")
	p("and the capture triggers on both databases), each step then ends at its last report, and the")
	p("cut-over is what follows the last verify report (the fenced pause, the work queues moved, the")
	p("layout recorded at the next epoch on both databases, the marks removed). Apply's time leaves out")
	p("`reshard.Open`, which migrates the new database. The ceiling ran on the loaded source, into a third")
	p("database migrated beforehand, under the same serving load as the apply (below); both copied the")
	p("same rows (the run checks the counts). Rows listed are counted by the server from an index whose")
	p("first column is the placing id, without reading them; rows read are those the client fetched.")
	p("")
	p("| step | rows listed or read | rows of moving virtual shards | seconds | rows listed or read/s | moving rows/s |")
	p("|---|---:|---:|---:|---:|---:|")
	p("| reshard set-up: the marks, the fences, the capture triggers | — | — | %.2f | — | — |", x.SetUp.Seconds())
	p("| **reshard copy**: each keyed table's ids listed with their rows counted, the moving ids' rows copied by the server with `INSERT IGNORE … SELECT … WHERE id IN (…)` into the database on the same server, %d batches a statement | %s | %s copied | %.2f | %s | **%s** |",
		reshard.InServerBatches, count(int(x.Copy.Read)), count(int(x.Copy.Moved)), x.Copy.Time.Seconds(), count(int(rate(x.Copy.Read, x.Copy.Time))), count(int(rate(x.Copy.Moved, x.Copy.Time))))
	p("| reshard verify: the moving ids' rows read on the source and on the new database, a SHA-256 digest per table and virtual shard on each side | %s | %s digested | %.2f | %s | %s |",
		count(int(x.Verify.Read)), count(int(x.Verify.Moved)), x.Verify.Time.Seconds(), count(int(rate(x.Verify.Read, x.Verify.Time))), count(int(rate(x.Verify.Moved, x.Verify.Time))))
	p("| reshard cut-over | — | — | %.2f | — | — |", x.CutOver.Seconds())
	p("| **reshard apply in all** | %s | %s copied | %.2f | — | %s |",
		count(int(x.Copy.Read+x.Verify.Read)), count(int(x.Copy.Moved)), x.Apply.Seconds(), count(int(rate(x.Copy.Moved, x.Apply))))
	p("| reshard cleanup: each keyed table's ids listed on both databases, the moved ids' rows deleted from the source, one `DELETE … WHERE id IN (…)` per batch of rows | %s | %s deleted | %.2f | %s | %s |",
		count(int(x.Cleanup.Read)), count(int(x.Cleanup.Moved)), x.Cleanup.Time.Seconds(), count(int(rate(x.Cleanup.Read, x.Cleanup.Time))), count(int(rate(x.Cleanup.Moved, x.Cleanup.Time))))
	p("| ceiling: raw `INSERT INTO target.t SELECT * FROM t WHERE key IN (…)`, %d ids a statement, the moving ids known up front | — | %s copied | %.2f | — | **%s** |",
		ceilingIDs, count(int(x.CeilingRows)), x.Ceiling.Seconds(), count(int(rate(x.CeilingRows, x.Ceiling))))
	p("")
	p("| ratio | value | target | verdict |")
	p("|---|---:|---:|---|")
	copyRatio := rate(x.Copy.Moved, x.Copy.Time) / rate(x.CeilingRows, x.Ceiling)
	p("| reshard copy / ceiling (moving rows/s) | %.2f | ≥ 0.5 | %s |", copyRatio, verdict(copyRatio, 0.5))
	cleanupRatio := x.Cleanup.Time.Seconds() / max(x.Copy.Time.Seconds(), 1e-9)
	p("| reshard cleanup time / copy time | %.2f | ≤ 1 | %s |", cleanupRatio, verdictAtMost(cleanupRatio, 1))
	p("| reshard apply in all / ceiling (moving rows/s) | %.2f | — | (reported) |", rate(x.Copy.Moved, x.Apply)/rate(x.CeilingRows, x.Ceiling))
	p("")
	p("The copy ran at %.0f%% of the ceiling's rate. The ceiling's rate leaves out reading the keys' ids", 100*copyRatio)
	p("(`SELECT DISTINCT` of each table's placing column) and picking the moving ones in Go, %.2f s; the", x.CeilingIDs.Seconds())
	p("copy lists them too, counting each id's rows so that a statement copies about %d rows (an id with", reshard.InServerBatches*reshard.DefaultBatchSize)
	p("more goes in chunks of that size), skips the rows workers may claim (they move at the cut-over),")
	p("and leaves rows an earlier run copied as they are. Of the apply's %.1f s, the set-up took %.0f%%,",
		x.Apply.Seconds(), 100*x.SetUp.Seconds()/x.Apply.Seconds())
	p("the copy %.0f%%, the verify %.0f%% and the cut-over %.0f%%. Cleanup, run after the cut-over as",
		100*x.Copy.Time.Seconds()/x.Apply.Seconds(), 100*x.Verify.Time.Seconds()/x.Apply.Seconds(), 100*x.CutOver.Seconds()/x.Apply.Seconds())
	p("`feedd reshard cleanup`, took %.1f s, %.2f× the copy's time for as many rows.", x.Cleanup.Time.Seconds(), cleanupRatio)
	p("")
	r.renderReshardLoad(p)
}

// renderReshardLoad reports the service's load before and during the
// apply, and the cut-over's pause.
func (r *report) renderReshardLoad(p func(string, ...any)) {
	x := r.Reshard
	p("### R. Serving while resharding")
	p("")
	p("The apply above ran while the service's store (routing by the layout in force, following the")
	p("cut-over by its epoch as `feedd serve` does) served %d readers of 20-item feed pages and one",
		x.During.Readers)
	p("writer of read marks (a write of the user's header row in `inbox`, every 2 ms), on the loaded")
	p("users; the same load ran for %.0f s before the apply for comparison. A write refused as stale",
		x.Before.Window.Seconds())
	p("at the cut-over is what the API answers 503 with; the load counts it and goes on.")
	p("")
	perSec := func(n int64, d time.Duration) float64 { return float64(n) / max(d.Seconds(), 1e-9) }
	p("| | before the apply | during the apply |")
	p("|---|---:|---:|")
	p("| seconds | %.1f | %.1f |", x.Before.Window.Seconds(), x.During.Window.Seconds())
	p("| feed pages read/s | %s | %s |", count(int(perSec(x.Before.Reads, x.Before.Window))), count(int(perSec(x.During.Reads, x.During.Window))))
	p("| read marks written/s | %s | %s |", count(int(perSec(x.Before.Writes, x.Before.Window))), count(int(perSec(x.During.Writes, x.During.Window))))
	p("| writes refused as stale | %d | %d |", x.Before.Fenced, x.During.Fenced)
	p("")
	pauses := slices.Clone(x.Pauses)
	slices.Sort(pauses)
	maxPause := time.Duration(0)
	if len(pauses) > 0 {
		maxPause = pauses[len(pauses)-1]
	}
	pauseVerdict := "met"
	if maxPause > time.Second {
		pauseVerdict = fmt.Sprintf("**MISSED** (%s > 1 s)", msStr(maxPause))
	}
	p("| figure | value | target | verdict |")
	p("|---|---:|---:|---|")
	p("| cut-over pause of the source's writes, p50 / max over %d cut-over(s) | %s / %s | ≤ 1 s | %s |",
		len(pauses), msStr(percentile(pauses, 0.5)), msStr(maxPause), pauseVerdict)
	p("| feed pages read/s during / before | %.2f | — | (reported) |",
		perSec(x.During.Reads, x.During.Window)/max(perSec(x.Before.Reads, x.Before.Window), 1e-9))
	p("")
	p("One database gives virtual shards up here, so there is one cut-over; the pause is from the fence's")
	p("lock request to the commit that records the next epoch, with the last captured writes applied in")
	p("between. During the apply the readers share the server with the copy, the catch-up and the")
	p("verify's scans, and every write on both databases also logs a row for the capture.")
	p("")
}

func (s *sharedServer) describe() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	switch {
	case s.samples == 0:
		parts = append(parts, "database sessions not sampled")
	case s.busy == 0:
		parts = append(parts, fmt.Sprintf("no other database's session was running a statement in any of %d once-a-second samples", s.samples))
	default:
		parts = append(parts, fmt.Sprintf("**yes**: other databases' sessions were running statements in %d of %d once-a-second samples (up to %d at once)",
			s.busy, s.samples, s.max))
	}
	if s.hostSamples > 0 {
		parts = append(parts, fmt.Sprintf("processes other than this benchmark and the database servers used %.2f of the %d CPUs on average (peak %.2f)",
			s.hostMean, runtime.NumCPU(), s.hostPeak))
	}
	if s.busy > 0 || s.hostMean > 0.1 {
		parts = append(parts, "the figures include that load")
	}
	return strings.Join(parts, "; ")
}

// section writes a phase's heading and, if the phase did not run, says
// why: not available on the server, or not asked for. It returns ran.
func (r *report) section(p func(string, ...any), phase byte, ran bool) bool {
	p("## %c. %s", phase, phaseName(phase))
	p("")
	switch why, unavailable := r.Unavailable[phase]; {
	case unavailable:
		p("Not available on TiDB (%s): %s.", r.Server.Version, why)
		p("")
	case !ran:
		p("Not run (`-phases` excluded %c).", phase)
		p("")
	}
	return ran
}

// read returns the report's read result with the key.
func (r *report) read(key string) (readResult, bool) {
	for _, rr := range r.Reads {
		if rr.Key == key {
			return rr, true
		}
	}
	return readResult{}, false
}

func verdict(v, target float64) string {
	if v >= target {
		return "met"
	}
	return fmt.Sprintf("**MISSED** (%s < %g)", below(v, target), target)
}

// below prints v, which is below target, with two decimals, or with as
// many more as it takes to show it below (0.949 where 0.95 is the target).
func below(v, target float64) string {
	for prec := 2; prec < 6; prec++ {
		if s := strconv.FormatFloat(v, 'f', prec, 64); s != strconv.FormatFloat(target, 'f', prec, 64) {
			return s
		}
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func p99(sorted []time.Duration) string {
	s := msStr(percentile(sorted, 0.99))
	if len(sorted) < 100 {
		s += " (max)"
	}
	return s
}

func msStr(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", ms(d))
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", ms(d))
	}
	return fmt.Sprintf("%.2f ms", ms(d))
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// count formats n with thousands separators.
func count(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// machine describes the host: CPUs, memory, OS.
func machine() string {
	cpu := ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					mem = bytesIEC(kb*1024) + " RAM"
				}
			}
		}
	}
	parts := []string{fmt.Sprintf("%d CPUs (nproc)", runtime.NumCPU())}
	if cpu != "" {
		parts[0] += " " + cpu
	}
	if mem != "" {
		parts = append(parts, mem)
	}
	parts = append(parts, runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, ", ")
}

// parseID parses a decimal id from the API; the API only returns valid ones.
func parseID(s string) uint64 {
	id, _ := strconv.ParseUint(s, 10, 64)
	return id
}

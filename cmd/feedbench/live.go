package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store/sqlconn"
)

// Phase L's ids: hosts and viewers of their own, above every other phase's.
const (
	liveHostBase   = 9_000_000_000
	liveViewerBase = 9_100_000_000
	// Each host holds one live stream, two previews and liveReplays replays.
	liveReplays = 5
)

// liveClasses are the followee counts whose first pages phase L times.
var liveClasses = []int{5, 10, 100}

// liveRun is one timed run of phase L.
type liveRun struct {
	Name    string
	Hosts   int
	Service closedLoopResult
	Ceiling closedLoopResult // the same k-way read in raw SQL; zero for later pages
}

// liveResult is what phase L measured.
type liveResult struct {
	Hosts, ViewersPerClass int
	Runs                   []liveRun
	Sessions               int64   // rows of live_sessions after the runs
	SnapshotBytes          float64 // mean snapshot size
	CleanupRate            float64 // first pages/s (10 hosts) while each deletes expired sessions
	CleanupRows            float64 // expired sessions each of those first pages deleted
	CleanupBase            float64 // first pages/s (10 hosts) of the same run without any expired
}

// livePhase loads hosts with streams and viewers following 5, 10 and 100
// of them, then times first pages of each class against raw SQL doing the
// same k-way read, later pages, and the clean-up of expired sessions.
func (b *bench) livePhase(ctx context.Context) error {
	hosts := max(liveClasses[len(liveClasses)-1], 1)
	viewers := b.opt.LiveViewers
	res := &liveResult{Hosts: hosts, ViewersPerClass: viewers}
	b.rep.Live = res
	if err := b.loadLiveFollows(ctx, hosts, viewers); err != nil {
		return err
	}
	if err := b.loadLiveStreams(ctx, hosts); err != nil {
		return err
	}
	svc := b.stack.svc
	first := func(class int) func(int) func(context.Context) error {
		return func(c int) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := svc.LivePage(ctx, b.liveViewer(class), feed.Page{Limit: feed.DefaultPageLimit}, "")
				return err
			}
		}
	}
	for i, class := range liveClasses {
		base := liveViewerBase + uint64(i*viewers)
		svcRun, err := closedLoop(ctx, b.opt.Clients, b.opt.Warmup, b.opt.Duration, first(i))
		if err != nil {
			return fmt.Errorf("L first pages of %d hosts: %w", class, err)
		}
		ceil, err := closedLoop(ctx, b.opt.Clients, b.opt.Warmup, b.opt.Duration, func(c int) func(context.Context) error {
			return func(ctx context.Context) error { return rawLiveFirstPage(ctx, b.db, base+uint64(b.rng.IntN(viewers))) }
		})
		if err != nil {
			return fmt.Errorf("L raw first pages of %d hosts: %w", class, err)
		}
		res.Runs = append(res.Runs, liveRun{Name: "first page", Hosts: class, Service: svcRun, Ceiling: ceil})
		b.log.Info("feedbench: L first pages", "hosts", class, "per_second", svcRun.Rate(), "ceiling_per_second", ceil.Rate())
	}
	// Later pages: one session per viewer of the 10-host class, read at
	// its second page, inside the snapshot (pages of 5 of 30 streams) and
	// in the replays (pages of 40, past the 30 streams of the snapshot).
	for _, later := range []struct {
		name  string
		limit int
	}{{"later page, in the snapshot", 5}, {"later page, in the replays", 40}} {
		type cont struct {
			viewer          uint64
			session, cursor string
		}
		conts := make([]cont, viewers)
		for v := range viewers {
			viewer := liveViewerBase + uint64(viewers+v)
			p, err := svc.LivePage(ctx, viewer, feed.Page{Limit: later.limit}, "")
			if err != nil {
				return err
			}
			conts[v] = cont{viewer, p.Session, p.Next}
		}
		run, err := closedLoop(ctx, b.opt.Clients, b.opt.Warmup, b.opt.Duration, func(c int) func(context.Context) error {
			return func(ctx context.Context) error {
				k := conts[b.rng.IntN(len(conts))]
				_, err := svc.LivePage(ctx, k.viewer, feed.Page{Limit: later.limit, Cursor: k.cursor}, k.session)
				return err
			}
		})
		if err != nil {
			return fmt.Errorf("L %s: %w", later.name, err)
		}
		res.Runs = append(res.Runs, liveRun{Name: later.name, Hosts: liveClasses[1], Service: run})
		b.log.Info("feedbench: L "+later.name, "per_second", run.Rate())
	}
	if err := b.db.QueryRowxContext(ctx, `SELECT COUNT(*), COALESCE(AVG(LENGTH(snapshot)), 0) FROM live_sessions`).
		Scan(&res.Sessions, &res.SnapshotBytes); err != nil {
		return err
	}
	// Clean-up: every stored session expired, then 10-host first pages,
	// each deleting up to two of them, against the same pages just before.
	base, err := closedLoop(ctx, b.opt.Clients, b.opt.Warmup, b.opt.Duration, first(1))
	if err != nil {
		return err
	}
	if _, err := b.db.ExecContext(ctx, `UPDATE live_sessions SET expires_at = 0`); err != nil {
		return err
	}
	cleaned0 := b.stack.counter("feed_live_sessions_cleaned_total")
	created0 := b.stack.counter("feed_live_sessions_created_total")
	run, err := closedLoop(ctx, b.opt.Clients, 0, b.opt.Duration, first(1))
	if err != nil {
		return err
	}
	created := b.stack.counter("feed_live_sessions_created_total") - created0
	res.CleanupBase, res.CleanupRate = base.Rate(), run.Rate()
	if created > 0 {
		res.CleanupRows = (b.stack.counter("feed_live_sessions_cleaned_total") - cleaned0) / created
	}
	b.log.Info("feedbench: L clean-up", "per_second", res.CleanupRate, "without", res.CleanupBase, "cleaned_per_page", res.CleanupRows)
	return nil
}

// liveViewer draws a viewer of the class.
func (b *bench) liveViewer(class int) uint64 {
	return liveViewerBase + uint64(class*b.opt.LiveViewers+b.rng.IntN(b.opt.LiveViewers))
}

// loadLiveFollows writes the viewers' follow edges (and the hosts'
// followers rows, which fan-out walks) with raw multi-row INSERTs: viewer
// v of a class follows that many hosts, starting at v modulo the hosts.
func (b *bench) loadLiveFollows(ctx context.Context, hosts, viewers int) error {
	now := time.Now().UnixMilli()
	var following, followers [][]any
	for i, class := range liveClasses {
		for v := range viewers {
			viewer := liveViewerBase + uint64(i*viewers+v)
			for j := range class {
				host := liveHostBase + uint64((v+j)%hosts)
				following = append(following, []any{viewer, host, now})
				followers = append(followers, []any{host, viewer, now})
			}
		}
	}
	for _, t := range []struct {
		head string
		rows [][]any
	}{
		{`INSERT INTO following (user_id, author_id, followed_at)`, following},
		{`INSERT INTO followers (author_id, user_id, followed_at)`, followers},
	} {
		if _, err := sqlconn.InsertRows(ctx, b.db, t.head, 3, "", len(t.rows), func(i int) []any { return t.rows[i] }); err != nil {
			return fmt.Errorf("L load follows: %w", err)
		}
	}
	return nil
}

// loadLiveStreams gives each host, through the service, liveReplays ended
// streams (their replays fanned out to the followers), a live stream and
// two previews, and waits for the fan-out.
func (b *bench) loadLiveStreams(ctx context.Context, hosts int) error {
	svc := b.stack.svc
	start := time.Now().Add(-time.Hour).UnixMilli()
	err := spread(b.opt.Clients, hosts, func(h int) error {
		host := liveHostBase + uint64(h)
		for s := range liveReplays + 3 {
			sched := start + int64(s*60_000+h)
			st, _, err := svc.CreateStream(ctx, service.StreamInput{HostID: host, ScheduledStart: &sched})
			if err != nil {
				return err
			}
			if s > liveReplays {
				continue // a preview
			}
			at := sched + 1000
			if _, err := svc.StartStream(ctx, host, st.StreamID, &at); err != nil || s == liveReplays {
				return err
			}
			at += 30_000
			if _, err := svc.EndStream(ctx, host, st.StreamID, &at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("L load streams: %w", err)
	}
	for {
		bl, err := b.st.Backlog(ctx)
		if err != nil || bl.Idle() {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawLiveFirstPage is a first page's k-way read in raw SQL: the viewer's
// followed hosts and their queues in one statement, merged. It writes no
// snapshot.
func rawLiveFirstPage(ctx context.Context, db *sqlx.DB, viewer uint64) error {
	var hosts []uint64
	if err := db.SelectContext(ctx, &hosts, `SELECT author_id FROM following WHERE user_id = ? AND muted = 0`, viewer); err != nil || len(hosts) == 0 {
		return err
	}
	q := `SELECT stream_id, pos FROM streams WHERE host_id IN (?` + strings.Repeat(",?", len(hosts)-1) + `) AND list = 1`
	args := make([]any, len(hosts))
	for i, h := range hosts {
		args[i] = h
	}
	var rows []struct {
		StreamID uint64 `db:"stream_id"`
		Pos      int64  `db:"pos"`
	}
	if err := db.SelectContext(ctx, &rows, q, args...); err != nil {
		return err
	}
	slices.SortFunc(rows, func(a, b struct {
		StreamID uint64 `db:"stream_id"`
		Pos      int64  `db:"pos"`
	}) int {
		return cmp.Or(cmp.Compare(b.Pos, a.Pos), cmp.Compare(b.StreamID, a.StreamID))
	})
	return nil
}

// renderLive writes phase L's section.
func (r *report) renderLive(p func(string, ...any)) {
	res := r.Live
	if !r.section(p, 'L', res != nil) {
		return
	}
	p("%d hosts, each with one live stream, two previews and %d replays (fanned out by the service to its", res.Hosts, liveReplays)
	p("followers); %d viewers following 5, 10 and 100 of them. A first page reads the followed hosts, their", res.ViewersPerClass)
	p("queues and replays ended in the last 10 s (one statement), merges them, stores the snapshot's time as")
	p("one session row (with the streams that changed within those 10 s) and, when the snapshot")
	p("leaves the page short (5 hosts: 15 streams for a page of 20), reads the replays; the ceiling is the")
	p("followed hosts and queues read and merged in raw SQL, without the session's write or the replays.")
	p("Service calls without HTTP, %d clients.", r.Opt.Clients)
	p("")
	p("| run | hosts followed | service pages/s | p50 | p99 | raw SQL pages/s | ratio |")
	p("|---|---|---|---|---|---|---|")
	for _, run := range res.Runs {
		ceil, ratio := "—", "—"
		if run.Ceiling.Ops > 0 {
			ceil = fmt.Sprintf("%.0f", run.Ceiling.Rate())
			ratio = fmt.Sprintf("%.2f", run.Service.Rate()/run.Ceiling.Rate())
		}
		p("| %s | %d | %.0f | %s | %s | %s | %s |", run.Name, run.Hosts, run.Service.Rate(),
			msStr(percentile(run.Service.Latency, 0.5)), p99(run.Service.Latency), ceil, ratio)
	}
	p("")
	p("Sessions: one `live_sessions` row each, %s stored after the runs, %.0f bytes of streams on average", count(int(res.Sessions)), res.SnapshotBytes)
	p("(9 bytes a stream that changed within 10 s before its first page). Clean-up: with every stored session expired, 10-host first pages ran at %.0f/s,", res.CleanupRate)
	p("each deleting %.2f expired sessions, against %.0f/s just before with none expired.", res.CleanupRows, res.CleanupBase)
	p("")
}

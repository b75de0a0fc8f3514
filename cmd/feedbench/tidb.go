package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// The TiDB run (make bench-tidb) measures the same phases on MariaDB and on
// an in-process TiDB, one after the other on this machine, and writes the
// two side by side.
const (
	tidbBegin = "<!-- feedbench -tidb: begin -->"
	tidbEnd   = "<!-- feedbench -tidb: end -->"
)

// runTiDB runs the phases on opt.TiDBBeside and then on opt.DSN (TiDB) and
// writes the section into opt.Out, between tidbBegin and tidbEnd in the
// text that make bench keeps.
func runTiDB(ctx context.Context, opt options, args []string, log *slog.Logger) error {
	start := time.Now()
	var reps []*report
	for _, dsn := range []string{opt.TiDBBeside, opt.DSN} {
		o := opt
		o.DSN = dsn
		rep, err := measure(ctx, o, args, log)
		if err != nil {
			return err
		}
		reps = append(reps, rep)
	}
	var b bytes.Buffer
	renderTiDB(&b, opt, args, reps, time.Since(start))
	if err := writeSection(opt.Out, tidbBegin, tidbEnd, b.String()); err != nil {
		return err
	}
	log.Info("feedbench: TiDB section written", "file", opt.Out, "elapsed", time.Since(start).Round(time.Second))
	return nil
}

// renderTiDB writes the section: each server's figures and ceilings, and
// TiDB's against MariaDB's.
func renderTiDB(w *bytes.Buffer, opt options, args []string, reps []*report, elapsed time.Duration) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	md, ti := reps[0], reps[1]
	p("## T. The same service on TiDB")
	p("")
	p("Command: `go run ./cmd/feedbench %s` under `bin/tidbtest` (`make bench-tidb`), %s, %s.", strings.Join(args, " "),
		md.Start.UTC().Format("2006-01-02 15:04 MST"), elapsed.Round(time.Second))
	p("")
	p("Phases %s run twice on this machine, one server after the other: on %s, then on TiDB %s, which", opt.Phases, md.Server.Version, ti.Server.Version)
	p("`tidbtest` runs inside its own process with the unistore engine (%s users × %d inbox rows loaded each time;", count(opt.Users), opt.InboxRows)
	p("fan-out: %d authors × %s followers, %d rounds). The same binary, the same migration, one DSN.", opt.FanoutAuthors, count(opt.FanoutFollowers), opt.Rounds)
	p("")
	p("| figure | MariaDB | TiDB | TiDB / MariaDB |")
	p("|---|---:|---:|---:|")
	row := func(name string, a, b float64) {
		p("| %s | %s | %s | %.2f |", name, count(int(a)), count(int(b)), safeRatio(b, a))
	}
	row("load rate (bulk INSERT of the inboxes), rows/s", rate(md.Load.Rows, md.Load.Elapsed), rate(ti.Load.Rows, ti.Load.Elapsed))
	for _, k := range []struct{ key, name string }{
		{readRaw, "ceiling: raw keyset SELECT, pages/s"},
		{readStore, "store.ReadFeed in-process, pages/s"},
		{readService, "service.Feed in-process, pages/s"},
		{readInbox, "feed pages over HTTP (wrk-style reader), pages/s"},
	} {
		a, okA := md.read(k.key)
		b, okB := ti.read(k.key)
		if okA && okB {
			row(k.name, a.Rate(), b.Rate())
		}
	}
	if md.Fanout != nil && ti.Fanout != nil {
		row("fan-out through the service, rows/s", md.Fanout.Fanout.Rate(), ti.Fanout.Fanout.Rate())
		row("ceiling: raw multi-row INSERT + trim, rows/s", md.Fanout.Ceiling.Rate(), ti.Fanout.Ceiling.Rate())
	}
	p("")
	p("Each server against its own ceilings, in the same run:")
	p("")
	p("| ratio | MariaDB | TiDB |")
	p("|---|---:|---:|")
	p("| feed pages, HTTP / raw SELECT | %.2f | %.2f |", httpOverRaw(md), httpOverRaw(ti))
	if md.Fanout != nil && ti.Fanout != nil {
		p("| fan-out rows/s, service / raw INSERT + trim | %.2f | %.2f |",
			safeRatio(md.Fanout.Fanout.Rate(), md.Fanout.Ceiling.Rate()), safeRatio(ti.Fanout.Fanout.Rate(), ti.Fanout.Ceiling.Rate()))
	}
}

// httpOverRaw is a run's HTTP page rate over its raw SELECT's.
func httpOverRaw(r *report) float64 {
	h, _ := r.read(readInbox)
	c, _ := r.read(readRaw)
	return safeRatio(h.Rate(), c.Rate())
}

package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/feedhq/feed/internal/dbserver"
	"github.com/feedhq/feed/store"
)

// The disk-resident run (make bench-disk) gives each engine the same
// memory: a 128 MiB InnoDB buffer pool and a 128 MiB RocksDB block cache,
// both read with direct I/O, so the OS page cache does not hold what the
// engines do not.
const (
	diskCacheBytes = 128 << 20
	diskBegin      = "<!-- feedbench -disk: begin -->"
	diskEnd        = "<!-- feedbench -disk: end -->"
)

// diskEngines are measured in this order, on one server.
var diskEngines = []store.Engine{store.InnoDB, store.RocksDB}

// runDisk starts a server of its own, runs the phases once per inbox
// engine on it and writes the side-by-side section into opt.Out, between
// diskBegin and diskEnd in the text that make bench keeps.
func runDisk(ctx context.Context, opt options, args []string, log *slog.Logger) error {
	srv, err := startDiskServer(ctx, opt, log)
	if err != nil {
		return err
	}
	defer srv.stop(log)
	start := time.Now()
	var reps []*report
	for _, e := range diskEngines {
		o := opt
		o.DSN, o.InboxEngine = srv.DSN, string(e)
		log.Info("feedbench: disk-resident run", "engine", e)
		rep, err := measure(ctx, o, args, log)
		if err != nil {
			return fmt.Errorf("%s: %w", e, err)
		}
		reps = append(reps, rep)
	}
	var b bytes.Buffer
	renderDisk(&b, opt, args, srv, reps, time.Since(start))
	if err := writeSection(opt.Out, diskBegin, diskEnd, b.String()); err != nil {
		return err
	}
	log.Info("feedbench: disk-resident section written", "file", opt.Out, "elapsed", time.Since(start).Round(time.Second))
	return nil
}

// diskServer is the mariadbd of a disk-resident run.
type diskServer struct {
	*dbserver.Server
	version string
}

// startDiskServer empties opt.DiskDir and starts mariadbd there with
// opt.RocksDBCnf, the engines' caches at diskCacheBytes and direct I/O.
func startDiskServer(ctx context.Context, opt options, log *slog.Logger) (*diskServer, error) {
	dir, err := filepath.Abs(opt.DiskDir)
	if err != nil {
		return nil, err
	}
	cnf, err := filepath.Abs(opt.RocksDBCnf)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	cache := strconv.Itoa(diskCacheBytes)
	s, err := dbserver.Launch(dir, "--defaults-file="+cnf, "--max-connections=1000",
		"--innodb-buffer-pool-size="+cache, "--innodb-flush-method=O_DIRECT",
		"--rocksdb-block-cache-size="+cache, "--rocksdb-use-direct-reads=ON",
		"--rocksdb-use-direct-io-for-flush-and-compaction=ON")
	if err != nil {
		return nil, err
	}
	srv := &diskServer{Server: s}
	if srv.version, err = serverVersion(ctx, s.DSN); err != nil {
		s.Kill()
		return nil, err
	}
	log.Info("feedbench: disk-resident server", "dsn", s.DSN, "dir", dir, "version", srv.version)
	return srv, nil
}

func serverVersion(ctx context.Context, dsn string) (string, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	return v, db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v)
}

func (s *diskServer) stop(log *slog.Logger) {
	s.Kill()
	dbserver.RemoveTemplate()
	log.Info("feedbench: disk-resident server stopped")
}

// footprintAt is the report's last footprint taken at a time that begins
// with when, or the zero one.
func footprintAt(r *report, when string) tableFootprint {
	var out tableFootprint
	for _, f := range r.Footprints {
		if strings.HasPrefix(f.When, when) {
			out = f.tableFootprint
		}
	}
	return out
}

func safeRatio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// renderDisk writes the section: each engine's figures beside its own
// raw-SQL ceilings, then the engines against each other.
func renderDisk(w *bytes.Buffer, opt options, args []string, srv *diskServer, reps []*report, elapsed time.Duration) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("## K. Disk-resident: the inbox in InnoDB and in MyRocks")
	p("")
	p("Command: `go run ./cmd/feedbench %s` (`make bench-disk`), %s, %s.", strings.Join(args, " "), reps[0].Start.UTC().Format("2006-01-02 15:04 MST"), elapsed.Round(time.Second))
	p("")
	p("One server of its own, started by the run: %s with `%s`, a %d MiB InnoDB buffer pool and a %d MiB RocksDB",
		srv.version, opt.RocksDBCnf, diskCacheBytes>>20, diskCacheBytes>>20)
	p("block cache, `innodb_flush_method=O_DIRECT`, RocksDB direct reads and direct I/O for flushes and compactions:")
	p("the OS page cache holds neither engine's data. Each engine's run loads the same inboxes (%s users × %d rows,", count(opt.Users), opt.InboxRows)
	p("in the order fan-out writes them) into a database whose `inbox` is in that engine, then runs phases %s", opt.Phases)
	p("as above; readers are drawn from all loaded users (%s per reader class), so their newest pages do not fit in memory.", count(opt.ReaderUsers))
	p("Every other table is InnoDB in both runs.")
	p("")
	p("| figure | InnoDB | MyRocks | MyRocks / InnoDB | target |")
	p("|---|---:|---:|---:|---|")
	in, rk := reps[0], reps[1]
	// The footprints are phase D's.
	if opt.runs('D') {
		fin, frk := footprintAt(in, "as loaded"), footprintAt(rk, "as loaded")
		ein, erk := footprintAt(in, "steady state after"), footprintAt(rk, "steady state after")
		p("| inbox rows as loaded | %s | %s | | |", count(int(fin.Rows)), count(int(frk.Rows)))
		p("| inbox bytes on disk as loaded (data + index), × the engine's %d MiB | %.1f MiB, %.1f× | %.1f MiB, %.1f× | | |", diskCacheBytes>>20,
			float64(fin.DataBytes+fin.IndexBytes)/(1<<20), float64(fin.DataBytes+fin.IndexBytes)/diskCacheBytes,
			float64(frk.DataBytes+frk.IndexBytes)/(1<<20), float64(frk.DataBytes+frk.IndexBytes)/diskCacheBytes)
		p("| bytes per entry as loaded | %.1f | %.1f | %.2f | |", fin.BytesPerRow(), frk.BytesPerRow(), safeRatio(frk.BytesPerRow(), fin.BytesPerRow()))
		p("| bytes per entry at steady state (phase D: inboxes at the limit turned over by the service's fan-out and trims), right after the churn | %.1f | %.1f | %.2f | MyRocks ≤ 12: %s |", ein.BytesPerRow(), erk.BytesPerRow(),
			safeRatio(erk.BytesPerRow(), ein.BytesPerRow()), verdictAtMost(erk.BytesPerRow(), 12))
		sin, srk := footprintAt(in, "settled"), footprintAt(rk, "settled")
		p("| the same, once InnoDB's purge and MyRocks's compactions have finished (nothing forced) | %.1f | %.1f | %.2f | MyRocks ≤ 12: %s |", sin.BytesPerRow(), srk.BytesPerRow(),
			safeRatio(srk.BytesPerRow(), sin.BytesPerRow()), verdictAtMost(srk.BytesPerRow(), 12))
	}
	p("| load rate, rows/s | %s | %s | %.2f | |", count(int(rate(in.Load.Rows, in.Load.Elapsed))), count(int(rate(rk.Load.Rows, rk.Load.Elapsed))),
		safeRatio(rate(rk.Load.Rows, rk.Load.Elapsed), rate(in.Load.Rows, in.Load.Elapsed)))
	readRow := func(key, name, target string, want float64) {
		a, okA := in.read(key)
		b, okB := rk.read(key)
		if !okA || !okB {
			return
		}
		v := safeRatio(b.Rate(), a.Rate())
		t := ""
		if target != "" {
			t = target + ": " + verdict(v, want)
		}
		p("| %s, pages/s | %s | %s | %.2f | %s |", name, count(int(a.Rate())), count(int(b.Rate())), v, t)
	}
	readRow(readRaw, "ceiling: raw keyset SELECT", "", 0)
	readRow(readService, "feed pages through service.Feed in-process", "≥ 1.8", 1.8)
	readRow(readInbox, "feed pages over HTTP (wrk-style reader)", "", 0)
	// What a page cost, to tell a run held by the disk from one held by
	// the CPU: at the CPU a page costs, the cores allow so many pages a
	// second; a run that reaches it waits on no disk.
	for _, k := range []struct{ key, name string }{{readRaw, "raw SELECT"}, {readService, "service.Feed"}, {readInbox, "HTTP"}} {
		a, okA := in.read(k.key)
		b, okB := rk.read(k.key)
		if !okA || !okB {
			continue
		}
		p("| diagnostic, %s: disk reads per page | %.2f | %.2f | | |", k.name, a.Cost.DiskReads(), b.Cost.DiskReads())
		p("| diagnostic, %s: CPU µs per page, database server + feedbench | %.0f + %.0f | %.0f + %.0f | | |", k.name,
			a.Cost.ServerCPU(), a.Cost.SelfCPU(), b.Cost.ServerCPU(), b.Cost.SelfCPU())
		p("| diagnostic, %s: pages/s the %d cores allow at that CPU per page | %s | %s | | |", k.name, runtime.NumCPU(),
			count(int(a.Cost.CPUBound())), count(int(b.Cost.CPUBound())))
	}
	if in.Fanout != nil && rk.Fanout != nil {
		p("| fan-out into full inboxes through the service, rows/s | %s | %s | %.2f | ≥ 1.5: %s |", count(int(in.Fanout.Fanout.Rate())), count(int(rk.Fanout.Fanout.Rate())),
			safeRatio(rk.Fanout.Fanout.Rate(), in.Fanout.Fanout.Rate()), verdict(safeRatio(rk.Fanout.Fanout.Rate(), in.Fanout.Fanout.Rate()), 1.5))
		p("| ceiling: raw multi-row INSERT + trim, rows/s | %s | %s | %.2f | |", count(int(in.Fanout.CeilingRetain.Rate())), count(int(rk.Fanout.CeilingRetain.Rate())),
			safeRatio(rk.Fanout.CeilingRetain.Rate(), in.Fanout.CeilingRetain.Rate()))
		p("| diagnostic: the raw INSERTs alone, rows/s | %s | %s | %.2f | |", count(int(in.Fanout.Ceiling.Rate())), count(int(rk.Fanout.Ceiling.Rate())),
			safeRatio(rk.Fanout.Ceiling.Rate(), in.Fanout.Ceiling.Rate()))
	}
	p("")
	p("Each engine against its own ceilings, in the same run:")
	p("")
	p("| ratio | InnoDB | MyRocks | target |")
	p("|---|---:|---:|---|")
	ratioRow := func(name string, f func(r *report) float64, want float64) {
		a, b := f(in), f(rk)
		p("| %s | %.2f | %.2f | ≥ %g: InnoDB %s, MyRocks %s |", name, a, b, want, verdict(a, want), verdict(b, want))
	}
	if opt.runs('C') {
		ratioRow("feed pages, HTTP / raw SELECT", httpOverRaw, 0.8)
	}
	if in.Fanout != nil && rk.Fanout != nil {
		ratioRow("fan-out rows/s, service / raw INSERT + trim", func(r *report) float64 {
			return safeRatio(r.Fanout.Fanout.Rate(), r.Fanout.CeilingRetain.Rate())
		}, 0.7)
	}
}

// writeSection puts section between the markers begin and end in path,
// after the generated report's keep marker (added at the end if missing),
// leaving the rest of the file as it is.
func writeSection(path, begin, end, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	text := string(old)
	block := begin + "\n" + section + end
	if before, rest, ok := strings.Cut(text, begin); ok {
		_, after, _ := strings.Cut(rest, end)
		text = before + block + after
	} else {
		if !strings.Contains(text, keepMarker) {
			text += "\n" + keepMarker + "\n"
		}
		text += "\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

//go:build bench

// The whole benchmark at tiny sizes, minutes on 2 CPUs: `make test-bench`
// runs it (in CI, on MariaDB), `make test` and `make test-tidb` do not.

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/feedhq/feed/store/storetest"
)

// TestMain lets the test binary be the Redis anchor's process too: the
// anchor runs as feedbench re-executed with anchorCommand, and under go
// test feedbench is the test binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == anchorCommand {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestQuick runs the whole benchmark with tiny sizes against the test
// server and checks that the report has every section. It writes to a temp
// file, never to docs/. On TiDB the measurements it cannot take (phase R's
// trigger-fenced resharding, OPTIMIZE TABLE) must say so in the report.
func TestQuick(t *testing.T) {
	dsn := storetest.ServerDSN(t)
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	var log strings.Builder
	err := run(context.Background(), []string{"-quick", "-dsn", dsn, "-out", out}, &log)
	if err != nil {
		t.Fatalf("feedbench: %v\n%s", err, log.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	wants := []string{
		"# Benchmarks",
		"| server |",
		"## How to read this",
		"## A. Fan-out throughput",
		"| fan-out / ceiling, full inboxes",
		"| fan-out / ceiling, inboxes with room",
		"## B. Publish → visible",
		"last follower p50",
		"## M. Many small posts",
		"| followers per post |",
		"## C. Feed read throughput",
		"| inbox-only HTTP / raw SELECT |",
		"| 10-pull HTTP / inbox-only HTTP |",
		"| 50-pull HTTP / inbox-only HTTP |",
		"## S. Feed streams",
		"publish → event p50",
		"| unread counts / pages, inbox-only readers, HTTP |",
		"| `?kinds=photo` pages (one item in ten) / unfiltered pages, inbox-only readers, HTTP |",
		"| `?kinds=video` pages (one item in 500) / unfiltered pages, inbox-only readers, HTTP |",
		"| pages of readers muting 100 authors / inbox-only pages, HTTP |",
		"## D. Disk bytes per inbox row",
		"| as loaded |",
		"| steady state after 1 turnover |",
		"## P. Deep and hybrid pages",
		"| deep / inbox page p50 at 60 followees |",
		"| service deep page / raw threshold merge, p50, 20 followees |",
		"| readers following 50 pull authors, HTTP |",
		"## R. Reshard copy rate",
		"## W. Page cost vs Redis",
		"| feedd / Redis anchor, first pages/s |",
		"## O. Open-loop mix",
		"| highest rate held, feedd |",
		"| highest rate held, Redis anchor |",
		keepMarker,
	}
	if storetest.TiDB(t) {
		wants = append(wants,
			"## R. Reshard copy rate\n\nNot available on TiDB",
			"| after OPTIMIZE TABLE | not available: TiDB does not support OPTIMIZE TABLE |",
			"**Bytes on disk are not available on TiDB:**")
	} else {
		wants = append(wants,
			"| reshard copy / ceiling (moving rows/s) |",
			"| after OPTIMIZE TABLE | ")
	}
	for _, want := range wants {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "Not run") {
		t.Errorf("a phase did not run:\n%s", report)
	}

	// A second run keeps the hand-written text below the marker.
	if err := os.WriteFile(out, []byte(report+"hand-written analysis\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	if err := run(context.Background(), []string{"-quick", "-phases", "D", "-optimize=false", "-dsn", dsn, "-out", out}, &log); err != nil {
		t.Fatalf("feedbench: %v\n%s", err, log.String())
	}
	b, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), keepMarker+"\nhand-written analysis\n") {
		t.Errorf("hand-written text below the marker was not kept:\n%s", b)
	}
}

// Command feedbench measures the feed service on a real MySQL-family server
// against raw-SQL ceilings measured in the same run on the same tables, and
// writes the figures to docs/BENCHMARKS.md.
//
// It creates its own uniquely named database on the server named by -dsn or
// FEED_TEST_MYSQL_DSN (a DSN without a database name; with neither it starts
// a MySQL 8.4 testcontainer), loads it, runs the service in-process (store,
// service with its fan-out workers, HTTP API on 127.0.0.1:0) and drives it
// with the Go client. Phases:
//
//	A  fan-out throughput of the real workers vs raw multi-row INSERT IGNORE
//	B  publish → visible latency over HTTP for a 1k and a 100k follower author
//	C  feed read throughput over HTTP vs a raw prepared keyset SELECT
//	D  disk bytes per inbox row
//	M  many small posts: publishing vs delivery rate at 1, 10 and 100
//	   followers per post, vs raw multi-row INSERT IGNORE of the same rows
//	R  store/reshard's copy of half the virtual shards to a second database
//	   vs raw INSERT … SELECT, on databases of its own
//	P  pages below the inbox at 50 to 2,000 followees over HTTP vs the same
//	   merge in raw SQL, and phase C's hybrid pages
//
// `make bench` runs it; -quick runs tiny sizes in a few seconds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "feedbench:", err)
		os.Exit(1)
	}
}

// Command feedbench measures the feed service on a real MySQL-family server
// against raw-SQL ceilings measured in the same run on the same tables, and
// writes the figures to docs/BENCHMARKS.md.
//
// It creates its own uniquely named database on the server named by -dsn or
// FEED_TEST_MYSQL_DSN (a DSN without a database name; with neither it starts
// a mariadbd of its own), loads it, runs the service in-process (store,
// service with its fan-out workers, HTTP API on 127.0.0.1:0) and drives it
// with the Go client. The phases, each a letter of -phases and a section of
// the report, are the table in phases.go; `feedbench -help` lists them.
//
// `make bench` runs every phase, `make bench-disk` (-disk) and
// `make bench-tidb` (-tidb-beside) some of them on other servers, each
// writing its own section; -quick runs tiny sizes in a few seconds.
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
	if len(os.Args) > 1 && os.Args[1] == anchorCommand {
		if err := runAnchor(ctx, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "feedbench redis anchor:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stderr); errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "feedbench:", err)
		os.Exit(1)
	}
}

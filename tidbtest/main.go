// Command tidbtest starts an in-process TiDB (unistore engine) and runs one
// command with FEED_TEST_MYSQL_DSN pointing at it, so the main module's test
// suites and cmd/feedbench run unchanged on TiDB:
//
//	bin/tidbtest -- go test ./store ./service ./httpapi
//
// It lives in its own module so the main module does not carry TiDB's
// dependencies. The command runs in the current directory (-dir to change);
// tidbtest exits with the command's status.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	dir := flag.String("dir", ".", "directory the command runs in")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: tidbtest [-dir D] -- command [args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*dir, flag.Args()))
}

func run(dir string, args []string) int {
	srv, err := startTiDB()
	if err != nil {
		slog.Error("starting TiDB", "err", err)
		return 1
	}
	defer srv.Close()
	slog.Info("tidbtest: TiDB is up", "dsn", srv.DSN())

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "FEED_TEST_MYSQL_DSN="+srv.DSN())
	// Interrupts reach the child through the process group; tidbtest
	// waits for it and then shuts TiDB down.
	signal.Ignore(syscall.SIGINT)
	if err := cmd.Run(); err != nil {
		if exit, ok := err.(*exec.ExitError); ok {
			return exit.ExitCode()
		}
		slog.Error("running command", "cmd", args, "err", err)
		return 1
	}
	return 0
}

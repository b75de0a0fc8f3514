package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/internal/dbserver"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
)

// bench is one run: the stack under test, the data it loaded and the report.
type bench struct {
	opt   options
	log   *slog.Logger
	stack *stack
	st    *store.Store
	db    *sqlx.DB // the one shard's pool: every id lives on it
	// server is the parsed DSN of the benchmark database; phase R names its own
	// databases on the same server with it.
	server *mysql.Config
	rng    *rand.Rand
	rep    *report
	data   dataset

	ceilingPosts uint64 // synthetic posts the insert ceiling wrote

	tmp      string // the run's temporary directory (tempDir), removed at its end
	feeddBin string // ./cmd/feedd built there (feeddBinary)
}

// run parses args, runs the benchmark and writes the report.
func run(ctx context.Context, args []string, stderr io.Writer) (err error) {
	opt, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if opt.CPUProfile != "" {
		f, err := os.Create(opt.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	switch {
	case opt.Disk:
		return runDisk(ctx, opt, args, log)
	case opt.TiDBBeside != "":
		return runTiDB(ctx, opt, args, log)
	}
	rep, err := measure(ctx, opt, args, log)
	if err != nil {
		return err
	}
	if err := rep.write(opt.Out); err != nil {
		return err
	}
	log.Info("feedbench: report written", "file", opt.Out, "elapsed", rep.Elapsed.Round(time.Second))
	return nil
}

// measure runs the phases on a database of their own and returns the report.
func measure(ctx context.Context, opt options, args []string, log *slog.Logger) (rep *report, err error) {
	server := opt.DSN
	if server == "" {
		dsn, stop, err := startServer(log)
		if err != nil {
			return nil, fmt.Errorf("neither -dsn nor %s is set, and no mariadbd of its own could be started: %w", envDSN, err)
		}
		defer stop()
		server = dsn
	}
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		return nil, fmt.Errorf("bad server dsn: %w", err)
	}
	addr := cfg.Addr
	cfg.DBName = uniqueDatabaseName()
	m := shardmap.Single(cfg.FormatDSN())
	m.InboxEngine = opt.InboxEngine
	st, err := store.Open(m)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	log.Info("feedbench: creating database", "database", cfg.DBName, "addr", addr)
	// Cleanup runs even when ctx was cancelled by a signal.
	cleanup := context.WithoutCancel(ctx)
	if err := st.Migrate(ctx, log); err != nil {
		return nil, err
	}
	defer func() {
		if opt.Keep {
			log.Info("feedbench: keeping database", "database", cfg.DBName)
			return
		}
		// A schema name cannot be a placeholder; uniqueDatabaseName
		// yields [a-z0-9_] only.
		if _, derr := st.Shards()[0].DB.ExecContext(cleanup, "DROP DATABASE IF EXISTS `"+cfg.DBName+"`"); derr != nil && err == nil {
			err = fmt.Errorf("drop database %s: %w", cfg.DBName, derr)
		}
		log.Info("feedbench: dropped database", "database", cfg.DBName)
	}()

	svcCfg := service.DefaultConfig()
	svcCfg.InboxSlack = opt.InboxSlack
	svcCfg.Workers = opt.Workers
	// A smoke run checks the paths, not the latencies, often on a machine
	// busy with other tests: its requests get a deadline no load reaches.
	var deadline time.Duration
	if opt.Quick {
		deadline = time.Minute
		svcCfg.SourceTimeout = deadline
	}
	stk, err := startStack(st, svcCfg, deadline, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := stk.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	b := &bench{
		opt:    opt,
		log:    log,
		stack:  stk,
		st:     st,
		db:     st.Shards()[0].DB,
		server: cfg,
		rng:    rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15)),
		rep:    newReport(opt, args, addr, cfg.DBName),
	}
	defer func() {
		if b.tmp != "" {
			os.RemoveAll(b.tmp)
		}
	}()
	b.rep.PullCacheTTL = stk.svc.Config().PullCacheTTL
	if b.rep.Server, err = readServerInfo(ctx, b.db); err != nil {
		return nil, err
	}
	log.Info("feedbench: server", "version", b.rep.Server.Version, "buffer_pool_bytes", b.rep.Server.BufferPoolBytes)
	stopWatch := b.watchSharedServer(ctx)
	if err := b.runPhases(ctx); err != nil {
		stopWatch()
		return nil, err
	}
	stopWatch()
	b.rep.Elapsed = time.Since(b.rep.Start)
	return b.rep, nil
}

// watchSharedServer samples, once a second, how many sessions of other
// databases are running statements on the server, and how much CPU other
// processes use: other engineers' tests on a shared machine bend the
// figures, and the report says so.
func (b *bench) watchSharedServer(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	host := newHostSampler()
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			n, err := otherActiveSessions(ctx, b.db)
			if err == nil {
				b.rep.Shared.add(n)
			}
			host.sample()
			b.rep.Shared.setHost(host.summary())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// uniqueDatabaseName is "feedbench_<time>_<random>".
func uniqueDatabaseName() string {
	var rnd [4]byte
	_, _ = crand.Read(rnd[:])
	return "feedbench_" + time.Now().UTC().Format("20060102t150405") + "_" + hex.EncodeToString(rnd[:])
}

// startServer launches a mariadbd of its own (internal/dbserver) in a
// temporary directory, with no option file and room for the phases'
// connections; stop kills it and removes its files.
func startServer(log *slog.Logger) (dsn string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "feedbench-server-")
	if err != nil {
		return "", nil, err
	}
	srv, err := dbserver.Launch(dir, "--no-defaults", "--max-connections=1000")
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	log.Info("feedbench: no DSN given; started a mariadbd of its own", "dsn", srv.DSN, "dir", dir)
	return srv.DSN, func() {
		srv.Kill()
		dbserver.RemoveTemplate()
		_ = os.RemoveAll(dir)
	}, nil
}

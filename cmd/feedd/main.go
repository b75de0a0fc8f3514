// Command feedd runs the feed service: `feedd serve` (HTTP API and fan-out
// workers), `feedd migrate` (schema on every shard), `feedd reshard`, and
// `feedd import` and `feedd export` (records as JSON Lines), and `feedd token`
// (a user token).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/httpapi/console"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:]); errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "feedd:", err)
		os.Exit(2)
	}
	// SIGHUP reloads the user tokens' keys. Caught from here on, so that
	// one arriving while serve starts waits instead of ending the process.
	hup := make(chan os.Signal, 1)
	if m.Command == "serve" {
		signal.Notify(hup, syscall.SIGHUP)
	}
	// The driver's own lines (a connection dropped, a bad packet) join the
	// structured log; the setting is global, hence here and not in Run.
	_ = mysql.SetLogger(driverLog{m.Log})
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "feedd:", err)
		m.Close()
		os.Exit(1)
	}
	if m.Command == "serve" {
		go func() {
			for range hup {
				m.ReloadUserTokenKeys()
			}
		}()
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}
	if err := m.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "feedd:", err)
		os.Exit(1)
	}
}

// Main is the program, built so tests can run it in-process: ParseFlags,
// Run (which returns once serving), Close (graceful stop).
type Main struct {
	Command string
	Config  Config
	Reshard reshardConfig
	Import  importConfig
	Export  exportConfig
	Token   tokenConfig
	Stdout  io.Writer
	Stderr  io.Writer
	Log     *slog.Logger

	store *store.Store
	svc   *service.Service
	// userTokenKeys verifies user tokens (nil without --jwks-file).
	userTokenKeys *httpapi.UserTokenKeys
	echo          *echo.Echo
	listener      net.Listener
	stopWork      context.CancelFunc
	workDone      chan struct{}
	// stopHealth ends the background probes of the databases.
	stopHealth context.CancelFunc
	healthDone chan struct{}
	serveDone  chan error
}

// NewMain returns a Main with default settings writing to stdout and
// stderr.
func NewMain() *Main {
	return &Main{Config: DefaultConfig(), Stdout: os.Stdout, Stderr: os.Stderr}
}

const usage = `usage: feedd <command> [flags]

commands:
  serve    run the HTTP API and the fan-out workers
  migrate  apply the schema migrations to every shard
  reshard  move virtual shards between databases (feedd reshard -h)
  import   load a JSON Lines file of follows, posts, mutes, hides and markers
  export   write every record, or those of a range of users, as JSON Lines
  token    print a user token: a JWT acting as one user (feedd token -h)

Every flag has an environment variable FEED_<FLAG> (e.g. FEED_MYSQL_DSN);
run "feedd serve -h" for the flags.`

// ParseFlags reads the command, then the environment and flags.
func (m *Main) ParseFlags(args []string) error {
	if len(args) == 0 || !slices.Contains([]string{"serve", "migrate", "reshard", "import", "export", "token"}, args[0]) {
		fmt.Fprintln(m.Stderr, usage)
		return flag.ErrHelp
	}
	m.Command = args[0]
	if m.Command == "reshard" {
		m.Log = newLogger(m.Stderr, m.Config.LogFormat, m.Config.LogLevel)
		return m.Reshard.parse(args[1:], m.Stderr)
	}
	if m.Command == "token" {
		m.Log = newLogger(m.Stderr, m.Config.LogFormat, m.Config.LogLevel)
		return m.Token.parse(args[1:], m.Stderr)
	}
	flags := args[1:]
	var more []func(*flag.FlagSet)
	switch m.Command {
	case "import":
		// feedd import [flags] FILE
		more = append(more, m.Import.register)
		if len(flags) == 0 || (strings.HasPrefix(flags[len(flags)-1], "-") && flags[len(flags)-1] != "-") {
			fmt.Fprintln(m.Stderr, "usage: feedd import [flags] FILE (- for standard input)")
			if len(flags) > 0 {
				// -h lists the flags; anything else is refused by them.
				_ = m.Config.parse("feedd import", flags, m.Stderr, more...)
			}
			return flag.ErrHelp
		}
		m.Import.File, flags = flags[len(flags)-1], flags[:len(flags)-1]
	case "export":
		more = append(more, m.Export.register)
	}
	if err := m.Config.parse("feedd "+m.Command, flags, m.Stderr, more...); err != nil {
		return err
	}
	if m.Command == "serve" && !m.Config.API && !m.Config.Workers {
		return errors.New("serve: nothing to run with --api=false and --workers=false")
	}
	m.Log = newLogger(m.Stderr, m.Config.LogFormat, m.Config.LogLevel)
	return nil
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lv}
	if strings.EqualFold(format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// driverLog passes the MySQL driver's log lines to slog.
type driverLog struct{ log *slog.Logger }

func (d driverLog) Print(v ...any) {
	d.log.Warn("mysql: "+strings.TrimSpace(fmt.Sprint(v...)), "component", "driver")
}

// Run runs migrate to completion, or starts serve and returns once it listens.
func (m *Main) Run(ctx context.Context) error {
	if m.Log == nil {
		m.Log = newLogger(m.Stderr, m.Config.LogFormat, m.Config.LogLevel)
	}
	switch m.Command {
	case "reshard":
		return runReshard(ctx, m.Reshard, m.Stderr)
	case "token":
		return runToken(m.Token, time.Now(), m.Stdout)
	}
	m.Log.Info("feedd: starting", append([]any{"command", m.Command}, m.Config.settings()...)...)
	shardMap := shardmap.Single(m.Config.MySQLDSN)
	if m.Config.Sharding != "" {
		var err error
		if shardMap, err = shardmap.Load(m.Config.Sharding); err != nil {
			return err
		}
	}
	shardMap.InboxEngine = m.Config.InboxEngine
	st, err := store.Open(shardMap)
	if err != nil {
		return err
	}
	m.store = st
	if m.Command == "export" {
		return m.export(ctx)
	}
	switch {
	case m.Command == "migrate":
		bar := newRowBar(m.Stderr, true)
		err = st.MigrateConverting(ctx, m.Log, bar.convert)
		bar.finish()
	case m.Config.AutoMigrate:
		err = st.Migrate(ctx, m.Log)
	}
	if err != nil {
		return err
	}
	// The inbox engine must be there, set up, and the one the inboxes are in.
	if err := st.CheckEngine(ctx); err != nil {
		return err
	}
	// The file must lay the data out as the databases say it is laid out.
	if err := st.CheckLayout(ctx); err != nil {
		return err
	}
	switch m.Command {
	case "migrate":
		return nil
	case "import":
		if m.svc, err = service.New(st, m.Config.Service, m.Log, service.NewMetrics(prometheus.NewRegistry()), time.Now); err != nil {
			return err
		}
		return m.runImport(ctx)
	}
	return m.serve()
}

// serve starts the workers and the HTTP server.
func (m *Main) serve() error {
	// A key set that does not load stops the start before anything runs.
	if m.Config.API && m.Config.JWKSFile != "" {
		keys, err := httpapi.LoadUserTokenKeys(m.Config.JWKSFile)
		if err != nil {
			return err
		}
		m.userTokenKeys = keys
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc, err := service.New(m.store, m.Config.Service, m.Log, service.NewMetrics(reg), time.Now)
	if err != nil {
		return err
	}
	m.svc = svc
	// Readiness answers from the probes' last results: the first round
	// runs before the listener opens, so /readyz is right from the start.
	svc.CheckHealth(context.Background())
	hctx, cancel := context.WithCancel(context.Background())
	m.stopHealth, m.healthDone = cancel, make(chan struct{})
	go func() {
		defer close(m.healthDone)
		svc.WatchHealth(hctx)
	}()
	if m.Config.Workers {
		ctx, cancel := context.WithCancel(context.Background())
		m.stopWork, m.workDone = cancel, make(chan struct{})
		go func() {
			defer close(m.workDone)
			svc.RunWorkers(ctx, m.Config.SoftStop)
		}()
		m.Log.Info("feedd: workers started", "shards", len(m.store.Shards()), "fanout_workers_per_shard", m.Config.Service.Workers)
	}
	if !m.Config.API {
		return nil
	}
	ln, err := net.Listen("tcp", m.Config.HTTPAddr)
	if err != nil {
		return err
	}
	m.listener = ln
	m.echo = httpapi.New(svc, httpapi.Options{Token: m.Config.APIToken, UserTokenKeys: m.userTokenKeys,
		RateLimit: m.Config.RateLimit, RateLimitService: m.Config.RateLimitService, TrustedProxies: m.Config.TrustedProxies,
		Log: m.Log, Registry: reg, ReadDeadline: m.Config.ReadDeadline, WriteDeadline: m.Config.WriteDeadline})
	console.Mount(m.echo, svc, console.Options{Token: m.Config.APIToken, TrustedProxies: m.Config.TrustedProxies, Log: m.Log})
	m.echo.Server.ReadHeaderTimeout = 5 * time.Second
	m.echo.Server.ReadTimeout = 30 * time.Second
	m.echo.Server.WriteTimeout = 30 * time.Second
	m.echo.Server.IdleTimeout = 2 * time.Minute
	m.echo.Listener = ln
	m.serveDone = make(chan error, 1)
	go func() { m.serveDone <- m.echo.Start("") }()
	m.Log.Info("feedd: listening", "addr", ln.Addr().String())
	return nil
}

// ReloadUserTokenKeys reads the user tokens' key set again (main calls it
// on SIGHUP): a key removed from the file stops opening anything, a key
// added opens from now on. A file that does not load leaves the set in
// use, and the log says why.
func (m *Main) ReloadUserTokenKeys() {
	if m.userTokenKeys == nil {
		m.Log.Warn("feedd: SIGHUP: no --jwks-file to reload")
		return
	}
	n, err := m.userTokenKeys.Reload()
	if err != nil {
		m.Log.Error("feedd: user token keys not reloaded; the previous set stays", "error", err)
		return
	}
	m.Log.Info("feedd: user token keys reloaded", "file", m.Config.JWKSFile, "keys", n)
}

// Addr is the address the API listens on (useful with :0).
func (m *Main) Addr() string {
	if m.listener == nil {
		return ""
	}
	return m.listener.Addr().String()
}

// Close stops in order: /readyz turns 503 while requests are still served
// for the drain delay, streams end, the HTTP server closes its listener and
// finishes requests in flight, the workers stop claiming, finish their batches and
// release their claims, then the pools close.
func (m *Main) Close() error {
	var errs []error
	serving := m.svc != nil
	if m.echo != nil {
		// Load balancers see /readyz fail and stop sending requests while
		// they are still served; then the listener closes.
		m.svc.Drain()
		m.Log.Info("feedd: draining", "drain_delay", m.Config.DrainDelay.String())
		time.Sleep(m.Config.DrainDelay)
		// Streams never finish on their own: end them, so that their
		// clients reconnect elsewhere and resume, and Shutdown need not
		// wait for them.
		m.svc.CloseStreams()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		errs = append(errs, m.echo.Shutdown(ctx))
		cancel()
		if err := <-m.serveDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
		m.echo = nil
	}
	if m.stopWork != nil {
		m.stopWork()
		<-m.workDone
		m.stopWork = nil
	}
	if m.stopHealth != nil {
		m.stopHealth()
		<-m.healthDone
		m.stopHealth = nil
	}
	if m.store != nil {
		errs = append(errs, m.store.Close())
		m.store = nil
	}
	err := errors.Join(errs...)
	if serving && m.Command == "serve" {
		m.Log.Info("feedd: stopped", "error", err)
	}
	return err
}

package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// Config is every setting of feedd. Each has a flag and an environment
// variable FEED_<NAME>; a flag given on the command line wins.
type Config struct {
	MySQLDSN    string
	Sharding    string
	InboxEngine string
	AutoMigrate bool
	HTTPAddr    string
	APIToken    string
	// JWKSFile is the key set user tokens are signed with; SIGHUP reloads it.
	JWKSFile string
	// RateLimit is the requests a second each client may make on /v1
	// (burst twice that; 0: off); RateLimitService limits the service
	// token too.
	RateLimit        float64
	RateLimitService bool
	// TrustedProxies may name the clients they forward and say they came
	// over TLS.
	TrustedProxies httpapi.TrustedProxies
	API            bool
	Workers        bool
	SoftStop       time.Duration
	// ReadDeadline and WriteDeadline bound a request: past them the client
	// gets 503 and the statement is killed on the server.
	ReadDeadline  time.Duration
	WriteDeadline time.Duration
	// DrainDelay is how long a stopping process keeps serving with /readyz
	// at 503, so load balancers take it out before its listener closes.
	DrainDelay time.Duration
	LogFormat  string
	LogLevel   string
	Service    service.Config
}

// DrainDelayDefault covers a load balancer's readiness checks: Kubernetes
// probes every 10 s by default and stops routing after one failure when
// failureThreshold is 1, so the delay should be at least the probe period
// (set periodSeconds and this together; 5 s suits a 5 s period).
const DrainDelayDefault = 5 * time.Second

// DefaultConfig returns the contract's defaults.
func DefaultConfig() Config {
	return Config{
		InboxEngine:   string(store.InnoDB),
		AutoMigrate:   true,
		HTTPAddr:      ":8080",
		API:           true,
		Workers:       true,
		SoftStop:      service.SoftStopTimeoutDefault,
		ReadDeadline:  httpapi.ReadDeadlineDefault,
		WriteDeadline: httpapi.WriteDeadlineDefault,
		DrainDelay:    DrainDelayDefault,
		LogFormat:     "text",
		LogLevel:      "info",
		Service:       service.DefaultConfig(),
	}
}

// secret options are redacted when settings are printed.
var secret = map[string]bool{"mysql-dsn": true, "api-token": true}

// register binds every option to a flag: the one table of settings.
func (c *Config) register(fs *flag.FlagSet) {
	s := &c.Service
	fs.StringVar(&c.MySQLDSN, "mysql-dsn", c.MySQLDSN, "MySQL DSN (go-sql-driver format) of the single shard when no sharding file is given")
	fs.StringVar(&c.Sharding, "sharding", c.Sharding, "path to sharding.yaml; wins over mysql-dsn")
	fs.StringVar(&c.InboxEngine, "inbox-engine", c.InboxEngine, "engine of the inbox table: innodb, or rocksdb (MyRocks, with deploy/rocksdb.cnf); feedd migrate converts a populated inbox online")
	fs.BoolVar(&c.AutoMigrate, "auto-migrate", c.AutoMigrate, "serve: apply migrations at start")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address")
	fs.StringVar(&c.APIToken, "api-token", c.APIToken, "when set, /v1 requests need 'Authorization: Bearer <token>'")
	fs.StringVar(&c.JWKSFile, "jwks-file", c.JWKSFile, "JSON Web Key Set file (oct/HS256 or Ed25519/EdDSA keys, each with a kid) whose keys sign user tokens: JWTs acting as one user; reloaded on SIGHUP")
	fs.Float64Var(&c.RateLimit, "rate-limit", c.RateLimit, "requests a second each client may make on /v1, with a burst of twice that: a user token by its user, any other client by its address; per process; 0: off")
	fs.BoolVar(&c.RateLimitService, "rate-limit-service", c.RateLimitService, "apply the rate limit to the service token (api-token) too, by address")
	fs.Var(&c.TrustedProxies, "trusted-proxies", "comma-separated CIDRs or addresses of proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (the client's address for rate limits, console logins and logs; the console's Secure cookies); empty: none")
	fs.BoolVar(&c.API, "api", c.API, "serve: run the HTTP API")
	fs.BoolVar(&c.Workers, "workers", c.Workers, "serve: run the fan-out workers")
	fs.DurationVar(&c.ReadDeadline, "read-deadline", c.ReadDeadline, "deadline of a GET or HEAD request; past it 503")
	fs.DurationVar(&c.WriteDeadline, "write-deadline", c.WriteDeadline, "deadline of a POST, PUT or DELETE request; past it 503")
	fs.DurationVar(&c.DrainDelay, "drain-delay", c.DrainDelay, "on SIGTERM, how long to serve with /readyz at 503 before the listener closes")
	fs.DurationVar(&c.SoftStop, "soft-stop", c.SoftStop, "on shutdown, how long batches in flight may finish")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error")
	fs.IntVar(&s.InboxLimit, "inbox-limit", s.InboxLimit, "entries kept per inbox")
	fs.IntVar(&s.InboxSlack, "inbox-slack", s.InboxSlack, "mean overshoot above inbox-limit before trimming, percent of it (1..100)")
	fs.Int64Var(&s.PushThreshold, "push-threshold", s.PushThreshold, "authors with more followers push only to active followers")
	fs.IntVar(&s.ActiveDays, "active-days", s.ActiveDays, "a follower is active if it read its feed within this many days")
	fs.IntVar(&s.MaxFollowing, "max-following", s.MaxFollowing, "follow cap per user")
	fs.IntVar(&s.MaxMuted, "max-muted", s.MaxMuted, "mute cap per user")
	fs.IntVar(&s.TaskSize, "task-size", s.TaskSize, "followers per fan-out sub-task")
	fs.IntVar(&s.BatchSize, "batch-size", s.BatchSize, "followers per fan-out transaction")
	fs.IntVar(&s.Workers, "worker-concurrency", s.Workers, "fan-out and follow-event loops per shard")
	fs.DurationVar(&s.Lease, "lease", s.Lease, "how long a worker's claim lasts before others may take over")
	fs.DurationVar(&s.PollInterval, "poll-interval", s.PollInterval, "how often idle workers poll for work")
	fs.DurationVar(&s.ClockSkew, "clock-skew", s.ClockSkew, "allowed clock difference between servers (and future publish_time)")
	fs.DurationVar(&s.PullCacheTTL, "pull-cache-ttl", s.PullCacheTTL, "how long a process reuses pull authors' newest posts (0: no cache; at most 2s)")
	fs.DurationVar(&s.TombstoneTTL, "tombstone-ttl", s.TombstoneTTL, "how long a deleted post's rows stay after its removal from feeds finished (at least 1m)")
	fs.BoolVar(&s.PartialReads, "partial-reads", s.PartialReads, "serve a feed page without the followed authors whose database does not answer, naming them (false: 503)")
	fs.DurationVar(&s.SourceTimeout, "source-timeout", s.SourceTimeout, "how long a feed page waits for one database's outboxes before it does without them")
	fs.IntVar(&s.MaxStreamsPerUser, "max-streams-per-user", s.MaxStreamsPerUser, "feed streams one user may hold open in a process; past it an open is 429 too_many_streams")
	fs.IntVar(&s.MaxStreams, "max-streams", s.MaxStreams, "feed streams a process holds open at most; past it an open is 429 too_many_streams")
	fs.DurationVar(&s.LiveSessionTTL, "live-session-ttl", s.LiveSessionTTL, "how long a live-feed session serves later pages after its first")
	fs.DurationVar(&s.ProbeInterval, "probe-interval", s.ProbeInterval, "how often each database is probed for readiness")
	fs.DurationVar(&s.ProbeTimeout, "probe-timeout", s.ProbeTimeout, "a database whose probe read and write take longer is reported down")
	fs.IntVar(&s.NodeID, "node-id", s.NodeID, "0..8191, unique per process, for server-assigned content ids; -1 random")
}

// envName is the environment variable of a flag: mysql-dsn → FEED_MYSQL_DSN.
func envName(flagName string) string {
	return "FEED_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse applies environment variables, then the command line. more
// registers a command's flags of its own.
func (c *Config) parse(name string, args []string, stderr io.Writer, more ...func(*flag.FlagSet)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	for _, f := range more {
		f(fs)
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s: %w", envName(f.Name), err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.Sharding == "" && c.MySQLDSN == "" {
		return fmt.Errorf("set FEED_MYSQL_DSN (or --mysql-dsn) or FEED_SHARDING (or --sharding)")
	}
	if c.ReadDeadline <= 0 || c.WriteDeadline <= 0 {
		return fmt.Errorf("read deadline and write deadline must be > 0")
	}
	if _, err := store.ParseEngine(c.InboxEngine); err != nil {
		return err
	}
	if c.DrainDelay < 0 {
		return fmt.Errorf("drain delay must be >= 0")
	}
	if !(c.RateLimit >= 0) || math.IsInf(c.RateLimit, 1) {
		return fmt.Errorf("rate limit must be a number of requests a second >= 0 (0: off)")
	}
	return c.Service.Validate()
}

// settings lists every setting as name=value with secrets redacted, for
// the start-up log.
func (c *Config) settings() []any {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.register(fs)
	var out []any
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if secret[f.Name] && v != "" {
			v = "<redacted>"
		}
		out = append(out, strings.ReplaceAll(f.Name, "-", "_"), v)
	})
	return out
}

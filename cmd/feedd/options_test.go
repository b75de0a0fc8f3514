package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed/service"
)

// clearFeedEnv unsets every FEED_<NAME> variable of a flag for the test, so
// the developer's environment cannot leak into a parse.
func clearFeedEnv(t *testing.T) {
	t.Helper()
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	var c Config
	c.register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		t.Setenv(name, "") // restores the old value when the test ends
		os.Unsetenv(name)
	})
}

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{
		"mysql-dsn":          "FEED_MYSQL_DSN",
		"sharding":           "FEED_SHARDING",
		"auto-migrate":       "FEED_AUTO_MIGRATE",
		"http-addr":          "FEED_HTTP_ADDR",
		"inbox-limit":        "FEED_INBOX_LIMIT",
		"worker-concurrency": "FEED_WORKER_CONCURRENCY",
		"api":                "FEED_API",
	} {
		if got := envName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

// TestContractSettings checks that every setting the run contract names
// exists as a flag and thus as FEED_<NAME>, and that no two flags share a
// variable.
func TestContractSettings(t *testing.T) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	var c Config
	c.register(fs)
	vars := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if other, dup := vars[name]; dup {
			t.Errorf("flags %q and %q share %s", other, f.Name, name)
		}
		vars[name] = f.Name
		if f.Usage == "" {
			t.Errorf("flag %q has no help", f.Name)
		}
	})
	for _, want := range []string{
		"FEED_MYSQL_DSN", "FEED_SHARDING", "FEED_AUTO_MIGRATE", "FEED_HTTP_ADDR", "FEED_INBOX_LIMIT",
		"FEED_PUSH_THRESHOLD", "FEED_ACTIVE_DAYS", "FEED_MAX_FOLLOWING", "FEED_API_TOKEN",
	} {
		if _, ok := vars[want]; !ok {
			t.Errorf("contract setting %s has no flag", want)
		}
	}
}

func TestConfigParse(t *testing.T) {
	const dsn = "u:pw@tcp(db:3306)/feed"
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string // substring; empty means success
		check   func(t *testing.T, c Config)
	}{
		{
			name: "contract defaults",
			args: []string{"--mysql-dsn", dsn},
			check: func(t *testing.T, c Config) {
				want := DefaultConfig()
				want.MySQLDSN = dsn
				if !reflect.DeepEqual(c, want) {
					t.Errorf("config = %+v, want %+v", c, want)
				}
				if !c.AutoMigrate || c.HTTPAddr != ":8080" || c.Service.InboxLimit != 300 ||
					c.Service.PushThreshold != 10000 || c.Service.ActiveDays != 7 || c.Service.MaxFollowing != 2000 ||
					!c.API || !c.Workers || c.APIToken != "" || !c.Service.PartialReads || c.Service.SourceTimeout != 500*time.Millisecond {
					t.Errorf("defaults differ from the contract: %+v", c)
				}
			},
		},
		{
			name: "every contract variable applies",
			env: map[string]string{
				"FEED_MYSQL_DSN":      dsn,
				"FEED_SHARDING":       "/etc/feed/sharding.yaml",
				"FEED_AUTO_MIGRATE":   "false",
				"FEED_HTTP_ADDR":      "127.0.0.1:9090",
				"FEED_INBOX_LIMIT":    "50",
				"FEED_PUSH_THRESHOLD": "123",
				"FEED_ACTIVE_DAYS":    "0",
				"FEED_MAX_FOLLOWING":  "10",
				"FEED_API_TOKEN":      "s3cret",
			},
			check: func(t *testing.T, c Config) {
				if c.MySQLDSN != dsn || c.Sharding != "/etc/feed/sharding.yaml" || c.AutoMigrate ||
					c.HTTPAddr != "127.0.0.1:9090" || c.Service.InboxLimit != 50 || c.Service.PushThreshold != 123 ||
					c.Service.ActiveDays != 0 || c.Service.MaxFollowing != 10 || c.APIToken != "s3cret" {
					t.Errorf("environment not applied: %+v", c)
				}
			},
		},
		{
			name: "other variables apply",
			env: map[string]string{
				"FEED_MYSQL_DSN":          dsn,
				"FEED_API":                "false",
				"FEED_WORKERS":            "0",
				"FEED_LEASE":              "5s",
				"FEED_POLL_INTERVAL":      "250ms",
				"FEED_TASK_SIZE":          "77",
				"FEED_BATCH_SIZE":         "33",
				"FEED_WORKER_CONCURRENCY": "2",
				"FEED_SOFT_STOP":          "1m",
				"FEED_NODE_ID":            "17",
				"FEED_LOG_FORMAT":         "json",
				"FEED_LOG_LEVEL":          "debug",
				"FEED_CLOCK_SKEW":         "3s",
				"FEED_INBOX_SLACK":        "35",
				"FEED_PARTIAL_READS":      "false",
				"FEED_SOURCE_TIMEOUT":     "250ms",
				"FEED_JWKS_FILE":          "/etc/feed/jwks.json",
				"FEED_RATE_LIMIT":         "2.5",
				"FEED_RATE_LIMIT_SERVICE": "true",
				"FEED_TRUSTED_PROXIES":    "10.0.0.0/8, 192.168.1.7",
				"FEED_MAX_STREAMS":        "500",
			},
			check: func(t *testing.T, c Config) {
				s := c.Service
				if c.API || c.Workers || s.Lease != 5*time.Second || s.PollInterval != 250*time.Millisecond ||
					s.TaskSize != 77 || s.BatchSize != 33 || s.Workers != 2 || c.SoftStop != time.Minute ||
					s.NodeID != 17 || c.LogFormat != "json" || c.LogLevel != "debug" || s.ClockSkew != 3*time.Second ||
					s.InboxSlack != 35 || s.PartialReads || s.SourceTimeout != 250*time.Millisecond ||
					c.JWKSFile != "/etc/feed/jwks.json" || c.RateLimit != 2.5 || !c.RateLimitService ||
					c.TrustedProxies.String() != "10.0.0.0/8,192.168.1.7/32" || s.MaxStreams != 500 {
					t.Errorf("environment not applied: %+v", c)
				}
			},
		},
		{
			name: "flag wins over environment",
			env: map[string]string{
				"FEED_MYSQL_DSN":    "env@tcp(env:3306)/env",
				"FEED_INBOX_LIMIT":  "50",
				"FEED_AUTO_MIGRATE": "false",
				"FEED_HTTP_ADDR":    ":1111",
				"FEED_API_TOKEN":    "from-env",
			},
			args: []string{"--mysql-dsn", dsn, "--inbox-limit=70", "--auto-migrate=true", "-http-addr", ":2222", "--api-token", "from-flag"},
			check: func(t *testing.T, c Config) {
				if c.MySQLDSN != dsn || c.Service.InboxLimit != 70 || !c.AutoMigrate || c.HTTPAddr != ":2222" || c.APIToken != "from-flag" {
					t.Errorf("flags did not win: %+v", c)
				}
			},
		},
		{
			name: "sharding alone is enough",
			env:  map[string]string{"FEED_SHARDING": "sharding.yaml"},
			check: func(t *testing.T, c Config) {
				if c.Sharding != "sharding.yaml" || c.MySQLDSN != "" {
					t.Errorf("config = %+v", c)
				}
			},
		},
		{name: "no dsn and no sharding", wantErr: "FEED_MYSQL_DSN"},
		{name: "empty dsn variable", env: map[string]string{"FEED_MYSQL_DSN": ""}, wantErr: "FEED_MYSQL_DSN"},
		{name: "bad int in env", env: map[string]string{"FEED_MYSQL_DSN": dsn, "FEED_INBOX_LIMIT": "many"}, wantErr: "FEED_INBOX_LIMIT"},
		{name: "bad bool in env", env: map[string]string{"FEED_MYSQL_DSN": dsn, "FEED_AUTO_MIGRATE": "maybe"}, wantErr: "FEED_AUTO_MIGRATE"},
		{name: "bad duration in env", env: map[string]string{"FEED_MYSQL_DSN": dsn, "FEED_LEASE": "30"}, wantErr: "FEED_LEASE"},
		{name: "bad trusted proxy in env", env: map[string]string{"FEED_MYSQL_DSN": dsn, "FEED_TRUSTED_PROXIES": "10.0.0.0/8,proxy"}, wantErr: "FEED_TRUSTED_PROXIES"},
		{name: "bad trusted proxy flag", args: []string{"--mysql-dsn", dsn, "--trusted-proxies", "10.0.0.0/40"}, wantErr: "trusted"},
		{name: "negative threshold in env", env: map[string]string{"FEED_MYSQL_DSN": dsn, "FEED_PUSH_THRESHOLD": "-1"}, wantErr: "push threshold"},
		{name: "bad int flag", args: []string{"--mysql-dsn", dsn, "--inbox-limit", "x"}, wantErr: "inbox-limit"},
		{name: "unknown flag", args: []string{"--mysql-dsn", dsn, "--no-such-flag"}, wantErr: "no-such-flag"},
		{name: "stray argument", args: []string{"--mysql-dsn", dsn, "extra"}, wantErr: "unexpected arguments"},
		{name: "inbox limit zero", args: []string{"--mysql-dsn", dsn, "--inbox-limit=0"}, wantErr: "inbox limit"},
		{name: "lease too short", args: []string{"--mysql-dsn", dsn, "--lease=10ms"}, wantErr: "lease"},
		{name: "node id too big", args: []string{"--mysql-dsn", dsn, "--node-id=9000"}, wantErr: "node id"},
		{name: "no workers", args: []string{"--mysql-dsn", dsn, "--worker-concurrency=0"}, wantErr: "workers"},
		{name: "zero poll interval", args: []string{"--mysql-dsn", dsn, "--poll-interval=0s"}, wantErr: "poll interval"},
		{name: "zero batch", args: []string{"--mysql-dsn", dsn, "--batch-size=0"}, wantErr: "batch size"},
		{name: "zero source timeout", args: []string{"--mysql-dsn", dsn, "--source-timeout=0s"}, wantErr: "source timeout"},
		{name: "negative rate limit", args: []string{"--mysql-dsn", dsn, "--rate-limit=-1"}, wantErr: "rate limit"},
		{name: "rate limit NaN", env: map[string]string{"FEED_MYSQL_DSN": dsn, "FEED_RATE_LIMIT": "NaN"}, wantErr: "rate limit"},
		{name: "rate limit infinite", args: []string{"--mysql-dsn", dsn, "--rate-limit=+Inf"}, wantErr: "rate limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearFeedEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c := DefaultConfig()
			err := c.parse("feedd serve", tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parse error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseFlags(t *testing.T) {
	clearFeedEnv(t)
	for _, args := range [][]string{nil, {}, {"bogus"}, {"--mysql-dsn", "x@tcp(h)/d"}, {"serve", "-h"}, {"migrate", "--help"}, {"token", "-h"}} {
		var stderr strings.Builder
		m := NewMain()
		m.Stderr = &stderr
		if err := m.ParseFlags(args); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("ParseFlags(%q) = %v, want flag.ErrHelp", args, err)
		}
		if !strings.Contains(stderr.String(), "usage") && !strings.Contains(stderr.String(), "Usage") {
			t.Errorf("ParseFlags(%q) printed no usage: %q", args, stderr.String())
		}
	}

	m := NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags([]string{"serve", "--mysql-dsn", "x@tcp(h)/d", "--api=false", "--workers=false"}); err == nil ||
		!strings.Contains(err.Error(), "nothing to run") {
		t.Errorf("serve with neither API nor workers: %v, want an error", err)
	}
	m = NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags([]string{"migrate", "--mysql-dsn", "x@tcp(h)/d", "--api=false", "--workers=false"}); err != nil {
		t.Errorf("migrate ignores --api and --workers: %v", err)
	}

	for _, cmd := range []string{"serve", "migrate"} {
		m := NewMain()
		m.Stderr = io.Discard
		if err := m.ParseFlags([]string{cmd, "--mysql-dsn", "x@tcp(h)/d", "--log-format", "json"}); err != nil {
			t.Fatalf("ParseFlags(%s): %v", cmd, err)
		}
		if m.Command != cmd || m.Log == nil || m.Config.MySQLDSN != "x@tcp(h)/d" {
			t.Errorf("ParseFlags(%s): command %q, config %+v", cmd, m.Command, m.Config)
		}
	}
}

func TestSettingsRedactSecrets(t *testing.T) {
	c := DefaultConfig()
	c.MySQLDSN = "feed:hunter2@tcp(db:3306)/feed"
	c.APIToken = "tok-s3cret"
	c.Sharding = "/etc/sharding.yaml"
	c.Service.InboxLimit = 42
	kv := c.settings()
	if len(kv)%2 != 0 {
		t.Fatalf("settings is not name/value pairs: %v", kv)
	}
	got := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		name, ok := kv[i].(string)
		if !ok {
			t.Fatalf("setting name %v is not a string", kv[i])
		}
		got[name] = fmt.Sprint(kv[i+1])
	}
	for name, want := range map[string]string{
		"mysql_dsn":   "<redacted>",
		"api_token":   "<redacted>",
		"sharding":    "/etc/sharding.yaml",
		"inbox_limit": "42",
		"http_addr":   ":8080",
		"lease":       service.LeaseDefault.String(),
	} {
		if got[name] != want {
			t.Errorf("setting %s = %q, want %q", name, got[name], want)
		}
	}
	all := fmt.Sprint(kv...)
	for _, secret := range []string{"hunter2", "tok-s3cret", "feed:"} {
		if strings.Contains(all, secret) {
			t.Errorf("settings leak %q: %s", secret, all)
		}
	}
	// Every flag is listed, so the start-up log shows the whole configuration.
	n := 0
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.register(fs)
	fs.VisitAll(func(*flag.Flag) { n++ })
	if len(got) != n {
		t.Errorf("settings lists %d settings, there are %d flags", len(got), n)
	}
	// An unset secret shows as empty, so operators can tell it is unset.
	c.APIToken = ""
	for i, v := range c.settings() {
		if v == "api_token" {
			if s := c.settings()[i+1]; s != "" {
				t.Errorf("empty api_token shows as %q", s)
			}
		}
	}
}

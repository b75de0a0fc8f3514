package service_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		change  func(*service.Config)
		wantErr string // "" means valid
	}{
		{name: "defaults", change: func(*service.Config) {}},
		{name: "inbox limit 1", change: func(c *service.Config) { c.InboxLimit = 1 }},
		{name: "inbox limit 0", change: func(c *service.Config) { c.InboxLimit = 0 }, wantErr: "inbox limit"},
		{name: "inbox limit negative", change: func(c *service.Config) { c.InboxLimit = -5 }, wantErr: "inbox limit"},
		{name: "inbox slack 1", change: func(c *service.Config) { c.InboxSlack = 1 }},
		{name: "inbox slack 100", change: func(c *service.Config) { c.InboxSlack = 100 }},
		{name: "inbox slack 0", change: func(c *service.Config) { c.InboxSlack = 0 }, wantErr: "inbox slack"},
		{name: "inbox slack above 100", change: func(c *service.Config) { c.InboxSlack = 101 }, wantErr: "inbox slack"},
		{name: "push threshold 0 (everyone pull)", change: func(c *service.Config) { c.PushThreshold = 0 }},
		{name: "push threshold negative", change: func(c *service.Config) { c.PushThreshold = -1 }, wantErr: "push threshold"},
		{name: "active days 0 (pure pull)", change: func(c *service.Config) { c.ActiveDays = 0 }},
		{name: "active days 100 years", change: func(c *service.Config) { c.ActiveDays = 36500 }},
		{name: "active days negative", change: func(c *service.Config) { c.ActiveDays = -1 }, wantErr: "active days"},
		{name: "active days overflowing the window", change: func(c *service.Config) { c.ActiveDays = 200_000 }, wantErr: "active days"},
		{name: "max following 1", change: func(c *service.Config) { c.MaxFollowing = 1 }},
		{name: "max following 0", change: func(c *service.Config) { c.MaxFollowing = 0 }, wantErr: "max following"},
		{name: "task size 1", change: func(c *service.Config) { c.TaskSize = 1 }},
		{name: "task size 0", change: func(c *service.Config) { c.TaskSize = 0 }, wantErr: "task size"},
		{name: "batch size 0", change: func(c *service.Config) { c.BatchSize = 0 }, wantErr: "batch size"},
		{name: "batch size above task size", change: func(c *service.Config) { c.TaskSize, c.BatchSize = 10, 1000 }},
		{name: "workers 1", change: func(c *service.Config) { c.Workers = 1 }},
		{name: "workers 0", change: func(c *service.Config) { c.Workers = 0 }, wantErr: "workers"},
		{name: "lease 100ms", change: func(c *service.Config) { c.Lease = 100 * time.Millisecond }},
		{name: "lease 99ms", change: func(c *service.Config) { c.Lease = 99 * time.Millisecond }, wantErr: "lease"},
		{name: "lease 0", change: func(c *service.Config) { c.Lease = 0 }, wantErr: "lease"},
		{name: "poll interval 1ns", change: func(c *service.Config) { c.PollInterval = 1 }},
		{name: "poll interval 0", change: func(c *service.Config) { c.PollInterval = 0 }, wantErr: "poll interval"},
		{name: "poll interval negative", change: func(c *service.Config) { c.PollInterval = -time.Second }, wantErr: "poll interval"},
		{name: "clock skew 0", change: func(c *service.Config) { c.ClockSkew = 0 }},
		{name: "clock skew negative", change: func(c *service.Config) { c.ClockSkew = -time.Millisecond }, wantErr: "clock skew"},
		{name: "pull cache off", change: func(c *service.Config) { c.PullCacheTTL = 0 }},
		{name: "pull cache 2s", change: func(c *service.Config) { c.PullCacheTTL = 2 * time.Second }},
		{name: "pull cache beyond the delete deadline", change: func(c *service.Config) { c.PullCacheTTL = 3 * time.Second }, wantErr: "pull cache ttl"},
		{name: "pull cache negative", change: func(c *service.Config) { c.PullCacheTTL = -time.Second }, wantErr: "pull cache ttl"},
		{name: "one stream a user, one a process", change: func(c *service.Config) { c.MaxStreamsPerUser, c.MaxStreams = 1, 1 }},
		{name: "no streams a user", change: func(c *service.Config) { c.MaxStreamsPerUser = 0 }, wantErr: "max streams"},
		{name: "fewer streams a process than a user", change: func(c *service.Config) { c.MaxStreamsPerUser, c.MaxStreams = 16, 15 }, wantErr: "max streams"},
		{name: "node id random", change: func(c *service.Config) { c.NodeID = -1 }},
		{name: "node id 0", change: func(c *service.Config) { c.NodeID = 0 }},
		{name: "node id 8191", change: func(c *service.Config) { c.NodeID = 8191 }},
		{name: "node id 8192", change: func(c *service.Config) { c.NodeID = 8192 }, wantErr: "node id"},
		{name: "node id -2", change: func(c *service.Config) { c.NodeID = -2 }, wantErr: "node id"},
		{name: "source timeout 1ns", change: func(c *service.Config) { c.SourceTimeout = 1 }},
		{name: "source timeout 0", change: func(c *service.Config) { c.SourceTimeout = 0 }, wantErr: "source timeout"},
		{name: "source timeout negative", change: func(c *service.Config) { c.SourceTimeout = -time.Second }, wantErr: "source timeout"},
		{name: "partial reads off", change: func(c *service.Config) { c.PartialReads = false }},
		{name: "zero config", change: func(c *service.Config) { *c = service.Config{} }, wantErr: "inbox limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := service.DefaultConfig()
			tt.change(&cfg)
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error about %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %v, want an error about %q", err, tt.wantErr)
			}
		})
	}
}

// TestConfigDefaults pins the contract's defaults.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := service.DefaultConfig()
	if c.InboxLimit != 300 || c.PushThreshold != 10000 || c.ActiveDays != 7 || c.MaxFollowing != 2000 {
		t.Fatalf("defaults %+v differ from the contract (300, 10000, 7, 2000)", c)
	}
	if c.NodeID != -1 {
		t.Fatalf("default node id %d, want -1 (random)", c.NodeID)
	}
	if !c.PartialReads || c.SourceTimeout != 500*time.Millisecond {
		t.Fatalf("partial reads %v, source timeout %s; want on and 500ms", c.PartialReads, c.SourceTimeout)
	}
}

// TestTrimEvery checks the mean check interval the slack gives: a whole
// number of pushes, at least one.
func TestTrimEvery(t *testing.T) {
	t.Parallel()
	tests := []struct{ limit, slack, want int }{
		{300, 20, 60},
		{300, 10, 30},
		{300, 100, 300},
		{50, 10, 5},
		{7, 10, 1}, // rounds down to zero: every push checks
		{1, 1, 1},
	}
	for _, tc := range tests {
		c := service.DefaultConfig()
		c.InboxLimit, c.InboxSlack = tc.limit, tc.slack
		if got := c.TrimEvery(); got != tc.want {
			t.Errorf("limit %d slack %d%%: TrimEvery %d, want %d", tc.limit, tc.slack, got, tc.want)
		}
	}
}

// TestNewRejectsInvalidConfig checks that a Service never runs on settings
// Validate rejects.
func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	cfg := service.DefaultConfig()
	cfg.InboxLimit = 0
	if _, err := service.New(nil, cfg, nil, nil, time.Now); err == nil {
		t.Fatal("New accepted inbox limit 0")
	}
}

// TestNewRejectsWorkersAbovePool: with several shards a fan-out batch holds
// a connection of one shard while it takes one of another, so as many
// workers as connections could deadlock the pools.
func TestNewRejectsWorkersAbovePool(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		shards, conns, workers int
		ok                     bool
	}{
		{shards: 2, conns: 8, workers: 7, ok: true},
		{shards: 2, conns: 8, workers: 8},
		{shards: 2, conns: 4, workers: service.WorkersDefault},
		{shards: 1, conns: 4, workers: 16, ok: true}, // no batch spans shards
	} {
		t.Run(fmt.Sprintf("%d shards, %d conns, %d workers", tt.shards, tt.conns, tt.workers), func(t *testing.T) {
			t.Parallel()
			st, err := store.Open(storetest.NewShardMap(t, storetest.Options{Shards: tt.shards, MaxOpenConns: tt.conns}))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			cfg := service.DefaultConfig()
			cfg.Workers = tt.workers
			_, err = service.New(st, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), service.NewMetrics(prometheus.NewRegistry()), time.Now)
			if ok := err == nil; ok != tt.ok {
				t.Fatalf("New: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

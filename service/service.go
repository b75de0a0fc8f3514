package service

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Service applies the feed's rules on top of the store.
type Service struct {
	store   *store.Store
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	ids     *idGen
	now     func() time.Time
	// wake nudges the idle loops of this process that a write gave work.
	wake *wakeups
	// handoff passes the follow events of this process's follows to its
	// own follow loops.
	handoff *followHandoff
	// cache holds pull authors' newest posts; nil when PullCacheTTL is 0.
	// draining is set once the process is stopping (Drain).
	draining atomic.Bool
	// targets bounds the fan-out batches writing to each database.
	targets *targetGate
	// streams are the open feed streams and their watchers.
	streams *streams
	// activity samples fan-out for the console's charts; reshards holds
	// the console's view of a reshard under way.
	activity *activity
	reshards *reshards
}

// New returns a Service. now is the clock (time.Now outside tests).
func New(st *store.Store, cfg Config, log *slog.Logger, m *Metrics, now func() time.Time) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkPools(st, cfg.Workers); err != nil {
		return nil, err
	}
	s := &Service{store: st, cfg: cfg, log: log, metrics: m, ids: newIDGen(cfg.NodeID, now), now: now, wake: newWakeups(), handoff: newFollowHandoff(),
		targets: newTargetGate(cfg.Workers), activity: &activity{}, reshards: &reshards{}}
	s.streams = newStreams(s)
	m.watchPools(st)
	if cfg.PullCacheTTL > 0 {
		st.CacheOutboxes(cfg.PullCacheTTL, now)
	}
	st.CacheHeads(cfg.ClockSkew, now)
	return s, nil
}

// checkPools rejects more fan-out workers per shard than a shard's pool
// has connections. A fan-out batch holds a connection of its author's shard
// while it takes one of each other shard it writes to, so with every
// connection of two shards held by batches waiting for the other's, all
// workers (and every request on those shards) would wait forever. With
// fewer workers than connections a batch waiting for a connection never
// holds the last one. One shard needs no second connection.
func checkPools(st *store.Store, workers int) error {
	shards := st.Shards()
	if len(shards) < 2 {
		return nil
	}
	for _, sh := range shards {
		if n := sh.DB.Stats().MaxOpenConnections; n > 0 && workers >= n {
			return fmt.Errorf("workers (%d) must be fewer than the workers' connections of database %s (connections.workers %d)",
				workers, sh.Name, n)
		}
	}
	return nil
}

// Config returns the service's settings.
func (s *Service) Config() Config { return s.cfg }

// checkPage rejects a page size outside 1..MaxPageLimit; the HTTP layer
// checks it too, but the service is callable without it.
func checkPage(page feed.Page) error {
	if page.Limit < 1 || page.Limit > feed.MaxPageLimit {
		return feed.Errorf(feed.EINVALID, "limit must be an integer in 1..%d", feed.MaxPageLimit)
	}
	return nil
}

// pageOf cuts a list fetched with limit+1 rows to limit and returns the
// cursor of its last item, or "" when nothing follows.
func pageOf[T any](items []T, limit int, cursor func(T) string) ([]T, string, error) {
	if len(items) <= limit {
		return items, "", nil
	}
	return items[:limit], cursor(items[limit-1]), nil
}

// pageByID serves a page of a list in id order: list reads up to
// page.Limit+1 items whose id (key) is above after, and the cursor of the
// page is the id of its last item.
func pageByID[T any](kind byte, page feed.Page, list func(after uint64) ([]T, error), key func(T) uint64) ([]T, string, error) {
	if err := checkPage(page); err != nil {
		return nil, "", err
	}
	after, err := decodeCursor(kind, page.Cursor, feed.Key{})
	if err != nil {
		return nil, "", err
	}
	items, err := list(after.ContentID)
	if err != nil {
		return nil, "", err
	}
	return pageOf(items, page.Limit, func(it T) string {
		return encodeCursor(kind, feed.Key{ContentID: key(it)})
	})
}

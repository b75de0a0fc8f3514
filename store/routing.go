package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/sqlconn"
)

// routing is the layout a Store routes by: the epoch in force and the
// database of each virtual shard. feedd reshard replaces it while the
// service runs: each database records the epochs it has seen (shard_map),
// probes read the highest, and Refresh swaps the routing.
type routing struct {
	epoch int64
	owner []*Shard // indexed by virtual shard
}

// route returns the routing in force.
func (s *Store) route() *routing { return s.routes.Load() }

// Epoch is the layout epoch the store routes by (0 before CheckLayout).
func (s *Store) Epoch() int64 { return s.route().epoch }

// setRoute routes by layout from now on, unless a newer epoch is in force
// already.
func (s *Store) setRoute(epoch int64, names []string) error {
	owner := make([]*Shard, len(names))
	for v, name := range names {
		if owner[v] = s.byName[name]; owner[v] == nil {
			return fmt.Errorf("sharding: the layout in force (epoch %d) places virtual shard %d on database %s, which this process's map lacks: "+
				"list every database of the layout in force in sharding.yaml (docs/SHARDING.md)", epoch, v, name)
		}
	}
	next := &routing{epoch: epoch, owner: owner}
	for {
		cur := s.routes.Load()
		if cur.epoch > epoch || s.routes.CompareAndSwap(cur, next) {
			return nil
		}
	}
}

// Refresh reads the highest layout epoch recorded on any database and, if
// it is newer than the one the store routes by, routes by its layout from
// then on. It reports whether the routing changed. An unreachable database
// is skipped: the epoch is recorded on every database a cut-over touches,
// the database that gave up virtual shards first.
func (s *Store) Refresh(ctx context.Context) (bool, error) {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	cur := s.Epoch()
	var epoch int64
	var layout string
	var errs []error
	for _, sh := range s.shards {
		e, l, err := ReadLayout(ctx, sh.pools[Reads])
		if err != nil {
			errs = append(errs, fmt.Errorf("database %s: %w", sh.Name, err))
			continue
		}
		if e > epoch {
			epoch, layout = e, l
		}
	}
	if epoch <= cur {
		return false, errors.Join(errs...)
	}
	names, err := shardmap.ParseLayout(layout)
	if err != nil {
		return false, fmt.Errorf("store: the layout in force (epoch %d): %w", epoch, err)
	}
	if len(names) != len(s.route().owner) {
		return false, fmt.Errorf("store: the layout in force (epoch %d) has %d virtual shards, this process %d", epoch, len(names), len(s.route().owner))
	}
	if err := s.setRoute(epoch, names); err != nil {
		return false, err
	}
	return true, nil
}

// epochSeen is told by probes and by refused writes that a database
// records an epoch; a newer one than the routing's wakes the refresher.
func (s *Store) epochSeen(epoch int64) {
	if epoch > s.Epoch() {
		s.wake()
	}
}

// wake asks the refresher to Refresh.
func (s *Store) wake() {
	select {
	case s.stale <- struct{}{}:
	default:
	}
}

// Stale returns a channel that receives when a database records a newer
// layout epoch than the store routes by, or refused a write as stale: the
// caller should Refresh.
func (s *Store) Stale() <-chan struct{} { return s.stale }

// FencedMessage is what the triggers feedd reshard installs on a database
// that gives up virtual shards answer a write from a connection of an
// older layout epoch with (SIGNAL, error 1644).
const FencedMessage = "feed: layout moved"

const errSignal = 1644

// fenced says whether err is a write refused by a layout fence.
func fenced(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errSignal && strings.Contains(me.Message, FencedMessage)
}

// errFenced is what a fenced write returns: the service answers 503 and
// the client's retry runs on the new layout.
var errFenced = feed.Errorf(feed.EUNAVAILABLE, "the data moved to another database; retry")

// pin records in ctx the epoch the store routes by now, before a write
// method chooses its databases: its connections then write under that
// epoch (sqlconn.WithEpoch), never a newer one. A database chosen by a layout the
// process left a moment later is then fenced as stale, as it should be,
// however long the write waits for a connection; one chosen by the newer
// layout at worst gets a write refused and retried.
func (s *Store) pin(ctx context.Context) context.Context {
	if _, ok := sqlconn.EpochOf(ctx); ok {
		return ctx // pinned by the caller's caller
	}
	return sqlconn.WithEpoch(ctx, s.Epoch())
}

// pinned is the epoch pin recorded in ctx, or the store's.
func (s *Store) pinned(ctx context.Context) int64 {
	if e, ok := sqlconn.EpochOf(ctx); ok {
		return e
	}
	return s.Epoch()
}

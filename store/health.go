package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"
)

// Database states, as readiness reports them.
const (
	StateUnknown  = "unknown"  // not probed yet
	StateUp       = "up"       // read and wrote within the probe's deadline, schema current
	StateDown     = "down"     // unreachable, or a read or a write did not complete in time
	StateOutdated = "outdated" // reachable, but the schema lacks migrations
)

// Health is a database's state as its last probes found it.
type Health struct {
	State string
	// Unreadable says the probe's read failed, not only its write: the
	// database answers nothing, where one under a backup's lock still
	// serves reads. Reads skip an unreadable database (PullPosts).
	Unreadable bool
	Err        error     // why it is not up
	Since      time.Time // when it entered the state
}

// Unreachable says the last probe found the database down or behind the
// schema: work for it waits. Before the first probe it is not.
func (h Health) Unreachable() bool { return h.State == StateDown || h.State == StateOutdated }

// downAfter is how many probes in a row must fail before a database that
// was up is reported down: one probe slowed past its deadline by a busy
// host would otherwise take the database out of reads, fan-out and
// readiness for a probe interval.
const downAfter = 2

// shardHealth holds a shard's last probe result; probes run in the
// background so that readiness answers at once whatever the database does.
type shardHealth struct {
	mu      sync.Mutex
	h       Health
	fails   int // failed probes in a row
	reshard ReshardState
}

// set records a probe's result; Since is kept while the state stays.
func (h *shardHealth) set(next Health) (prev, cur Health) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev = h.h
	if next.State != StateDown {
		h.fails = 0
	} else if h.fails++; prev.State == StateUp && h.fails < downAfter {
		return prev, prev
	}
	next.Since = prev.Since
	if prev.State != next.State {
		next.Since = time.Now()
	}
	h.h = next
	return prev, h.h
}

// Health returns the shard's state as last probed.
func (sh *Shard) Health() Health {
	sh.health.mu.Lock()
	defer sh.health.mu.Unlock()
	return sh.health.h
}

// probeWriteSQL proves the database takes writes: a backup's FLUSH TABLES
// WITH READ LOCK or a read-only replica makes it wait or fail.
// The time is the server's, so that feedd reshard can tell from the same
// clock whether a process still probes.
const probeWriteSQL = `INSERT INTO health (id, probed_at) VALUES (0, ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000))
ON DUPLICATE KEY UPDATE probed_at = VALUES(probed_at)`

// Probe reads and writes the shard within timeout, records its state and
// returns the state before and after. It reads through the pool of API
// reads and writes through that of API writes, so each tells what those
// requests meet: under a backup's lock the writes wait and fill their pool,
// while the reads still answer.
func (sh *Shard) Probe(ctx context.Context, timeout time.Duration) (prev, cur Health) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending, err := hasPendingMigrations(ctx, sh.pools[Reads].DB)
	switch {
	case err != nil:
		return sh.health.set(Health{State: StateDown, Unreadable: true, Err: wrap("probe read", err)})
	case pending:
		return sh.health.set(Health{State: StateOutdated})
	}
	if _, err := sh.pools[Writes].ExecContext(ctx, probeWriteSQL); err != nil {
		return sh.health.set(Health{State: StateDown, Err: wrap("probe write", err)})
	}
	// A cut-over of feedd reshard records the next layout epoch here.
	if epoch, _, err := ReadLayout(ctx, sh.pools[Reads]); err == nil && sh.epochSeen != nil {
		sh.epochSeen(epoch)
	}
	sh.readReshard(ctx)
	return sh.health.set(Health{State: StateUp})
}

// ReshardState is what a database records of a reshard under way, as the
// last probe read it.
type ReshardState struct {
	Phase   string // "" when none, or when the database gives nothing up
	Copied  int64  // rows copied so far by the database's current step
	Backlog int64  // captured writes not applied yet, at most (the log's seq span)
}

// reshardStateSQL reads the mark and the change log's span, two index
// ends: a COUNT(*) would read the whole log every probe.
const reshardStateSQL = `SELECT phase, copied,
 (SELECT COALESCE(MAX(seq) - MIN(seq) + 1, 0) FROM reshard_changes) FROM reshard WHERE id = 0`

func (sh *Shard) readReshard(ctx context.Context) {
	var st ReshardState
	err := sh.pools[Reads].QueryRowContext(ctx, reshardStateSQL).Scan(&st.Phase, &st.Copied, &st.Backlog)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return // keep the last state
	}
	sh.health.mu.Lock()
	sh.health.reshard = st
	sh.health.mu.Unlock()
}

// Reshard returns the reshard state the last probe read.
func (sh *Shard) Reshard() ReshardState {
	sh.health.mu.Lock()
	defer sh.health.mu.Unlock()
	return sh.health.reshard
}

// HealthChange is called with a shard whose state a probe changed.
type HealthChange func(sh *Shard, prev, cur Health)

// CheckHealth probes every shard at once, each within timeout.
func (s *Store) CheckHealth(ctx context.Context, timeout time.Duration, changed HealthChange) {
	var wg sync.WaitGroup
	for _, sh := range s.shards {
		wg.Go(func() { sh.probeOnce(ctx, timeout, changed) })
	}
	wg.Wait()
}

// WatchHealth probes every shard every interval, each on its own so that a
// hung database delays no other's probe, until ctx ends.
func (s *Store) WatchHealth(ctx context.Context, interval, timeout time.Duration, changed HealthChange) {
	var wg sync.WaitGroup
	for _, sh := range s.shards {
		wg.Go(func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					sh.probeOnce(ctx, timeout, changed)
				}
			}
		})
	}
	wg.Wait()
}

func (sh *Shard) probeOnce(ctx context.Context, timeout time.Duration, changed HealthChange) {
	prev, cur := sh.Probe(ctx, timeout)
	if ctx.Err() == nil && prev.State != cur.State && changed != nil {
		changed(sh, prev, cur)
	}
}

package service

import (
	"context"
	"time"

	"github.com/feedhq/feed/store"
)

// Readiness is what the instance can serve: ready while at least one
// database is up, so that a load balancer keeps an instance that still
// serves most users, and not once it drains; Databases names each
// database's state.
type Readiness struct {
	Ready     bool
	Draining  bool
	Databases map[string]string
}

// Readiness reports the databases' states as the background probes last
// found them; it does no I/O, so it answers at once whatever they do.
func (s *Service) Readiness() Readiness {
	r := Readiness{Databases: map[string]string{}, Draining: s.draining.Load()}
	for _, sh := range s.store.Shards() {
		h := sh.Health()
		r.Databases[sh.Name] = h.State
		r.Ready = r.Ready || h.State == store.StateUp
	}
	r.Ready = r.Ready && !r.Draining
	return r
}

// Drain makes the instance report itself not ready, so that load balancers
// stop sending it requests while it still serves them.
func (s *Service) Drain() { s.draining.Store(true) }

// CheckHealth probes every database once, within the probe timeout.
func (s *Service) CheckHealth(ctx context.Context) {
	s.store.CheckHealth(ctx, s.cfg.ProbeTimeout, s.healthChanged)
}

// WatchHealth probes every database each probe interval, and watches the
// pools for waits and samples fan-out activity, until ctx ends.
func (s *Service) WatchHealth(ctx context.Context) {
	go s.watchPools(ctx)
	go s.sampleActivity(ctx)
	go s.followLayout(ctx)
	s.store.WatchHealth(ctx, s.cfg.ProbeInterval, s.cfg.ProbeTimeout, s.healthChanged)
}

// followLayout routes by each layout feedd reshard cuts over to, as soon as
// a probe reads its epoch or a database refuses a write as stale, so a
// running process needs no restart.
func (s *Service) followLayout(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.store.Stale():
		}
		rctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
		changed, err := s.store.Refresh(rctx)
		cancel()
		switch {
		case changed:
			s.log.Info("routing by a new layout", "epoch", s.store.Epoch(), "layout", s.store.Layout())
		case err != nil && ctx.Err() == nil:
			s.log.Warn("reading the layout in force", "err", err)
		}
	}
}

// watchPools logs once when a class's pool of a database starts making
// statements wait for a connection (its budget is used up: writes stalled
// on a lock, workers on a slow database) and once when the waits stop.
func (s *Service) watchPools(ctx context.Context) {
	type key struct {
		db    string
		class store.Class
	}
	last := map[key]int64{}
	for _, sh := range s.store.Shards() {
		for _, c := range store.Classes() {
			last[key{sh.Name, c}] = sh.Pool(c).Stats().WaitCount
		}
	}
	waiting := map[key]bool{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, sh := range s.store.Shards() {
			for _, c := range store.Classes() {
				k, st := key{sh.Name, c}, sh.Pool(c).Stats()
				grew := st.WaitCount > last[k]
				last[k] = st.WaitCount
				switch {
				case grew && !waiting[k]:
					waiting[k] = true
					s.log.Warn("pool: statements wait for connections", "database", sh.Name, "class", c.String(),
						"in_use", st.InUse, "max_open", st.MaxOpenConnections)
				case !grew && waiting[k]:
					waiting[k] = false
					s.log.Info("pool: no more waits for connections", "database", sh.Name, "class", c.String())
				}
			}
		}
	}
}

// healthChanged logs a database's transitions, once each: requests and
// workers failing on a down database do not log its outage again.
func (s *Service) healthChanged(sh *store.Shard, prev, cur store.Health) {
	up := 0.0
	if cur.State == store.StateUp {
		up = 1
	}
	s.metrics.shardUp.WithLabelValues(sh.Name).Set(up)
	switch {
	case cur.State == store.StateUp && prev.State == store.StateUnknown:
		s.log.Info("health: database up", "database", sh.Name)
	case cur.State == store.StateUp:
		s.log.Info("health: database up again", "database", sh.Name, "was", prev.State, "for", cur.Since.Sub(prev.Since).Round(time.Millisecond).String())
	default:
		s.log.Error("health: database not up", "database", sh.Name, "state", cur.State, "error", cur.Err)
	}
}

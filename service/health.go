package service

import (
	"context"
	"time"

	"github.com/feedhq/feed/store"
)

// Readiness is what the instance can serve: ready while at least one
// database is up, so that a load balancer keeps an instance that still
// serves most users; Databases names each database's state.
type Readiness struct {
	Ready     bool
	Databases map[string]string
}

// Readiness reports the databases' states as the background probes last
// found them; it does no I/O, so it answers at once whatever they do.
func (s *Service) Readiness() Readiness {
	r := Readiness{Databases: map[string]string{}}
	for _, sh := range s.store.Shards() {
		h := sh.Health()
		r.Databases[sh.Name] = h.State
		r.Ready = r.Ready || h.State == store.StateUp
	}
	return r
}

// CheckHealth probes every database once, within the probe timeout.
func (s *Service) CheckHealth(ctx context.Context) {
	s.store.CheckHealth(ctx, s.cfg.ProbeTimeout, s.healthChanged)
}

// WatchHealth probes every database each probe interval until ctx ends.
func (s *Service) WatchHealth(ctx context.Context) {
	s.store.WatchHealth(ctx, s.cfg.ProbeInterval, s.cfg.ProbeTimeout, s.healthChanged)
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

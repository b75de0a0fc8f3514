package service

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Activity sampling: the console charts the last hour of this process's
// fan-out from a ring of samples kept in memory, so it needs no metrics
// server and costs a few numbers per interval.
const (
	ActivityEvery  = 10 * time.Second
	activityWindow = time.Hour
)

// Sample is what this process's workers did in one sampling interval.
type Sample struct {
	At time.Time
	// RowsPerSec is the inbox rows fan-out wrote (pushed or retracted)
	// per second.
	RowsPerSec float64
	// Delivered counts the deliveries this process's workers completed;
	// LatencyMean and LatencyMax are their times from publish to done,
	// when every follower's feed shows the post.
	Delivered               int
	LatencyMean, LatencyMax time.Duration
	// Copied is, by database giving virtual shards up in a reshard, the
	// rows its current step has copied, as the last probe read it.
	Copied map[string]int64
}

// activity accumulates the interval under way and keeps the last hour of
// samples, oldest first.
type activity struct {
	mu       sync.Mutex
	samples  []Sample
	rowsSeen float64 // the fan-out row counters at the last sample
	n        int
	sum, max time.Duration
}

// delivered records a delivery completed now, published at publishedAt
// (Unix ms): the time a follower waited for the post.
func (s *Service) delivered(publishedAt int64) {
	if publishedAt <= 0 {
		return
	}
	d := max(s.now().Sub(time.UnixMilli(publishedAt)), 0)
	s.metrics.deliverySeconds.Observe(d.Seconds())
	a := s.activity
	a.mu.Lock()
	a.n++
	a.sum += d
	a.max = max(a.max, d)
	a.mu.Unlock()
}

// sampleActivity closes an interval every ActivityEvery until ctx ends.
func (s *Service) sampleActivity(ctx context.Context) {
	t := time.NewTicker(ActivityEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.takeSample(now, now.Sub(last))
			last = now
		}
	}
}

// takeSample closes the interval under way, which lasted elapsed, with
// the rows each reshard step has copied as the probes last read them.
func (s *Service) takeSample(now time.Time, elapsed time.Duration) {
	copied := map[string]int64{}
	for _, sh := range s.store.Shards() {
		if r := sh.Reshard(); r.Phase != "" {
			copied[sh.Name] = r.Copied
		}
	}
	s.closeInterval(now, elapsed, copied)
}

// closeInterval appends the interval's sample and drops those older than
// the window.
func (s *Service) closeInterval(now time.Time, elapsed time.Duration, copied map[string]int64) {
	rows := counterValue(s.metrics.inboxRows.WithLabelValues("push")) + counterValue(s.metrics.inboxRows.WithLabelValues("retract"))
	a := s.activity
	a.mu.Lock()
	defer a.mu.Unlock()
	smp := Sample{At: now, RowsPerSec: (rows - a.rowsSeen) / max(elapsed.Seconds(), 1e-3), Delivered: a.n, LatencyMax: a.max, Copied: copied}
	if a.n > 0 {
		smp.LatencyMean = a.sum / time.Duration(a.n)
	}
	a.rowsSeen, a.n, a.sum, a.max = rows, 0, 0, 0
	a.samples = append(a.samples, smp)
	if keep := int(activityWindow / ActivityEvery); len(a.samples) > keep {
		a.samples = append(a.samples[:0], a.samples[len(a.samples)-keep:]...)
	}
}

// Activity returns the samples of the last hour, oldest first.
func (s *Service) Activity() []Sample {
	s.activity.mu.Lock()
	defer s.activity.mu.Unlock()
	return append([]Sample(nil), s.activity.samples...)
}

// counterValue reads a counter's value, as a scrape would.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

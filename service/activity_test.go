package service

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCopyRate takes the rate over the last minute of samples, from where
// the step's count last started over.
func TestCopyRate(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(1_000_000, 0).Add(time.Duration(s) * time.Second) }
	smp := func(s int, copied map[string]int64) Sample { return Sample{At: at(s), Copied: copied} }
	cases := []struct {
		name    string
		samples []Sample
		want    float64
	}{
		{"none", nil, 0},
		{"one sample", []Sample{smp(0, map[string]int64{"a": 100})}, 0},
		{"steady", []Sample{smp(0, map[string]int64{"a": 0}), smp(10, map[string]int64{"a": 500}), smp(20, map[string]int64{"a": 1000})}, 50},
		{"older than a minute left out", []Sample{smp(0, map[string]int64{"a": 0}), smp(50, map[string]int64{"a": 100}),
			smp(80, map[string]int64{"a": 400}), smp(110, map[string]int64{"a": 700})}, 10},
		{"count started over", []Sample{smp(0, map[string]int64{"a": 900}), smp(10, map[string]int64{"a": 100}), smp(20, map[string]int64{"a": 300})}, 20},
		{"step not under way before", []Sample{smp(0, nil), smp(10, map[string]int64{"a": 0}), smp(20, map[string]int64{"a": 400})}, 40},
	}
	for _, c := range cases {
		if got := copyRate(c.samples, "a"); got != c.want {
			t.Errorf("%s: rate %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTakeSample turns the counters and the deliveries of an interval into
// a sample and keeps an hour of them.
func TestTakeSample(t *testing.T) {
	t.Parallel()
	s := &Service{activity: &activity{}, metrics: NewMetrics(prometheus.NewRegistry()), now: time.Now}
	s.metrics.inboxRows.WithLabelValues("push").Add(300)
	s.activity.n, s.activity.sum, s.activity.max = 2, 3*time.Second, 2*time.Second
	s.closeInterval(time.Unix(10, 0), 10*time.Second, nil)
	got := s.Activity()
	if len(got) != 1 || got[0].RowsPerSec != 30 || got[0].Delivered != 2 || got[0].LatencyMean != 1500*time.Millisecond || got[0].LatencyMax != 2*time.Second {
		t.Fatalf("sample %+v", got)
	}
	for i := range int(activityWindow/ActivityEvery) + 5 {
		s.closeInterval(time.Unix(int64(20+i), 0), time.Second, nil)
	}
	if got := s.Activity(); len(got) != int(activityWindow/ActivityEvery) || got[len(got)-1].RowsPerSec != 0 {
		t.Fatalf("%d samples kept, last %+v", len(got), got[len(got)-1])
	}
}

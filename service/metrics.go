package service

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the service's Prometheus series. One set per process,
// registered on the registry cmd/feedd serves.
type Metrics struct {
	postsPublished  prometheus.Counter
	inboxRows       *prometheus.CounterVec
	batchSeconds    prometheus.Histogram
	deliveries      *prometheus.CounterVec
	followEvents    prometheus.Counter
	backfillRows    prometheus.Counter
	trimmedRows     prometheus.Counter
	workerErrors    *prometheus.CounterVec
	feedPullAuthors prometheus.Histogram
	feedQueries     prometheus.Histogram
}

// NewMetrics creates the series and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		postsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_posts_published_total", Help: "Posts stored by publish."}),
		inboxRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_fanout_inbox_rows_total", Help: "Inbox rows written by fan-out, by op (push, retract)."}, []string{"op"}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_fanout_batch_seconds", Help: "Duration of one fan-out sub-task batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_deliveries_planned_total", Help: "Deliveries planned, by mode."}, []string{"mode"}),
		followEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_follow_events_applied_total", Help: "Follow and unfollow events applied."}),
		backfillRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_backfill_rows_total", Help: "Inbox rows copied by follow backfills."}),
		trimmedRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_inbox_trimmed_rows_total", Help: "Inbox rows removed by retention."}),
		workerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_worker_errors_total", Help: "Worker steps that failed, by loop."}, []string{"loop"}),
		feedPullAuthors: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_read_pull_authors", Help: "Outboxes merged into one feed page (deep scroll excluded).",
			Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100}}),
		feedQueries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_read_queries", Help: "SQL statements run for one feed page.",
			Buckets: []float64{1, 2, 3, 4, 6, 10, 20, 40}}),
	}
	reg.MustRegister(m.postsPublished, m.inboxRows, m.batchSeconds, m.deliveries, m.followEvents,
		m.backfillRows, m.trimmedRows, m.workerErrors, m.feedPullAuthors, m.feedQueries)
	return m
}

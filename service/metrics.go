package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed/store"
)

// Metrics are the service's Prometheus series. One set per process,
// registered on the registry cmd/feedd serves.
type Metrics struct {
	postsPublished  prometheus.Counter
	inboxRows       *prometheus.CounterVec
	batchSeconds    prometheus.Histogram
	deliverySeconds prometheus.Histogram
	deliveries      *prometheus.CounterVec
	followEvents    prometheus.Counter
	backfillRows    prometheus.Counter
	trimmedRows     prometheus.Counter
	purgedPosts     prometheus.Counter
	workerErrors    *prometheus.CounterVec
	feedPullAuthors prometheus.Histogram
	feedQueries     prometheus.Histogram
	feedRows        prometheus.Histogram
	shardUp         *prometheus.GaugeVec
	// Streams: open now, opens refused (by the cap hit: user, process),
	// events sent, statements their watchers ran.
	streamsOpen        prometheus.Gauge
	streamsRefused     *prometheus.CounterVec
	streamEvents       prometheus.Counter
	streamWatchQueries prometheus.Counter
	live               *liveMetrics
	moves              *moveMetrics
	reg                prometheus.Registerer
}

// NewMetrics creates the series and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		postsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_posts_published_total", Help: "Posts stored by publish."}),
		inboxRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_fanout_inbox_rows_total", Help: "Inbox rows written by fan-out, by op (push, retract; replay: replays-list rows)."}, []string{"op"}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_fanout_batch_seconds", Help: "Duration of one fan-out sub-task batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		deliverySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_delivery_seconds", Help: "Time from a post's publish to its delivery done (every follower's feed shows it), observed by the worker that completes it.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16)}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_deliveries_planned_total", Help: "Deliveries planned, by mode."}, []string{"mode"}),
		followEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_follow_events_applied_total", Help: "Follow and unfollow events applied."}),
		backfillRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_backfill_rows_total", Help: "Inbox rows copied by follow backfills."}),
		trimmedRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_inbox_trimmed_rows_total", Help: "Inbox rows removed by retention."}),
		purgedPosts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_tombstones_purged_total", Help: "Deleted posts whose rows were purged after the tombstone TTL."}),
		workerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_worker_errors_total", Help: "Worker steps that failed, by loop."}, []string{"loop"}),
		feedPullAuthors: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_read_pull_authors", Help: "Outboxes merged into one feed page (deep scroll excluded).",
			Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100}}),
		feedQueries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_read_queries", Help: "SQL statements run for one feed page.",
			Buckets: []float64{1, 2, 3, 4, 6, 10, 20, 40}}),
		feedRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_read_rows", Help: "Rows the SQL statements of one feed page returned: inbox rows, followed authors and outbox rows (posts and heads), deep scroll included.",
			Buckets: []float64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000}}),
		shardUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "feed_shard_up", Help: "1 while the database's last probe read and wrote in time with a current schema."},
			[]string{"database"}),
		streamsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "feed_streams_open", Help: "Feed streams open in this process."}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_streams_refused_total", Help: "Feed stream opens refused at a cap, by cap (user, process)."}, []string{"cap"}),
		streamEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_stream_events_total", Help: "Items sent on feed streams."}),
		streamWatchQueries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_stream_watch_queries_total", Help: "SQL statements run by the stream watchers (one per shard)."}),
		live:  newLiveMetrics(reg),
		moves: newMoveMetrics(reg),
		reg:   reg,
	}
	reg.MustRegister(m.postsPublished, m.inboxRows, m.batchSeconds, m.deliverySeconds, m.deliveries, m.followEvents,
		m.backfillRows, m.trimmedRows, m.purgedPosts, m.workerErrors, m.feedPullAuthors, m.feedQueries, m.feedRows, m.shardUp,
		m.streamsOpen, m.streamsRefused, m.streamEvents, m.streamWatchQueries)
	return m
}

// watchPools exports the shards' connection pools: saturation shows as
// waits for a free connection.
func (m *Metrics) watchPools(st *store.Store) {
	m.reg.MustRegister(poolCollector{st})
}

var (
	poolConnsDesc = prometheus.NewDesc("feed_db_connections",
		"Connections of a database's pool of a class (reads, writes, workers), by state (in_use, idle).",
		[]string{"database", "class", "state"}, nil)
	poolMaxDesc = prometheus.NewDesc("feed_db_max_open_connections",
		"Size of a database's pool of a class.", []string{"database", "class"}, nil)
	poolWaitsDesc = prometheus.NewDesc("feed_db_waits_total",
		"Times a statement waited for a free connection of a database's pool of a class.", []string{"database", "class"}, nil)
	poolWaitSecondsDesc = prometheus.NewDesc("feed_db_wait_seconds_total",
		"Time statements spent waiting for a free connection of a database's pool of a class.", []string{"database", "class"}, nil)
	conflictsDesc = prometheus.NewDesc("feed_db_conflicts_total",
		"Transactions a database rolled back for a conflict with other writers (a deadlock, a lock wait timeout, a snapshot conflict), by outcome: retried (run again) or gave_up (after 8 tries: the request got 503, a worker runs its step again later).",
		[]string{"database", "outcome"}, nil)
	reshardPhaseDesc = prometheus.NewDesc("feed_reshard_phase",
		"1 for the phase of a reshard on the database giving virtual shards up (copy, catch-up, verify, cut-over), as the last probe read it.",
		[]string{"database", "phase"}, nil)
	reshardCopiedDesc = prometheus.NewDesc("feed_reshard_copied_rows",
		"Rows a reshard has copied from the database so far in its current step.", []string{"database"}, nil)
	reshardBacklogDesc = prometheus.NewDesc("feed_reshard_backlog_rows",
		"Writes a reshard captured on the database and has not applied yet (at most).", []string{"database"}, nil)
)

// poolCollector reads the pools' statistics, the conflict counts, and the
// reshard state the probes read, when scraped.
type poolCollector struct{ st *store.Store }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConnsDesc
	ch <- poolMaxDesc
	ch <- poolWaitsDesc
	ch <- poolWaitSecondsDesc
	ch <- conflictsDesc
	ch <- reshardPhaseDesc
	ch <- reshardCopiedDesc
	ch <- reshardBacklogDesc
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, sh := range c.st.Shards() {
		for _, class := range store.Classes() {
			s, db, cl := sh.Pool(class).Stats(), sh.Name, class.String()
			ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(s.InUse), db, cl, "in_use")
			ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(s.Idle), db, cl, "idle")
			ch <- prometheus.MustNewConstMetric(poolMaxDesc, prometheus.GaugeValue, float64(s.MaxOpenConnections), db, cl)
			ch <- prometheus.MustNewConstMetric(poolWaitsDesc, prometheus.CounterValue, float64(s.WaitCount), db, cl)
			ch <- prometheus.MustNewConstMetric(poolWaitSecondsDesc, prometheus.CounterValue, s.WaitDuration.Seconds(), db, cl)
		}
		retried, gaveUp := sh.Conflicts()
		ch <- prometheus.MustNewConstMetric(conflictsDesc, prometheus.CounterValue, float64(retried), sh.Name, "retried")
		ch <- prometheus.MustNewConstMetric(conflictsDesc, prometheus.CounterValue, float64(gaveUp), sh.Name, "gave_up")
		r := sh.Reshard()
		if r.Phase != "" {
			ch <- prometheus.MustNewConstMetric(reshardPhaseDesc, prometheus.GaugeValue, 1, sh.Name, r.Phase)
		}
		ch <- prometheus.MustNewConstMetric(reshardCopiedDesc, prometheus.GaugeValue, float64(r.Copied), sh.Name)
		ch <- prometheus.MustNewConstMetric(reshardBacklogDesc, prometheus.GaugeValue, float64(r.Backlog), sh.Name)
	}
}

package service

import (
	"cmp"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// StreamInput is a request to schedule a stream; zero StreamID asks the
// server to assign one.
type StreamInput struct {
	HostID         uint64
	StreamID       uint64
	ScheduledStart *int64
}

// CreateStream schedules a stream in the preview state. Creating the same
// stream again returns it with created=false.
//
// Returns EINVALID without a positive scheduled_start, ECONFLICT if the id
// names another stream, a deleted one or a post, ELIMIT when the host has
// store.MaxQueuedStreams previews and live streams.
func (s *Service) CreateStream(ctx context.Context, in StreamInput) (feed.Stream, bool, error) {
	ctx = store.WithClass(ctx, store.Writes)
	if in.ScheduledStart == nil || *in.ScheduledStart <= 0 {
		return feed.Stream{}, false, feed.Errorf(feed.EINVALID, "scheduled_start must be a positive Unix millisecond time")
	}
	now := s.now().UnixMilli()
	st := feed.Stream{HostID: in.HostID, StreamID: in.StreamID, ScheduledStart: *in.ScheduledStart}
	if in.StreamID != 0 {
		stored, created, err := s.store.CreateStream(ctx, st, now)
		if err == nil && !created && stored.ScheduledStart != st.ScheduledStart {
			return feed.Stream{}, false, feed.Errorf(feed.ECONFLICT, "stream %d exists with other fields", in.StreamID)
		}
		return stored, created, err
	}
	// Stream ids are drawn as content ids are (they share the space); a
	// collision is drawn again.
	for range 3 {
		st.StreamID = s.homeID(in.HostID)
		stored, created, err := s.store.CreateStream(ctx, st, now)
		if feed.ErrorCode(err) == feed.ECONFLICT || (err == nil && !created) {
			continue
		}
		return stored, created, err
	}
	return feed.Stream{}, false, feed.Errorf(feed.EUNAVAILABLE, "could not assign a unique stream id")
}

// StartStream takes a preview live at startedAt (nil: now).
//
// Returns EINVALID for a time not in 1..now+clock skew, ENOTFOUND for a
// stream the host does not have, ECONFLICT unless it is a preview.
func (s *Service) StartStream(ctx context.Context, hostID, streamID uint64, startedAt *int64) (feed.Stream, error) {
	at, err := s.transitionTime("started_at", startedAt)
	if err != nil {
		return feed.Stream{}, err
	}
	return s.store.StartStream(store.WithClass(ctx, store.Writes), hostID, streamID, at)
}

// EndStream ends a live stream at endedAt (nil: now); its replay then
// reaches the host's followers by fan-out.
//
// Returns EINVALID for a time not in started_at..now+clock skew, ENOTFOUND
// for a stream the host does not have, ECONFLICT unless it is live.
func (s *Service) EndStream(ctx context.Context, hostID, streamID uint64, endedAt *int64) (feed.Stream, error) {
	at, err := s.transitionTime("ended_at", endedAt)
	if err != nil {
		return feed.Stream{}, err
	}
	st, err := s.store.EndStream(store.WithClass(ctx, store.Writes), hostID, streamID, at)
	if err == nil {
		s.wake.notify(planQueue)
	}
	return st, err
}

// transitionTime is a transition's time: now when nil, else a positive
// time no later than now plus the clock-skew allowance.
func (s *Service) transitionTime(name string, at *int64) (int64, error) {
	now := s.now()
	if at == nil {
		return now.UnixMilli(), nil
	}
	if *at <= 0 || *at > now.Add(s.cfg.ClockSkew).UnixMilli() {
		return 0, feed.Errorf(feed.EINVALID, "%s must be Unix milliseconds between 1 and now + %s", name, s.cfg.ClockSkew)
	}
	return *at, nil
}

// DeleteStream takes a stream off every live feed: the host's lists at
// once (so sessions' later pages leave it out), followers' replays lists
// by fan-out. Deleting it again does nothing.
//
// Returns ENOTFOUND if the host never created it.
func (s *Service) DeleteStream(ctx context.Context, hostID, streamID uint64) error {
	err := s.store.DeleteStream(store.WithClass(ctx, store.Writes), hostID, streamID, s.now().UnixMilli())
	if err == nil {
		s.wake.notify(planQueue)
	}
	return err
}

// GetStream returns a stream of the host.
//
// Returns ENOTFOUND if it does not exist or was deleted.
func (s *Service) GetStream(ctx context.Context, hostID, streamID uint64) (feed.Stream, error) {
	return s.store.GetStream(store.WithClass(ctx, store.Reads), hostID, streamID)
}

// liveItem is a stream on a live page with the position after it.
type liveItem struct {
	feed.Stream
	next string
}

// LivePage returns a page of the viewer's live feed. Without session (and
// cursor) it is a first page: it snapshots the followed hosts' live and
// preview streams under a new session. Later pages name the session and
// the previous page's cursor: they read the snapshot as it was, less the
// streams deleted since, then the replays, leaving out every stream the
// snapshot holds.
//
// Returns EINVALID for a bad limit, cursor or session, or a cursor without
// its session; ESESSION for an unknown or expired session; EUNAVAILABLE if
// a database of the followed hosts does not answer.
func (s *Service) LivePage(ctx context.Context, viewerID uint64, page feed.Page, session string) (feed.LivePage, error) {
	ctx = store.WithClass(ctx, store.Reads)
	if err := checkPage(page); err != nil {
		return feed.LivePage{}, err
	}
	if session == "" {
		if page.Cursor != "" {
			return feed.LivePage{}, feed.Errorf(feed.EINVALID, "a cursor needs the session of its first page")
		}
		return s.firstLivePage(ctx, viewerID, page.Limit)
	}
	id, err := strconv.ParseUint(session, 10, 64)
	if err != nil || id == 0 {
		return feed.LivePage{}, feed.Errorf(feed.EINVALID, "malformed session")
	}
	if page.Cursor == "" {
		return feed.LivePage{}, feed.Errorf(feed.EINVALID, "a session's later pages need the previous page's cursor")
	}
	pos, inReplays, err := decodeLiveCursor(page.Cursor)
	if err != nil {
		return feed.LivePage{}, err
	}
	blob, err := s.store.GetLiveSession(ctx, viewerID, id, s.now().UnixMilli())
	if err != nil {
		return feed.LivePage{}, err
	}
	snap, err := decodeSnapshot(blob)
	if err != nil {
		return feed.LivePage{}, err
	}
	var items []liveItem
	below := store.Top
	if inReplays {
		below = pos
	} else if items, err = s.snapshotItems(ctx, snap, int(pos.PublishTime), page.Limit+1); err != nil {
		return feed.LivePage{}, err
	}
	hosts, err := s.store.FollowedHosts(ctx, viewerID)
	if err != nil {
		return feed.LivePage{}, err
	}
	return s.finishLivePage(ctx, viewerID, hosts, snap, items, below, page.Limit, session)
}

// firstLivePage merges the followed hosts' queues (each one range of the
// host's index, a database's hosts in one statement), stores them as the
// new session's snapshot and returns its first page.
func (s *Service) firstLivePage(ctx context.Context, viewerID uint64, limit int) (feed.LivePage, error) {
	hosts, err := s.store.FollowedHosts(ctx, viewerID)
	if err != nil {
		return feed.LivePage{}, err
	}
	ids := make([]uint64, len(hosts))
	for i, h := range hosts {
		ids[i] = h.HostID
	}
	snap, err := s.store.StreamQueues(ctx, ids, s.cfg.SourceTimeout)
	if err != nil {
		return feed.LivePage{}, err
	}
	slices.SortFunc(snap, compareLive)
	now := s.now()
	id := rand.Uint64() | 1
	dropped, cleaned, err := s.store.CreateLiveSession(store.WithClass(ctx, store.Writes), viewerID, id,
		now.Add(s.cfg.LiveSessionTTL).UnixMilli(), encodeSnapshot(snap), now.UnixMilli())
	if err != nil {
		return feed.LivePage{}, err
	}
	s.metrics.live.sessions.Inc()
	s.metrics.live.dropped.Add(float64(dropped))
	s.metrics.live.cleaned.Add(float64(cleaned))
	s.metrics.live.snapshotStreams.Observe(float64(len(snap)))
	items := make([]liveItem, 0, min(len(snap), limit+1))
	for i, st := range snap[:min(len(snap), limit+1)] {
		items = append(items, liveItem{st, encodeCursor(cursorLiveSnapshot, feed.Key{PublishTime: int64(i + 1)})})
	}
	return s.finishLivePage(ctx, viewerID, hosts, snap, items, store.Top, limit, strconv.FormatUint(id, 10))
}

// snapshotItems returns up to n streams of the snapshot from offset on
// that are not deleted now.
func (s *Service) snapshotItems(ctx context.Context, snap []feed.Stream, offset, n int) ([]liveItem, error) {
	var items []liveItem
	for i := offset; i < len(snap) && len(items) < n; {
		chunk := snap[i:min(len(snap), i+n-len(items))]
		live, err := s.store.LiveStreams(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for j, st := range chunk {
			if _, ok := live[st.StreamID]; ok {
				items = append(items, liveItem{st, encodeCursor(cursorLiveSnapshot, feed.Key{PublishTime: int64(i + j + 1)})})
			}
		}
		i += len(chunk)
	}
	return items, nil
}

// finishLivePage fills a page that the snapshot left short with replays
// below the given key, and cuts it to limit.
func (s *Service) finishLivePage(ctx context.Context, viewerID uint64, hosts []store.HostEdge, snap []feed.Stream,
	items []liveItem, below feed.Key, limit int, session string) (feed.LivePage, error) {
	if len(items) <= limit {
		seen := make(map[uint64]bool, len(snap))
		for _, st := range snap {
			seen[st.StreamID] = true
		}
		reps, err := s.replays(ctx, viewerID, hosts, below, limit+1-len(items), seen)
		if err != nil {
			return feed.LivePage{}, err
		}
		for _, r := range reps {
			items = append(items, liveItem{r, encodeCursor(cursorLiveReplays, store.ReplayKey(r))})
		}
	}
	page := feed.LivePage{Session: session, Items: make([]feed.Stream, 0, min(len(items), limit))}
	if len(items) > limit {
		page.Next = items[limit-1].next
		items = items[:limit]
	}
	for _, it := range items {
		page.Items = append(page.Items, it.Stream)
	}
	return page, nil
}

// replays returns the newest n replays of the followed hosts below before,
// leaving out the streams in skip, as their hosts' databases hold them now:
// a replay deleted whose retraction has not reached the viewer's list yet
// is left out too.
func (s *Service) replays(ctx context.Context, viewerID uint64, hosts []store.HostEdge, before feed.Key, n int, skip map[uint64]bool) ([]feed.Stream, error) {
	for {
		got, err := s.replayCandidates(ctx, viewerID, hosts, before, n, skip)
		if err != nil || len(got) == 0 {
			return got, err
		}
		live, err := s.store.LiveStreams(ctx, got)
		if err != nil {
			return nil, err
		}
		out, gone := make([]feed.Stream, 0, len(got)), false
		for _, r := range got {
			if st, ok := live[r.StreamID]; ok {
				out = append(out, st)
			} else {
				skip[r.StreamID], gone = true, true
			}
		}
		if !gone {
			return out, nil
		}
	}
}

// replayCandidates returns the newest n replays of the followed hosts below
// before, leaving out the streams in skip. They come from the viewer's replays
// list, which fan-out keeps, where it is complete: for hosts whose edge has
// no pull bits, at and above its floor. The hosts' own replay lists fill in
// the rest, as pull authors' outboxes do for posts: a host pending
// backfill is read whole (its rows in the list are left out, so none that
// an old follow left behind shows), a pull host up to the viewer's active
// spell, and every host once the list runs down to its floor.
func (s *Service) replayCandidates(ctx context.Context, viewerID uint64, hosts []store.HostEdge, before feed.Key, n int, skip map[uint64]bool) ([]feed.Stream, error) {
	need := n + len(skip)
	pulls := make(map[uint64]int, len(hosts))
	for _, h := range hosts {
		pulls[h.HostID] = h.Pull
	}
	var (
		got   []feed.Stream
		floor *feed.Key
		deep  bool
	)
	for at, valid := before, 0; ; {
		pg, err := s.store.ReadReplays(ctx, viewerID, at, need)
		if err != nil {
			return nil, err
		}
		floor = pg.Floor
		for _, r := range pg.Items {
			if floor != nil && store.ReplayKey(r).Less(*floor) {
				deep = true
				break
			}
			if pull, ok := pulls[r.HostID]; ok && pull&store.PullPending == 0 {
				got, valid = append(got, r), valid+1
			}
		}
		if deep || len(pg.Items) < need {
			deep = deep || floor != nil
			break
		} else if valid >= need {
			break
		}
		at = store.ReplayKey(pg.Items[len(pg.Items)-1])
	}
	var sources []store.PullSource
	if deep {
		for _, h := range hosts {
			sources = append(sources, store.PullSource{AuthorID: h.HostID, Before: before})
		}
	} else {
		activeSince := int64(-1)
		for _, h := range hosts {
			switch {
			case h.Pull&store.PullPending != 0:
				sources = append(sources, store.PullSource{AuthorID: h.HostID, Before: before})
			case h.Pull&store.PullBelowActive != 0:
				if activeSince < 0 {
					lastRead, since, err := s.store.Activity(ctx, viewerID)
					if err != nil {
						return nil, err
					}
					activeSince = s.spellStart(s.now(), lastRead, since)
				}
				sources = append(sources, store.PullSource{AuthorID: h.HostID, Before: olderOf(before, feed.Key{PublishTime: activeSince + 1})})
			}
		}
	}
	if len(sources) > 0 {
		pulled, err := s.store.HostReplays(ctx, sources, need, s.cfg.SourceTimeout)
		if err != nil {
			return nil, err
		}
		got = append(got, pulled...)
	}
	slices.SortFunc(got, func(a, b feed.Stream) int {
		ka, kb := store.ReplayKey(a), store.ReplayKey(b)
		return cmp.Or(cmp.Compare(kb.PublishTime, ka.PublishTime), cmp.Compare(kb.ContentID, ka.ContentID))
	})
	out := make([]feed.Stream, 0, n)
	for i, r := range got {
		if len(out) == n {
			break
		}
		if !skip[r.StreamID] && (i == 0 || got[i-1].StreamID != r.StreamID) {
			out = append(out, r)
		}
	}
	return out, nil
}

// liveScore orders the queue: started_at for a live stream, above every
// preview's -scheduled_start (times are positive).
func liveScore(st feed.Stream) int64 {
	if st.StartedAt != nil {
		return *st.StartedAt
	}
	return -st.ScheduledStart
}

// compareLive sorts live streams and previews in feed order: score
// descending, then stream id descending.
func compareLive(a, b feed.Stream) int {
	return cmp.Or(cmp.Compare(liveScore(b), liveScore(a)), cmp.Compare(b.StreamID, a.StreamID))
}

// A snapshot is the session's live and preview streams in feed order, one
// fixed-size record each: stream_id, host_id, state (0 preview, 1 live),
// scheduled_start, started_at (0 for a preview), big-endian.
const snapshotRecord = 8 + 8 + 1 + 8 + 8

func encodeSnapshot(snap []feed.Stream) []byte {
	b := make([]byte, 0, len(snap)*snapshotRecord)
	for _, st := range snap {
		b = binary.BigEndian.AppendUint64(b, st.StreamID)
		b = binary.BigEndian.AppendUint64(b, st.HostID)
		var live byte
		var started int64
		if st.StartedAt != nil {
			live, started = 1, *st.StartedAt
		}
		b = append(b, live)
		b = binary.BigEndian.AppendUint64(b, uint64(st.ScheduledStart))
		b = binary.BigEndian.AppendUint64(b, uint64(started))
	}
	return b
}

func decodeSnapshot(b []byte) ([]feed.Stream, error) {
	if len(b)%snapshotRecord != 0 {
		return nil, feed.Errorf(feed.EINTERNAL, "snapshot of %d bytes", len(b))
	}
	out := make([]feed.Stream, 0, len(b)/snapshotRecord)
	for ; len(b) > 0; b = b[snapshotRecord:] {
		st := feed.Stream{
			StreamID:       binary.BigEndian.Uint64(b),
			HostID:         binary.BigEndian.Uint64(b[8:]),
			State:          feed.StreamPreview,
			ScheduledStart: int64(binary.BigEndian.Uint64(b[17:])),
		}
		if b[16] == 1 {
			started := int64(binary.BigEndian.Uint64(b[25:]))
			st.State, st.StartedAt = feed.StreamLive, &started
		}
		out = append(out, st)
	}
	return out, nil
}

// decodeLiveCursor parses a live page's cursor: an offset into the
// snapshot, or the key of the last replay shown.
//
// Returns EINVALID for anything else.
func decodeLiveCursor(c string) (pos feed.Key, inReplays bool, err error) {
	if pos, err = decodeCursor(cursorLiveReplays, c, store.Top); err == nil {
		return pos, true, nil
	}
	pos, err = decodeCursor(cursorLiveSnapshot, c, feed.Key{})
	if err == nil && (pos.PublishTime < 1 || pos.ContentID != 0) {
		err = feed.Errorf(feed.EINVALID, "malformed cursor")
	}
	return pos, false, err
}

// liveMetrics count sessions and what removes them: created minus dropped
// and cleaned bounds the rows live_sessions holds.
type liveMetrics struct {
	sessions        prometheus.Counter
	dropped         prometheus.Counter
	cleaned         prometheus.Counter
	snapshotStreams prometheus.Histogram
	replaysTrimmed  prometheus.Counter
}

func newLiveMetrics(reg prometheus.Registerer) *liveMetrics {
	m := &liveMetrics{
		sessions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_live_sessions_created_total", Help: "Live-feed sessions created (first pages)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_live_sessions_dropped_total", Help: "Live-feed sessions dropped as their viewer's oldest past the most a viewer keeps."}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_live_sessions_cleaned_total", Help: "Expired live-feed sessions deleted by the clean-up new sessions run."}),
		snapshotStreams: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_live_snapshot_streams", Help: "Live and preview streams one session's snapshot holds.",
			Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 500}}),
		replaysTrimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_replays_trimmed_rows_total", Help: "Replays-list rows removed by retention."}),
	}
	reg.MustRegister(m.sessions, m.dropped, m.cleaned, m.snapshotStreams, m.replaysTrimmed)
	return m
}

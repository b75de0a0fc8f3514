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
	st := feed.Stream{HostID: in.HostID, StreamID: in.StreamID, ScheduledStart: *in.ScheduledStart}
	if in.StreamID != 0 {
		stored, created, err := s.store.CreateStream(ctx, st, s.now().UnixMilli())
		if err == nil && !created && stored.ScheduledStart != st.ScheduledStart {
			return feed.Stream{}, false, feed.Errorf(feed.ECONFLICT, "stream %d exists with other fields", in.StreamID)
		}
		return stored, created, err
	}
	// Stream ids are drawn as content ids are (they share the space); a
	// collision is drawn again.
	for range 3 {
		// Each try records its own time: a creation commits within
		// store.TransitionBound of the time it records.
		st.StreamID = s.homeID(in.HostID)
		stored, created, err := s.store.CreateStream(ctx, st, s.now().UnixMilli())
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
	return s.store.StartStream(store.WithClass(ctx, store.Writes), hostID, streamID, at, s.now().UnixMilli())
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
	st, err := s.store.EndStream(store.WithClass(ctx, store.Writes), hostID, streamID, at, s.now().UnixMilli())
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
// cursor) it is a first page: it takes a snapshot of the followed hosts'
// live and preview streams under a new session. Later pages name the
// session and the previous page's cursor: they read the snapshot as it
// was, less the streams deleted since, then the replays, leaving out every
// stream the snapshot holds.
//
// A session stores the snapshot's server time, not its streams: every page
// reads the followed hosts' streams that the snapshot can hold (their
// queues and the replays ended since) and takes each one's state as of
// that time from its transitions' server times (stateAt). The time lies
// snapshotLag before the first page's read, so every transition recorded
// at or before it is one the read saw; the few streams the read saw in
// another state than their times give (transitions within the lag) are
// stored with the session as the first page showed them.
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
	at, blob, err := s.store.GetLiveSession(ctx, viewerID, id, s.now().UnixMilli())
	if err != nil {
		return feed.LivePage{}, err
	}
	seen, err := decodeSeen(blob)
	if err != nil {
		return feed.LivePage{}, err
	}
	hosts, streams, err := s.snapshotStreams(ctx, viewerID, at)
	if err != nil {
		return feed.LivePage{}, err
	}
	snap := snapshotOf(streams, func(st store.TimedStream) string {
		if state, ok := seen[st.StreamID]; ok {
			return state
		}
		return stateAt(st, at)
	})
	below, from := store.Top, len(snap)
	if !inReplays {
		from = slices.IndexFunc(snap, func(st feed.Stream) bool { return liveKey(st).Less(pos) })
		if from < 0 {
			from = len(snap)
		}
	} else {
		below = pos
	}
	return s.finishLivePage(ctx, viewerID, hosts, snap, from, below, page.Limit, session)
}

// snapshotLag is how far a session's snapshot time lies before its first
// page's read: every stream transition recorded at or before that time has
// committed or failed by the read (store.TransitionBound), with as long
// again for the clocks of feedd's processes to differ.
const snapshotLag = 2 * store.TransitionBound

// firstLivePage reads the followed hosts' streams (each host's queue and
// its replays ended within the lag, a database's hosts in one statement),
// stores a new session with the snapshot's time and the streams it saw
// otherwise than their times give, and returns its first page.
func (s *Service) firstLivePage(ctx context.Context, viewerID uint64, limit int) (feed.LivePage, error) {
	now := s.now()
	at := now.Add(-snapshotLag).UnixMilli()
	hosts, streams, err := s.snapshotStreams(ctx, viewerID, at)
	if err != nil {
		return feed.LivePage{}, err
	}
	seen := map[uint64]string{}
	snap := snapshotOf(streams, func(st store.TimedStream) string {
		state := ""
		if st.State != feed.StreamReplay {
			state = st.State
		}
		if state != stateAt(st, at) {
			seen[st.StreamID] = state
		}
		return state
	})
	id := rand.Uint64() | 1
	dropped, cleaned, err := s.store.CreateLiveSession(store.WithClass(ctx, store.Writes), viewerID, id,
		now.Add(s.cfg.LiveSessionTTL).UnixMilli(), at, encodeSeen(seen), now.UnixMilli())
	if err != nil {
		return feed.LivePage{}, err
	}
	s.metrics.live.sessions.Inc()
	s.metrics.live.dropped.Add(float64(dropped))
	s.metrics.live.cleaned.Add(float64(cleaned))
	s.metrics.live.snapshotStreams.Observe(float64(len(snap)))
	s.metrics.live.seenStreams.Observe(float64(len(seen)))
	return s.finishLivePage(ctx, viewerID, hosts, snap, 0, store.Top, limit, strconv.FormatUint(id, 10))
}

// snapshotStreams returns the hosts the viewer follows and their streams
// that a snapshot at server time at can hold.
func (s *Service) snapshotStreams(ctx context.Context, viewerID uint64, at int64) ([]store.HostEdge, []store.TimedStream, error) {
	hosts, err := s.store.FollowedHosts(ctx, viewerID)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]uint64, len(hosts))
	for i, h := range hosts {
		ids[i] = h.HostID
	}
	streams, err := s.store.SnapshotStreams(ctx, ids, at, s.cfg.SourceTimeout)
	return hosts, streams, err
}

// stateAt is the state a stream had at server time at, from its
// transitions' server times: preview or live, or "" when it was not yet
// created or had ended (a replay is no part of a snapshot).
func stateAt(st store.TimedStream, at int64) string {
	switch {
	case st.CreatedAt > at:
		return ""
	case st.State == feed.StreamPreview || st.StartedSrv > at:
		return feed.StreamPreview
	case st.State == feed.StreamLive || st.EndedSrv > at:
		return feed.StreamLive
	}
	return ""
}

// snapshotOf returns the streams that state puts in the snapshot, each
// shown in that state, in feed order.
func snapshotOf(streams []store.TimedStream, state func(store.TimedStream) string) []feed.Stream {
	var snap []feed.Stream
	for _, t := range streams {
		st := t.Stream
		switch state(t) {
		case feed.StreamPreview:
			st.State, st.StartedAt, st.EndedAt = feed.StreamPreview, nil, nil
		case feed.StreamLive:
			st.State, st.EndedAt = feed.StreamLive, nil
		default:
			continue
		}
		snap = append(snap, st)
	}
	slices.SortFunc(snap, compareLive)
	return snap
}

// finishLivePage returns the page of the session's snapshot from its
// index from on, filled out with the replays below the given key when the
// snapshot runs out, cut to limit.
func (s *Service) finishLivePage(ctx context.Context, viewerID uint64, hosts []store.HostEdge, snap []feed.Stream,
	from int, below feed.Key, limit int, session string) (feed.LivePage, error) {
	items := make([]liveItem, 0, limit+1)
	for _, st := range snap[from:min(len(snap), from+limit+1)] {
		items = append(items, liveItem{st, encodeCursor(cursorLiveSnapshot, liveKey(st))})
	}
	if len(items) <= limit {
		inSnap := make(map[uint64]bool, len(snap))
		for _, st := range snap {
			inSnap[st.StreamID] = true
		}
		reps, err := s.replays(ctx, viewerID, hosts, below, limit+1-len(items), inSnap)
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

// liveKey is a snapshot stream's position in feed order, as a key that
// sorts as compareLive does: score, then stream id.
func liveKey(st feed.Stream) feed.Key {
	return feed.Key{PublishTime: liveScore(st), ContentID: st.StreamID}
}

// A session's seen streams are 9-byte records: stream_id (big-endian),
// then the state the first page showed it in (0 none, 1 preview, 2 live).
const seenRecord = 8 + 1

var seenStates = []string{"", feed.StreamPreview, feed.StreamLive}

func encodeSeen(seen map[uint64]string) []byte {
	b := make([]byte, 0, len(seen)*seenRecord)
	for id, state := range seen {
		b = binary.BigEndian.AppendUint64(b, id)
		b = append(b, byte(slices.Index(seenStates, state)))
	}
	return b
}

func decodeSeen(b []byte) (map[uint64]string, error) {
	if len(b)%seenRecord != 0 {
		return nil, feed.Errorf(feed.EINTERNAL, "session of %d bytes", len(b))
	}
	seen := make(map[uint64]string, len(b)/seenRecord)
	for ; len(b) > 0; b = b[seenRecord:] {
		if int(b[8]) >= len(seenStates) {
			return nil, feed.Errorf(feed.EINTERNAL, "session state %d", b[8])
		}
		seen[binary.BigEndian.Uint64(b)] = seenStates[b[8]]
	}
	return seen, nil
}

// decodeLiveCursor parses a live page's cursor: the key (liveKey) of the
// last snapshot stream shown, or the key of the last replay shown.
//
// Returns ESESSION for a snapshot cursor of no stream (an offset, the
// cursors of sessions stored in an earlier format), EINVALID for anything
// else.
func decodeLiveCursor(c string) (pos feed.Key, inReplays bool, err error) {
	if pos, err = decodeCursor(cursorLiveReplays, c, store.Top); err == nil {
		return pos, true, nil
	}
	pos, err = decodeCursor(cursorLiveSnapshot, c, feed.Key{})
	if err == nil && pos.ContentID == 0 {
		err = feed.Errorf(feed.ESESSION, "a cursor of an earlier session format: start again from the first page")
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
	seenStreams     prometheus.Histogram
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
		seenStreams: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "feed_live_session_streams", Help: "Streams one session stores: those its first page saw in another state than their transitions' times give for the snapshot's time.",
			Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 500}}),
		replaysTrimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "feed_replays_trimmed_rows_total", Help: "Replays-list rows removed by retention."}),
	}
	reg.MustRegister(m.sessions, m.dropped, m.cleaned, m.snapshotStreams, m.seenStreams, m.replaysTrimmed)
	return m
}

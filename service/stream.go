package service

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// Feed stream timing. A watcher polls often enough that an item is sent well
// within a second of showing on a page; a stream whose read failed tries
// again after streamRetry; a quiet stream gets a keepalive within 15 s.
const (
	streamPoll      = 250 * time.Millisecond
	streamRetry     = time.Second
	streamKeepalive = 10 * time.Second
)

// streamWatchBudget bounds the statements a watcher runs a second: after a
// poll of n statements the next waits n/streamWatchBudget seconds when that
// is longer than streamPoll. Up to 50 statements a poll (3,200 watched
// users and pull authors of the database) nothing changes; past that the
// database work of the watchers stays flat as streams grow, and what grows
// is the delay before a change is seen.
const streamWatchBudget = 200

// pollWait is how long a watcher waits after a poll of n statements.
func pollWait(n int) time.Duration {
	return max(streamPoll, time.Duration(n)*time.Second/streamWatchBudget)
}

// StreamSink is where a stream writes: its start, once the stream is
// admitted and before anything else, then events, oldest first, and
// keepalives. An error from any ends the stream (the client is gone).
type StreamSink interface {
	Start() error
	Item(p feed.Post, position string) error
	Keepalive() error
}

// streams is the process's registry of open feed streams, with one watcher
// goroutine per shard that looks for changes on behalf of all of them: per
// poll, one statement per 64 watched users of the shard reads their
// inboxes' newest keys, and one per 64 watched pull authors of the shard
// reads their outboxes' heads. A changed key wakes only the streams of
// that user, or of the users who pull that author; a woken stream reads
// its feed above the last position it sent, exactly as a since page does.
// The database work per poll grows with the users watched, in batched
// index seeks, not with a query per stream.
type streams struct {
	svc *Service
	mu  sync.Mutex
	// byUser holds the open streams of each user; pulls the streams that
	// merge each pull author's outbox.
	byUser map[uint64][]*subscription
	pulls  map[uint64][]*subscription
	open   int // the subscriptions of byUser
	// closed ends every stream (CloseStreams); start runs the watchers
	// with the first stream, stop ends them.
	closed    chan struct{}
	closeOnce sync.Once
	startOnce sync.Once
	stop      context.CancelFunc
	watchers  sync.WaitGroup
}

type subscription struct {
	user  uint64
	wake  chan struct{} // capacity 1: a pending wake-up
	pulls []uint64      // the pull authors it watches, under streams.mu
}

func newStreams(svc *Service) *streams {
	return &streams{svc: svc, byUser: map[uint64][]*subscription{}, pulls: map[uint64][]*subscription{}, closed: make(chan struct{})}
}

// subscribe admits a stream of user, unless the user or the process holds
// as many open as the caps allow.
//
// Returns ESTREAMS at a cap.
func (h *streams) subscribe(user uint64) (*subscription, error) {
	h.startOnce.Do(h.start)
	cfg := h.svc.cfg
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case len(h.byUser[user]) >= cfg.MaxStreamsPerUser:
		h.svc.metrics.streamsRefused.WithLabelValues("user").Inc()
		return nil, feed.Errorf(feed.ESTREAMS, "user %d holds %d feed streams open, the most a user may: close one first", user, cfg.MaxStreamsPerUser)
	case h.open >= cfg.MaxStreams:
		h.svc.metrics.streamsRefused.WithLabelValues("process").Inc()
		return nil, feed.Errorf(feed.ESTREAMS, "this instance holds %d feed streams open, its most: retry later", cfg.MaxStreams)
	}
	sub := &subscription{user: user, wake: make(chan struct{}, 1)}
	h.byUser[user] = append(h.byUser[user], sub)
	h.open++
	h.svc.metrics.streamsOpen.Inc()
	return sub, nil
}

func (h *streams) unsubscribe(sub *subscription) {
	h.mu.Lock()
	remove(h.byUser, sub.user, sub)
	h.open--
	h.setPulls(sub, nil)
	h.mu.Unlock()
	h.svc.metrics.streamsOpen.Dec()
}

// remove drops sub from m[key], deleting the key when none is left.
func remove(m map[uint64][]*subscription, key uint64, sub *subscription) {
	if rest := slices.DeleteFunc(m[key], func(s *subscription) bool { return s == sub }); len(rest) > 0 {
		m[key] = rest
	} else {
		delete(m, key)
	}
}

// setPulls replaces the pull authors sub watches; the caller holds h.mu.
func (h *streams) setPulls(sub *subscription, authors []uint64) {
	for _, a := range sub.pulls {
		remove(h.pulls, a, sub)
	}
	sub.pulls = authors
	for _, a := range authors {
		h.pulls[a] = append(h.pulls[a], sub)
	}
}

// watchPulls records the pull authors the stream's last read merged.
func (h *streams) watchPulls(sub *subscription, authors []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(sub.pulls, authors) {
		h.setPulls(sub, slices.Clone(authors))
	}
}

// start runs one watcher per shard until close.
func (h *streams) start() {
	ctx, cancel := context.WithCancel(store.WithClass(context.Background(), store.Reads))
	h.stop = cancel
	for _, sh := range h.svc.store.Shards() {
		h.watchers.Go(func() { h.watch(ctx, sh) })
	}
}

// close ends every stream and the watchers.
func (h *streams) close() {
	h.closeOnce.Do(func() {
		close(h.closed)
		h.startOnce.Do(func() {}) // no watchers start after this
		if h.stop != nil {
			h.stop()
		}
		h.watchers.Wait()
	})
}

// watched returns the users of sh with open streams and the pull authors
// on sh that some stream merges.
func (h *streams) watched(sh *store.Shard) (users, authors []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for u := range h.byUser {
		if h.svc.store.ShardOf(u) == sh {
			users = append(users, u)
		}
	}
	for a := range h.pulls {
		if h.svc.store.ShardOf(a) == sh {
			authors = append(authors, a)
		}
	}
	return users, authors
}

// wakeAll wakes the streams of users and those that pull authors.
func (h *streams) wakeAll(users, authors []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wake := func(subs []*subscription) {
		for _, sub := range subs {
			select {
			case sub.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
	}
	for _, u := range users {
		wake(h.byUser[u])
	}
	for _, a := range authors {
		wake(h.pulls[a])
	}
}

// watch polls sh for its watched users' newest inbox entries and its
// watched pull authors' newest posts, and wakes the streams whose keys
// changed (a key seen for the first time counts as changed: the stream
// may have started after the last poll).
func (h *streams) watch(ctx context.Context, sh *store.Shard) {
	tops, heads := map[uint64]feed.Key{}, map[uint64]feed.Key{}
	timer := time.NewTimer(streamPoll)
	defer timer.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		users, authors := h.watched(sh)
		n, err := h.poll(ctx, users, authors, tops, heads)
		timer.Reset(pollWait(n))
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			h.svc.log.Warn("stream: watcher cannot read its database", "database", sh.Name, "error", err)
		case err == nil && failing:
			h.svc.log.Info("stream: watcher reads its database again", "database", sh.Name)
		}
		failing = err != nil
	}
}

// poll runs one round of a watcher: reads the keys, wakes the streams
// whose keys changed and forgets users and authors no longer watched. It
// returns the statements it ran.
func (h *streams) poll(ctx context.Context, users, authors []uint64, tops, heads map[uint64]feed.Key) (int, error) {
	var changedUsers, changedAuthors []uint64
	statements := 0
	if len(users) > 0 {
		got, n, err := h.svc.store.InboxTops(ctx, users)
		h.svc.metrics.streamWatchQueries.Add(float64(n))
		statements += n
		if err != nil {
			return statements, err
		}
		changedUsers = changed(tops, users, got)
	}
	if len(authors) > 0 {
		srcs := make([]store.PullSource, len(authors))
		for i, a := range authors {
			srcs[i] = store.PullSource{AuthorID: a, Before: store.Top}
		}
		p, err := h.svc.store.PullPosts(ctx, srcs, 1, 0)
		h.svc.metrics.streamWatchQueries.Add(float64(p.Queries))
		statements += p.Queries
		if err == nil {
			err = p.Err
		}
		if err != nil {
			return statements, err
		}
		got := make(map[uint64]feed.Key, len(p.Posts))
		for _, post := range p.Posts {
			got[post.AuthorID] = post.Key()
		}
		changedAuthors = changed(heads, authors, got)
	}
	h.wakeAll(changedUsers, changedAuthors)
	return statements, nil
}

// changed updates last with got for the watched ids (an absent id has the
// zero key), forgets the others, and returns the ids whose key changed or
// was not known.
func changed(last map[uint64]feed.Key, watched []uint64, got map[uint64]feed.Key) []uint64 {
	var out []uint64
	keep := make(map[uint64]bool, len(watched))
	for _, id := range watched {
		keep[id] = true
		if k, ok := last[id]; !ok || k != got[id] {
			out = append(out, id)
		}
		last[id] = got[id]
	}
	for id := range last {
		if !keep[id] {
			delete(last, id)
		}
	}
	return out
}

// CheckPosition validates a since position ("" is none), so a stream can
// refuse a malformed one before it starts.
//
// Returns EINVALID for a malformed position.
func CheckPosition(position string) error {
	_, err := decodePosition(position)
	return err
}

// CloseStreams ends every open stream, for a process that stops: their
// clients reconnect, to another instance, and resume from their last
// event's position.
func (s *Service) CloseStreams() { s.streams.close() }

// StreamFeed sends the user's feed to sink as it grows: first every item newer
// than since, oldest first, then each item that enters the feed above the
// last one sent; with since "", only items that enter above the feed's top
// when the stream opens (a client that wants what came before passes the
// top_cursor of the page it shows), until ctx ends or the process
// closes its streams (nil). Each sent item's position is its event id, so a
// client resumes from the last id it got. Every read of the feed runs
// within readTimeout; a read that fails or leaves out an unreachable
// database's authors sends nothing and is tried again a second later from
// the last item sent, so no item is skipped.
//
// A user holds at most Config.MaxStreamsPerUser streams open in a process,
// and a process Config.MaxStreams.
//
// Returns EINVALID for a malformed since, ESTREAMS at a cap, before sink's
// Start.
func (s *Service) StreamFeed(ctx context.Context, userID uint64, since string, readTimeout time.Duration, sink StreamSink) error {
	pos, err := decodePosition(since)
	if err != nil {
		return err
	}
	ctx = store.WithClass(ctx, store.Reads)
	sub, err := s.streams.subscribe(userID)
	if err != nil {
		return err
	}
	defer s.streams.unsubscribe(sub)
	if err := sink.Start(); err != nil {
		return err
	}
	keepalive := time.NewTicker(streamKeepalive)
	defer keepalive.Stop()
	retry := time.NewTimer(0) // the first catch-up runs at once
	defer retry.Stop()
	fromTop := since == ""
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.streams.closed:
			return nil
		case <-keepalive.C:
			if err := sink.Keepalive(); err != nil {
				return err
			}
			continue
		case <-sub.wake:
		case <-retry.C:
		}
		if fromTop {
			pos, err = s.readTop(ctx, sub, readTimeout)
			fromTop = err != nil
		} else {
			pos, err = s.sendGap(ctx, sub, pos, readTimeout, sink)
		}
		var gone sinkError
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &gone):
			return gone.err
		case err != nil:
			s.log.Debug("stream: read failed, retrying", "user_id", userID, "error", err)
			retry.Reset(streamRetry)
		}
	}
}

// readTop returns the position of the newest item of the feed (the zero key
// for an empty feed), read within readTimeout, and records the pull
// authors to watch.
func (s *Service) readTop(ctx context.Context, sub *subscription, readTimeout time.Duration) (feed.Key, error) {
	items, err := s.readFeedWithin(ctx, sub, store.Top, feed.Key{}, 1, readTimeout)
	if err != nil || len(items) == 0 {
		return feed.Key{}, err
	}
	return items[0].Key(), nil
}

// readFeedWithin is readFeed for a stream: within readTimeout, failing
// rather than leave out the authors of a database that does not answer,
// and recording the pull authors of a read from the top.
func (s *Service) readFeedWithin(ctx context.Context, sub *subscription, before, since feed.Key, n int, readTimeout time.Duration) ([]feed.Post, error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	items, rd, err := s.readFeed(rctx, sub.user, before, since, n, nil)
	if err != nil {
		return nil, err
	}
	if missing := rd.missingAuthors(); len(missing) > 0 {
		return nil, feed.Errorf(feed.EUNAVAILABLE, "the posts of %d followed authors cannot be read now", len(missing))
	}
	if before == store.Top {
		s.streams.watchPulls(sub, rd.pullAuthors)
	}
	return items, nil
}

// streamPage is how many items one window of a catch-up holds at most.
const streamPage = feed.MaxPageLimit

// A catch-up sends the items above the stream's position oldest first, a
// window at a time: the oldest items above the position, at most
// streamPage of them, read newest first as any page is, then sent in
// reverse. Memory holds one window whatever the gap, and the first event
// follows a few reads. A window is found by probing times between the
// position and one known to hold more than streamPage items above it, each
// probe a read of at most streamPage+1 items: a probe that holds too few
// moves the next by the density it read, one that holds too many halves the
// range or drops below the oldest item it read, and a window of half a page
// or more ends the search. The next window's first probe spans what the
// last one did, scaled to its count, so a gap of even density takes about
// two reads a window (the check whether the rest fits in one, and the
// window). Where more than a page shares one millisecond, the search steps
// down through it a read of a page at a time.

// sinkError is a write to a stream's sink that failed: the client is gone.
type sinkError struct{ err error }

func (e sinkError) Error() string { return e.err.Error() }

// sendGap sends every item above pos to sink, oldest first, and returns
// the position of the last item sent (pos when none was): on an error,
// what was sent stays sent and the next attempt resumes after it. A
// failed write to the sink is a sinkError.
func (s *Service) sendGap(ctx context.Context, sub *subscription, pos feed.Key, readTimeout time.Duration, sink StreamSink) (feed.Key, error) {
	var span int64 // the time the last window spanned
	for {
		items, more, err := s.gapWindow(ctx, sub, pos, &span, readTimeout)
		if err != nil {
			return pos, err
		}
		for _, p := range slices.Backward(items) {
			if err := sink.Item(p, encodeCursor(cursorFeed, p.Key())); err != nil {
				return pos, sinkError{err}
			}
			pos = p.Key()
			s.metrics.streamEvents.Inc()
		}
		if !more {
			return pos, nil
		}
	}
}

// gapWindow returns the oldest items above pos, newest first, at most
// streamPage of them, and whether more may lie above them: none with more
// only when items went away during the search, which the caller runs
// again. span is the time the previous window spanned, scaled to
// windowTarget items, and is set to this one's.
func (s *Service) gapWindow(ctx context.Context, sub *subscription, pos feed.Key, span *int64, readTimeout time.Duration) ([]feed.Post, bool, error) {
	read := func(before feed.Key) ([]feed.Post, error) {
		return s.readFeedWithin(ctx, sub, before, pos, streamPage+1, readTimeout)
	}
	items, err := read(store.Top)
	if err != nil || len(items) <= streamPage {
		return items, false, err
	}
	// Times t with (pos, t) holding at most streamPage items (good) and
	// more (bad). No item is older than time 0, so the search starts there
	// at the earliest, and its products stay within int64.
	base := max(pos.PublishTime, -1)
	good, bad := base, items[0].PublishTime+1
	// The first probe spans what the last window did, scaled to hold
	// windowTarget items, or at the first window a time the gap's newest
	// items suggest.
	t := base + *span
	if *span == 0 {
		t = base + max((items[0].PublishTime-items[streamPage].PublishTime)*windowTarget/streamPage, 1)
	}
	for bad-good > 1 {
		t = min(max(t, good+1), bad-1)
		got, err := read(feed.Key{PublishTime: t})
		switch n := len(got); {
		case err != nil:
			return nil, false, err
		case n >= streamPage/2 && n <= streamPage:
			return window(got, base, span)
		case n > streamPage:
			// Below the oldest item read, or half way down, whichever is
			// lower; a page all at one millisecond bounds the search there.
			oldest := got[streamPage].PublishTime
			bad, t = t, min(good+(t-good)/2, oldest)
			if got[0].PublishTime == oldest && oldest+1 < bad {
				bad = oldest + 1
			}
		case n == 0:
			good, t = t, base+2*(t-base)
		default: // interpolated from the density below t
			good, t = t, base+(t-base)*windowTarget/int64(n)
		}
		if t >= bad { // an interpolation past the bound: bisect
			t = good + (bad-good)/2
		}
	}
	// More than a page lies within the millisecond at good (or at pos):
	// step down from bad by the oldest item each read returns, until a
	// read holds the rest.
	var last []feed.Post
	for before := (feed.Key{PublishTime: bad}); ; {
		got, err := read(before)
		switch {
		case err != nil:
			return nil, false, err
		case len(got) == 0 && last == nil:
			return nil, true, nil // deleted meanwhile: the next search starts again
		case len(got) == 0:
			return window(last[1:], base, span) // the window below last[0] held exactly last[1:]
		case len(got) <= streamPage:
			return window(got, base, span)
		}
		last, before = got, got[streamPage].Key()
	}
}

// windowTarget is how many items a catch-up's probes aim a window at.
const windowTarget = 3 * streamPage / 4

// window ends gapWindow with items, recording the time above base they
// span, scaled to what would hold windowTarget items.
func window(items []feed.Post, base int64, span *int64) ([]feed.Post, bool, error) {
	if len(items) > 0 {
		*span = max((items[0].PublishTime-base)*windowTarget/int64(len(items)), 1)
	}
	return items, true, nil
}

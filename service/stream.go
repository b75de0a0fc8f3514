package service

import (
	"context"
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

// StreamSink is where a stream writes: events, oldest first, and
// keepalives. An error from either ends the stream (the client is gone).
type StreamSink interface {
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

func (h *streams) subscribe(user uint64) *subscription {
	h.startOnce.Do(h.start)
	sub := &subscription{user: user, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.byUser[user] = append(h.byUser[user], sub)
	h.mu.Unlock()
	h.svc.metrics.streamsOpen.Inc()
	return sub
}

func (h *streams) unsubscribe(sub *subscription) {
	h.mu.Lock()
	remove(h.byUser, sub.user, sub)
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
	tick := time.NewTicker(streamPoll)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		users, authors := h.watched(sh)
		err := h.poll(ctx, users, authors, tops, heads)
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
// whose keys changed and forgets users and authors no longer watched.
func (h *streams) poll(ctx context.Context, users, authors []uint64, tops, heads map[uint64]feed.Key) error {
	var changedUsers, changedAuthors []uint64
	if len(users) > 0 {
		got, n, err := h.svc.store.InboxTops(ctx, users)
		h.svc.metrics.streamWatchQueries.Add(float64(n))
		if err != nil {
			return err
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
		if err == nil {
			err = p.Err
		}
		if err != nil {
			return err
		}
		got := make(map[uint64]feed.Key, len(p.Posts))
		for _, post := range p.Posts {
			got[post.AuthorID] = post.Key()
		}
		changedAuthors = changed(heads, authors, got)
	}
	h.wakeAll(changedUsers, changedAuthors)
	return nil
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
// database's authors sends nothing and is tried again a second later, so
// no item is skipped.
//
// Returns EINVALID for a malformed since before anything is sent.
func (s *Service) StreamFeed(ctx context.Context, userID uint64, since string, readTimeout time.Duration, sink StreamSink) error {
	pos, err := decodePosition(since)
	if err != nil {
		return err
	}
	ctx = store.WithClass(ctx, store.Reads)
	sub := s.streams.subscribe(userID)
	defer s.streams.unsubscribe(sub)
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
		var gap []feed.Post
		if fromTop {
			pos, err = s.readTop(ctx, sub, readTimeout)
			fromTop = err != nil
		} else {
			gap, err = s.readGap(ctx, sub, pos, readTimeout)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			s.log.Debug("stream: read failed, retrying", "user_id", userID, "error", err)
			retry.Reset(streamRetry)
			continue
		}
		for _, p := range slices.Backward(gap) {
			if err := sink.Item(p, encodeCursor(cursorFeed, p.Key())); err != nil {
				return err
			}
			pos = p.Key()
			s.metrics.streamEvents.Inc()
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

// streamPage is how many items one read of a catch-up takes.
const streamPage = feed.MaxPageLimit

// readGap returns every item newer than pos, newest first, read a page at a
// time, each within readTimeout. The whole gap is read before anything is
// sent, so a read that fails sends nothing and the next attempt starts
// from the same position.
func (s *Service) readGap(ctx context.Context, sub *subscription, pos feed.Key, readTimeout time.Duration) ([]feed.Post, error) {
	var gap []feed.Post
	before := store.Top
	for {
		items, err := s.readFeedWithin(ctx, sub, before, pos, streamPage+1, readTimeout)
		if err != nil {
			return nil, err
		}
		more := len(items) > streamPage
		items = items[:min(len(items), streamPage)]
		gap = append(gap, items...)
		if !more {
			break
		}
		before = items[len(items)-1].Key()
	}
	return gap, nil
}

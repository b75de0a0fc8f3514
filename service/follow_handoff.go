package service

import (
	"sync"
	"time"

	"github.com/feedhq/feed/store"
)

// handoffBound bounds the follow events a process holds handed to its own
// follow loops and not yet taken; past it, follows queue their events
// unclaimed, for any worker.
const handoffBound = 4 * followEventBatch

// followHandoff passes the follow events this process's follows queue to
// its own follow loops, claimed as they were queued (store.EventLease): a
// loop applies them without claiming them, which saves the claim's
// statements (the follow still wakes the loops), and any worker takes them
// once the lease ends if this process stops or crashes first. It takes events
// only while RunWorkers runs follow loops, and holds at most handoffBound.
// A loop releases events that waited past half their lease rather than
// start them late, as it does with its own claims' steps.
type followHandoff struct {
	mu      sync.Mutex
	runs    int // RunWorkers calls running follow loops
	held    int // events handed and not taken, and room reserved
	pending map[*store.Shard][]handedEvents
}

// handedEvents are events of one shard claimed at one time.
type handedEvents struct {
	evs     []store.FollowEvent
	claimed time.Time
}

func newFollowHandoff() *followHandoff {
	return &followHandoff{pending: map[*store.Shard][]handedEvents{}}
}

// open marks follow loops as running.
func (h *followHandoff) open() {
	h.mu.Lock()
	h.runs++
	h.mu.Unlock()
}

// close marks a RunWorkers call's loops as stopped; once none run, it
// returns the events not taken, for the caller to release.
func (h *followHandoff) close() map[*store.Shard][]store.FollowEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs--
	if h.runs > 0 {
		return nil
	}
	left := map[*store.Shard][]store.FollowEvent{}
	for sh, batches := range h.pending {
		for _, b := range batches {
			left[sh] = append(left[sh], b.evs...)
			h.held -= len(b.evs)
		}
	}
	clear(h.pending)
	return left
}

// reserve makes room for up to n events, reporting false when no follow
// loop runs or the room is taken: the follows then queue their events
// unclaimed.
func (h *followHandoff) reserve(n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == 0 || h.held+n > handoffBound {
		return false
	}
	h.held += n
	return true
}

// put hands the events, claimed at claimed, to the loops of their shards,
// giving back the room reserved for reserved events beyond them. Once no
// loop runs it keeps none and returns them, for the caller to release.
func (h *followHandoff) put(shardOf func(uint64) *store.Shard, evs []store.FollowEvent, reserved int, claimed time.Time) map[*store.Shard][]store.FollowEvent {
	byShard := map[*store.Shard][]store.FollowEvent{}
	for _, ev := range evs {
		sh := shardOf(ev.UserID)
		byShard[sh] = append(byShard[sh], ev)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == 0 {
		h.held -= reserved
		return byShard
	}
	h.held -= reserved - len(evs)
	for sh, part := range byShard {
		h.pending[sh] = append(h.pending[sh], handedEvents{evs: part, claimed: claimed})
	}
	return nil
}

// take returns up to limit events handed to the loops of sh, the earliest
// handed first, and when the earliest of them was claimed.
func (h *followHandoff) take(sh *store.Shard, limit int) ([]store.FollowEvent, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	batches := h.pending[sh]
	if len(batches) == 0 {
		return nil, time.Time{}
	}
	claimed := batches[0].claimed
	var out []store.FollowEvent
	for len(batches) > 0 && len(out) < limit {
		b := &batches[0]
		n := min(len(b.evs), limit-len(out))
		out = append(out, b.evs[:n]...)
		if b.evs = b.evs[n:]; len(b.evs) == 0 {
			batches = batches[1:]
		}
	}
	if len(batches) == 0 {
		delete(h.pending, sh)
	} else {
		h.pending[sh] = batches
	}
	h.held -= len(out)
	return out, claimed
}

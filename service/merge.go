package service

import (
	"container/heap"
	"slices"

	"github.com/feedhq/feed"
)

// mergeNewest merges lists of posts into one newest-first list with each
// content id once, dropping posts below floor (nil keeps all), and returns
// its first n posts. A post can sit in an inbox and in its author's outbox
// at once; both copies carry the same key, so they sort next to each other.
// When the lists hold many more than n posts (a page merging dozens of
// outboxes), a heap picks the n newest before anything is sorted, and a
// list that is newest first is left at its first post too old for it.
func mergeNewest(n int, floor *feed.Key, lists ...[]feed.Post) []feed.Post {
	if n <= 0 {
		return nil
	}
	total := 0
	for _, l := range lists {
		total += len(l)
	}
	out := make([]feed.Post, 0, min(total, 2*n+1))
	var h *oldestFirst
	if total > 2*n {
		h = &oldestFirst{in: map[uint64]bool{}}
	}
	for _, l := range lists {
		sorted := h != nil && slices.IsSortedFunc(l, feed.NewestFirst)
		for _, p := range l {
			if floor != nil && p.Key().Less(*floor) {
				continue
			}
			if h == nil {
				out = append(out, p)
			} else if h.offer(p, n) && sorted {
				break // the rest of the list is older still
			}
		}
	}
	if h != nil {
		out = append(out, h.posts...)
	}
	slices.SortFunc(out, feed.NewestFirst)
	out = slices.CompactFunc(out, func(a, b feed.Post) bool { return a.ContentID == b.ContentID })
	return out[:min(n, len(out))]
}

// oldestFirst is a min-heap by key (the oldest post at the root) of the
// newest distinct posts offered so far.
type oldestFirst struct {
	posts []feed.Post
	in    map[uint64]bool // content ids in posts
}

func (h *oldestFirst) Len() int           { return len(h.posts) }
func (h *oldestFirst) Less(i, j int) bool { return h.posts[i].Key().Less(h.posts[j].Key()) }
func (h *oldestFirst) Swap(i, j int)      { h.posts[i], h.posts[j] = h.posts[j], h.posts[i] }
func (h *oldestFirst) Push(x any)         { h.posts = append(h.posts, x.(feed.Post)) }
func (h *oldestFirst) Pop() any {
	p := h.posts[len(h.posts)-1]
	h.posts = h.posts[:len(h.posts)-1]
	return p
}

// offer keeps p if it is among the n newest distinct posts offered, and
// reports whether p was left out for being older than all n.
func (h *oldestFirst) offer(p feed.Post, n int) (older bool) {
	switch {
	case h.in[p.ContentID]:
		return false // the other copy of a post held already
	case len(h.posts) < n:
	case h.posts[0].Key().Less(p.Key()):
		delete(h.in, heap.Pop(h).(feed.Post).ContentID)
	default:
		return true
	}
	heap.Push(h, p)
	h.in[p.ContentID] = true
	return false
}

// olderOf returns the older of two keys: the tighter of two "older than" bounds.
func olderOf(a, b feed.Key) feed.Key {
	if a.Less(b) {
		return a
	}
	return b
}

// newerOf returns the newer of two keys: the tighter of two "at or above"
// bounds.
func newerOf(a, b feed.Key) feed.Key {
	if a.Less(b) {
		return b
	}
	return a
}

package service

import (
	"slices"

	"github.com/feedhq/feed"
)

// mergeNewest merges lists of posts into one newest-first list with each
// content id once, dropping posts below floor (nil keeps all), and returns
// its first n posts. A post can sit in an inbox and in its author's outbox
// at once; both copies carry the same key, so they come out of the merge
// one after the other. The lists are merged k ways, their heads in a heap,
// so a page merging dozens of outboxes takes about n steps, not one per
// post offered; a list that is not newest first (one read from many
// outboxes at once) is sorted first, in a copy: the lists are not changed.
func mergeNewest(n int, floor *feed.Key, lists ...[]feed.Post) []feed.Post {
	if n <= 0 {
		return nil
	}
	h := make(newestHeads, 0, len(lists))
	for _, l := range lists {
		if len(l) == 0 {
			continue
		}
		if !slices.IsSortedFunc(l, feed.NewestFirst) {
			l = slices.SortedFunc(slices.Values(l), feed.NewestFirst)
		}
		h = append(h, l)
	}
	h.init()
	out := make([]feed.Post, 0, n)
	for len(h) > 0 && len(out) < n {
		p := h[0][0]
		if floor != nil && p.Key().Less(*floor) {
			break // every head is older still
		}
		if len(out) == 0 || out[len(out)-1].ContentID != p.ContentID {
			out = append(out, p)
		}
		if h[0] = h[0][1:]; len(h[0]) == 0 {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		h.down(0)
	}
	return out
}

// newestHeads is a heap of non-empty newest-first lists by their first
// post, the newest at the root.
type newestHeads [][]feed.Post

func (h newestHeads) newer(i, j int) bool { return h[j][0].Key().Less(h[i][0].Key()) }

func (h newestHeads) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// down moves the list at i down to its place.
func (h newestHeads) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h.newer(r, c) {
			c = r
		}
		if !h.newer(c, i) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
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

package service

import (
	"slices"

	"github.com/feedhq/feed"
)

// mergeNewest merges lists of posts into one newest-first list with each
// content id once, dropping posts below floor (nil keeps all). A post can
// sit in an inbox and in its author's outbox at once; both copies carry the
// same key, so they sort next to each other.
func mergeNewest(floor *feed.Key, lists ...[]feed.Post) []feed.Post {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]feed.Post, 0, n)
	for _, l := range lists {
		for _, p := range l {
			if floor == nil || !p.Key().Less(*floor) {
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b feed.Post) int {
		switch ka, kb := a.Key(), b.Key(); {
		case kb.Less(ka):
			return -1
		case ka.Less(kb):
			return 1
		}
		return 0
	})
	return slices.CompactFunc(out, func(a, b feed.Post) bool { return a.ContentID == b.ContentID })
}

// olderOf returns the older of two keys: the tighter of two "older than" bounds.
func olderOf(a, b feed.Key) feed.Key {
	if a.Less(b) {
		return a
	}
	return b
}

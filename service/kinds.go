package service

import (
	"context"
	"slices"

	"github.com/feedhq/feed"
)

// checkKinds validates a feed's kinds filter and returns it sorted, each
// kind once; nil for no filter.
//
// Returns EINVALID for more than feed.MaxKinds kinds, none, or a malformed
// one.
func checkKinds(kinds []string) ([]string, error) {
	if kinds == nil {
		return nil, nil
	}
	if len(kinds) < 1 || len(kinds) > feed.MaxKinds {
		return nil, feed.Errorf(feed.EINVALID, "kinds takes 1 to %d kinds", feed.MaxKinds)
	}
	for _, k := range kinds {
		if !feed.KindPattern.MatchString(k) {
			return nil, feed.Errorf(feed.EINVALID, "kinds: each kind must match %s", feed.KindPattern)
		}
	}
	out := slices.Clone(kinds)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// KindScanBudget is how many feed items one page with a kinds filter
// examines at most: a rare kind costs a page a bounded read, and a page
// that finds fewer matches than its limit within it ends with a cursor at
// the last item examined.
const KindScanBudget = 1000

// maxKindChunk bounds the feed items one read of a filtered page takes.
const maxKindChunk = 500

// nextKindChunk is how many feed items the next read of a filtered page
// takes: twice the page at first, then what the share of matches seen so
// far says the rest of the page needs, a quarter more, at least a page and
// at most maxKindChunk. A common kind so reads about a page, a rare one
// grows its reads toward the budget.
func nextKindChunk(limit, scanned, matched int) int {
	if scanned == 0 {
		return 2 * (limit + 1)
	}
	need := limit + 1 - matched
	n := 2 * scanned
	if matched > 0 {
		n = need * scanned / matched
		n += n / 4
	}
	return min(max(n, limit+1), maxKindChunk)
}

// readKinds returns up to limit posts of the kinds (sorted) strictly between
// since and before, newest first, and the next cursor: the last post's when
// more may follow, the last examined item's when the budget ran out first,
// "" at the end. It reads the feed itself a chunk at a time, so the page is
// exact by the same argument as an unfiltered one.
func (s *Service) readKinds(ctx context.Context, userID uint64, before, since feed.Key, limit int, kinds []string) ([]feed.Post, string, *pageRead, error) {
	var (
		out []feed.Post
		all = &pageRead{user: userID}
	)
	for scanned := 0; ; {
		chunk := min(nextKindChunk(limit, scanned, len(out)), KindScanBudget-scanned)
		items, rd, err := s.readFeed(ctx, userID, before, since, chunk)
		if err != nil {
			return nil, "", nil, err
		}
		all.missing = append(all.missing, rd.missing...)
		for _, p := range items {
			if _, ok := slices.BinarySearch(kinds, p.Kind); !ok {
				continue
			}
			if len(out) == limit {
				return out, feedCursor(out[limit-1]), all, nil
			}
			out = append(out, p)
		}
		scanned += len(items)
		switch {
		case len(items) < chunk:
			return out, "", all, nil // the feed ends above since
		case scanned >= KindScanBudget:
			return out, feedCursor(items[len(items)-1]), all, nil
		}
		before = items[len(items)-1].Key()
	}
}

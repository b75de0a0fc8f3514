package service

import (
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

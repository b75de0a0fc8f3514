package service

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/feedhq/feed"
)

func mpost(t int64, id uint64) feed.Post {
	return feed.Post{ContentID: id, AuthorID: id % 7, PublishTime: t, Kind: feed.KindPost}
}

func mergeKeys(posts []feed.Post) []feed.Key {
	out := make([]feed.Key, len(posts))
	for i, p := range posts {
		out[i] = p.Key()
	}
	return out
}

func TestMergeNewest(t *testing.T) {
	t.Parallel()
	floor := func(t int64, id uint64) *feed.Key { return &feed.Key{PublishTime: t, ContentID: id} }
	tests := []struct {
		name  string
		floor *feed.Key
		lists [][]feed.Post
		want  []feed.Post
	}{
		{name: "no lists"},
		{name: "empty lists", lists: [][]feed.Post{nil, {}, nil}},
		{
			name:  "empty lists beside a full one",
			lists: [][]feed.Post{nil, {mpost(3, 1), mpost(2, 2)}, {}},
			want:  []feed.Post{mpost(3, 1), mpost(2, 2)},
		},
		{
			name:  "interleaves two sorted lists",
			lists: [][]feed.Post{{mpost(9, 1), mpost(5, 2), mpost(1, 3)}, {mpost(8, 4), mpost(4, 5)}},
			want:  []feed.Post{mpost(9, 1), mpost(8, 4), mpost(5, 2), mpost(4, 5), mpost(1, 3)},
		},
		{
			name:  "sorts unsorted input (pull results come in no order)",
			lists: [][]feed.Post{{mpost(1, 3), mpost(9, 1), mpost(5, 2)}},
			want:  []feed.Post{mpost(9, 1), mpost(5, 2), mpost(1, 3)},
		},
		{
			name: "equal publish times order by content id descending",
			lists: [][]feed.Post{
				{mpost(5, 10), mpost(5, 30), mpost(4, 99)},
				{mpost(5, 20), mpost(5, 40), mpost(6, 1)},
			},
			want: []feed.Post{mpost(6, 1), mpost(5, 40), mpost(5, 30), mpost(5, 20), mpost(5, 10), mpost(4, 99)},
		},
		{
			name: "dedupes a post in the inbox and in its author's outbox",
			lists: [][]feed.Post{
				{mpost(7, 3), mpost(5, 2), mpost(5, 1)},
				{mpost(5, 2), mpost(4, 9)},
				{mpost(7, 3), mpost(5, 2)},
			},
			want: []feed.Post{mpost(7, 3), mpost(5, 2), mpost(5, 1), mpost(4, 9)},
		},
		{
			name:  "dedupes among many equal keys",
			lists: [][]feed.Post{{mpost(5, 3), mpost(5, 2), mpost(5, 1)}, {mpost(5, 3), mpost(5, 1)}, {mpost(5, 2), mpost(5, 1)}},
			want:  []feed.Post{mpost(5, 3), mpost(5, 2), mpost(5, 1)},
		},
		{
			name:  "nil floor keeps everything",
			lists: [][]feed.Post{{mpost(2, 1)}, {mpost(0, 1<<63), mpost(0, 1)}},
			want:  []feed.Post{mpost(2, 1), mpost(0, 1<<63), mpost(0, 1)},
		},
		{
			name:  "floor is inclusive at its key",
			floor: floor(5, 20),
			lists: [][]feed.Post{{mpost(6, 1), mpost(5, 30), mpost(5, 20), mpost(5, 10), mpost(4, 99)}, {mpost(5, 20), mpost(5, 19)}},
			want:  []feed.Post{mpost(6, 1), mpost(5, 30), mpost(5, 20)},
		},
		{
			name:  "floor drops every list's older posts",
			floor: floor(5, 0),
			lists: [][]feed.Post{{mpost(4, 1<<62)}, {mpost(5, 1), mpost(3, 3)}},
			want:  []feed.Post{mpost(5, 1)},
		},
		{
			name:  "floor above everything leaves nothing",
			floor: floor(100, 1),
			lists: [][]feed.Post{{mpost(100, 0), mpost(99, 5)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var in [][]feed.Post
			for _, l := range tt.lists {
				in = append(in, slices.Clone(l))
			}
			// Every n, so that small ones take the heap's path.
			for n := range len(tt.want) + 2 {
				got := mergeNewest(n, tt.floor, in...)
				if want := tt.want[:min(n, len(tt.want))]; !slices.Equal(got, want) {
					t.Fatalf("mergeNewest(%d) = %v, want %v", n, mergeKeys(got), mergeKeys(want))
				}
			}
			// The inputs are not reordered or changed in place.
			for i := range in {
				if !slices.Equal(in[i], tt.lists[i]) {
					t.Fatalf("input list %d changed: %v, was %v", i, mergeKeys(in[i]), mergeKeys(tt.lists[i]))
				}
			}
		})
	}
}

// TestMergeNewestRandom compares mergeNewest with a full sort of random
// lists that share posts (an inbox and outboxes), many equal times, and a
// floor, for page sizes on both sides of the heap's threshold; some lists
// are newest first, as inboxes and cached outboxes are.
func TestMergeNewestRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		var lists [][]feed.Post
		var all []feed.Post
		for range rng.IntN(6) {
			var l []feed.Post
			for range rng.IntN(40) {
				p := mpost(rng.Int64N(20), rng.Uint64N(60)+1)
				p.PublishTime = int64(p.ContentID % 20) // one key per content id
				l = append(l, p)
			}
			if rng.IntN(2) == 0 {
				slices.SortFunc(l, feed.NewestFirst)
			}
			lists = append(lists, l)
			all = append(all, l...)
		}
		var floor *feed.Key
		if rng.IntN(2) == 0 {
			floor = &feed.Key{PublishTime: rng.Int64N(20), ContentID: rng.Uint64N(60)}
		}
		var want []feed.Post
		for _, p := range all {
			if floor == nil || !p.Key().Less(*floor) {
				want = append(want, p)
			}
		}
		slices.SortFunc(want, func(a, b feed.Post) int {
			if b.Key().Less(a.Key()) {
				return -1
			} else if a.Key().Less(b.Key()) {
				return 1
			}
			return 0
		})
		want = slices.CompactFunc(want, func(a, b feed.Post) bool { return a.ContentID == b.ContentID })
		for _, n := range []int{1, 3, 21, 1000} {
			got := mergeNewest(n, floor, lists...)
			if w := want[:min(n, len(want))]; !slices.Equal(mergeKeys(got), mergeKeys(w)) {
				t.Fatalf("mergeNewest(%d) = %v, want %v", n, mergeKeys(got), mergeKeys(w))
			}
		}
	}
}

func TestMergeOlderOf(t *testing.T) {
	t.Parallel()
	k := func(t int64, id uint64) feed.Key { return feed.Key{PublishTime: t, ContentID: id} }
	tests := []struct {
		name string
		a, b feed.Key
		want feed.Key
	}{
		{"a older by time", k(1, 9), k(2, 1), k(1, 9)},
		{"b older by time", k(3, 1), k(2, 9), k(2, 9)},
		{"same time, a older by id", k(5, 1), k(5, 2), k(5, 1)},
		{"same time, b older by id", k(5, 2), k(5, 1), k(5, 1)},
		{"equal", k(5, 5), k(5, 5), k(5, 5)},
		{"top and an active_since bound", k(1<<63-1, 1<<64-1), k(1000, 0), k(1000, 0)},
		{"id zero sorts before every id of its time", k(1000, 0), k(1000, 1), k(1000, 0)},
	}
	for _, tt := range tests {
		if got := olderOf(tt.a, tt.b); got != tt.want {
			t.Errorf("%s: olderOf(%v, %v) = %v, want %v", tt.name, tt.a, tt.b, got, tt.want)
		}
		if got := olderOf(tt.b, tt.a); got != tt.want {
			t.Errorf("%s: olderOf(%v, %v) = %v, want %v (not symmetric)", tt.name, tt.b, tt.a, got, tt.want)
		}
	}
}

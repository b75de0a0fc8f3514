package store

import (
	"testing"
	"time"

	"github.com/feedhq/feed"
)

func TestOutboxEntryBelow(t *testing.T) {
	p := func(ts int64, id uint64) feed.Post { return feed.Post{PublishTime: ts, ContentID: id} }
	head := []feed.Post{p(9, 3), p(9, 2), p(8, 7), p(5, 1)}
	tests := []struct {
		name     string
		complete bool
		before   feed.Key
		from     feed.Key
		limit    int
		want     []feed.Post
		ok       bool
	}{
		{"first page fits", false, feed.Key{PublishTime: 100}, feed.Key{}, 2, head[:2], true},
		{"bound inside equal times", false, feed.Key{PublishTime: 9, ContentID: 3}, feed.Key{}, 2, head[1:3], true},
		{"runs out, more may exist", false, feed.Key{PublishTime: 9, ContentID: 2}, feed.Key{}, 5, head[2:], false},
		{"runs out, author has no more", true, feed.Key{PublishTime: 9, ContentID: 2}, feed.Key{}, 5, head[2:], true},
		{"below everything, complete", true, feed.Key{PublishTime: 5, ContentID: 1}, feed.Key{}, 3, nil, true},
		{"below everything, incomplete", false, feed.Key{PublishTime: 1}, feed.Key{}, 3, nil, false},
		{"cut at from, incomplete entry", false, feed.Key{PublishTime: 100}, feed.Key{PublishTime: 8, ContentID: 7}, 5, head[:3], true},
		{"cut at from, limit first", false, feed.Key{PublishTime: 100}, feed.Key{PublishTime: 8, ContentID: 7}, 2, head[:2], true},
		{"from below the entry", false, feed.Key{PublishTime: 100}, feed.Key{PublishTime: 4}, 5, head, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := outboxEntry{posts: head, complete: tt.complete}.below(tt.before, tt.from, tt.limit)
			if ok != tt.ok || len(got) != len(tt.want) {
				t.Fatalf("below = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("below = %v; want %v", got, tt.want)
				}
			}
		})
	}
}

func TestOutboxCacheExpiresAndEvicts(t *testing.T) {
	c := newOutboxCache(time.Second, time.Now)
	t0 := time.Unix(1000, 0)
	c.put(1, outboxEntry{at: t0, complete: true})
	if _, ok := c.get(1, t0.Add(999*time.Millisecond)); !ok {
		t.Fatal("entry missing within its ttl")
	}
	if _, ok := c.get(1, t0.Add(time.Second)); ok {
		t.Fatal("entry served after its ttl")
	}
	if _, ok := c.get(1, t0.Add(-time.Millisecond)); ok {
		t.Fatal("entry served to a clock before it was made")
	}
	c.drop(1)
	if _, ok := c.get(1, t0); ok {
		t.Fatal("dropped entry served")
	}
	for a := range uint64(outboxCacheAuthors + 5) {
		c.put(a, outboxEntry{at: t0})
	}
	if n := len(c.entries); n > outboxCacheAuthors {
		t.Fatalf("cache holds %d authors, bound %d", n, outboxCacheAuthors)
	}
}

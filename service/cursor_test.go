package service

import (
	"encoding/base64"
	"encoding/binary"
	"testing"

	"github.com/feedhq/feed"
)

var cursorKinds = []byte{cursorFeed, cursorPosts, cursorFollowing, cursorFollowers}

// rawCursor builds a cursor from its parts, valid or not.
func rawCursor(version, kind byte, t int64, id uint64, extra ...byte) string {
	b := make([]byte, 2, cursorLen+len(extra))
	b[0], b[1] = version, kind
	b = binary.BigEndian.AppendUint64(b, uint64(t))
	b = binary.BigEndian.AppendUint64(b, id)
	return base64.RawURLEncoding.EncodeToString(append(b, extra...))
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	keys := []feed.Key{
		{PublishTime: 0, ContentID: 1},
		{PublishTime: 1689089522000, ContentID: 32850},
		{PublishTime: 1689089522000, ContentID: 1<<64 - 1},
		{PublishTime: 1<<63 - 1, ContentID: 1<<64 - 1}, // store.Top
		{PublishTime: -1, ContentID: 0},
		{ContentID: 42}, // follow lists use only the id
	}
	for _, kind := range cursorKinds {
		for _, k := range keys {
			s := encodeCursor(kind, k)
			if s == "" {
				t.Fatalf("encodeCursor(%q, %v) is empty, which means the start of a list", kind, k)
			}
			got, err := decodeCursor(kind, s, feed.Key{PublishTime: 7, ContentID: 7})
			if err != nil {
				t.Fatalf("decodeCursor(%q, encodeCursor(%v)): %v", kind, k, err)
			}
			if got != k {
				t.Fatalf("kind %q: round trip of %v gave %v", kind, k, got)
			}
			if s != rawCursor(cursorVersion, kind, k.PublishTime, k.ContentID) {
				t.Fatalf("kind %q: encoding of %v is %q, not the documented layout", kind, k, s)
			}
		}
	}
}

func TestCursorEmptyIsStart(t *testing.T) {
	t.Parallel()
	start := feed.Key{PublishTime: 123, ContentID: 456}
	for _, kind := range cursorKinds {
		got, err := decodeCursor(kind, "", start)
		if err != nil || got != start {
			t.Fatalf("decodeCursor(%q, \"\") = %v, %v; want the start key %v", kind, got, err, start)
		}
	}
}

func TestCursorRejects(t *testing.T) {
	t.Parallel()
	valid := encodeCursor(cursorFeed, feed.Key{PublishTime: 1689089522000, ContentID: 32850})
	std := base64.StdEncoding.EncodeToString([]byte{cursorVersion, cursorFeed, 0xfb, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	tests := []struct {
		name, cursor string
		kind         byte
	}{
		{"feed cursor given to posts", valid, cursorPosts},
		{"feed cursor given to following", valid, cursorFollowing},
		{"posts cursor given to feed", encodeCursor(cursorPosts, feed.Key{PublishTime: 1, ContentID: 2}), cursorFeed},
		{"followers cursor given to following", encodeCursor(cursorFollowers, feed.Key{ContentID: 9}), cursorFollowing},
		{"not base64", "not a cursor!", cursorFeed},
		{"padded base64", valid + "==", cursorFeed},
		{"standard alphabet", std, cursorFeed},
		{"one character", "A", cursorFeed},
		{"truncated", valid[:len(valid)-4], cursorFeed},
		{"too long", rawCursor(cursorVersion, cursorFeed, 1, 2, 0), cursorFeed},
		{"too short", base64.RawURLEncoding.EncodeToString([]byte{cursorVersion, cursorFeed, 1}), cursorFeed},
		{"version 0", rawCursor(0, cursorFeed, 1, 2), cursorFeed},
		{"version 2", rawCursor(2, cursorFeed, 1, 2), cursorFeed},
		{"unknown kind", rawCursor(cursorVersion, 'x', 1, 2), cursorFeed},
		{"whitespace", " " + valid, cursorFeed},
		{"line break inside", valid[:8] + "\n" + valid[8:], cursorFeed},
		{"trailing line break", valid + "\r\n", cursorFeed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := decodeCursor(tt.kind, tt.cursor, feed.Key{})
			if code := feed.ErrorCode(err); code != feed.EINVALID {
				t.Fatalf("decodeCursor(%q, %q) = %v, %v; want %s", tt.kind, tt.cursor, k, err, feed.EINVALID)
			}
		})
	}
}

// FuzzDecodeCursor checks that decoding never panics, that everything it
// rejects is EINVALID, and that a cursor it accepts is the canonical
// encoding of the key it yields: one position has exactly one cursor.
func FuzzDecodeCursor(f *testing.F) {
	f.Add("", byte(0))
	f.Add(encodeCursor(cursorFeed, feed.Key{PublishTime: 1689089522000, ContentID: 32850}), byte(0))
	f.Add(encodeCursor(cursorPosts, feed.Key{PublishTime: 1<<63 - 1, ContentID: 1<<64 - 1}), byte(1))
	f.Add(encodeCursor(cursorFollowing, feed.Key{ContentID: 7}), byte(2))
	f.Add(encodeCursor(cursorFollowers, feed.Key{ContentID: 7}), byte(3))
	f.Add(rawCursor(2, cursorFeed, 1, 2), byte(0))
	f.Add("AQ\nZgAAAYlFVq3QAAAAAAAAgFI", byte(0))
	f.Add("====", byte(0))
	f.Fuzz(func(t *testing.T, s string, k byte) {
		kind := cursorKinds[int(k)%len(cursorKinds)]
		start := feed.Key{PublishTime: 11, ContentID: 13}
		key, err := decodeCursor(kind, s, start)
		if err != nil {
			if code := feed.ErrorCode(err); code != feed.EINVALID {
				t.Fatalf("decodeCursor(%q) failed with %s (%v), want %s", s, code, err, feed.EINVALID)
			}
			return
		}
		if s == "" {
			if key != start {
				t.Fatalf("empty cursor gave %v, want the start %v", key, start)
			}
			return
		}
		if again := encodeCursor(kind, key); again != s {
			t.Fatalf("decodeCursor accepted %q as %v, which encodes as %q", s, key, again)
		}
	})
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/feedhq/feed"
)

// TestAppendPostPageMatchesEncodingJSON holds the hand-written page encoder
// to the bytes c.JSON would send for the same page.
func TestAppendPostPageMatchesEncodingJSON(t *testing.T) {
	post := func(kind string) feed.Post {
		return feed.Post{ContentID: 42, AuthorID: 7, PublishTime: 1_700_000_000_123, Kind: kind}
	}
	tests := []struct {
		name    string
		posts   []feed.Post
		next    string
		missing []uint64
	}{
		{"empty last page", nil, "", nil},
		{"empty page with cursor", []feed.Post{}, "abc", nil},
		{"one post", []feed.Post{post("post")}, "", nil},
		{"extremes", []feed.Post{{ContentID: math.MaxUint64, AuthorID: 1, PublishTime: math.MinInt64, Kind: "a"},
			{ContentID: 1, AuthorID: math.MaxUint64, PublishTime: math.MaxInt64, Kind: "z9_.-"}}, "eyJ0IjoxfQ", nil},
		{"kind needing escapes", []feed.Post{post(`q"b\s<t>&`), post("tab\tnl\n"), post("é\u2028"), post("bad\xffutf8")}, "x", nil},
		{"cursor needing escapes", []feed.Post{post("post")}, `<"&>`, nil},
		{"partial", []feed.Post{post("post")}, "abc", []uint64{12, 34}},
		{"partial, empty last page", nil, "", []uint64{math.MaxUint64}},
		{"no missing authors", []feed.Post{post("post")}, "abc", []uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(newPostPage(tc.posts, tc.next, tc.missing)); err != nil {
				t.Fatal(err)
			}
			got := appendPostPage([]byte("prefix"), tc.posts, tc.next, tc.missing)
			if !bytes.Equal(got, append([]byte("prefix"), want.Bytes()...)) {
				t.Fatalf("got  %s\nwant %s", got, want.Bytes())
			}
		})
	}
}

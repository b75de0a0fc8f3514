package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
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
		name string
		page feed.FeedPage
	}{
		{"empty last page", feed.FeedPage{}},
		{"empty page with cursor", feed.FeedPage{Items: []feed.Post{}, Next: "abc"}},
		{"one post", feed.FeedPage{Items: []feed.Post{post("post")}, Top: "top"}},
		{"extremes", feed.FeedPage{Items: []feed.Post{{ContentID: math.MaxUint64, AuthorID: 1, PublishTime: math.MinInt64, Kind: "a"},
			{ContentID: 1, AuthorID: math.MaxUint64, PublishTime: math.MaxInt64, Kind: "z9_.-"}}, Next: "eyJ0IjoxfQ", Top: "t"}},
		{"kind needing escapes", feed.FeedPage{Items: []feed.Post{post(`q"b\s<t>&`), post("tab\tnl\n"), post("é\u2028"), post("bad\xffutf8")}, Next: "x"}},
		{"cursor needing escapes", feed.FeedPage{Items: []feed.Post{post("post")}, Next: `<"&>`, Top: `&"<`}},
		{"partial", feed.FeedPage{Items: []feed.Post{post("post")}, Next: "abc", MissingAuthors: []uint64{12, 34}}},
		{"partial, empty last page", feed.FeedPage{MissingAuthors: []uint64{math.MaxUint64}}},
		{"no missing authors", feed.FeedPage{Items: []feed.Post{post("post")}, Next: "abc", MissingAuthors: []uint64{}}},
	}
	for _, tc := range tests {
		for _, isFeed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/feed=%v", tc.name, isFeed), func(t *testing.T) {
				var want bytes.Buffer
				if err := json.NewEncoder(&want).Encode(newPostPage(tc.page, isFeed)); err != nil {
					t.Fatal(err)
				}
				got := appendPostPage([]byte("prefix"), tc.page, isFeed)
				if !bytes.Equal(got, append([]byte("prefix"), want.Bytes()...)) {
					t.Fatalf("got  %s\nwant %s", got, want.Bytes())
				}
			})
		}
	}
}

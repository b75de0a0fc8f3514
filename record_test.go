package feed_test

import (
	"strings"
	"testing"

	"github.com/feedhq/feed"
)

func TestParseRecord(t *testing.T) {
	const maxTime = 2_000_000_000_000
	good := map[string]feed.Record{
		`{"type":"follow","user_id":"1","author_id":2}`:                                 {Type: "follow", UserID: 1, AuthorID: 2},
		`{"type":"follow","user_id":1,"author_id":"2","followed_at":5}`:                 {Type: "follow", UserID: 1, AuthorID: 2, FollowedAt: 5},
		`{"type":"post","author_id":"2","content_id":"10","publish_time":7}`:            {Type: "post", AuthorID: 2, ContentID: 10, PublishTime: 7, Kind: "post"},
		`{"type":"post","author_id":2,"content_id":10,"publish_time":7,"kind":"photo"}`: {Type: "post", AuthorID: 2, ContentID: 10, PublishTime: 7, Kind: "photo"},
		`{"type":"mute","user_id":"1","author_id":"3"}`:                                 {Type: "mute", UserID: 1, AuthorID: 3},
		`{"type":"hide","author_id":"2","user_id":"4"}`:                                 {Type: "hide", UserID: 4, AuthorID: 2},
		`{"type":"marker","user_id":"1","content_id":"10","publish_time":9}`:            {Type: "marker", UserID: 1, ContentID: 10, PublishTime: 9},
	}
	for line, want := range good {
		got, err := feed.ParseRecord([]byte(line), maxTime)
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", line, got, err, want)
		}
		again, err := feed.ParseRecord(got.AppendJSON(nil), maxTime)
		if err != nil || again != got {
			t.Errorf("%s: round trip %s gave %+v, %v", line, got.AppendJSON(nil), again, err)
		}
	}
	bad := map[string]string{
		`[]`:                              "not a JSON object",
		`{"type":"like"}`:                 "type must be",
		`{"user_id":"1"}`:                 "type must be",
		`{"type":"follow","user_id":"1"}`: "author_id is required",
		`{"type":"follow","user_id":"1","author_id":"1"}`:                                   "must differ",
		`{"type":"follow","user_id":"0","author_id":"1"}`:                                   "user_id must be",
		`{"type":"follow","user_id":"x","author_id":"1"}`:                                   "user_id must be",
		`{"type":"follow","user_id":"1","author_id":"2","kind":"post"}`:                     `no field "kind"`,
		`{"type":"post","author_id":"2","content_id":"10"}`:                                 "publish_time is required",
		`{"type":"post","author_id":"2","content_id":"10","publish_time":-1}`:               "publish_time must be",
		`{"type":"post","author_id":"2","content_id":"10","publish_time":2000000000001}`:    "publish_time must be",
		`{"type":"post","author_id":"2","content_id":"10","publish_time":1,"kind":"Photo"}`: "kind must be",
		`{"type":"marker","user_id":"1","content_id":"10"}`:                                 "publish_time is required",
	}
	for line, want := range bad {
		_, err := feed.ParseRecord([]byte(line), maxTime)
		if feed.ErrorCode(err) != feed.EINVALID || !strings.Contains(feed.ErrorMessage(err), want) {
			t.Errorf("%s: got %v, want EINVALID with %q", line, err, want)
		}
	}
}

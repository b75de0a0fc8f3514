package client

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestPageDecodeMatchesEncodingJSON holds the hand parser of post pages to
// encoding/json's result on what it accepts, and checks that it accepts the
// server's own form.
func TestPageDecodeMatchesEncodingJSON(t *testing.T) {
	item := `{"content_id":"767819750794182656","author_id":"200","publish_time":1795598446995,"kind":"post"}`
	tests := []struct {
		body string
		fast bool // the hand parser must take it
	}{
		{`{"items":[],"next_cursor":null}` + "\n", true},
		{`{"items":[],"next_cursor":null,"top_cursor":null}` + "\n", true},
		{`{"items":[` + item + `],"next_cursor":"AXAAAAGJRZS9OAAAAAAAAIBT"}` + "\n", true},
		{`{"items":[` + item + `,` + item + `],"next_cursor":"a","top_cursor":"b","partial":true,"missing_authors":["300","400"]}` + "\n", true},
		{`{"items":[{"content_id":"1","author_id":"2","publish_time":-0,"kind":"x"}],"next_cursor":null}`, true},
		{`{"next_cursor":"a","items":[{"kind":"k","publish_time":9223372036854775807,"author_id":"1","content_id":"2"}]}`, true},
		{`{"items":[{"content_id":"1"}],"partial":false,"missing_authors":[]}`, true},
		{`{}`, true},
		// Forms left to encoding/json.
		{` {"items":[],"next_cursor":null}`, false},
		{`{"items": [],"next_cursor":null}`, false},
		{`{"items":[],"next_cursor":null}` + "\n\n", false},
		{`{"items":null,"next_cursor":null}`, false},
		{`{"Items":[` + item + `],"next_cursor":null}`, false},
		{`{"items":[` + item + `],"items":[],"next_cursor":null}`, false},
		{`{"items":[{"content_id":"1","content_id":"2"}]}`, false},
		{`{"items":[{"content_id":"1","extra":3,"kind":"post"}],"next_cursor":"x"}`, false},
		{`{"items":[{"content_id":"a\"b","kind":"post"}]}`, false},
		{`{"items":[{"content_id":"1","kind":"caf\u00e9"}]}`, false},
		{`{"items":[{"content_id":"1","kind":"café"}]}`, false},
		{`{"items":[{"publish_time":1.5}]}`, false},
		{`{"items":[{"publish_time":1e3}]}`, false},
		{`{"items":[{"publish_time":01}]}`, false},
		{`{"items":[{"publish_time":9223372036854775808}]}`, false},
		{`{"items":[{"publish_time":"1"}]}`, false},
		{`{"items":[` + item + `],"next_cursor":null,"missing_authors":null}`, false},
		{`{"items":[],"partial":1}`, false},
		{`{"items":[` + item, false},
		{`{"items":[],"next_cursor":"abc`, false},
		{`{"items":[]}x`, false},
		{`[]`, false},
		{``, false},
	}
	for _, tc := range tests {
		t.Run(tc.body, func(t *testing.T) {
			if _, ok := parsePostPage([]byte(tc.body), 0); ok != tc.fast {
				t.Fatalf("hand parser took it: %v, want %v", ok, tc.fast)
			}
			for _, hint := range []int{-1, 0, 1, 20, 1 << 40} {
				var want Page[Post]
				wantErr := json.Unmarshal([]byte(tc.body), &want)
				var got Page[Post]
				gotErr := pageBody[Post]{page: &got, limit: hint}.decode([]byte(tc.body))
				if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
					t.Fatalf("hint %d: error %v, want %v", hint, gotErr, wantErr)
				}
				if wantErr == nil && !reflect.DeepEqual(got, want) {
					t.Fatalf("hint %d: got  %+v\nwant %+v", hint, got, want)
				}
			}
		})
	}
}

// TestPageDecodeOtherItems checks that pages of other items still decode
// through encoding/json.
func TestPageDecodeOtherItems(t *testing.T) {
	body := `{"items":[{"author_id":"200","followed_at":1795598447067}],"next_cursor":null}`
	var p Page[Following]
	if err := (pageBody[Following]{page: &p, limit: 5}).decode([]byte(body)); err != nil {
		t.Fatal(err)
	}
	want := Page[Following]{Items: []Following{{AuthorID: "200", FollowedAt: 1795598447067}}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	if err := (pageBody[Following]{page: &p}).decode([]byte(strings.TrimSuffix(body, "}"))); err == nil {
		t.Fatal("truncated page decoded")
	}
}

// BenchmarkPageDecode decodes a feed page of 20 posts as the server writes
// it, by hand and through encoding/json.
func BenchmarkPageDecode(b *testing.B) {
	var body strings.Builder
	body.WriteString(`{"items":[`)
	for i := range 20 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"content_id":"46116860184273880` + strconv.Itoa(10+i) + `","author_id":"2000` + strconv.Itoa(10+i) + `","publish_time":1795598446995,"kind":"post"}`)
	}
	body.WriteString(`],"next_cursor":"AWYAAAGJRZTBIAAAAAAAAJxB","top_cursor":"AWYAAAGiEgHxkwqn1_7JncAA"}` + "\n")
	data := []byte(body.String())
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p Page[Post]
			if err := (pageBody[Post]{page: &p, limit: 20}).decode(data); err != nil || len(p.Items) != 20 {
				b.Fatal(err, len(p.Items))
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p Page[Post]
			if err := json.Unmarshal(data, &p); err != nil || len(p.Items) != 20 {
				b.Fatal(err, len(p.Items))
			}
		}
	})
}

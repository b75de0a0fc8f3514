package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRedisAnchor drives the anchor against a real Redis
// (FEED_TEST_REDIS_ADDR, default 127.0.0.1:6379) through feedd's paths.
func TestRedisAnchor(t *testing.T) {
	addr := os.Getenv("FEED_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", addr, err)
	}
	keys := anchorKeys(fmt.Sprintf("feedbench-test:%d:", os.Getpid()))
	t.Cleanup(func() {
		ks, _ := rdb.Keys(ctx, string(keys)+"*").Result()
		if len(ks) > 0 {
			rdb.Del(ctx, ks...)
		}
		rdb.Close()
	})
	s := &anchorServer{rdb: rdb, keys: keys, limit: 5}
	srv := httptest.NewServer(s.routes())
	t.Cleanup(srv.Close)
	do := func(method, path, body string, want int) string {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		return string(b)
	}
	ids := func(body string) (out []string, next *string) {
		var p anchorPage
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("not a page: %s", body)
		}
		for _, it := range p.Items {
			out = append(out, it.ContentID)
		}
		return out, p.NextCursor
	}

	out := do("POST", "/v1/follows", `{"follows":[{"user_id":"1","author_id":"2"},{"user_id":1,"author_id":2},{"user_id":"3","author_id":"3"}]}`, 200)
	if !strings.Contains(out, `"created"`) || !strings.Contains(out, `"exists"`) || !strings.Contains(out, `"error"`) {
		t.Fatalf("follows: %s", out)
	}
	// Posts at equal times sort by content id, descending.
	for i, at := range []int{100, 200, 200, 300, 400, 500, 600} {
		p := do("POST", "/v1/users/2/posts", fmt.Sprintf(`{"content_id":"%d","publish_time":%d}`, 10+i, at), 201)
		if !strings.Contains(p, fmt.Sprintf(`"content_id":"%d"`, 10+i)) || !strings.Contains(p, `"kind":"post"`) {
			t.Fatalf("post: %s", p)
		}
	}
	do("POST", "/v1/users/2/posts", `{"content_id":"10"}`, 409)
	first, next := ids(do("GET", "/v1/users/1/feed?limit=2", "", 200))
	if !slices.Equal(first, []string{"16", "15"}) || next == nil {
		t.Fatalf("first page %v, next %v", first, next)
	}
	// The inbox limit (5) keeps the newest five.
	var all []string
	for cur := ""; ; {
		page, next := ids(do("GET", "/v1/users/1/feed?limit=2&cursor="+cur, "", 200))
		all = append(all, page...)
		if next == nil {
			break
		}
		cur = *next
	}
	if want := []string{"16", "15", "14", "13", "12"}; !slices.Equal(all, want) {
		t.Fatalf("walk %v, want %v", all, want)
	}
	do("DELETE", "/v1/users/2/posts/15", "", 204)
	do("DELETE", "/v1/users/3/posts/14", "", 404)
	if page, _ := ids(do("GET", "/v1/users/1/feed", "", 200)); !slices.Equal(page, []string{"16", "14", "13", "12"}) {
		t.Fatalf("after delete: %v", page)
	}
	// A follow copies the author's newest posts; an unfollow takes them out.
	do("PUT", "/v1/users/4/following/2", "", 204)
	if page, _ := ids(do("GET", "/v1/users/4/feed", "", 200)); len(page) != 5 || page[0] != "16" {
		t.Fatalf("after follow: %v", page)
	}
	do("DELETE", "/v1/users/1/following/2", "", 204)
	if page, _ := ids(do("GET", "/v1/users/1/feed", "", 200)); len(page) != 0 {
		t.Fatalf("after unfollow: %v", page)
	}
	do("GET", "/v1/users/0/feed", "", 400)
	do("GET", "/v1/users/1/feed?cursor=nope", "", 400)
}

package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi"
)

// sseEvent is one event of a stream as a client parses it.
type sseEvent struct{ id, event, data string }

// openSSE opens the user's stream with the query and Last-Event-ID (if
// any) and returns its events as they are parsed, and a func that hangs up.
func openSSE(t *testing.T, v *env, user uint64, query, lastID string) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.srv.URL+"/v1/users/"+u(user)+"/feed/stream?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := v.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	events := make(chan sseEvent, 100)
	go func() {
		defer close(events)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var e sseEvent
		for sc.Scan() {
			field, value, _ := strings.Cut(sc.Text(), ": ")
			switch field {
			case "id":
				e.id = value
			case "event":
				e.event = value
			case "data":
				e.data = value
			case "":
				if e.event != "" {
					events <- e
				}
				e = sseEvent{}
			}
		}
	}()
	return events, cancel
}

// nextEvents waits for n item events; the wait only bounds a failing test.
func nextEvents(t *testing.T, events <-chan sseEvent, n int) []post {
	t.Helper()
	var out []post
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("stream ended after %d events, want %d", len(out), n)
			}
			var p post
			if e.event != "item" || e.id == "" || json.Unmarshal([]byte(e.data), &p) != nil {
				t.Fatalf("bad event %+v", e)
			}
			out = append(out, p)
		case <-timeout:
			t.Fatalf("got %d events, want %d", len(out), n)
		}
	}
	return out
}

// TestStream reads the feed stream over HTTP with the token as a query
// parameter: the feed first, oldest first, then new posts, past the read
// deadline; a reconnect with Last-Event-ID resumes after the last event;
// bad positions and tokens are refused before the stream starts.
func TestStream(t *testing.T) {
	t.Parallel()
	const token = "s3cret"
	v := setup(t, envOpts{token: token})
	t.Cleanup(v.svc.CloseStreams) // before the server's Close, which waits for handlers
	user := v.id()
	base := time.Now().Add(-time.Hour).UnixMilli()
	var posts []post
	for i := range 3 {
		posts = append(posts, v.publishAt(t, user, v.id(), base+int64(i)))
	}
	q := url.Values{"access_token": {token}}.Encode()
	events, hangUp := openSSE(t, v, user, q, "")
	if got := nextEvents(t, events, 3); got[0] != posts[0] || got[1] != posts[1] || got[2] != posts[2] {
		t.Fatalf("catch-up %v, want %v", postIDs(got), postIDs(posts))
	}
	time.Sleep(httpapi.ReadDeadlineDefault + 500*time.Millisecond) // the stream outlives a request deadline
	p := v.publish(t, user, `{}`, http.StatusCreated)
	var last sseEvent
	select {
	case last = <-events:
	case <-time.After(30 * time.Second):
		t.Fatal("no event for a new post")
	}
	if !strings.Contains(last.data, `"content_id":"`+p.ContentID+`"`) {
		t.Fatalf("event %+v, want post %s", last, p.ContentID)
	}
	hangUp()

	later := []post{v.publish(t, user, `{}`, http.StatusCreated), v.publish(t, user, `{}`, http.StatusCreated)}
	// Last-Event-ID wins over since, as a reconnecting EventSource sends both.
	var firstPage page[post]
	v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?limit=5", "").decode(t, &firstPage)
	events, hangUp = openSSE(t, v, user, q+"&since="+url.QueryEscape(*firstPage.NextCursor), last.id)
	defer hangUp()
	if got := nextEvents(t, events, 2); got[0] != later[0] || got[1] != later[1] {
		t.Fatalf("resumed %v, want %v", postIDs(got), postIDs(later))
	}

	call := func(method, target, auth, lastID string) resp {
		t.Helper()
		req, err := http.NewRequest(method, v.srv.URL+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		return v.send(t, req)
	}
	stream := "/v1/users/" + u(user) + "/feed/stream"
	wantError(t, call(http.MethodGet, stream, "", ""), http.StatusUnauthorized, "unauthorized")
	wantError(t, call(http.MethodGet, stream+"?access_token=wrong", "", ""), http.StatusUnauthorized, "unauthorized")
	wantError(t, call(http.MethodGet, stream+"?"+q, "Bearer wrong", ""), http.StatusUnauthorized, "unauthorized")
	wantError(t, call(http.MethodGet, "/v1/users/"+u(user)+"/feed?"+q, "", ""), http.StatusUnauthorized, "unauthorized")
	wantError(t, call(http.MethodGet, stream, "Bearer "+token, "nope"), http.StatusBadRequest, "invalid_argument")
	wantError(t, call(http.MethodGet, stream+"?since=nope", "Bearer "+token, ""), http.StatusBadRequest, "invalid_argument")
	wantError(t, call(http.MethodGet, "/v1/users/0/feed/stream", "Bearer "+token, ""), http.StatusBadRequest, "invalid_argument")
	r := call(http.MethodHead, stream, "Bearer "+token, "")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HEAD: %d %s", r.status, r.header.Get("Content-Type"))
	}
}

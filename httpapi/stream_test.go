package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/service"
)

// openStream opens the user's stream with the token as ?access_token=
// and returns its events and a func that hangs up.
func openStream(t *testing.T, v *env, user uint64, since, lastID string) (<-chan client.Event, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := client.New(v.srv.URL, v.token, v.srv.Client())
	events, err := c.StreamFeed(ctx, user, client.StreamRequest{LastEventID: lastID, Since: since, TokenInQuery: true})
	if err != nil {
		t.Fatal(err)
	}
	return events, cancel
}

// nextEvents waits for n events; the wait only bounds a failing test.
func nextEvents(t *testing.T, events <-chan client.Event, n int) ([]post, string) {
	t.Helper()
	var out []post
	last := ""
	timeout := time.After(wait.Deadline)
	for len(out) < n {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("stream ended after %d events, want %d", len(out), n)
			}
			out = append(out, post(e.Post))
			last = e.ID
		case <-timeout:
			t.Fatalf("got %d events, want %d", len(out), n)
		}
	}
	return out, last
}

// TestStream reads the feed stream over HTTP with the token as a query
// parameter: the feed above a position first, oldest first, then new posts, past the read
// deadline; a reconnect with Last-Event-ID resumes after the last event;
// bad positions and tokens are refused before the stream starts.
func TestStream(t *testing.T) {
	t.Parallel()
	const token = "s3cret"
	v := setup(t, envOpts{token: token})
	t.Cleanup(v.svc.CloseStreams) // before the server's Close, which waits for handlers
	user := v.id()
	base := time.Now().Add(-time.Hour).UnixMilli()
	v.publishAt(t, user, v.id(), base-1)
	var start page[post]
	v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed", "").decode(t, &start)
	var posts []post
	for i := range 3 {
		posts = append(posts, v.publishAt(t, user, v.id(), base+int64(i)))
	}
	events, hangUp := openStream(t, v, user, *start.TopCursor, "")
	if got, _ := nextEvents(t, events, 3); got[0] != posts[0] || got[1] != posts[1] || got[2] != posts[2] {
		t.Fatalf("catch-up %v, want %v", postIDs(got), postIDs(posts))
	}
	// Not a wait for an event: the stream must outlive a request's deadline,
	// a wall-clock timer the API takes no clock for, so real time passes.
	time.Sleep(httpapi.ReadDeadlineDefault + 500*time.Millisecond)
	p := v.publish(t, user, `{}`, http.StatusCreated)
	got, lastID := nextEvents(t, events, 1)
	if got[0] != p {
		t.Fatalf("event %+v, want %+v", got[0], p)
	}
	hangUp()

	later := []post{v.publish(t, user, `{}`, http.StatusCreated), v.publish(t, user, `{}`, http.StatusCreated)}
	// Last-Event-ID wins over since, as a reconnecting EventSource sends both.
	var firstPage page[post]
	v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?limit=5", "").decode(t, &firstPage)
	events, hangUp = openStream(t, v, user, *firstPage.NextCursor, lastID)
	defer hangUp()
	if got, _ := nextEvents(t, events, 2); got[0] != later[0] || got[1] != later[1] {
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
	q := url.Values{"access_token": {token}}.Encode()
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

// TestStreamCaps: past the streams a user may hold open, or the process,
// an open is 429 too_many_streams with Retry-After and starts nothing; a
// stream that ends makes room for the next.
func TestStreamCaps(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{config: func(c *service.Config) { c.MaxStreamsPerUser, c.MaxStreams = 2, 3 }})
	t.Cleanup(v.svc.CloseStreams)
	c := client.New(v.srv.URL, v.token, v.srv.Client())
	open := func(user uint64) (func(), error) {
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := c.StreamFeed(ctx, user, client.StreamRequest{}); err != nil {
			cancel()
			return nil, err
		}
		return cancel, nil
	}
	refused := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.Code != feed.ESTREAMS || ce.RetryAfter <= 0 {
			t.Fatalf("%s: %v, want 429 %s with Retry-After", what, err, feed.ESTREAMS)
		}
	}
	a, b, other := v.id(), v.id(), v.id()
	var hangUps []func()
	for _, user := range []uint64{a, a, b} {
		hangUp, err := open(user)
		if err != nil {
			t.Fatalf("stream of %d: %v", user, err)
		}
		hangUps = append(hangUps, hangUp)
	}
	_, err := open(a)
	refused("a third stream of one user", err)
	_, err = open(other)
	refused("a fourth stream of the process", err)
	hangUps[0]()
	wait.For(t, "a stream's end to make room", func() error {
		hangUp, err := open(other)
		if err == nil {
			hangUps = append(hangUps, hangUp)
		}
		return err
	})
	for _, hangUp := range hangUps {
		hangUp()
	}
}

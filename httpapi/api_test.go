package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// env is the real stack on a fresh database: store, service (optionally
// with its workers) and the echo instance behind an HTTP server.
type env struct {
	svc   *service.Service
	st    *store.Store
	srv   *httptest.Server
	token string
	// protected says the server wants a token on /v1 (a service token or
	// user token keys).
	protected bool
	ids       atomic.Uint64
}

type envOpts struct {
	workers bool
	token   string
	// keys verify user tokens; rateLimit and rateLimitService are
	// Options'.
	keys             *httpapi.UserTokenKeys
	rateLimit        float64
	rateLimitService bool
	config           func(*service.Config)
	// store replaces the fresh test database (e.g. one that is unreachable).
	store *store.Store
}

func setup(t *testing.T, opt envOpts) *env {
	t.Helper()
	st := opt.store
	if st == nil {
		st = storetest.NewStore(t, storetest.Options{})
	}
	cfg := service.DefaultConfig()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Lease = 2 * time.Second
	if opt.config != nil {
		opt.config(&cfg)
	}
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	svc, err := service.New(st, cfg, log, service.NewMetrics(reg), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	svc.CheckHealth(t.Context())
	if opt.workers {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); svc.RunWorkers(ctx, time.Second) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	srv := httptest.NewServer(httpapi.New(svc, httpapi.Options{Token: opt.token, UserTokenKeys: opt.keys,
		RateLimit: opt.rateLimit, RateLimitService: opt.rateLimitService, Log: log, Registry: reg}))
	t.Cleanup(srv.Close)
	v := &env{svc: svc, st: st, srv: srv, token: opt.token, protected: opt.token != "" || opt.keys != nil}
	v.ids.Store(1_000_000)
	return v
}

// id returns an id no other caller of this env gets.
func (v *env) id() uint64 { return v.ids.Add(1) }

type resp struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request (with the env's token, if any) and checks the answer
// against openapi.json. body "" sends none.
func (v *env) do(t testing.TB, method, target, body string) resp {
	t.Helper()
	return v.as(t, v.token, method, target, body)
}

// as is do with a bearer token of its own ("" sends none).
func (v *env) as(t testing.TB, token, method, target, body string) resp {
	t.Helper()
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	return v.call(t, method, target, body, auth)
}

// call is do with the Authorization header auth ("" sends none).
func (v *env) call(t testing.TB, method, target, body, auth string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, v.srv.URL+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return v.send(t, req)
}

// send sends req as it is and checks the answer against openapi.json.
func (v *env) send(t testing.TB, req *http.Request) resp {
	t.Helper()
	res, err := v.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	r := resp{status: res.StatusCode, header: res.Header, body: b}
	checkResponse(t, req.Method, req.URL.Path, r, v.protected)
	return r
}

func (r resp) decode(t testing.TB, out any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// wantStatus fails unless r has the status.
func wantStatus(t testing.TB, r resp, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
}

// wantError fails unless r is the error envelope with status and code.
func wantError(t testing.TB, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s); body %s", r.status, status, code, r.body)
	}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	r.decode(t, &body)
	if body.Error.Code != code || body.Error.Message == "" {
		t.Fatalf("error %+v, want code %s and a message", body.Error, code)
	}
}

type post struct {
	ContentID   string `json:"content_id"`
	AuthorID    string `json:"author_id"`
	PublishTime int64  `json:"publish_time"`
	Kind        string `json:"kind"`
}

type following struct {
	AuthorID   string `json:"author_id"`
	FollowedAt int64  `json:"followed_at"`
}

type follower struct {
	UserID     string `json:"user_id"`
	FollowedAt int64  `json:"followed_at"`
}

type page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
	TopCursor  *string `json:"top_cursor"` // feed pages only
}

type delivery struct {
	State      string `json:"state"`
	Mode       string `json:"mode"`
	Recipients int64  `json:"recipients"`
	Delivered  int64  `json:"delivered"`
}

func u(id uint64) string { return strconv.FormatUint(id, 10) }

// publish posts body as author's publish and wants status.
func (v *env) publish(t testing.TB, author uint64, body string, status int) post {
	t.Helper()
	r := v.do(t, http.MethodPost, "/v1/users/"+u(author)+"/posts", body)
	wantStatus(t, r, status)
	var p post
	r.decode(t, &p)
	return p
}

// publishAt publishes a post with the given id and time.
func (v *env) publishAt(t testing.TB, author, id uint64, at int64) post {
	t.Helper()
	return v.publish(t, author, fmt.Sprintf(`{"content_id":"%d","publish_time":%d}`, id, at), http.StatusCreated)
}

// list reads a whole list with the given page size, checking every page
// but the last is full and has a cursor.
func list[T any](t testing.TB, v *env, path string, limit int) []T {
	t.Helper()
	var all []T
	cursor := ""
	for range 1000 {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := v.do(t, http.MethodGet, path+"?"+q.Encode(), "")
		wantStatus(t, r, http.StatusOK)
		var p page[T]
		r.decode(t, &p)
		if p.Items == nil {
			t.Fatalf("%s: items is null, want a list", path)
		}
		all = append(all, p.Items...)
		if p.NextCursor == nil {
			return all
		}
		if len(p.Items) != limit {
			t.Fatalf("%s: page of %d items with a next cursor, want %d", path, len(p.Items), limit)
		}
		cursor = *p.NextCursor
	}
	t.Fatalf("%s: list did not end", path)
	return nil
}

func (v *env) posts(t testing.TB, author uint64) []post {
	t.Helper()
	return list[post](t, v, "/v1/users/"+u(author)+"/posts", 100)
}

func (v *env) feed(t testing.TB, user uint64) []post {
	t.Helper()
	return list[post](t, v, "/v1/users/"+u(user)+"/feed", 100)
}

func (v *env) following(t testing.TB, user uint64) []following {
	t.Helper()
	return list[following](t, v, "/v1/users/"+u(user)+"/following", 100)
}

func (v *env) followers(t testing.TB, author uint64) []follower {
	t.Helper()
	return list[follower](t, v, "/v1/users/"+u(author)+"/followers", 100)
}

func (v *env) delivery(t testing.TB, author uint64, content string) delivery {
	t.Helper()
	r := v.do(t, http.MethodGet, "/v1/users/"+u(author)+"/posts/"+content+"/delivery", "")
	wantStatus(t, r, http.StatusOK)
	var d delivery
	r.decode(t, &d)
	return d
}

func ids[T any](items []T, id func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = id(it)
	}
	return out
}

func postIDs(ps []post) []string { return ids(ps, func(p post) string { return p.ContentID }) }

func TestPublish(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})

	t.Run("created, repeated, conflicting", func(t *testing.T) {
		t.Parallel()
		author, other, id := v.id(), v.id(), v.id()
		at := time.Now().Add(-time.Hour).UnixMilli()
		body := fmt.Sprintf(`{"content_id":"%d","publish_time":%d,"kind":"note"}`, id, at)
		want := post{ContentID: u(id), AuthorID: u(author), PublishTime: at, Kind: "note"}
		if got := v.publish(t, author, body, http.StatusCreated); got != want {
			t.Fatalf("created %+v, want %+v", got, want)
		}
		// The same post again, also with a numeric id or without the time.
		for _, again := range []string{
			body,
			fmt.Sprintf(`{"content_id":%d,"publish_time":%d,"kind":"note"}`, id, at),
			fmt.Sprintf(`{"kind":"note","content_id":"%d"}`, id),
		} {
			if got := v.publish(t, author, again, http.StatusOK); got != want {
				t.Fatalf("repeat %s: %+v, want %+v", again, got, want)
			}
		}
		// The same id with other fields.
		for _, c := range []struct {
			author uint64
			body   string
		}{
			{author, fmt.Sprintf(`{"content_id":"%d","publish_time":%d,"kind":"video"}`, id, at)},
			{author, fmt.Sprintf(`{"content_id":"%d","publish_time":%d,"kind":"note"}`, id, at+1)},
			{author, fmt.Sprintf(`{"content_id":"%d","publish_time":%d}`, id, at)}, // kind defaults to post
			{other, body},
		} {
			wantError(t, v.do(t, http.MethodPost, "/v1/users/"+u(c.author)+"/posts", c.body), http.StatusConflict, "conflict")
		}
		if got := v.posts(t, author); !slices.Equal(got, []post{want}) {
			t.Fatalf("after conflicts the author has %+v, want only %+v", got, want)
		}
		if got := v.posts(t, other); len(got) != 0 {
			t.Fatalf("the other author has %+v after a conflict", got)
		}
	})

	t.Run("server assigns id, time and kind", func(t *testing.T) {
		t.Parallel()
		author := v.id()
		seen := map[string]bool{}
		for _, body := range []string{"", `{}`, " \n\t ", `{"content_id":null,"publish_time":null,"kind":null}`} {
			before := time.Now().UnixMilli()
			p := v.publish(t, author, body, http.StatusCreated)
			after := time.Now().UnixMilli()
			if n, err := strconv.ParseUint(p.ContentID, 10, 64); err != nil || n == 0 {
				t.Fatalf("body %q: content_id %q is not an id", body, p.ContentID)
			}
			if seen[p.ContentID] {
				t.Fatalf("body %q: content_id %s assigned twice", body, p.ContentID)
			}
			seen[p.ContentID] = true
			if p.AuthorID != u(author) || p.Kind != "post" || p.PublishTime < before || p.PublishTime > after {
				t.Fatalf("body %q: got %+v, want author %d, kind post, time in [%d, %d]", body, p, author, before, after)
			}
		}
		if got := v.posts(t, author); len(got) != 4 {
			t.Fatalf("author has %d posts, want 4", len(got))
		}
	})

	t.Run("content id as number or string", func(t *testing.T) {
		t.Parallel()
		author, id := v.id(), v.id()
		if p := v.publish(t, author, fmt.Sprintf(`{"content_id":%d}`, id), http.StatusCreated); p.ContentID != u(id) {
			t.Fatalf("numeric id %d came back as %q", id, p.ContentID)
		}
		// The largest id, as a number: read exactly, not as a float.
		const maxID = "18446744073709551615"
		if p := v.publish(t, author, `{"content_id":`+maxID+`}`, http.StatusCreated); p.ContentID != maxID {
			t.Fatalf("id %s came back as %q", maxID, p.ContentID)
		}
		if p := v.publish(t, author, `{"content_id":"`+maxID+`"}`, http.StatusOK); p.ContentID != maxID {
			t.Fatalf("id %s as a string came back as %q", maxID, p.ContentID)
		}
	})

	t.Run("kind and publish_time bounds", func(t *testing.T) {
		t.Parallel()
		author := v.id()
		for _, c := range []struct {
			body string
			kind string
			at   int64
		}{
			{`{"kind":"a"}`, "a", -1},
			{`{"kind":"` + strings.Repeat("z", 32) + `"}`, strings.Repeat("z", 32), -1},
			{`{"kind":"video_clip_2"}`, "video_clip_2", -1},
			{`{"kind":"_x"}`, "_x", -1},
			{`{"kind":"9lives"}`, "9lives", -1},
			{`{"publish_time":0}`, "post", 0},
		} {
			p := v.publish(t, author, c.body, http.StatusCreated)
			if p.Kind != c.kind || (c.at >= 0 && p.PublishTime != c.at) {
				t.Fatalf("%s: got %+v", c.body, p)
			}
		}
		// Within the one-minute clock-skew allowance.
		soon := time.Now().Add(30 * time.Second).UnixMilli()
		if p := v.publish(t, author, fmt.Sprintf(`{"publish_time":%d}`, soon), http.StatusCreated); p.PublishTime != soon {
			t.Fatalf("publish_time %d came back as %d", soon, p.PublishTime)
		}
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		t.Parallel()
		farFuture := time.Now().Add(2 * time.Minute).UnixMilli()
		for _, body := range []string{
			// kind
			`{"kind":""}`, `{"kind":"Post"}`, `{"kind":"-post"}`, `{"kind":"a.b"}`, `{"kind":"a b"}`,
			`{"kind":"` + strings.Repeat("z", 33) + `"}`, `{"kind":5}`, `{"kind":["post"]}`,
			// publish_time
			`{"publish_time":-1}`, fmt.Sprintf(`{"publish_time":%d}`, farFuture), `{"publish_time":1.5}`,
			`{"publish_time":"1700000000000"}`, `{"publish_time":1e30}`,
			// content_id
			`{"content_id":0}`, `{"content_id":"0"}`, `{"content_id":-1}`, `{"content_id":"-1"}`,
			`{"content_id":18446744073709551616}`, `{"content_id":"18446744073709551616"}`,
			`{"content_id":"abc"}`, `{"content_id":1.5}`, `{"content_id":"1.5"}`, `{"content_id":1e3}`,
			`{"content_id":""}`, `{"content_id":" 7"}`, `{"content_id":"+7"}`, `{"content_id":true}`, `{"content_id":{}}`,
			// members and shape
			`{"kind":"post","extra":1}`, `{"Kind":"post"}`, `{"CONTENT_ID":"7"}`, `{"author_id":"1"}`,
			`{`, `{"kind":"post"`, `{"kind":}`, `nope`, `{} x`, `{}}`, `{}{}`, `{"kind":"post"} {"kind":"post"}`,
			`[]`, `null`, `"post"`, `5`, `true`,
		} {
			author := v.id()
			r := v.do(t, http.MethodPost, "/v1/users/"+u(author)+"/posts", body)
			if r.status != http.StatusBadRequest {
				t.Errorf("body %s: status %d, want 400; %s", body, r.status, r.body)
				continue
			}
			wantError(t, r, http.StatusBadRequest, "invalid_argument")
			if got := v.posts(t, author); len(got) != 0 {
				t.Errorf("body %s: rejected, yet the author has %+v", body, got)
			}
			if got := v.feed(t, author); len(got) != 0 {
				t.Errorf("body %s: rejected, yet the author's feed has %+v", body, got)
			}
		}
		// A rejected publish does not take the id.
		author, id := v.id(), v.id()
		wantError(t, v.do(t, http.MethodPost, "/v1/users/"+u(author)+"/posts",
			fmt.Sprintf(`{"content_id":"%d","kind":"BAD"}`, id)), http.StatusBadRequest, "invalid_argument")
		v.publish(t, author, fmt.Sprintf(`{"content_id":"%d"}`, id), http.StatusCreated)
	})

	t.Run("body over 64 KiB", func(t *testing.T) {
		t.Parallel()
		author, id := v.id(), v.id()
		head := fmt.Sprintf(`{"content_id":"%d"}`, id)
		pad := func(n int) string { return head + strings.Repeat(" ", n-len(head)) }
		path := "/v1/users/" + u(author) + "/posts"

		// Refused by its Content-Length before it is read.
		wantError(t, v.do(t, http.MethodPost, path, pad(httpapi.MaxBodyBytes+1)), http.StatusRequestEntityTooLarge, "payload_too_large")
		// Refused while it is read: chunked, no Content-Length.
		req, err := http.NewRequest(http.MethodPost, v.srv.URL+path, io.MultiReader(strings.NewReader(pad(httpapi.MaxBodyBytes+1))))
		if err != nil {
			t.Fatal(err)
		}
		if req.ContentLength != 0 {
			t.Fatalf("request has a Content-Length of %d; want it chunked", req.ContentLength)
		}
		wantError(t, v.send(t, req), http.StatusRequestEntityTooLarge, "payload_too_large")
		if got := v.posts(t, author); len(got) != 0 {
			t.Fatalf("a refused body stored %+v", got)
		}
		// Exactly the limit is fine.
		if p := v.publish(t, author, pad(httpapi.MaxBodyBytes), http.StatusCreated); p.ContentID != u(id) {
			t.Fatalf("got %+v", p)
		}
	})

	t.Run("a 10 MB body written whole before the answer is read", func(t *testing.T) {
		t.Parallel()
		conn, err := net.Dial("tcp", v.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		const size = 10_000_000
		head := fmt.Sprintf("POST /v1/users/%d/posts HTTP/1.1\r\nHost: feed\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", v.id(), size)
		body := append([]byte(head), bytes.Repeat([]byte(" "), size)...)
		// The whole request goes out first, as a simple client sends it;
		// a server that closed early would make this write or the read
		// below fail with a reset.
		if _, err := conn.Write(body); err != nil {
			t.Fatalf("writing the body: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"payload_too_large"`) {
			t.Fatalf("got %d %s, want 413 payload_too_large", resp.StatusCode, b)
		}
	})

	t.Run("a deleted post's id is not reused", func(t *testing.T) {
		t.Parallel()
		author, other, id := v.id(), v.id(), v.id()
		body := fmt.Sprintf(`{"content_id":"%d","publish_time":1700000000000}`, id)
		v.publish(t, author, body, http.StatusCreated)
		wantStatus(t, v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/posts/%d", author, id), ""), http.StatusNoContent)
		wantError(t, v.do(t, http.MethodPost, "/v1/users/"+u(author)+"/posts", body), http.StatusConflict, "conflict")
		wantError(t, v.do(t, http.MethodPost, "/v1/users/"+u(other)+"/posts", body), http.StatusConflict, "conflict")
		if got := v.posts(t, author); len(got) != 0 {
			t.Fatalf("the deleted post came back: %+v", got)
		}
		if got := v.posts(t, other); len(got) != 0 {
			t.Fatalf("the other author has %+v", got)
		}
	})

	t.Run("the author sees the post at once", func(t *testing.T) {
		t.Parallel()
		// No workers run in this env: only publish itself can have put it there.
		author := v.id()
		p := v.publish(t, author, `{}`, http.StatusCreated)
		if got := v.feed(t, author); !slices.Equal(got, []post{p}) {
			t.Fatalf("feed %+v, want %+v", got, p)
		}
		if got := v.posts(t, author); !slices.Equal(got, []post{p}) {
			t.Fatalf("posts %+v, want %+v", got, p)
		}
	})
}

func TestDeletePost(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})

	t.Run("delete and delete again", func(t *testing.T) {
		t.Parallel()
		author := v.id()
		keep := v.publish(t, author, `{"publish_time":1700000000000}`, http.StatusCreated)
		gone := v.publish(t, author, `{"publish_time":1700000000001}`, http.StatusCreated)
		for range 2 {
			wantStatus(t, v.do(t, http.MethodDelete, "/v1/users/"+u(author)+"/posts/"+gone.ContentID, ""), http.StatusNoContent)
			if got := v.posts(t, author); !slices.Equal(got, []post{keep}) {
				t.Fatalf("posts %+v, want only %+v", got, keep)
			}
			if got := v.feed(t, author); !slices.Equal(got, []post{keep}) {
				t.Fatalf("feed %+v, want only %+v", got, keep)
			}
		}
	})

	t.Run("never published", func(t *testing.T) {
		t.Parallel()
		wantError(t, v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/posts/%d", v.id(), v.id()), ""), http.StatusNotFound, "not_found")
	})

	t.Run("another author's post", func(t *testing.T) {
		t.Parallel()
		owner, other := v.id(), v.id()
		p := v.publish(t, owner, `{}`, http.StatusCreated)
		wantError(t, v.do(t, http.MethodDelete, "/v1/users/"+u(other)+"/posts/"+p.ContentID, ""), http.StatusNotFound, "not_found")
		if got := v.posts(t, owner); !slices.Equal(got, []post{p}) {
			t.Fatalf("owner's posts %+v, want %+v", got, p)
		}
	})
}

func TestListPosts(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})

	t.Run("newest first, paged", func(t *testing.T) {
		t.Parallel()
		author := v.id()
		base := time.Now().Add(-time.Hour).UnixMilli()
		var want []post
		for i := range 5 {
			want = append(want, v.publishAt(t, author, v.id(), base+int64(i)*1000))
		}
		// Two posts at the same millisecond: the larger content id first.
		lo, hi := v.id(), v.id()
		want = append(want, v.publishAt(t, author, hi, base-1000), v.publishAt(t, author, lo, base-1000))
		slices.SortStableFunc(want, func(a, b post) int {
			if a.PublishTime != b.PublishTime {
				return int(b.PublishTime - a.PublishTime)
			}
			return strings.Compare(b.ContentID, a.ContentID) // same length
		})
		for _, limit := range []int{1, 2, 3, 7, 100} {
			if got := list[post](t, v, "/v1/users/"+u(author)+"/posts", limit); !slices.Equal(got, want) {
				t.Fatalf("limit %d: %v, want %v", limit, postIDs(got), postIDs(want))
			}
		}
	})

	t.Run("default limit is 20", func(t *testing.T) {
		t.Parallel()
		author := v.id()
		for range 21 {
			v.publish(t, author, `{}`, http.StatusCreated)
		}
		r := v.do(t, http.MethodGet, "/v1/users/"+u(author)+"/posts", "")
		wantStatus(t, r, http.StatusOK)
		var p page[post]
		r.decode(t, &p)
		if len(p.Items) != 20 || p.NextCursor == nil {
			t.Fatalf("got %d items, cursor %v; want 20 and a cursor", len(p.Items), p.NextCursor)
		}
		r = v.do(t, http.MethodGet, "/v1/users/"+u(author)+"/posts?cursor="+url.QueryEscape(*p.NextCursor), "")
		var rest page[post]
		r.decode(t, &rest)
		if len(rest.Items) != 1 || rest.NextCursor != nil {
			t.Fatalf("second page: %d items, cursor %v; want 1 and null", len(rest.Items), rest.NextCursor)
		}
	})

	t.Run("a page that ends the list exactly has a null cursor", func(t *testing.T) {
		t.Parallel()
		author := v.id()
		v.publish(t, author, `{}`, http.StatusCreated)
		v.publish(t, author, `{}`, http.StatusCreated)
		r := v.do(t, http.MethodGet, "/v1/users/"+u(author)+"/posts?limit=2", "")
		if !bytes.Contains(r.body, []byte(`"next_cursor":null`)) {
			t.Fatalf("body %s, want next_cursor null", r.body)
		}
	})

	t.Run("empty list", func(t *testing.T) {
		t.Parallel()
		r := v.do(t, http.MethodGet, "/v1/users/"+u(v.id())+"/posts", "")
		wantStatus(t, r, http.StatusOK)
		if got := strings.TrimSpace(string(r.body)); got != `{"items":[],"next_cursor":null}` {
			t.Fatalf("body %s", got)
		}
	})
}

func TestDelivery(t *testing.T) {
	t.Parallel()

	t.Run("pending", func(t *testing.T) {
		t.Parallel()
		v := setup(t, envOpts{}) // no workers: nothing plans it
		author := v.id()
		p := v.publish(t, author, `{}`, http.StatusCreated)
		if got, want := v.delivery(t, author, p.ContentID), (delivery{State: "pending", Mode: "push"}); got != want {
			t.Fatalf("delivery %+v, want %+v", got, want)
		}
		wantError(t, v.do(t, http.MethodGet, fmt.Sprintf("/v1/users/%d/posts/%d/delivery", author, v.id()), ""), http.StatusNotFound, "not_found")
		wantError(t, v.do(t, http.MethodGet, fmt.Sprintf("/v1/users/%d/posts/%s/delivery", v.id(), p.ContentID), ""), http.StatusNotFound, "not_found")
	})

	t.Run("running, done, and the removal sweep", func(t *testing.T) {
		t.Parallel()
		// Two followers and batches of one: the post is planned into a
		// fan-out task, not pushed with other small posts in one step.
		v := setup(t, envOpts{workers: true, config: func(c *service.Config) { c.BatchSize = 1 }})
		author, fans := v.id(), []uint64{v.id(), v.id()}
		for _, fan := range fans {
			wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", fan, author), ""), http.StatusNoContent)
		}
		wait.For(t, "listed as followers", func() error {
			if got := v.followers(t, author); len(got) != 2 {
				return fmt.Errorf("followers %+v", got)
			}
			return nil
		})
		storetest.WaitIdle(t, v.st)

		// Hold the author's follow edges, which the fan-out's writes into
		// the followers' inboxes read FOR UPDATE, so those writes wait: the delivery is planned and running
		// meanwhile.
		ctx := context.Background()
		tx, err := v.st.ShardOf(author).DB.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var n int
		if err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM following FORCE INDEX (PRIMARY) WHERE author_id = ? FOR UPDATE`, author); err != nil || n != 2 {
			t.Fatalf("lock the follow edges: n=%d, %v", n, err)
		}
		p := v.publish(t, author, `{}`, http.StatusCreated)
		wait.For(t, "the delivery running", func() error {
			if d := v.delivery(t, author, p.ContentID); d.State != "running" {
				return fmt.Errorf("delivery %+v", d)
			}
			return nil
		})
		if got, want := v.delivery(t, author, p.ContentID), (delivery{State: "running", Mode: "push", Recipients: 2}); got != want {
			t.Fatalf("delivery %+v, want %+v", got, want)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		want := delivery{State: "done", Mode: "push", Recipients: 2, Delivered: 2}
		wait.For(t, "the delivery done", func() error {
			if d := v.delivery(t, author, p.ContentID); d != want {
				return fmt.Errorf("delivery %+v", d)
			}
			return nil
		})
		for _, fan := range fans {
			if got := v.feed(t, fan); !slices.Equal(got, []post{p}) {
				t.Fatalf("follower's feed %+v, want %+v", got, p)
			}
		}

		// Deleting reports the removal sweep on the same resource.
		wantStatus(t, v.do(t, http.MethodDelete, "/v1/users/"+u(author)+"/posts/"+p.ContentID, ""), http.StatusNoContent)
		swept := func() bool { return len(v.feed(t, fans[0])) == 0 && len(v.feed(t, fans[1])) == 0 }
		if d := v.delivery(t, author, p.ContentID); d == want && !swept() {
			// Done is fine only if the sweep already finished.
			t.Fatalf("delivery %+v but a follower still has the post", d)
		}
		wait.For(t, "the post swept", func() error {
			if d := v.delivery(t, author, p.ContentID); d != want || !swept() {
				return fmt.Errorf("delivery %+v, followers' feeds %+v and %+v", d, v.feed(t, fans[0]), v.feed(t, fans[1]))
			}
			return nil
		})
	})
}

func TestFollow(t *testing.T) {
	t.Parallel()
	// No workers: everything checked here holds when the request returns.
	v := setup(t, envOpts{config: func(c *service.Config) { c.MaxFollowing = 3 }})
	follow := func(t *testing.T, user, author uint64) resp {
		return v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", user, author), "")
	}
	unfollow := func(t *testing.T, user, author uint64) resp {
		return v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d", user, author), "")
	}

	t.Run("follow is idempotent", func(t *testing.T) {
		t.Parallel()
		user, author := v.id(), v.id()
		before := time.Now().UnixMilli()
		wantStatus(t, follow(t, user, author), http.StatusNoContent)
		after := time.Now().UnixMilli()
		first := v.following(t, user)
		if len(first) != 1 || first[0].AuthorID != u(author) || first[0].FollowedAt < before || first[0].FollowedAt > after {
			t.Fatalf("following %+v, want author %d followed in [%d, %d]", first, author, before, after)
		}
		wantStatus(t, follow(t, user, author), http.StatusNoContent)
		if got := v.following(t, user); !slices.Equal(got, first) {
			t.Fatalf("after a repeat: %+v, want %+v", got, first)
		}
	})

	t.Run("self-follow", func(t *testing.T) {
		t.Parallel()
		user := v.id()
		wantError(t, follow(t, user, user), http.StatusBadRequest, "invalid_argument")
		wantError(t, unfollow(t, user, user), http.StatusBadRequest, "invalid_argument")
		if got := v.following(t, user); len(got) != 0 {
			t.Fatalf("following %+v", got)
		}
	})

	t.Run("cap", func(t *testing.T) {
		t.Parallel()
		user := v.id()
		authors := []uint64{v.id(), v.id(), v.id()}
		for _, a := range authors {
			wantStatus(t, follow(t, user, a), http.StatusNoContent)
		}
		extra := v.id()
		wantError(t, follow(t, user, extra), http.StatusConflict, "limit_exceeded")
		wantStatus(t, follow(t, user, authors[1]), http.StatusNoContent) // already followed
		got := ids(v.following(t, user), func(f following) string { return f.AuthorID })
		if want := []string{u(authors[0]), u(authors[1]), u(authors[2])}; !slices.Equal(got, want) {
			t.Fatalf("following %v, want %v", got, want)
		}
		wantStatus(t, unfollow(t, user, authors[0]), http.StatusNoContent)
		wantStatus(t, follow(t, user, extra), http.StatusNoContent)
	})

	t.Run("unfollow is idempotent", func(t *testing.T) {
		t.Parallel()
		user, author := v.id(), v.id()
		wantStatus(t, unfollow(t, user, author), http.StatusNoContent) // never followed
		wantStatus(t, follow(t, user, author), http.StatusNoContent)
		for range 2 {
			wantStatus(t, unfollow(t, user, author), http.StatusNoContent)
			if got := v.following(t, user); len(got) != 0 {
				t.Fatalf("following %+v", got)
			}
		}
	})

	t.Run("following is ordered by author id, paged", func(t *testing.T) {
		t.Parallel()
		user, b := v.id(), v.id()
		// Numeric order differs from string order: b9 < b10 < b100.
		nine, ten, hundred := b*10+9, b*100+10, b*1000+100
		for _, a := range []uint64{hundred, nine, ten} {
			wantStatus(t, follow(t, user, a), http.StatusNoContent)
		}
		want := []string{u(nine), u(ten), u(hundred)}
		for _, limit := range []int{1, 2, 3} {
			got := ids(list[following](t, v, "/v1/users/"+u(user)+"/following", limit), func(f following) string { return f.AuthorID })
			if !slices.Equal(got, want) {
				t.Fatalf("limit %d: %v, want %v", limit, got, want)
			}
		}
	})

	t.Run("the feed follows at once", func(t *testing.T) {
		t.Parallel()
		user, author := v.id(), v.id()
		old := v.publishAt(t, author, v.id(), time.Now().Add(-24*time.Hour).UnixMilli())
		wantStatus(t, follow(t, user, author), http.StatusNoContent)
		if got := v.feed(t, user); !slices.Equal(got, []post{old}) {
			t.Fatalf("feed after follow %+v, want %+v", got, old)
		}
		fresh := v.publish(t, author, `{}`, http.StatusCreated)
		if got := v.feed(t, user); !slices.Equal(got, []post{fresh, old}) {
			t.Fatalf("feed %v, want %v", postIDs(got), []string{fresh.ContentID, old.ContentID})
		}
		wantStatus(t, unfollow(t, user, author), http.StatusNoContent)
		if got := v.feed(t, user); len(got) != 0 {
			t.Fatalf("feed after unfollow %+v", got)
		}
	})
}

// TestMuteAndHideRoutes checks the routes' statuses, bodies and errors;
// the feed's behaviour is the service's tests'.
func TestMuteAndHideRoutes(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{workers: true, config: func(c *service.Config) { c.MaxMuted = 2 }})
	user, author, other := v.id(), v.id(), v.id()
	at := func(method, path string, a, b uint64) resp {
		return v.do(t, method, fmt.Sprintf("/v1/users/%d/%s/%d", a, path, b), "")
	}
	wantStatus(t, at(http.MethodPut, "following", user, author), http.StatusNoContent)
	p := v.publish(t, author, `{}`, http.StatusCreated)
	wait.For(t, "the post in the feed", func() error {
		if got := v.feed(t, user); len(got) != 1 {
			return fmt.Errorf("feed %+v", got)
		}
		return nil
	})

	before := time.Now().UnixMilli()
	for range 2 {
		wantStatus(t, at(http.MethodPut, "muted", user, author), http.StatusNoContent)
	}
	if got := v.feed(t, user); len(got) != 0 {
		t.Fatalf("feed after the mute: %+v", got)
	}
	type muted struct {
		AuthorID string `json:"author_id"`
		MutedAt  int64  `json:"muted_at"`
	}
	if got := list[muted](t, v, "/v1/users/"+u(user)+"/muted", 10); len(got) != 1 || got[0].AuthorID != u(author) || got[0].MutedAt < before {
		t.Fatalf("muted list %+v", got)
	}
	if got := v.following(t, user); len(got) != 1 {
		t.Fatalf("following after the mute: %+v", got)
	}
	wantStatus(t, at(http.MethodPut, "muted", user, other), http.StatusNoContent)
	wantError(t, at(http.MethodPut, "muted", user, v.id()), http.StatusConflict, "limit_exceeded")
	wantError(t, at(http.MethodPut, "muted", user, user), http.StatusBadRequest, "invalid_argument")
	wantError(t, at(http.MethodPut, "hidden_from", author, author), http.StatusBadRequest, "invalid_argument")
	wantError(t, v.do(t, http.MethodPut, "/v1/users/"+u(user)+"/muted/x", ""), http.StatusBadRequest, "invalid_argument")
	for range 2 {
		wantStatus(t, at(http.MethodDelete, "muted", user, author), http.StatusNoContent)
	}
	if got := v.feed(t, user); !slices.Equal(got, []post{p}) {
		t.Fatalf("feed after the unmute: %+v, want %+v", got, p)
	}

	wantStatus(t, at(http.MethodPut, "hidden_from", author, user), http.StatusNoContent)
	if got := v.feed(t, user); len(got) != 0 {
		t.Fatalf("feed after the hide: %+v", got)
	}
	type hidden struct {
		UserID   string `json:"user_id"`
		HiddenAt int64  `json:"hidden_at"`
	}
	wait.For(t, "the hide listed", func() error {
		got := list[hidden](t, v, "/v1/users/"+u(author)+"/hidden_from", 10)
		if len(got) != 1 || got[0].UserID != u(user) || got[0].HiddenAt < before {
			return fmt.Errorf("hidden_from %+v", got)
		}
		return nil
	})
	wantStatus(t, at(http.MethodDelete, "hidden_from", author, user), http.StatusNoContent)
	if got := v.feed(t, user); !slices.Equal(got, []post{p}) {
		t.Fatalf("feed after the unhide: %+v, want %+v", got, p)
	}
	wait.For(t, "the hide unlisted", func() error {
		if got := list[hidden](t, v, "/v1/users/"+u(author)+"/hidden_from", 10); len(got) != 0 {
			return fmt.Errorf("hidden_from %+v", got)
		}
		return nil
	})
}

// TestFeedKindsParam checks the kinds query parameter's parsing; the
// filter itself is the service's tests'.
func TestFeedKindsParam(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})
	user := v.id()
	photo := v.publish(t, user, `{"kind":"photo"}`, http.StatusCreated)
	v.publish(t, user, `{}`, http.StatusCreated)
	r := v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?kinds=video,photo", "")
	wantStatus(t, r, http.StatusOK)
	var p page[post]
	r.decode(t, &p)
	if !slices.Equal(p.Items, []post{photo}) || p.NextCursor != nil {
		t.Fatalf("page %+v, want the photo alone", p)
	}
	for _, q := range []string{"kinds=", "kinds=photo,", "kinds=Photo", "kinds=a,b,c,d,e,f,g,h,i,j,k", "kinds=" + strings.Repeat("x", 33)} {
		wantError(t, v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?"+q, ""), http.StatusBadRequest, "invalid_argument")
	}
}

func TestFollowers(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{workers: true})
	author, b := v.id(), v.id()
	nine, ten, hundred := b*10+9, b*100+10, b*1000+100
	for _, user := range []uint64{hundred, ten, nine} {
		wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", user, author), ""), http.StatusNoContent)
	}
	userIDs := func(limit int) []string {
		return ids(list[follower](t, v, "/v1/users/"+u(author)+"/followers", limit), func(f follower) string { return f.UserID })
	}
	want := []string{u(nine), u(ten), u(hundred)}
	wait.For(t, "listing 3 followers", func() error {
		if got := userIDs(100); len(got) != 3 {
			return fmt.Errorf("followers %v", got)
		}
		return nil
	})
	for _, limit := range []int{1, 2, 100} {
		if got := userIDs(limit); !slices.Equal(got, want) {
			t.Fatalf("limit %d: %v, want %v", limit, got, want)
		}
	}
	// followed_at is the time of the follow, as the following list says.
	for _, f := range v.followers(t, author) {
		id, _ := strconv.ParseUint(f.UserID, 10, 64)
		if fl := v.following(t, id); len(fl) != 1 || fl[0].FollowedAt != f.FollowedAt {
			t.Fatalf("follower %+v, but the user's following list is %+v", f, fl)
		}
	}
	wantStatus(t, v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d", ten, author), ""), http.StatusNoContent)
	wait.For(t, "unlisting the unfollower", func() error {
		if got := userIDs(100); !slices.Equal(got, []string{u(nine), u(hundred)}) {
			return fmt.Errorf("followers %v", got)
		}
		return nil
	})
}

func TestFeed(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{workers: true})
	user, a, b := v.id(), v.id(), v.id()
	for _, author := range []uint64{a, b} {
		wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", user, author), ""), http.StatusNoContent)
	}
	base := time.Now().Add(-time.Hour).UnixMilli()
	lo, hi := v.id(), v.id()
	posts := []post{
		v.publishAt(t, a, v.id(), base-10),
		v.publishAt(t, a, v.id(), base-30),
		v.publishAt(t, b, lo, base-20),
		v.publishAt(t, b, hi, base-20),
		v.publishAt(t, user, v.id(), base-15),
		v.publishAt(t, a, v.id(), base-40),
	}
	stranger := v.id()
	v.publishAt(t, stranger, v.id(), base) // not followed: never in the feed
	want := []post{posts[0], posts[4], posts[3], posts[2], posts[1], posts[5]}
	storetest.WaitIdle(t, v.st)
	for _, limit := range []int{1, 2, 4, 6, 100} {
		if got := list[post](t, v, "/v1/users/"+u(user)+"/feed", limit); !slices.Equal(got, want) {
			t.Fatalf("limit %d: %v, want %v", limit, postIDs(got), postIDs(want))
		}
	}

	t.Run("new posts between pages", func(t *testing.T) {
		r := v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?limit=2", "")
		var first page[post]
		r.decode(t, &first)
		v.publish(t, a, `{}`, http.StatusCreated) // newer than everything
		got := first.Items
		cursor := first.NextCursor
		for cursor != nil {
			r := v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?limit=2&cursor="+url.QueryEscape(*cursor), "")
			wantStatus(t, r, http.StatusOK)
			var p page[post]
			r.decode(t, &p)
			got = append(got, p.Items...)
			cursor = p.NextCursor
		}
		if !slices.Equal(got, want) {
			t.Fatalf("paged %v, want %v", postIDs(got), postIDs(want))
		}
	})

	t.Run("cursors of other lists", func(t *testing.T) {
		cursorOf := func(path string) string {
			r := v.do(t, http.MethodGet, path+"?limit=1", "")
			var p struct {
				NextCursor *string `json:"next_cursor"`
			}
			_ = json.Unmarshal(r.body, &p)
			if p.NextCursor == nil {
				t.Fatalf("%s: no cursor", path)
			}
			return url.QueryEscape(*p.NextCursor)
		}
		feedCursor := cursorOf("/v1/users/" + u(user) + "/feed")
		postsCursor := cursorOf("/v1/users/" + u(a) + "/posts")
		followingCursor := cursorOf("/v1/users/" + u(user) + "/following")
		for _, target := range []string{
			"/v1/users/" + u(user) + "/feed?cursor=" + postsCursor,
			"/v1/users/" + u(a) + "/posts?cursor=" + feedCursor,
			"/v1/users/" + u(a) + "/followers?cursor=" + followingCursor,
			"/v1/users/" + u(user) + "/following?cursor=" + feedCursor,
		} {
			wantError(t, v.do(t, http.MethodGet, target, ""), http.StatusBadRequest, "invalid_argument")
		}
	})

	t.Run("a deleted post leaves the feed", func(t *testing.T) {
		gone := posts[2]
		wantStatus(t, v.do(t, http.MethodDelete, "/v1/users/"+u(b)+"/posts/"+gone.ContentID, ""), http.StatusNoContent)
		wait.For(t, "the post gone from the feed", func() error {
			if got := v.feed(t, user); slices.Contains(got, gone) {
				return fmt.Errorf("feed %v", postIDs(got))
			}
			return nil
		})
	})

	t.Run("unfollow hides the author at once", func(t *testing.T) {
		wantStatus(t, v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d", user, a), ""), http.StatusNoContent)
		for _, p := range v.feed(t, user) {
			if p.AuthorID == u(a) {
				t.Fatalf("unfollowed author's post %+v still in the feed", p)
			}
		}
	})
}

// TestFeedSince reads above a position: only newer items, newest first, the
// gap paged down with next_cursor until null, and an empty page with null
// cursors when nothing is newer.
func TestFeedSince(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})
	user := v.id()
	feedPath := "/v1/users/" + u(user) + "/feed"
	read := func(query string) page[post] {
		t.Helper()
		r := v.do(t, http.MethodGet, feedPath+"?"+query, "")
		wantStatus(t, r, http.StatusOK)
		var p page[post]
		r.decode(t, &p)
		return p
	}
	base := time.Now().Add(-time.Hour).UnixMilli()
	var old []post
	for i := range 3 {
		old = append(old, v.publishAt(t, user, uint64(2_000_000+10*i), base+int64(i)))
	}
	first := read("limit=2")
	if first.TopCursor == nil || first.Items[0] != old[2] {
		t.Fatalf("first page %+v: want top cursor at %v", first, old[2])
	}
	top := *first.TopCursor

	r := v.do(t, http.MethodGet, feedPath+"?since="+url.QueryEscape(top), "")
	wantStatus(t, r, http.StatusOK)
	if got := strings.TrimSpace(string(r.body)); got != `{"items":[],"next_cursor":null,"top_cursor":null}` {
		t.Fatalf("nothing newer: %s", got)
	}

	// Five newer posts, two of them at the top's own publish time (ids
	// above and below it: only the one above is newer).
	topID, _ := strconv.ParseUint(old[2].ContentID, 10, 64)
	newer := []post{v.publishAt(t, user, topID+1, old[2].PublishTime)}
	v.publishAt(t, user, topID-1, old[2].PublishTime)
	for i := range 4 {
		newer = append(newer, v.publishAt(t, user, v.id(), base+10+int64(i)))
	}
	slices.Reverse(newer)
	var got []post
	q := url.Values{"limit": {"2"}, "since": {top}}
	p := read(q.Encode())
	if p.TopCursor == nil {
		t.Fatal("since page without a top cursor")
	}
	for {
		got = append(got, p.Items...)
		if p.NextCursor == nil {
			break
		}
		q.Set("cursor", *p.NextCursor)
		p = read(q.Encode())
	}
	if !slices.Equal(got, newer) {
		t.Fatalf("gap %v, want %v", postIDs(got), postIDs(newer))
	}
	if p := read("limit=5&since=" + url.QueryEscape(top)); !slices.Equal(p.Items, newer) || p.NextCursor != nil {
		t.Fatalf("one page of the whole gap: %v next %v, want %v and null", postIDs(p.Items), p.NextCursor, postIDs(newer))
	}
	for _, bad := range []string{"x", "AXAAAAGJRZS9OAAAAAAAAIBT", top + "A"} {
		wantError(t, v.do(t, http.MethodGet, feedPath+"?since="+url.QueryEscape(bad), ""), http.StatusBadRequest, "invalid_argument")
	}
}

type marker struct {
	Cursor       *string `json:"cursor"`
	UpdatedAt    *int64  `json:"updated_at"`
	Unread       int     `json:"unread"`
	UnreadCapped bool    `json:"unread_capped"`
}

// TestMarker sets, reads and tries to move back a read marker over HTTP.
func TestMarker(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})
	user := v.id()
	path := "/v1/users/" + u(user) + "/feed/marker"
	get := func() marker {
		t.Helper()
		r := v.do(t, http.MethodGet, path, "")
		wantStatus(t, r, http.StatusOK)
		var m marker
		r.decode(t, &m)
		return m
	}
	put := func(cursor string) marker {
		t.Helper()
		r := v.do(t, http.MethodPut, path, fmt.Sprintf(`{"cursor":%q}`, cursor))
		wantStatus(t, r, http.StatusOK)
		var m marker
		r.decode(t, &m)
		return m
	}
	r := v.do(t, http.MethodGet, path, "")
	wantStatus(t, r, http.StatusOK)
	if got := strings.TrimSpace(string(r.body)); got != `{"cursor":null,"updated_at":null,"unread":0,"unread_capped":false}` {
		t.Fatalf("no marker: %s", got)
	}
	base := time.Now().Add(-time.Hour).UnixMilli()
	for i := range 5 {
		v.publishAt(t, user, v.id(), base+int64(i))
	}
	if m := get(); m.Unread != 5 || m.Cursor != nil {
		t.Fatalf("five posts, no marker: %+v", m)
	}
	var p page[post]
	v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?limit=2", "").decode(t, &p)
	m := put(*p.NextCursor)
	if m.Cursor == nil || *m.Cursor != *p.NextCursor || m.UpdatedAt == nil || m.Unread != 1 {
		t.Fatalf("marker at the second item: %+v", m)
	}
	var deeper page[post]
	v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?limit=4", "").decode(t, &deeper)
	if back := put(*deeper.NextCursor); *back.Cursor != *m.Cursor || *back.UpdatedAt != *m.UpdatedAt || back.Unread != 1 {
		t.Fatalf("marker moved back: %+v, was %+v", back, m)
	}
	if got := get(); *got.Cursor != *m.Cursor || got.Unread != 1 {
		t.Fatalf("stored marker %+v, want %+v", got, m)
	}
	for _, body := range []string{``, `{}`, `{"cursor":null}`, `{"cursor":""}`, `{"cursor":"x"}`, `{"cursor":12}`,
		`{"cursor":"AXAAAAGJRZS9OAAAAAAAAIBT"}`, `{"position":"x"}`, `[]`} {
		wantError(t, v.do(t, http.MethodPut, path, body), http.StatusBadRequest, "invalid_argument")
	}
}

// routes are the /v1 routes with their path parameters.
var routes = []struct{ method, path string }{
	{http.MethodPost, "/v1/users/{author}/posts"},
	{http.MethodGet, "/v1/users/{author}/posts"},
	{http.MethodDelete, "/v1/users/{author}/posts/{content}"},
	{http.MethodGet, "/v1/users/{author}/posts/{content}/delivery"},
	{http.MethodPut, "/v1/users/{user}/following/{author}"},
	{http.MethodDelete, "/v1/users/{user}/following/{author}"},
	{http.MethodGet, "/v1/users/{user}/following"},
	{http.MethodGet, "/v1/users/{author}/followers"},
	{http.MethodGet, "/v1/users/{user}/feed"},
	{http.MethodGet, "/v1/users/{user}/feed/marker"},
	{http.MethodPut, "/v1/users/{user}/feed/marker"},
}

// isList reports whether the route answers a page of a list.
func isList(method, path string) bool {
	return method == http.MethodGet && !strings.Contains(path, "{content}") && !strings.HasSuffix(path, "/marker")
}

func fill(path string, values map[string]string) string {
	for k, val := range values {
		path = strings.ReplaceAll(path, "{"+k+"}", val)
	}
	return path
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})
	user, author := v.id(), v.id()
	p := v.publish(t, user, `{}`, http.StatusCreated)
	wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", user, author), ""), http.StatusNoContent)
	good := map[string]string{"user": u(user), "author": u(user), "content": p.ContentID}
	unchanged := func(t *testing.T, what string) {
		t.Helper()
		if got := v.posts(t, user); !slices.Equal(got, []post{p}) {
			t.Fatalf("%s: posts %+v, want %+v", what, got, p)
		}
		if got := v.following(t, user); len(got) != 1 || got[0].AuthorID != u(author) {
			t.Fatalf("%s: following %+v", what, got)
		}
	}

	t.Run("bad ids in the path", func(t *testing.T) {
		bad := []string{"0", "-1", "18446744073709551616", "99999999999999999999999", "abc", "1.0", "1e3", "0x10", "%2B1", "%201", "1%20"}
		for _, rt := range routes {
			for _, param := range []string{"user", "author", "content"} {
				if !strings.Contains(rt.path, "{"+param+"}") {
					continue
				}
				for _, b := range bad {
					values := map[string]string{"user": good["user"], "author": u(author), "content": good["content"]}
					if strings.Contains(rt.path, "{user}") {
						values["author"] = u(author)
					} else {
						values["author"] = u(user)
					}
					values[param] = b
					target := fill(rt.path, values)
					body := ""
					if rt.method == http.MethodPost {
						body = `{}`
					}
					r := v.do(t, rt.method, target, body)
					if r.status != http.StatusBadRequest {
						t.Errorf("%s %s: %d, want 400: %s", rt.method, target, r.status, r.body)
						continue
					}
					wantError(t, r, http.StatusBadRequest, "invalid_argument")
				}
			}
		}
		unchanged(t, "after bad ids")
	})

	t.Run("bad limits", func(t *testing.T) {
		for _, rt := range routes {
			if !isList(rt.method, rt.path) {
				continue
			}
			path := fill(rt.path, good)
			for _, limit := range []string{"0", "101", "x", "-1", "1.5", "1e2", "%201", "99999999999999999999"} {
				wantError(t, v.do(t, http.MethodGet, path+"?limit="+limit, ""), http.StatusBadRequest, "invalid_argument")
			}
			for _, limit := range []string{"1", "100", ""} {
				wantStatus(t, v.do(t, http.MethodGet, path+"?limit="+limit, ""), http.StatusOK)
			}
		}
	})

	t.Run("bad cursors", func(t *testing.T) {
		garbage := []string{
			"!!!",
			"Z2FyYmFnZQ",                 // base64url("garbage")
			"AAAAAAAAAAAAAAAAAAAAAAAA",   // the right length, version 0
			"AWYAAAGJRMAwAAAAAAAAgFI%3D", // padded
			"%25",
			strings.Repeat("A", 4000),
		}
		for _, rt := range routes {
			if !isList(rt.method, rt.path) {
				continue
			}
			for _, c := range garbage {
				wantError(t, v.do(t, http.MethodGet, fill(rt.path, good)+"?cursor="+c, ""), http.StatusBadRequest, "invalid_argument")
			}
		}
	})

	t.Run("unknown routes", func(t *testing.T) {
		for _, target := range []string{
			"/", "/nope", "/v1", "/v1/", "/v1/users", "/v1/users/1", "/v1/users/1/nope",
			"/v1/users/1/feed/", "/V1/users/1/feed", "/v2/users/1/feed", "/v1/users/1/posts/2/3",
			"/healthz/x", "/openapi.yaml",
		} {
			wantError(t, v.do(t, http.MethodGet, target, ""), http.StatusNotFound, "not_found")
		}
		wantError(t, v.do(t, http.MethodPost, "/v1/users/1/likes", `{}`), http.StatusNotFound, "not_found")
	})

	t.Run("wrong methods", func(t *testing.T) {
		r := v.do(t, http.MethodPatch, "/v1/users/1/feed", "")
		wantError(t, r, http.StatusMethodNotAllowed, "invalid_argument")
		if got := r.header.Get("Allow"); got != "OPTIONS, GET, HEAD" {
			t.Fatalf("Allow %q", got)
		}
		// checkResponse compares each Allow header with the spec.
		for _, c := range []struct{ method, target string }{
			{http.MethodPost, "/v1/users/1/feed"},
			{http.MethodDelete, "/v1/users/1/posts"},
			{http.MethodPut, "/v1/users/1/posts"},
			{http.MethodGet, "/v1/users/1/posts/2"},
			{http.MethodPut, "/v1/users/1/posts/2/delivery"},
			{http.MethodPost, "/v1/users/1/following"},
			{http.MethodPost, "/v1/users/1/followers"},
			{http.MethodPost, "/healthz"},
			{http.MethodDelete, "/readyz"},
			{http.MethodPut, "/metrics"},
			{http.MethodPost, "/openapi.json"},
			{"PROPFIND", "/v1/users/1/feed"},
			{"BREW", "/v1/users/1/feed"},
		} {
			wantError(t, v.do(t, c.method, c.target, ""), http.StatusMethodNotAllowed, "invalid_argument")
		}
		// A follow by the wrong method follows nobody.
		wantError(t, v.do(t, http.MethodPost, fmt.Sprintf("/v1/users/%d/following/%d", user, v.id()), ""), http.StatusMethodNotAllowed, "invalid_argument")
		wantError(t, v.do(t, http.MethodPatch, "/v1/users/"+u(user)+"/posts/"+p.ContentID, ""), http.StatusMethodNotAllowed, "invalid_argument")
		unchanged(t, "after wrong methods")
	})

	t.Run("OPTIONS names the methods", func(t *testing.T) {
		r := v.do(t, http.MethodOptions, "/v1/users/1/posts", "")
		wantStatus(t, r, http.StatusNoContent)
		if got := r.header.Get("Allow"); got != "OPTIONS, GET, HEAD, POST" {
			t.Fatalf("Allow %q", got)
		}
	})

	t.Run("HEAD", func(t *testing.T) {
		for _, c := range []struct {
			target string
			status int
		}{
			{"/healthz", http.StatusOK},
			{"/readyz", http.StatusOK},
			{"/metrics", http.StatusOK},
			{"/openapi.json", http.StatusOK},
			{"/v1/users/" + u(user) + "/feed", http.StatusOK},
			{"/v1/users/" + u(user) + "/posts", http.StatusOK},
			{"/v1/users/" + u(user) + "/posts/" + p.ContentID + "/delivery", http.StatusOK},
			{"/v1/users/" + u(user) + "/posts/" + u(v.id()) + "/delivery", http.StatusNotFound},
			{"/v1/users/" + u(user) + "/following", http.StatusOK},
			{"/v1/users/" + u(user) + "/followers", http.StatusOK},
			{"/v1/users/" + u(user) + "/feed?limit=0", http.StatusBadRequest},
			{"/v1/users/0/feed", http.StatusBadRequest},
			{"/nope", http.StatusNotFound},
		} {
			// checkResponse wants no body and a documented status.
			if r := v.do(t, http.MethodHead, c.target, ""); r.status != c.status {
				t.Errorf("HEAD %s: %d, want %d", c.target, r.status, c.status)
			}
		}
		r := v.do(t, http.MethodHead, "/v1/users/"+u(user)+"/feed", "")
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("HEAD feed: Content-Type %q", ct)
		}
	})
}

func TestToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-Token"
	v := setup(t, envOpts{token: token})
	user, author := v.id(), v.id()
	p := v.publish(t, user, `{}`, http.StatusCreated)
	values := map[string]string{"user": u(user), "author": u(author), "content": p.ContentID}

	call := v.call

	t.Run("every /v1 request needs the token", func(t *testing.T) {
		for _, rt := range routes {
			target := fill(rt.path, values)
			for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + token + "x", "Bearer  " + token,
				"Basic " + token, token, "Bearer " + strings.ToLower(token)} {
				wantError(t, call(t, rt.method, target, `{}`, auth), http.StatusUnauthorized, "unauthorized")
			}
		}
		// Also where no route or method matches, and before the body limit.
		for _, c := range []struct{ method, target string }{
			{http.MethodGet, "/v1"}, {http.MethodGet, "/v1/"}, {http.MethodGet, "/v1/nope"},
			{http.MethodPatch, "/v1/users/1/feed"}, {http.MethodOptions, "/v1/users/1/feed"},
		} {
			wantError(t, call(t, c.method, c.target, "", ""), http.StatusUnauthorized, "unauthorized")
		}
		wantStatus(t, call(t, http.MethodHead, "/v1/users/1/feed", "", ""), http.StatusUnauthorized) // no body
		wantError(t, call(t, http.MethodPost, "/v1/users/1/posts", strings.Repeat(" ", httpapi.MaxBodyBytes+1), ""), http.StatusUnauthorized, "unauthorized")
		wantError(t, call(t, http.MethodGet, "/v1/nope", "", "Bearer "+token), http.StatusNotFound, "not_found")
		wantError(t, call(t, http.MethodPatch, "/v1/users/1/feed", "", "Bearer "+token), http.StatusMethodNotAllowed, "invalid_argument")
	})

	t.Run("the scheme name is case-insensitive", func(t *testing.T) {
		for _, auth := range []string{"Bearer " + token, "bearer " + token, "BEARER " + token} {
			wantStatus(t, call(t, http.MethodGet, "/v1/users/"+u(user)+"/feed", "", auth), http.StatusOK)
		}
	})

	t.Run("refused writes change nothing", func(t *testing.T) {
		id := v.id()
		body := fmt.Sprintf(`{"content_id":"%d"}`, id)
		wantError(t, call(t, http.MethodPost, "/v1/users/"+u(author)+"/posts", body, ""), http.StatusUnauthorized, "unauthorized")
		wantError(t, call(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", author, user), "", "Bearer no"), http.StatusUnauthorized, "unauthorized")
		wantError(t, call(t, http.MethodDelete, "/v1/users/"+u(user)+"/posts/"+p.ContentID, "", ""), http.StatusUnauthorized, "unauthorized")
		if got := v.posts(t, author); len(got) != 0 {
			t.Fatalf("posts %+v", got)
		}
		if got := v.following(t, author); len(got) != 0 {
			t.Fatalf("following %+v", got)
		}
		if got := v.posts(t, user); !slices.Equal(got, []post{p}) {
			t.Fatalf("posts %+v, want %+v", got, p)
		}
		v.publish(t, author, body, http.StatusCreated) // not 200: the refused request stored nothing
	})

	t.Run("operations stay open", func(t *testing.T) {
		for _, target := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
			wantStatus(t, call(t, http.MethodGet, target, "", ""), http.StatusOK)
			wantStatus(t, call(t, http.MethodGet, target, "", "Bearer wrong"), http.StatusOK)
		}
		wantError(t, call(t, http.MethodGet, "/nope", "", ""), http.StatusNotFound, "not_found")
	})
}

func TestOperations(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})

	r := v.do(t, http.MethodGet, "/healthz", "")
	wantStatus(t, r, http.StatusOK)
	if got := strings.TrimSpace(string(r.body)); got != `{"status":"ok"}` {
		t.Errorf("healthz %s", got)
	}
	r = v.do(t, http.MethodGet, "/readyz", "")
	wantStatus(t, r, http.StatusOK)
	if got := strings.TrimSpace(string(r.body)); got != `{"status":"ready","databases":{"db0":"up"}}` {
		t.Errorf("readyz %s", got)
	}

	v.publish(t, v.id(), `{}`, http.StatusCreated)
	for range 2 { // the middlewares run for a request that matches no route too
		wantStatus(t, v.do(t, http.MethodGet, "/no/such/route", ""), http.StatusNotFound)
	}
	r = v.do(t, http.MethodGet, "/metrics", "")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{
		`feed_http_requests_total{method="GET",route="/healthz",status="200"} 1`,
		`feed_http_requests_total{method="GET",route="unmatched",status="404"} 2`,
		`feed_http_requests_total{method="POST",route="/v1/users/:id/posts",status="201"} 1`,
		`feed_http_request_seconds_bucket{method="GET",route="/readyz"`,
		`feed_posts_published_total 1`,
	} {
		if !bytes.Contains(r.body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}

	r = v.do(t, http.MethodGet, "/openapi.json", "")
	wantStatus(t, r, http.StatusOK)
	file, err := readSpecFile()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.body, file) {
		t.Error("/openapi.json differs from httpapi/openapi.json")
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil || doc.OpenAPI != "3.0.3" || len(doc.Paths) == 0 {
		t.Errorf("/openapi.json: openapi %q, %d paths, %v", doc.OpenAPI, len(doc.Paths), err)
	}
}

// unreachableStore is a store whose only database never answers.
func unreachableStore(t *testing.T) *store.Store {
	t.Helper()
	// Nothing listens on port 1; the store does not connect until used.
	st, err := store.Open(shardmap.Single("root@tcp(127.0.0.1:1)/x?timeout=2s"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	st := unreachableStore(t)
	v := setup(t, envOpts{store: st})

	wantStatus(t, v.do(t, http.MethodGet, "/healthz", ""), http.StatusOK)
	r := v.do(t, http.MethodGet, "/readyz", "")
	wantStatus(t, r, http.StatusServiceUnavailable)
	if want := `{"status":"unavailable","databases":{"main":"down"}}`; strings.TrimSpace(string(r.body)) != want {
		t.Errorf("readyz body %s, want %s", r.body, want)
	}
	values := map[string]string{"user": "1", "author": "2", "content": "3"}
	for _, rt := range routes {
		body := ""
		switch {
		case rt.method == http.MethodPost:
			body = `{}`
		case rt.method == http.MethodPut && strings.HasSuffix(rt.path, "/marker"):
			body = `{"cursor":"AWYAAAGJRZS9OAAAAAAAAIBT"}`
		}
		wantError(t, v.do(t, rt.method, fill(rt.path, values), body), http.StatusServiceUnavailable, "unavailable")
	}
	// Validation still comes first.
	wantError(t, v.do(t, http.MethodGet, "/v1/users/0/feed", ""), http.StatusBadRequest, "invalid_argument")
}

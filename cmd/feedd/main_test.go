package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/dbserver"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeBuild()
	dbserver.RemoveTemplate()
	os.Exit(code)
}

// syncBuffer collects the log of one Main or one feedd process.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// startMain runs feedd in-process with args (the command first), as main
// does, and closes it when the test ends; its log goes to the test log if
// the test failed. For migrate, Run has finished when it returns.
func startMain(t *testing.T, args ...string) (*Main, *syncBuffer) {
	t.Helper()
	m := NewMain()
	log := &syncBuffer{}
	m.Stderr = log
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--drain-delay") }) {
		// Tests close many servers; a load balancer's drain is not theirs.
		args = append(slices.Clone(args), "--drain-delay=0s")
	}
	args = withEngine(t, args)
	if err := m.ParseFlags(args); err != nil {
		t.Fatalf("ParseFlags(%q): %v", args, err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			t.Logf("feedd %s log:\n%s", args[0], tail(log.String(), 16<<10))
		}
	})
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("Run(%q): %v", args, err)
	}
	return m, log
}

// withEngine adds the inbox engine of the tests' stores (storetest.EnvEngine)
// to a command's arguments that name none, as childEnv does for
// subprocesses.
func withEngine(t *testing.T, args []string) []string {
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--inbox-engine") }) {
		return args
	}
	return append(slices.Clone(args), "--inbox-engine="+string(storetest.InboxEngine(t)))
}

// serveArgs are the arguments of an in-process `feedd serve` on a random
// port with fast workers.
func serveArgs(dsn string, extra ...string) []string {
	return append([]string{"serve", "--mysql-dsn", dsn, "--http-addr", "127.0.0.1:0",
		"--poll-interval", "20ms", "--lease", "2s", "--soft-stop", "2s"}, extra...)
}

func newClient(t *testing.T, m *Main, token string) *client.Client {
	t.Helper()
	if m.Addr() == "" {
		t.Fatal("feedd does not listen")
	}
	return client.New("http://"+m.Addr(), token, &http.Client{Timeout: 10 * time.Second})
}

// openStore opens the databases of a shard map for checks from the test.
func openStore(t *testing.T, m *shardmap.Map) *store.Store {
	t.Helper()
	st, err := store.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// idle is the condition that no work is queued on any shard of st.
func idle(st *store.Store) func() error {
	return func() error {
		b, err := st.Backlog(context.Background())
		if err != nil {
			return err
		}
		if !b.Idle() {
			return fmt.Errorf("backlog %+v", b)
		}
		return nil
	}
}

// waitIdle waits until no work is queued on any shard.
func waitIdle(t *testing.T, st *store.Store) {
	t.Helper()
	wait.For(t, "the system at rest", idle(st))
}

// apiCode returns the status and code of an API error (0, "" for nil).
func apiCode(err error) (int, string) {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Status, e.Code
	}
	if err != nil {
		return -1, err.Error()
	}
	return 0, ""
}

func wantAPIError(t *testing.T, err error, status int, code string) {
	t.Helper()
	if s, c := apiCode(err); s != status || c != code {
		t.Fatalf("error = %v, want %d %s", err, status, code)
	}
}

func id(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func ids(posts []client.Post) []string {
	out := make([]string, len(posts))
	for i, p := range posts {
		out[i] = p.ContentID
	}
	return out
}

// feedAll pages through a user's feed with the given page size, checking
// that every page but the last is full and the cursors end.
func feedAll(t *testing.T, c *client.Client, user uint64, limit int) []client.Post {
	t.Helper()
	ctx := context.Background()
	var all []client.Post
	cursor := ""
	for range 1000 {
		page, err := c.Feed(ctx, user, limit, cursor)
		if err != nil {
			t.Fatalf("feed of %d: %v", user, err)
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			return all
		}
		if len(page.Items) != limit {
			t.Fatalf("feed of %d: page of %d items with a next cursor, want %d", user, len(page.Items), limit)
		}
		cursor = *page.NextCursor
	}
	t.Fatalf("feed of %d does not end", user)
	return nil
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// checkSession is a client's session over the contract, step by step as
// one would run it with curl: publish, follow, page the feed, fan-out,
// delete, unfollow and re-follow. reader and author
// are user ids; st sees the same databases as the server.
func checkSession(t *testing.T, c *client.Client, st *store.Store, reader, author uint64) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()

	// The reader's own post is in their feed when POST returns.
	own, created, err := c.Publish(ctx, reader, client.PublishRequest{})
	if err != nil || !created {
		t.Fatalf("publish own post: created=%v err=%v", created, err)
	}
	if own.AuthorID != strconv.FormatUint(reader, 10) || id(own.ContentID) == 0 || own.Kind != "post" || own.PublishTime < now-60_000 {
		t.Fatalf("own post = %+v", own)
	}
	page, err := c.Feed(ctx, reader, 20, "")
	if err != nil || len(page.Items) != 1 || page.Items[0] != own || page.NextCursor != nil {
		t.Fatalf("own feed = %+v, %v; want just %+v", page, err, own)
	}

	// The author's older posts, with client-assigned ids and times.
	var older []client.Post // newest first
	base := uint64(reader)*1000 + 7
	for i := range 5 {
		p, created, err := c.Publish(ctx, author, client.PublishRequest{
			ContentID: strconv.FormatUint(base+uint64(i), 10), PublishTime: now - 60_000 + int64(i)*1000, Kind: "note"})
		if err != nil || !created {
			t.Fatalf("publish %d: created=%v err=%v", i, created, err)
		}
		older = slices.Insert(older, 0, p)
	}
	// Idempotent publish, and a conflicting one.
	again, created, err := c.Publish(ctx, author, client.PublishRequest{ContentID: older[0].ContentID, PublishTime: older[0].PublishTime, Kind: "note"})
	if err != nil || created || again != older[0] {
		t.Fatalf("publish again = %+v created=%v err=%v, want %+v not created", again, created, err, older[0])
	}
	_, _, err = c.Publish(ctx, author, client.PublishRequest{ContentID: older[0].ContentID, Kind: "photo"})
	wantAPIError(t, err, http.StatusConflict, "conflict")
	posts, err := c.Posts(ctx, author, 100, "")
	if err != nil || !slices.Equal(ids(posts.Items), ids(older)) {
		t.Fatalf("author's posts = %v, %v; want %v", ids(posts.Items), err, ids(older))
	}

	// Follow: the older posts show at once, no waiting for the backfill.
	if err := c.Follow(ctx, reader, author); err != nil {
		t.Fatalf("follow: %v", err)
	}
	if err := c.Follow(ctx, reader, author); err != nil {
		t.Fatalf("follow again: %v", err)
	}
	want := append([]client.Post{own}, older...)
	for _, limit := range []int{2, 4, 100} {
		if got := feedAll(t, c, reader, limit); !slices.Equal(got, want) {
			t.Fatalf("feed after follow (pages of %d) = %v, want %v", limit, ids(got), ids(want))
		}
	}
	following, err := c.Following(ctx, reader, 10, "")
	if err != nil || len(following.Items) != 1 || id(following.Items[0].AuthorID) != author {
		t.Fatalf("following = %+v, %v", following, err)
	}
	waitIdle(t, st)
	followers, err := c.Followers(ctx, author, 10, "")
	if err != nil || len(followers.Items) != 1 || id(followers.Items[0].UserID) != reader {
		t.Fatalf("followers at rest = %+v, %v", followers, err)
	}
	// The backfill copied the posts into the inbox: the feed is unchanged.
	if got := feedAll(t, c, reader, 3); !slices.Equal(got, want) {
		t.Fatalf("feed after backfill = %v, want %v", ids(got), ids(want))
	}

	// A new post fans out and its delivery reaches done.
	fresh, _, err := c.Publish(ctx, author, client.PublishRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "delivery done", func() error {
		d, err := c.Delivery(ctx, author, id(fresh.ContentID))
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(d, client.Delivery{State: "done", Mode: "push", Recipients: 1, Delivered: 1}) {
			return fmt.Errorf("delivery %+v", d)
		}
		return nil
	})
	inbox, err := st.InboxKeys(ctx, reader)
	if err != nil || len(inbox) != 7 || inbox[0].ContentID != id(fresh.ContentID) {
		t.Fatalf("reader's inbox after fan-out = %+v, %v", inbox, err)
	}
	want = append([]client.Post{fresh}, want...)
	if got := feedAll(t, c, reader, 2); !slices.Equal(got, want) {
		t.Fatalf("feed after fan-out = %v, want %v", ids(got), ids(want))
	}
	_, err = c.Delivery(ctx, author, 999_999_999)
	wantAPIError(t, err, http.StatusNotFound, "not_found")

	// Paging while posts arrive: no item twice, none skipped.
	first, err := c.Feed(ctx, reader, 3, "")
	if err != nil || first.NextCursor == nil {
		t.Fatalf("first page: %+v, %v", first, err)
	}
	newer, _, err := c.Publish(ctx, author, client.PublishRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var paged []client.Post
	paged = append(paged, first.Items...)
	for cursor := first.NextCursor; cursor != nil; {
		p, err := c.Feed(ctx, reader, 3, *cursor)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, p.Items...)
		cursor = p.NextCursor
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("pages started before a publish = %v, want %v", ids(paged), ids(want))
	}
	want = append([]client.Post{newer}, want...)
	waitIdle(t, st)

	// Delete: gone from the author's list at once, from every feed once the
	// retraction runs.
	gone := want[3] // one of the older posts, in the inbox by backfill
	if err := c.DeletePost(ctx, author, id(gone.ContentID)); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.DeletePost(ctx, author, id(gone.ContentID)); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	wantAPIError(t, c.DeletePost(ctx, author, 999_999_999), http.StatusNotFound, "not_found")
	posts, err = c.Posts(ctx, author, 100, "")
	if err != nil || slices.Contains(ids(posts.Items), gone.ContentID) {
		t.Fatalf("author's posts after delete = %v, %v", ids(posts.Items), err)
	}
	want = slices.DeleteFunc(slices.Clone(want), func(p client.Post) bool { return p == gone })
	wait.For(t, "deleted post leaves the feed", func() error {
		got := feedAll(t, c, reader, 100)
		if !slices.Equal(got, want) {
			return fmt.Errorf("feed %v, want %v", ids(got), ids(want))
		}
		return nil
	})
	wait.For(t, "deleted post leaves the inbox", func() error {
		inbox, err := st.InboxKeys(ctx, reader)
		if err != nil {
			return err
		}
		for _, p := range inbox {
			if p.ContentID == id(gone.ContentID) {
				return fmt.Errorf("inbox still has %d", p.ContentID)
			}
		}
		return nil
	})

	// Unfollow: no post of the author in any response after it returns.
	if err := c.Unfollow(ctx, reader, author); err != nil {
		t.Fatalf("unfollow: %v", err)
	}
	if err := c.Unfollow(ctx, reader, author); err != nil {
		t.Fatalf("unfollow again: %v", err)
	}
	if got := feedAll(t, c, reader, 2); !slices.Equal(got, []client.Post{own}) {
		t.Fatalf("feed after unfollow = %v, want just %v", ids(got), own.ContentID)
	}
	// Re-follow behaves like follow.
	if err := c.Follow(ctx, reader, author); err != nil {
		t.Fatalf("re-follow: %v", err)
	}
	if got := feedAll(t, c, reader, 4); !slices.Equal(got, want) {
		t.Fatalf("feed after re-follow = %v, want %v", ids(got), ids(want))
	}
	waitIdle(t, st)
	if got := feedAll(t, c, reader, 4); !slices.Equal(got, want) {
		t.Fatalf("feed after re-follow at rest = %v, want %v", ids(got), ids(want))
	}

	// Bad requests.
	wantAPIError(t, c.Follow(ctx, reader, reader), http.StatusBadRequest, "invalid_argument")
	_, err = c.Feed(ctx, reader, 101, "")
	wantAPIError(t, err, http.StatusBadRequest, "invalid_argument")
	_, err = c.Feed(ctx, reader, 5, "not-a-cursor")
	wantAPIError(t, err, http.StatusBadRequest, "invalid_argument")
	_, _, err = c.Publish(ctx, author, client.PublishRequest{PublishTime: time.Now().Add(time.Hour).UnixMilli()})
	wantAPIError(t, err, http.StatusBadRequest, "invalid_argument")
}

func TestServe(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	m, log := startMain(t, serveArgs(dsn)...)
	c := newClient(t, m, "")
	st := openStore(t, shardmap.Single(dsn))

	checkSession(t, c, st, 100, 200)

	base := "http://" + m.Addr()
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s", code, body)
	}
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Errorf("/metrics = %d", code)
	}
	for _, metric := range []string{"feed_http_requests_total", "feed_posts_published_total", "feed_fanout_inbox_rows_total", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(body, metric) {
			t.Errorf("/metrics lacks %s", metric)
		}
	}
	code, body = httpGet(t, base+"/openapi.json")
	var spec struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &spec); code != http.StatusOK || err != nil || !strings.HasPrefix(spec.OpenAPI, "3") || len(spec.Paths) == 0 {
		t.Errorf("/openapi.json = %d, %v, %+v", code, err, spec)
	}
	if strings.Contains(log.String(), dsn) {
		t.Errorf("the log shows the DSN:\n%s", log)
	}

	// Close is graceful: requests after it fail to connect, and a second
	// Close (the cleanup's) is harmless.
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Feed(context.Background(), 100, 1, ""); err == nil {
		t.Error("the API still answers after Close")
	}
}

func TestServeAPIToken(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	const token = "tok-8c1f6b"
	m, log := startMain(t, serveArgs(dsn, "--api-token", token)...)
	ctx := context.Background()

	good := newClient(t, m, token)
	p, _, err := good.Publish(ctx, 1, client.PublishRequest{})
	if err != nil {
		t.Fatalf("publish with the token: %v", err)
	}
	pid := id(p.ContentID)
	for name, c := range map[string]*client.Client{"no token": newClient(t, m, ""), "wrong token": newClient(t, m, token+"x")} {
		calls := map[string]error{}
		_, _, calls["publish"] = c.Publish(ctx, 1, client.PublishRequest{})
		calls["delete post"] = c.DeletePost(ctx, 1, pid)
		_, calls["list posts"] = c.Posts(ctx, 1, 0, "")
		_, calls["delivery"] = c.Delivery(ctx, 1, pid)
		calls["follow"] = c.Follow(ctx, 2, 1)
		calls["unfollow"] = c.Unfollow(ctx, 2, 1)
		_, calls["following"] = c.Following(ctx, 2, 0, "")
		_, calls["followers"] = c.Followers(ctx, 1, 0, "")
		_, calls["feed"] = c.Feed(ctx, 2, 0, "")
		for call, err := range calls {
			if s, code := apiCode(err); s != http.StatusUnauthorized || code != "unauthorized" {
				t.Errorf("%s, %s: %v, want 401 unauthorized", name, call, err)
			}
		}
	}
	// Nothing above happened.
	posts, err := good.Posts(ctx, 1, 10, "")
	if err != nil || len(posts.Items) != 1 {
		t.Fatalf("posts = %+v, %v", posts, err)
	}
	if err := good.Follow(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	if f, err := good.Feed(ctx, 2, 10, ""); err != nil || len(f.Items) != 1 {
		t.Fatalf("feed with the token = %+v, %v", f, err)
	}
	// Outside /v1 no token is needed.
	base := "http://" + m.Addr()
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		if code, body := httpGet(t, base+path); code != http.StatusOK {
			t.Errorf("%s without token = %d %s", path, code, tail(body, 200))
		}
	}
	if strings.Contains(log.String(), token) {
		t.Errorf("the log shows the API token")
	}
}

func TestMigrateThenServe(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	ctx := context.Background()

	// Without migrations and auto-migrate, the server is not ready.
	m, _ := startMain(t, serveArgs(dsn, "--auto-migrate=false", "--workers=false")...)
	if code, body := httpGet(t, "http://"+m.Addr()+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before migrate = %d %s, want 503", code, body)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	for range 2 { // migrate is idempotent
		mig, log := startMain(t, "migrate", "--mysql-dsn", dsn)
		if mig.Addr() != "" {
			t.Errorf("migrate listens on %s", mig.Addr())
		}
		if err := mig.Close(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log.String(), "store: migrated") {
			t.Errorf("migrate log:\n%s", log)
		}
	}

	m, _ = startMain(t, serveArgs(dsn, "--auto-migrate=false")...)
	if code, body := httpGet(t, "http://"+m.Addr()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after migrate = %d %s", code, body)
	}
	c := newClient(t, m, "")
	if err := c.Follow(ctx, 5, 6); err != nil {
		t.Fatal(err)
	}
	p, _, err := c.Publish(ctx, 6, client.PublishRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "post in feed", func() error {
		f, err := c.Feed(ctx, 5, 10, "")
		if err != nil || len(f.Items) != 1 || f.Items[0] != p {
			return fmt.Errorf("feed %+v, %v", f, err)
		}
		return nil
	})
}

// TestSplitAPIAndWorkers runs the API without workers, then a workers-only
// process on the same database that does the queued work.
func TestSplitAPIAndWorkers(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	ctx := context.Background()
	api, _ := startMain(t, serveArgs(dsn, "--workers=false")...)
	c := newClient(t, api, "")
	st := openStore(t, shardmap.Single(dsn))

	if err := c.Follow(ctx, 10, 20); err != nil {
		t.Fatal(err)
	}
	p, _, err := c.Publish(ctx, 20, client.PublishRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Reads merge the author's outbox while the backfill is pending.
	if f, err := c.Feed(ctx, 10, 10, ""); err != nil || len(f.Items) != 1 || f.Items[0] != p {
		t.Fatalf("feed = %+v, %v", f, err)
	}
	// Nothing works the queues: give idle workers many poll intervals. Not
	// a wait for an event: that nothing happens takes real time to show.
	time.Sleep(300 * time.Millisecond)
	if d, err := c.Delivery(ctx, 20, id(p.ContentID)); err != nil || d.State != "pending" {
		t.Fatalf("delivery without workers = %+v, %v; want pending", d, err)
	}
	if b, err := st.Backlog(ctx); err != nil || b.Deliveries != 1 || b.FollowEvents != 1 {
		t.Fatalf("backlog without workers = %+v, %v", b, err)
	}
	if inbox, err := st.InboxKeys(ctx, 10); err != nil || len(inbox) != 0 {
		t.Fatalf("inbox without workers = %+v, %v", inbox, err)
	}

	workers, _ := startMain(t, serveArgs(dsn, "--api=false", "--http-addr", "127.0.0.1:1")...)
	if workers.Addr() != "" {
		t.Errorf("workers-only process listens on %s", workers.Addr())
	}
	wait.For(t, "delivery done", func() error {
		d, err := c.Delivery(ctx, 20, id(p.ContentID))
		if err != nil || d.State != "done" {
			return fmt.Errorf("delivery %+v, %v", d, err)
		}
		return nil
	})
	waitIdle(t, st)
	if inbox, err := st.InboxKeys(ctx, 10); err != nil || len(inbox) != 1 || inbox[0].ContentID != id(p.ContentID) {
		t.Fatalf("inbox after the workers ran = %+v, %v", inbox, err)
	}
	if f, err := c.Followers(ctx, 20, 10, ""); err != nil || len(f.Items) != 1 || id(f.Items[0].UserID) != 10 {
		t.Fatalf("followers after the workers ran = %+v, %v", f, err)
	}
	// A second post now fans out through the workers-only process.
	p2, _, err := c.Publish(ctx, 20, client.PublishRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "second delivery done", func() error {
		d, err := c.Delivery(ctx, 20, id(p2.ContentID))
		if err != nil || !reflect.DeepEqual(d, client.Delivery{State: "done", Mode: "push", Recipients: 1, Delivered: 1}) {
			return fmt.Errorf("delivery %+v, %v", d, err)
		}
		return nil
	})
	if err := workers.Close(); err != nil {
		t.Fatalf("close workers: %v", err)
	}
}

// idOnShards returns the first id from start up whose virtual shard is in
// [lo, hi].
func idOnShards(start uint64, lo, hi int) uint64 {
	for u := start; ; u++ {
		if v := shardmap.VirtualShard(u, shardmap.DefaultVirtualShards); v >= lo && v <= hi {
			return u
		}
	}
}

// TestServeSharded runs the session on two databases named in a
// sharding.yaml, one DSN through ${VAR}, and checks rows landed on both.
func TestServeSharded(t *testing.T) {
	dsnA, dsnB := storetest.DatabaseDSN(t), storetest.DatabaseDSN(t)
	cfgB, err := mysql.ParseDSN(dsnB)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FEED_TEST_SHARD_B_DB", cfgB.DBName)
	dbB := cfgB.DBName
	cfgB.DBName = "DBNAME"
	templB := strings.Replace(cfgB.FormatDSN(), "/DBNAME", "/${FEED_TEST_SHARD_B_DB}", 1)
	if !strings.Contains(templB, "${") {
		t.Fatalf("DSN template %q", templB)
	}
	yaml := fmt.Sprintf(`virtual_shards: 1024
databases:
  a:
    dsn: %q
    connections: {workers: 8}
  b:
    dsn: %q
ranges:
  - vshards: 0-511
    database: a
  - vshards: 512-1023
    database: b
`, dsnA, templB)
	path := filepath.Join(t.TempDir(), "sharding.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	m, _ := startMain(t, "serve", "--sharding", path, "--http-addr", "127.0.0.1:0", "--poll-interval", "20ms", "--lease", "2s")
	c := newClient(t, m, "")
	shardMap, err := shardmap.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, shardMap)
	if !strings.HasSuffix(shardMap.Databases["b"].DSN, "/"+dbB) {
		t.Fatalf("${VAR} not expanded: %s", shardMap.Databases["b"].DSN)
	}
	if code, body := httpGet(t, "http://"+m.Addr()+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %s", code, body)
	}

	// Reader on a, author on b: every step of the session crosses shards.
	reader, author := idOnShards(100, 0, 511), idOnShards(200, 512, 1023)
	checkSession(t, c, st, reader, author)

	// An author with followers on both databases.
	ctx := context.Background()
	star := idOnShards(5000, 0, 511)
	var fans []uint64
	for _, r := range [][2]int{{0, 511}, {512, 1023}} {
		u := uint64(10_000)
		for range 3 {
			u = idOnShards(u+1, r[0], r[1])
			fans = append(fans, u)
			if err := c.Follow(ctx, u, star); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitIdle(t, st)
	p, _, err := c.Publish(ctx, star, client.PublishRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "delivery done", func() error {
		d, err := c.Delivery(ctx, star, id(p.ContentID))
		if err != nil || !reflect.DeepEqual(d, client.Delivery{State: "done", Mode: "push", Recipients: 6, Delivered: 6}) {
			return fmt.Errorf("delivery %+v, %v", d, err)
		}
		return nil
	})
	for _, u := range fans {
		if f, err := c.Feed(ctx, u, 10, ""); err != nil || len(f.Items) != 1 || f.Items[0] != p {
			t.Errorf("feed of %d = %+v, %v", u, f, err)
		}
	}
	// The rows: the post's inbox entries split 4 (author + 3) / 3, and each
	// database holds its users' inboxes only.
	for name, want := range map[string]int{"a": 4, "b": 3} {
		db, err := sql.Open("mysql", shardMap.Databases[name].DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM inbox WHERE content_id = ?`, id(p.ContentID)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("database %s has %d inbox rows of the post, want %d", name, n, want)
		}
		rows, err := db.Query(`SELECT DISTINCT user_id FROM inbox`)
		if err != nil {
			t.Fatal(err)
		}
		var users int
		for rows.Next() {
			var u uint64
			if err := rows.Scan(&u); err != nil {
				t.Fatal(err)
			}
			users++
			if st.ShardOf(u).Name != name {
				t.Errorf("database %s holds the inbox of user %d of shard %s", name, u, st.ShardOf(u).Name)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if users == 0 {
			t.Errorf("database %s holds no inbox", name)
		}
		var posts int
		if err := db.QueryRow(`SELECT COUNT(*) FROM posts`).Scan(&posts); err != nil {
			t.Fatal(err)
		}
		if posts == 0 {
			t.Errorf("database %s holds no posts", name)
		}
	}
}

// TestCloseBeforeRun: Close of a Main that never ran, or failed to start,
// does nothing and does not block.
func TestCloseBeforeRun(t *testing.T) {
	m := NewMain()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags([]string{"serve", "--sharding", filepath.Join(t.TempDir(), "missing.yaml")}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err == nil {
		t.Fatal("Run with a missing sharding file succeeded")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRunWithoutParseFlags: a Main configured in code (no ParseFlags) runs
// and logs to its Stderr.
func TestRunWithoutParseFlags(t *testing.T) {
	t.Parallel()
	m := NewMain()
	log := &syncBuffer{}
	m.Stderr = log
	m.Command = "migrate"
	m.Config.MySQLDSN = storetest.DatabaseDSN(t)
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "store: migrated") {
		t.Errorf("log:\n%s", log)
	}
}

// TestServeListenError: when serve fails after the workers started, Run
// returns the error and Close still stops everything.
func TestServeListenError(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	m := NewMain()
	log := &syncBuffer{}
	m.Stderr = log
	if err := m.ParseFlags(serveArgs(dsn, "--http-addr", "127.0.0.1:99999")); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err == nil {
		t.Fatal("Run on a bad address succeeded")
	}
	done := make(chan error, 1)
	go func() { done <- m.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Close hangs; log:\n%s", log)
	}
}

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store/storetest"
)

// TestWriteStall holds FLUSH TABLES WITH READ LOCK on a throwaway server, as
// a backup does: writes answer 503 within their deadline instead of hanging,
// their statements are killed on the server, readiness drops, a client that
// hangs up is metered as 499, and after UNLOCK everything recovers by itself
// and the writes, retried, are applied exactly once.
func TestWriteStall(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t)
	m, log := startMain(t, "serve", "--mysql-dsn", srv.DSN+"feed", "--http-addr", "127.0.0.1:0",
		"--workers=false", "--write-deadline", "1s", "--read-deadline", "1s",
		"--probe-interval", "100ms", "--probe-timeout", "500ms")
	base := "http://" + m.Addr()
	// The client waits far longer than the deadlines: a hang fails the test.
	c := client.New(base, "", &http.Client{Timeout: 20 * time.Second})
	ctx := t.Context()
	const author, user = 200, 100
	must(t, c.Follow(ctx, user, author))
	if _, _, err := c.Publish(ctx, author, client.PublishRequest{ContentID: "10", PublishTime: 1_000}); err != nil {
		t.Fatal(err)
	}

	admin, err := sql.Open("mysql", srv.DSN)
	must(t, err)
	defer admin.Close()
	unlock := backupLock(t, srv)

	// Writes stall on the lock and answer 503 with Retry-After.
	post := client.PublishRequest{ContentID: "11", PublishTime: 2_000}
	_, _, err = c.Publish(ctx, author, post)
	wantAPIError(t, err, http.StatusServiceUnavailable, "unavailable")
	wantAPIError(t, c.Follow(ctx, user, 300), http.StatusServiceUnavailable, "unavailable")
	resp, err := http.Post(base+"/v1/users/200/posts", "application/json", strings.NewReader(`{"content_id":"12"}`))
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("stalled publish: %d Retry-After %q, want 503 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Reads are allowed by the lock and keep answering.
	if _, err := c.Feed(ctx, user, 10, ""); err != nil {
		t.Errorf("feed read under the lock: %v", err)
	}

	// A client that gives up is not a server fault.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _, err = c.Publish(short, author, client.PublishRequest{ContentID: "13"})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish with a 200 ms client timeout: %v, want the client's deadline", err)
	}

	// Readiness drops: the probe cannot write.
	waitReady(t, base, http.StatusServiceUnavailable, `{"status":"unavailable","databases":{"main":"down"}}`)
	// The timed-out statements were killed on the server: nothing of the
	// API's waits there (probes come and go, each within its deadline).
	wait.For(t, "no API statement left waiting on the server", func() error {
		var n int
		err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = 'feed' AND COMMAND = 'Query' AND INFO NOT LIKE '%health%' AND ID <> CONNECTION_ID()`).Scan(&n)
		must(t, err)
		if n != 0 {
			return fmt.Errorf("%d statements running", n)
		}
		return nil
	})
	wait.For(t, "the 499 metered", func() error {
		if v := metricValue(t, base, `feed_http_requests_total{method="POST",route="/v1/users/:id/posts",status="499"}`); v != 1 {
			return fmt.Errorf("%v 499s metered", v)
		}
		return nil
	})

	unlock()
	waitReady(t, base, http.StatusOK, "")
	// Retrying the timed-out writes is safe: each is applied once.
	if _, created, err := c.Publish(ctx, author, post); err != nil {
		t.Fatal(err)
	} else if !created {
		t.Error("the publish that got 503 had happened: it should have rolled back with its killed statement")
	}
	must(t, c.Follow(ctx, user, 300))
	page, err := c.Posts(ctx, author, 100, "")
	must(t, err)
	var ids []string
	for _, p := range page.Items {
		ids = append(ids, p.ContentID)
	}
	if got := strings.Join(ids, ","); got != "11,10" {
		t.Errorf("author's posts %s, want 11,10 (13 and 12 never committed: both were cut off before)", got)
	}
	// Nothing piles up: requests and connections return to rest.
	wait.For(t, "no request in flight but this scrape, no connection in use", func() error {
		flight := metricValue(t, base, `feed_http_requests_in_flight`)
		reads := metricValue(t, base, `feed_db_connections{class="reads",database="main",state="in_use"}`)
		writes := metricValue(t, base, `feed_db_connections{class="writes",database="main",state="in_use"}`)
		if flight != 1 || reads != 0 || writes != 0 {
			return fmt.Errorf("%v requests in flight, %v read and %v write connections in use", flight, reads, writes)
		}
		return nil
	})
	for _, outcome := range []string{"retried", "gave_up"} {
		if v := metricValue(t, base, `feed_db_conflicts_total{database="main",outcome="`+outcome+`"}`); v < 0 {
			t.Errorf("no feed_db_conflicts_total series for %s", outcome)
		}
	}
	if strings.Contains(log.String(), "http: internal error") || strings.Contains(log.String(), "context canceled") {
		t.Errorf("the stall was logged as a server fault:\n%s", log.String())
	}
}

// backupLock holds FLUSH TABLES WITH READ LOCK on srv, as a backup does,
// until the returned unlock (called at the end of the test at the latest).
func backupLock(t *testing.T, srv *storetest.Server) (unlock func()) {
	t.Helper()
	db, err := sql.Open("mysql", srv.DSN)
	must(t, err)
	conn, err := db.Conn(t.Context())
	must(t, err)
	_, err = conn.ExecContext(t.Context(), "FLUSH TABLES WITH READ LOCK")
	must(t, err)
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			_, err := conn.ExecContext(context.Background(), "UNLOCK TABLES")
			conn.Close()
			db.Close()
			must(t, err)
		})
	}
	t.Cleanup(unlock)
	return unlock
}

// twoDatabases writes a sharding.yaml with virtual shards 0-511 on database
// a and 512-1023 on b, and returns its path.
func twoDatabases(t *testing.T, dsnA, dsnB string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sharding.yaml")
	yaml := fmt.Sprintf("virtual_shards: 1024\ndatabases:\n  a: {dsn: %q}\n  b: {dsn: %q}\nranges:\n  - {vshards: 0-511, database: a}\n  - {vshards: 512-1023, database: b}\n", dsnA, dsnB)
	must(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

// metricValue scrapes /metrics and returns the sample named exactly series
// (name and labels as Prometheus prints them), or -1 when it is absent.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	_, body := httpGet(t, base+"/metrics")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	must(t, err)
	return v
}

// waitReady waits until base's /readyz answers status, with body unless
// body is empty.
func waitReady(t *testing.T, base string, status int, body string) {
	t.Helper()
	wait.For(t, fmt.Sprintf("readyz %d %s", status, body), func() error {
		code, got := httpGet(t, base+"/readyz")
		if code != status || body != "" && got != body+"\n" {
			return fmt.Errorf("readyz %d %s", code, got)
		}
		return nil
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseDown kills the database under a serving feedd with its
// workers: readiness drops at once, the outage is logged once and not per
// failing step, and when the server is back everything resumes by itself.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t)
	m, log := startMain(t, "serve", "--mysql-dsn", srv.DSN+"feed", "--http-addr", "127.0.0.1:0",
		"--poll-interval", "20ms", "--probe-interval", "100ms", "--probe-timeout", "500ms")
	base := "http://" + m.Addr()
	c := client.New(base, "", &http.Client{Timeout: 20 * time.Second})
	ctx := t.Context()
	const author, user = 200, 100
	must(t, c.Follow(ctx, user, author))

	srv.Kill()
	waitReady(t, base, http.StatusServiceUnavailable, `{"status":"unavailable","databases":{"main":"down"}}`)
	_, _, err := c.Publish(ctx, author, client.PublishRequest{ContentID: "10"})
	wantAPIError(t, err, http.StatusServiceUnavailable, "unavailable")
	// Let the workers fail a few times in a row (backing off from 100 ms):
	// each failure logged would make as many lines.
	wait.For(t, "the fan-out failing 5 times", func() error {
		if v := metricValue(t, base, `feed_worker_errors_total{loop="fanout"}`); v < 5 {
			return fmt.Errorf("%v failures", v)
		}
		return nil
	})
	if n := strings.Count(log.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d error lines for one outage, want 1 (the health transition):\n%s", n, log.String())
	}

	srv.Restart(t)
	waitReady(t, base, http.StatusOK, "")
	if n := strings.Count(log.String(), "health: database up again"); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
	if _, _, err := c.Publish(ctx, author, client.PublishRequest{ContentID: "10"}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the post in the follower's feed", func() error {
		page, err := c.Feed(ctx, user, 10, "")
		if err != nil || len(page.Items) != 1 || page.Items[0].ContentID != "10" {
			return fmt.Errorf("feed %+v, %v", page, err)
		}
		return nil
	})
}

// TestReadsDuringWriteStall holds FLUSH TABLES WITH READ LOCK while 60
// publishes and every worker wait for it: feed reads, which the lock
// allows, keep answering within their deadline because they have
// connections of their own; after UNLOCK the publishes, retried, are each
// delivered exactly once.
func TestReadsDuringWriteStall(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t)
	m, _ := startMain(t, "serve", "--mysql-dsn", srv.DSN+"feed", "--http-addr", "127.0.0.1:0",
		"--poll-interval", "20ms", "--read-deadline", "1s", "--write-deadline", "2s")
	base := "http://" + m.Addr()
	c := client.New(base, "", &http.Client{Timeout: 20 * time.Second})
	ctx := t.Context()
	const authors, readers, publishes = 3, 10, 60
	for r := range readers {
		for a := range authors {
			must(t, c.Follow(ctx, uint64(100+r), uint64(900+a)))
		}
	}
	post := func(i int) (uint64, client.PublishRequest) {
		return uint64(900 + i%authors), client.PublishRequest{ContentID: strconv.Itoa(1000 + i), PublishTime: int64(1_000_000 + i)}
	}
	for i := range 6 { // acknowledged before the stall
		a, p := post(i)
		if _, _, err := c.Publish(ctx, a, p); err != nil {
			t.Fatal(err)
		}
	}

	admin, err := sql.Open("mysql", srv.DSN)
	must(t, err)
	defer admin.Close()
	unlock := backupLock(t, srv)

	results := make(chan error, publishes)
	for i := 6; i < 6+publishes; i++ {
		go func() {
			a, p := post(i)
			_, _, err := c.Publish(ctx, a, p)
			results <- err
		}()
	}
	wait.For(t, "8 workers and publishes waiting for the lock", func() error {
		var n int
		must(t, admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = 'feed' AND STATE LIKE 'Waiting for %lock%' AND INFO NOT LIKE '%health%'`).Scan(&n))
		if n < 8 {
			return fmt.Errorf("%d waiting", n)
		}
		return nil
	})
	for r := range readers {
		if _, err := c.Feed(ctx, uint64(100+r), 20, ""); err != nil {
			t.Fatalf("feed read during the write stall: %v", err)
		}
	}
	for range publishes {
		wantAPIError(t, <-results, http.StatusServiceUnavailable, "unavailable")
	}
	unlock()

	for i := 6; i < 6+publishes; i++ {
		a, p := post(i)
		if _, _, err := c.Publish(ctx, a, p); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]string, 0, 6+publishes)
	for i := 6 + publishes - 1; i >= 0; i-- {
		want = append(want, strconv.Itoa(1000+i))
	}
	for r := range readers {
		wait.For(t, fmt.Sprintf("every post in the feed of %d, once", 100+r), func() error {
			var got []string
			for p, err := range client.All(ctx, 100, func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error) {
				return c.Feed(ctx, uint64(100+r), limit, cursor)
			}) {
				must(t, err)
				got = append(got, p.ContentID)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("feed %v", got)
			}
			return nil
		})
	}
}

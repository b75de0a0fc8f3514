package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store/storetest"
)

// TestSoakAbuse repeats, in rounds against one feedd, what a hostile client
// can repeat: first pages of a live feed over many streams, feed streams
// opened past the per-user cap and resumed across a long gap, and guesses
// of the console's token, beside an operator who signs in and out, and
// follows and mutes past the caps. After
// the first round every table holds the rows it held then, and the
// process's heap stays within twice its size then plus 32 MiB.
// FEED_SOAK_ROUNDS sets the rounds (make soak runs many).
func TestSoakAbuse(t *testing.T) {
	skipShort(t)
	t.Parallel()
	rounds := storetest.SoakRounds(t, 3)
	const (
		token             = "soak-token"
		viewer, reader    = 500_001, 500_002
		author            = 600_001
		hosts, perHost    = 20, 5
		posts, firstPages = 300, 40
		streamsPerUser    = 4
		maxMuted          = 3
	)
	bin, dsn, st, _ := crashDatabase(t)
	ctx := t.Context()
	now := time.Now().UnixMilli()
	for h := range hosts {
		host := uint64(700_000 + h)
		for k := range perHost {
			if _, _, err := st.CreateStream(ctx, feed.Stream{HostID: host, StreamID: uint64(800_000 + h*perHost + k), ScheduledStart: now + 3_600_000}, now); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Follow(ctx, viewer, host, 2000, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Follow(ctx, reader, author, 2000, now); err != nil {
		t.Fatal(err)
	}
	p := startFeedd(t, bin, "feedd", "serve", "--mysql-dsn", dsn, "--http-addr", "127.0.0.1:0",
		"--api-token", token, "--trusted-proxies", "127.0.0.1,::1", "--poll-interval", "50ms", "--lease", "2s",
		"--max-streams-per-user", strconv.Itoa(streamsPerUser), "--drain-delay", "0s",
		"--max-following", strconv.Itoa(hosts), "--max-muted", strconv.Itoa(maxMuted))
	base := p.listenAddr(t)
	c := client.New(base, token, &http.Client{Timeout: 10 * time.Second})
	for i := range posts {
		if _, _, err := c.Publish(ctx, author, client.PublishRequest{PublishTime: now - int64(posts-i)*1000}); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, st)
	page, err := c.Feed(ctx, reader, 1, "")
	if err != nil || page.NextCursor == nil {
		t.Fatalf("first feed page: %+v, %v", page, err)
	}
	var bottom string // the position of the reader's oldest item
	for cursor := ""; ; {
		pg, err := c.Feed(ctx, reader, 100, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if pg.NextCursor == nil {
			break
		}
		cursor, bottom = *pg.NextCursor, *pg.NextCursor
	}

	// The viewer follows --max-following hosts; it mutes --max-muted authors.
	pairURL := func(list string, author int) string {
		return base + "/v1/users/" + strconv.Itoa(viewer) + "/" + list + "/" + strconv.Itoa(author)
	}
	for a := range maxMuted {
		if code, body := authRequest(t, http.MethodPut, pairURL("muted", 910_000+a), token); code != http.StatusNoContent {
			t.Fatalf("mute: %d %s", code, body)
		}
	}

	guesser := newBrowser(t, base, "198.51.100.66")
	operator := newBrowser(t, base, "203.0.113.7")
	var warmRows map[string]int64
	var warmHeap float64
	for r := range rounds {
		for range firstPages {
			if code, body := authRequest(t, http.MethodGet, base+"/v1/users/"+strconv.Itoa(viewer)+"/live?limit=5", token); code != http.StatusOK {
				t.Fatalf("round %d: live first page: %d %s", r, code, body)
			}
		}
		for a := range 10 {
			for _, list := range []string{"following", "muted"} {
				if code, body := authRequest(t, http.MethodPut, pairURL(list, 920_000+a), token); code != http.StatusConflict || !strings.Contains(body, feed.ELIMIT) {
					t.Fatalf("round %d: a %s past the cap: %d %s", r, list, code, body)
				}
			}
		}
		var hangUps []context.CancelFunc
		for range streamsPerUser {
			sctx, cancel := context.WithCancel(ctx)
			hangUps = append(hangUps, cancel)
			events, err := c.StreamFeed(sctx, reader, client.StreamRequest{LastEventID: bottom})
			if err != nil {
				t.Fatalf("round %d: stream: %v", r, err)
			}
			select {
			case <-events:
			case <-time.After(wait.Deadline):
				t.Fatalf("round %d: no event from a stream resumed across the gap", r)
			}
		}
		var ce *client.Error
		if _, err := c.StreamFeed(ctx, reader, client.StreamRequest{}); !errors.As(err, &ce) || ce.Code != feed.ESTREAMS {
			t.Fatalf("round %d: a stream past the cap: %v, want %s", r, err, feed.ESTREAMS)
		}
		for _, hangUp := range hangUps {
			hangUp()
		}
		for i := range 10 {
			if code := guesser.login(t, "guess-"+strconv.Itoa(i)); code != http.StatusUnauthorized && code != http.StatusTooManyRequests {
				t.Fatalf("round %d: a wrong token: %d", r, code)
			}
		}
		if code := guesser.login(t, token); code != http.StatusTooManyRequests {
			t.Fatalf("round %d: the right token from a throttled client: %d, want 429", r, code)
		}
		if code := operator.login(t, token); code != http.StatusSeeOther {
			t.Fatalf("round %d: the operator's login: %d", r, code)
		}
		operator.logout(t)
		wait.For(t, "the streams closed", func() error {
			if n := metricValue(t, base, "feed_streams_open"); n != 0 {
				return fmt.Errorf("%v streams open", n)
			}
			return nil
		})
		rows, err := storetest.RowCounts(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		heap := metricValue(t, base, "go_memstats_heap_inuse_bytes")
		if heap < 0 {
			t.Fatal("no go_memstats_heap_inuse_bytes in /metrics")
		}
		t.Logf("round %d: heap %.1f MiB, rows %v", r, heap/(1<<20), rows)
		if r == 0 {
			warmRows, warmHeap = rows, heap
			continue
		}
		for table, n := range rows {
			if n != warmRows[table] {
				t.Errorf("round %d: table %s holds %d rows, %d after the first round", r, table, n, warmRows[table])
			}
		}
		if heap > 2*warmHeap+32<<20 {
			t.Errorf("round %d: heap %.1f MiB, %.1f MiB after the first round", r, heap/(1<<20), warmHeap/(1<<20))
		}
	}
}

// authGet GETs url with the bearer token.
func authRequest(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return send(t, http.DefaultClient, req)
}

func send(t *testing.T, hc *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// browser is a console client behind the trusted proxy at one address:
// cookies kept, redirects not followed.
type browser struct {
	base, addr string
	hc         *http.Client
}

func newBrowser(t *testing.T, base, addr string) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{base: base, addr: addr, hc: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// post sends the form to path with the CSRF token of the page at from.
func (b *browser) post(t *testing.T, from, path string, form url.Values) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+from, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", b.addr)
	_, page := send(t, b.hc, req)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field on %s:\n%s", from, page)
	}
	form.Set("csrf", m[1])
	req, err = http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", b.addr)
	code, _ := send(t, b.hc, req)
	return code
}

func (b *browser) login(t *testing.T, token string) int {
	t.Helper()
	return b.post(t, "/console/login", "/console/login", url.Values{"token": {token}, "next": {"/console"}})
}

func (b *browser) logout(t *testing.T) {
	t.Helper()
	if code := b.post(t, "/console", "/console/logout", url.Values{}); code != http.StatusSeeOther {
		t.Fatalf("logout: %d", code)
	}
}

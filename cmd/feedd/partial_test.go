package main

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store/storetest"
)

// TestPartialFeed serves the feed of a reader on database a who follows
// authors on a and on b, while b hangs (SIGSTOP) and then while it is
// killed: every page answers 200 within the read deadline with
// "partial": true, b's authors in missing_authors and exactly the posts of
// the reader and of a's author, in order, and the cursors walk on over
// them (once the outbox cache's copies of b's authors have expired);
// without partial reads the same page is 503, and so is a feed whose
// reader lives on b. Once b answers again pages are complete and carry no
// partial field. Under a backup's lock b's probe reports it down, but its
// outboxes still read: pages stay complete.
func TestPartialFeed(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t)
	path := twoDatabases(t, storetest.DatabaseDSN(t), srv.DSN+"feed")
	// No workers: the follows stay pending, so every page merges the
	// followed authors' outboxes.
	args := []string{"serve", "--sharding", path, "--http-addr", "127.0.0.1:0", "--workers=false",
		"--probe-interval", "100ms", "--probe-timeout", "500ms"}
	m, _ := startMain(t, args...)
	strictMain, _ := startMain(t, append(args, "--partial-reads=false")...)
	base := "http://" + m.Addr()
	// The clients wait far longer than the read deadline: a hang fails the test.
	c := client.New(base, "", &http.Client{Timeout: 20 * time.Second})
	strict := client.New("http://"+strictMain.Addr(), "", &http.Client{Timeout: 20 * time.Second})
	ctx := t.Context()

	reader := idOnShards(100, 0, 511)
	near := idOnShards(reader+1, 0, 511)
	far1 := idOnShards(100, 512, 1023)
	far2 := idOnShards(far1+1, 512, 1023)
	farReader := idOnShards(far2+1, 512, 1023)
	var all, reachable []client.Post
	for i, author := range []uint64{near, far1, far2, reader} {
		for j := range 4 {
			req := client.PublishRequest{ContentID: strconv.Itoa(1000 + 10*i + j), PublishTime: int64(1_000_000 + 3*j + i%2)}
			p, _, err := c.Publish(ctx, author, req)
			must(t, err)
			all = append(all, p)
			if author == near || author == reader {
				reachable = append(reachable, p)
			}
		}
	}
	for _, posts := range [][]client.Post{all, reachable} {
		slices.SortFunc(posts, func(a, b client.Post) int {
			return cmp.Or(cmp.Compare(b.PublishTime, a.PublishTime), cmp.Compare(id(b.ContentID), id(a.ContentID)))
		})
	}
	for _, author := range []uint64{near, far1, far2} {
		must(t, c.Follow(ctx, reader, author))
	}
	must(t, c.Follow(ctx, farReader, near))
	missing := []string{strconv.FormatUint(far1, 10), strconv.FormatUint(far2, 10)}
	partialTail := fmt.Sprintf(`,"partial":true,"missing_authors":["%d","%d"]}`, far1, far2)
	firstPage := fmt.Sprintf("%s/v1/users/%d/feed?limit=3", base, reader)

	// walk pages through the reader's feed, checking that every page is
	// partial with b's authors missing, or none is.
	walk := func(what string, partial bool) []client.Post {
		t.Helper()
		var got []client.Post
		cursor := ""
		for page := 1; ; page++ {
			p, err := c.Feed(ctx, reader, 3, cursor)
			if err != nil {
				t.Fatalf("%s: page %d: %v", what, page, err)
			}
			if p.Partial != partial || (partial && !slices.Equal(p.MissingAuthors, missing)) || (!partial && p.MissingAuthors != nil) {
				t.Fatalf("%s: page %d partial=%v missing_authors=%v, want partial=%v and %v", what, page, p.Partial, p.MissingAuthors, partial, missing)
			}
			got = append(got, p.Items...)
			if p.NextCursor == nil {
				return got
			}
			if len(p.Items) != 3 {
				t.Fatalf("%s: page %d has %d items and a next cursor", what, page, len(p.Items))
			}
			cursor = *p.NextCursor
		}
	}
	wantWalk := func(what string, got, want []client.Post) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("%s: walked %v, want %v", what, ids(got), ids(want))
		}
	}
	wantWalk("every database up", walk("every database up", false), all)

	for _, outage := range []struct {
		name     string
		down, up func()
	}{
		{"b hung", srv.Stop, srv.Resume},
		{"b killed", srv.Kill, func() { srv.Restart(t) }},
	} {
		outage.down()
		// Pages stay complete while the outbox cache holds b's authors.
		wait.For(t, outage.name+": partial pages", func() error {
			if p, err := c.Feed(ctx, reader, 3, ""); err != nil || !p.Partial {
				return fmt.Errorf("page %+v, %v", p, err)
			}
			return nil
		})
		wantWalk(outage.name, walk(outage.name, true), reachable)
		if code, body := httpGet(t, firstPage); code != http.StatusOK || !strings.HasSuffix(body, partialTail+"\n") {
			t.Fatalf("%s: first page %d %s, want 200 ending in %s", outage.name, code, body, partialTail)
		}
		_, err := strict.Feed(ctx, reader, 3, "")
		wantAPIError(t, err, http.StatusServiceUnavailable, "unavailable")
		_, err = c.Feed(ctx, farReader, 3, "")
		wantAPIError(t, err, http.StatusServiceUnavailable, "unavailable")

		outage.up()
		wait.For(t, outage.name+": complete pages", func() error {
			if p, err := c.Feed(ctx, reader, 3, ""); err != nil || p.Partial {
				return fmt.Errorf("page %+v, %v", p, err)
			}
			return nil
		})
		wantWalk(outage.name+", back", walk(outage.name+", back", false), all)
		if code, body := httpGet(t, firstPage); code != http.StatusOK || strings.Contains(body, "partial") || strings.Contains(body, "missing_authors") {
			t.Fatalf("%s, back: first page %d %s, want 200 without partial fields", outage.name, code, body)
		}
	}

	backupLock(t, srv)
	wait.For(t, "b reported down under the lock", func() error {
		if code, body := httpGet(t, base+"/readyz"); !strings.Contains(body, `"b":"down"`) {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})
	wantWalk("b under a backup's lock", walk("b under a backup's lock", false), all)
}

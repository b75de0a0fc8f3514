package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// runExport runs `feedd export` in-process with args and returns the lines
// it wrote, each checked to parse as a record, and its stderr.
func runExport(t *testing.T, args ...string) (lines []string, stderr string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "export.jsonl")
	_, log := startMain(t, append([]string{"export", "--out", out}, args...)...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		if _, err := feed.ParseRecord(line, time.Now().Add(time.Hour).UnixMilli()); err != nil {
			t.Errorf("line %s: %v", line, err)
		}
		lines = append(lines, string(line))
	}
	if matches, _ := filepath.Glob(out + ".*"); len(matches) > 0 {
		t.Errorf("temporary files left: %v", matches)
	}
	slices.Sort(lines)
	return lines, log.String()
}

// put sends a PUT without checking more than its status.
func put(t *testing.T, url, body string, status int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	must(t, err)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("PUT %s: %d %s, want %d", url, resp.StatusCode, b, status)
	}
}

// TestExportSharded writes a user's follows, mute, hide, marker and posts
// (one deleted) across two databases through the API, then runs
// `feedd export` on the sharding file: every record comes out exactly once,
// and --users keeps the records of its range.
func TestExportSharded(t *testing.T) {
	t.Parallel()
	path := twoDatabases(t, storetest.DatabaseDSN(t), storetest.DatabaseDSN(t))
	m, _ := startMain(t, "serve", "--sharding", path, "--http-addr", "127.0.0.1:0", "--poll-interval", "20ms", "--lease", "2s")
	c := newClient(t, m, "")
	shardMap, err := shardmap.Load(path)
	must(t, err)
	st := openStore(t, shardMap)
	ctx := context.Background()
	base := "http://" + m.Addr() + "/v1/users/"

	// The reader on a, everyone else on b.
	reader, author, muted, hider := idOnShards(100, 0, 511), idOnShards(200, 512, 1023), idOnShards(300, 512, 1023), idOnShards(400, 512, 1023)
	must(t, c.Follow(ctx, reader, author))
	must(t, c.Follow(ctx, reader, hider))
	put(t, fmt.Sprintf("%s%d/muted/%d", base, reader, muted), "", http.StatusNoContent)
	put(t, fmt.Sprintf("%s%d/hidden_from/%d", base, hider, reader), "", http.StatusNoContent)
	var posts []client.Post
	for i, who := range []uint64{author, author, reader, author} {
		p, _, err := c.Publish(ctx, who, client.PublishRequest{ContentID: fmt.Sprint(900 + i), PublishTime: time.Now().Add(-time.Hour).UnixMilli() + int64(i)})
		must(t, err)
		posts = append(posts, p)
	}
	must(t, c.DeletePost(ctx, author, id(posts[3].ContentID)))
	posts = posts[:3]
	waitIdle(t, st)
	page, err := c.Feed(ctx, reader, 1, "")
	if err != nil || len(page.Items) != 1 || page.Items[0] != posts[2] {
		t.Fatalf("feed of %d: %+v, %v", reader, page, err)
	}
	put(t, fmt.Sprintf("%s%d/feed/marker", base, reader), `{"cursor":"`+*page.TopCursor+`"}`, http.StatusOK)

	following, err := c.Following(ctx, reader, 10, "")
	must(t, err)
	if len(following.Items) != 2 {
		t.Fatalf("following %+v", following)
	}
	var readerLines, authorLines []string
	for _, f := range following.Items {
		readerLines = append(readerLines, fmt.Sprintf(`{"type":"follow","user_id":"%d","author_id":"%s","followed_at":%d}`, reader, f.AuthorID, f.FollowedAt))
	}
	readerLines = append(readerLines,
		fmt.Sprintf(`{"type":"mute","user_id":"%d","author_id":"%d"}`, reader, muted),
		fmt.Sprintf(`{"type":"hide","user_id":"%d","author_id":"%d"}`, reader, hider),
		fmt.Sprintf(`{"type":"marker","user_id":"%d","content_id":"%s","publish_time":%d}`, reader, posts[2].ContentID, posts[2].PublishTime))
	for _, p := range posts {
		line := fmt.Sprintf(`{"type":"post","author_id":"%s","content_id":"%s","publish_time":%d,"kind":"%s"}`, p.AuthorID, p.ContentID, p.PublishTime, p.Kind)
		if p.AuthorID == fmt.Sprint(reader) {
			readerLines = append(readerLines, line)
		} else {
			authorLines = append(authorLines, line)
		}
	}
	sorted := func(lines ...[]string) []string { return slices.Sorted(slices.Values(slices.Concat(lines...))) }

	got, stderr := runExport(t, "--sharding", path)
	if want := sorted(readerLines, authorLines); !slices.Equal(got, want) {
		t.Errorf("export:\n got %q\nwant %q", got, want)
	}
	if want := "exported 8 records in "; !strings.Contains(stderr, want) || !strings.Contains(stderr, "follow 2, mute 1, hide 1, marker 1, post 3") {
		t.Errorf("stderr lacks the summary %q…:\n%s", want, stderr)
	}
	got, _ = runExport(t, "--sharding", path, "--users", fmt.Sprintf("%d-%d", reader, reader))
	if want := sorted(readerLines); !slices.Equal(got, want) {
		t.Errorf("export --users of the reader:\n got %q\nwant %q", got, want)
	}
	got, _ = runExport(t, "--sharding", path, "--users", fmt.Sprintf("%d-%d", author, author))
	if want := sorted(authorLines); !slices.Equal(got, want) {
		t.Errorf("export --users of the author:\n got %q\nwant %q", got, want)
	}
}

// TestExportFlags: --users takes an inclusive range of ids A-B with
// 1 <= A <= B, and export takes serve's database settings.
func TestExportFlags(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"5-4", "0-3", "x", "3", "1-", "-1", "1-18446744073709551616"} {
		m := NewMain()
		m.Stderr = io.Discard
		if err := m.ParseFlags([]string{"export", "--mysql-dsn", "root@tcp(127.0.0.1:3306)/x", "--users", bad}); err == nil {
			t.Errorf("--users %s accepted", bad)
		}
	}
	m := NewMain()
	m.Stderr = io.Discard
	must(t, m.ParseFlags([]string{"export", "--mysql-dsn", "root@tcp(127.0.0.1:3306)/x", "--users", "7-7", "--out", "f"}))
	if m.Export != (exportConfig{Lo: 7, Hi: 7, Out: "f"}) {
		t.Errorf("export config %+v", m.Export)
	}
	m = NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags([]string{"export"}); err == nil {
		t.Error("export without a database accepted")
	}
}

package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
)

// exportRecords reads a user's export, checks it is JSON Lines of records
// that parse, and returns the lines sorted.
func exportRecords(t testing.TB, v *env, user uint64) []string {
	t.Helper()
	r := v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/export", "")
	wantStatus(t, r, http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	if len(r.body) > 0 && !bytes.HasSuffix(r.body, []byte("\n")) {
		t.Errorf("the body does not end in a newline: %q", r.body)
	}
	var lines []string
	for line := range bytes.Lines(r.body) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		if _, err := feed.ParseRecord(line, time.Now().Add(time.Hour).UnixMilli()); err != nil {
			t.Errorf("line %s: %v", line, err)
		}
		lines = append(lines, string(line))
	}
	slices.Sort(lines)
	return lines
}

// TestExportRoute checks a user's export: the user's follows, mutes, the
// hides the user gives, the marker and the posts not deleted, one record a
// line; an empty body for a user with nothing; 400 for a bad id; the Go
// client's Export.
func TestExportRoute(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{workers: true})
	user, author, muted, reader := v.id(), v.id(), v.id(), v.id()
	put := func(path string, a, b uint64) {
		t.Helper()
		wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/%s/%d", a, path, b), ""), http.StatusNoContent)
	}
	put("following", user, author)
	put("muted", user, muted)
	put("hidden_from", author, reader)
	p1 := v.publishAt(t, author, 80_001, 1_700_000_000_000)
	p2 := v.publish(t, author, `{"content_id":"80002","publish_time":1700000001000,"kind":"photo"}`, http.StatusCreated)
	gone := v.publishAt(t, author, 80_003, 1_700_000_002_000)
	wantStatus(t, v.do(t, http.MethodDelete, "/v1/users/"+u(author)+"/posts/"+gone.ContentID, ""), http.StatusNoContent)
	own := v.publishAt(t, user, 80_004, 1_700_000_003_000)
	var top page[post]
	v.do(t, http.MethodGet, "/v1/users/"+u(user)+"/feed?limit=1", "").decode(t, &top)
	if len(top.Items) != 1 || top.Items[0] != own {
		t.Fatalf("feed %+v", top)
	}
	wantStatus(t, v.do(t, http.MethodPut, "/v1/users/"+u(user)+"/feed/marker", `{"cursor":"`+*top.TopCursor+`"}`), http.StatusOK)
	following := v.following(t, user)
	if len(following) != 1 {
		t.Fatalf("following %+v", following)
	}

	lines := func(recs ...string) []string { slices.Sort(recs); return recs }
	postLine := func(p post) string {
		return fmt.Sprintf(`{"type":"post","author_id":"%s","content_id":"%s","publish_time":%d,"kind":"%s"}`, p.AuthorID, p.ContentID, p.PublishTime, p.Kind)
	}
	want := lines(
		fmt.Sprintf(`{"type":"follow","user_id":"%d","author_id":"%d","followed_at":%d}`, user, author, following[0].FollowedAt),
		fmt.Sprintf(`{"type":"mute","user_id":"%d","author_id":"%d"}`, user, muted),
		fmt.Sprintf(`{"type":"marker","user_id":"%d","content_id":"%s","publish_time":%d}`, user, own.ContentID, own.PublishTime),
		postLine(own))
	if got := exportRecords(t, v, user); !slices.Equal(got, want) {
		t.Errorf("export of the user:\n got %q\nwant %q", got, want)
	}
	// The author's hides come from the author's list, which the hide's
	// follow event writes.
	want = lines(fmt.Sprintf(`{"type":"hide","user_id":"%d","author_id":"%d"}`, reader, author), postLine(p1), postLine(p2))
	wait.For(t, "the author's export", func() error {
		if got := exportRecords(t, v, author); !slices.Equal(got, want) {
			return fmt.Errorf("got %q, want %q", got, want)
		}
		return nil
	})
	if got := exportRecords(t, v, v.id()); len(got) != 0 {
		t.Errorf("export of a user with nothing: %q", got)
	}
	r := v.do(t, http.MethodHead, "/v1/users/"+u(user)+"/export", "")
	if wantStatus(t, r, http.StatusOK); r.header.Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("HEAD: Content-Type %q", r.header.Get("Content-Type"))
	}
	for _, bad := range []string{"0", "x", "18446744073709551616", "-1"} {
		wantError(t, v.do(t, http.MethodGet, "/v1/users/"+bad+"/export", ""), http.StatusBadRequest, "invalid_argument")
	}

	c := client.New(v.srv.URL, "", nil)
	body, err := c.Export(t.Context(), user)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(strings.Lines(string(b))); len(got) != 4 || got[0] != exportRecords(t, v, user)[0]+"\n" {
		t.Errorf("client export %q", b)
	}
	if _, err := c.Export(t.Context(), 0); err == nil || !strings.Contains(err.Error(), "invalid_argument") {
		t.Errorf("client export of user 0: %v", err)
	}

	// A page read past the read deadline before the first line is a 503.
	slow := &env{svc: v.svc, st: v.st, srv: httptest.NewServer(httpapi.New(v.svc, httpapi.Options{ReadDeadline: time.Nanosecond}))}
	t.Cleanup(slow.srv.Close)
	r = slow.do(t, http.MethodGet, "/v1/users/"+u(user)+"/export", "")
	wantError(t, r, http.StatusServiceUnavailable, "unavailable")
}

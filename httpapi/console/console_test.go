package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/httpapi/console"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
	"github.com/feedhq/feed/store/storetest"
)

// fixture is feedd's HTTP stack with the console on a fresh database, its
// workers started on demand, and a browser-like client (cookies, no
// redirects followed).
type fixture struct {
	st     *store.Store
	svc    *service.Service
	srv    *httptest.Server
	client *http.Client
}

func setup(t *testing.T, token string) *fixture {
	t.Helper()
	return setupOn(t, token, storetest.NewStore(t, storetest.Options{}))
}

// setupOn is setup on a migrated store.
func setupOn(t *testing.T, token string, st *store.Store) *fixture {
	t.Helper()
	return setupBehind(t, token, st, nil)
}

// setupBehind is setupOn behind the trusted proxies.
func setupBehind(t *testing.T, token string, st *store.Store, proxies httpapi.TrustedProxies) *fixture {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.PollInterval = 20 * time.Millisecond
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	svc, err := service.New(st, cfg, log, service.NewMetrics(reg), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	svc.CheckHealth(t.Context())
	e := httpapi.New(svc, httpapi.Options{Token: token, TrustedProxies: proxies, Log: log, Registry: reg})
	console.Mount(e, svc, console.Options{Token: token, TrustedProxies: proxies, Log: log})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &fixture{st: st, svc: svc, srv: srv, client: client}
}

// startWorkers runs the service's workers until the test ends.
func (f *fixture) startWorkers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.svc.RunWorkers(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (f *fixture) waitIdle(t *testing.T) { storetest.WaitIdle(t, f.st) }

func (f *fixture) get(t *testing.T, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return f.do(t, req)
}

func (f *fixture) post(t *testing.T, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return f.do(t, req)
}

func (f *fixture) do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// csrf returns the token a page's forms post back.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfInput.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%s", page)
	}
	return m[1]
}

func mustContain(t *testing.T, page string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(page, w) {
			t.Errorf("page lacks %q:\n%s", w, page)
		}
	}
}

func publish(t *testing.T, svc *service.Service, author uint64, content uint64) feed.Post {
	t.Helper()
	p, _, err := svc.Publish(t.Context(), service.PublishInput{AuthorID: author, ContentID: content})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConsolePages renders every page from real data: before the workers
// run, the follow's posts are merged from the author's outbox (pulled) and
// the deliveries pending; after, the posts are in the inbox (pushed) and
// the deliveries done.
func TestConsolePages(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	for c := uint64(101); c <= 103; c++ {
		publish(t, f.svc, 2, c)
	}
	if err := f.svc.Follow(t.Context(), 1, 2); err != nil {
		t.Fatal(err)
	}

	resp, page := f.get(t, "/console/users/1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("user page: %d\n%s", resp.StatusCode, page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	mustContain(t, page, `data-content-id="103"`, `data-content-id="101"`, ">pulled<", `href="/console/users/2"`)
	if strings.Contains(page, ">pushed<") {
		t.Errorf("an item is marked pushed before any fan-out:\n%s", page)
	}
	_, page = f.get(t, "/console/deliveries")
	mustContain(t, page, `id="delivery-101" data-state="pending"`)

	f.startWorkers(t)
	f.waitIdle(t)
	_, page = f.get(t, "/console/users/1")
	mustContain(t, page, ">pushed<", `<td>push</td>`)
	if strings.Contains(page, ">pulled<") {
		t.Errorf("an item is still marked pulled after fan-out:\n%s", page)
	}
	_, page = f.get(t, "/console/deliveries")
	mustContain(t, page, `id="delivery-103" data-state="done"`, `id="no-stuck"`)

	resp, page = f.get(t, "/console")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("overview: %d", resp.StatusCode)
	}
	mustContain(t, page, `id="db-db0"`, ">ready<", "0-1023", "outbox backlog", "fan-out rows/s", "publish → visible")
	_, page = f.get(t, "/console/reshard")
	mustContain(t, page, "Layout in force", "1024 0-1023=db0", "None.")

	// The live fragment is the running state alone, for the script.
	resp, page = f.get(t, "/console/deliveries?partial=live")
	if resp.StatusCode != http.StatusOK || strings.Contains(page, "<html") || !strings.Contains(page, `id="delivery-103"`) {
		t.Errorf("live fragment: %d\n%s", resp.StatusCode, page)
	}
	// Bad input is a 4xx page.
	if resp, _ := f.get(t, "/console/users/x"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("user x: %d", resp.StatusCode)
	}
	if resp, _ := f.get(t, "/console/users/1?cursor=nonsense"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad cursor: %d", resp.StatusCode)
	}
}

// TestConsoleRetry lists a task three dead workers left leased, and its
// retry (a POST with the page's CSRF token) lets a live worker finish it.
func TestConsoleRetry(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	ctx := t.Context()
	if err := storeload.Followers(ctx, f.st, 7, []uint64{11, 12, 13, 14, 15, 16}, 1, false); err != nil {
		t.Fatal(err)
	}
	post := feed.Post{AuthorID: 7, ContentID: 700, PublishTime: time.Now().UnixMilli(), Kind: feed.KindPost}
	if err := storetest.StuckDelivery(ctx, f.st, post); err != nil {
		t.Fatal(err)
	}
	f.startWorkers(t)

	_, page := f.get(t, "/console/deliveries")
	mustContain(t, page, `id="stuck-700-0"`, `id="delivery-700" data-state="running"`)
	form := url.Values{"author_id": {"7"}, "content_id": {"700"}, "seq": {"0"}}
	if resp, _ := f.post(t, "/console/deliveries/retry", form); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("retry without the CSRF token: %d, want 403", resp.StatusCode)
	}
	form.Set("csrf", csrf(t, page))
	resp, _ := f.post(t, "/console/deliveries/retry", form)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry: %d, want 303", resp.StatusCode)
	}
	_, page = f.get(t, resp.Header.Get("Location"))
	mustContain(t, page, "task 0 of post 700 retried")
	f.waitIdle(t)
	d, err := f.svc.Delivery(ctx, 7, 700)
	if err != nil || d.State != feed.DeliveryDone || d.Delivered != 6 {
		t.Fatalf("delivery after the retry: %+v, %v", d, err)
	}
	_, page = f.get(t, "/console/deliveries")
	mustContain(t, page, `id="no-stuck"`, `id="delivery-700" data-state="done"`)
	// A task that is not there any more is reported, nothing changes.
	resp, _ = f.post(t, "/console/deliveries/retry", form)
	_, page = f.get(t, resp.Header.Get("Location"))
	mustContain(t, page, "retry: no unfinished task 0 of post 700")
}

// TestConsoleLogin: with a token, pages send to the login form, actions
// and fragments answer 401, the form sets a session cookie that is not the
// token, and a bearer token works as for /v1.
func TestConsoleLogin(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	f := setup(t, token)
	resp, _ := f.get(t, "/console/deliveries")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/console/login?next=%2Fconsole%2Fdeliveries" {
		t.Fatalf("no session: %d to %q", resp.StatusCode, loc)
	}
	if resp, _ := f.get(t, "/console?partial=live"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("fragment without a session: %d", resp.StatusCode)
	}
	if resp, _ := f.get(t, "/console/static/console.css"); resp.StatusCode != http.StatusOK {
		t.Errorf("static file without a session: %d", resp.StatusCode)
	}
	_, page := f.get(t, "/console/login?next=%2Fconsole%2Fdeliveries")
	form := url.Values{"csrf": {csrf(t, page)}, "next": {"/console/deliveries"}, "token": {"wrong"}}
	if resp, _ := f.post(t, "/console/login", form); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", resp.StatusCode)
	}
	form.Set("next", "https://elsewhere.example/")
	form.Set("token", token)
	resp, _ = f.post(t, "/console/login", form)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, ck := range resp.Cookies() {
		if strings.Contains(ck.Value, token) || (ck.Name == "feed_console" && (!ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode)) {
			t.Errorf("cookie %+v", ck)
		}
	}
	if resp, page := f.get(t, "/console"); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Sign out") {
		t.Errorf("signed in: %d", resp.StatusCode)
	}
	// The session is the console's only: /v1 still needs the bearer token.
	if resp, _ := f.get(t, "/v1/users/1/feed"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/v1 with the console's cookie: %d", resp.StatusCode)
	}
	bare := &fixture{srv: f.srv, client: &http.Client{CheckRedirect: f.client.CheckRedirect}}
	if resp, _ := bare.get(t, "/console/reshard", "Authorization", "Bearer "+token); resp.StatusCode != http.StatusOK {
		t.Errorf("bearer token: %d", resp.StatusCode)
	}
	var session *http.Cookie
	for _, ck := range f.client.Jar.Cookies(mustURL(t, f.srv.URL+"/console")) {
		if ck.Name == "feed_console" {
			session = ck
		}
	}
	if session == nil {
		t.Fatal("no session cookie in the jar")
	}
	// Another instance with another token on the same databases: the
	// session, signed in with the old token, opens nothing there.
	rotated := setupOn(t, "rotated-token", f.st)
	if resp, _ := rotated.get(t, "/console", "Cookie", session.Name+"="+session.Value); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the session under a changed token: %d", resp.StatusCode)
	}
	_, page = f.get(t, "/console")
	if resp, _ := f.post(t, "/console/logout", url.Values{"csrf": {csrf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %d", resp.StatusCode)
	}
	if resp, _ := f.get(t, "/console"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after logout: %d", resp.StatusCode)
	}
	// The cookie kept from before the logout opens nothing either.
	if resp, _ := bare.get(t, "/console", "Cookie", session.Name+"="+session.Value); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the session's cookie replayed after logout: %d", resp.StatusCode)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestConsoleLoginThrottled: behind a trusted proxy, the client it names
// is throttled after a few wrong tokens (429 with Retry-After, the right
// token refused too, at the form and as a bearer token) while another
// client signs in, and a request the proxy says came over TLS gets Secure
// cookies.
func TestConsoleLoginThrottled(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	proxies, err := httpapi.ParseTrustedProxies("127.0.0.0/8, ::1")
	if err != nil {
		t.Fatal(err)
	}
	f := setupBehind(t, token, storetest.NewStore(t, storetest.Options{}), proxies)
	_, page := f.get(t, "/console/login")
	csrfValue := csrf(t, page)
	login := func(client, tok string, header ...string) *http.Response {
		t.Helper()
		form := url.Values{"csrf": {csrfValue}, "next": {"/console"}, "token": {tok}}
		req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/console/login", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", client)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, _ := f.do(t, req)
		return resp
	}
	const guesser, operator = "198.51.100.8", "198.51.100.7"
	for i := range 4 {
		if resp := login(guesser, "wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d", i+1, resp.StatusCode)
		}
	}
	resp := login(guesser, token)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the right token while throttled: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp, _ := f.get(t, "/console/reshard", "Authorization", "Bearer "+token, "X-Forwarded-For", guesser); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the bearer token while throttled: %d", resp.StatusCode)
	}
	resp = login(operator, token, "X-Forwarded-Proto", "https")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("another client's login: %d", resp.StatusCode)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "feed_console" && !ck.Secure {
			t.Errorf("session cookie over TLS at the proxy: %+v", ck)
		}
	}
	resp = login(operator, token)
	for _, ck := range resp.Cookies() {
		if ck.Name == "feed_console" && ck.Secure {
			t.Errorf("session cookie over plain HTTP: %+v", ck)
		}
	}
}

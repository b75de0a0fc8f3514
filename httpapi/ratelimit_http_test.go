package httpapi_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
)

// wantRateLimit fails unless r carries the rate limit headers with these
// values ("" for none). Times in seconds shrink as the test runs: a wait
// w stands for any of w-60..w.
func wantRateLimit(t *testing.T, r resp, limit, remaining, reset, retryAfter string) {
	t.Helper()
	for h, want := range map[string]string{"RateLimit-Limit": limit, "RateLimit-Remaining": remaining,
		"RateLimit-Reset": reset, "Retry-After": retryAfter} {
		got := r.header.Get(h)
		if h == "RateLimit-Reset" || h == "Retry-After" {
			g, errG := strconv.Atoi(got)
			w, errW := strconv.Atoi(want)
			if errG == nil && errW == nil && g <= w && g > w-60 {
				continue
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
}

// TestRateLimitHoldsOneClient holds a user token at 429 while another user
// token, and the service token, are served; callers without a valid token
// share their address's bucket. At 0.01 requests a second the burst is
// one request and a token takes 100 s to come back, longer than the test
// takes.
func TestRateLimitHoldsOneClient(t *testing.T) {
	t.Parallel()
	const service = "s3rvice"
	k, keys := newUserKeys(t)
	v := setup(t, envOpts{token: service, keys: keys, rateLimit: 0.01})
	alice, bob := v.id(), v.id()
	aliceTok, bobTok := k.hsToken(t, alice, both), k.edToken(t, bob, both)
	feed := func(user uint64) string { return "/v1/users/" + u(user) + "/feed" }

	r := v.as(t, aliceTok, http.MethodGet, feed(alice), "")
	wantStatus(t, r, http.StatusOK)
	wantRateLimit(t, r, "1", "0", "100", "")
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodGet} {
		r = v.as(t, aliceTok, method, feed(alice), "")
		if method == http.MethodHead {
			wantStatus(t, r, http.StatusTooManyRequests)
		} else {
			wantError(t, r, http.StatusTooManyRequests, "rate_limited")
		}
		wantRateLimit(t, r, "1", "0", "100", "100")
	}
	// A publish past the limit stores nothing.
	wantError(t, v.as(t, aliceTok, http.MethodPost, "/v1/users/"+u(alice)+"/posts", `{}`), http.StatusTooManyRequests, "rate_limited")
	// Another user is another client; the service token is exempt.
	r = v.as(t, bobTok, http.MethodGet, feed(bob), "")
	wantStatus(t, r, http.StatusOK)
	wantRateLimit(t, r, "1", "0", "100", "")
	for range 3 {
		r = v.as(t, service, http.MethodGet, "/v1/users/"+u(alice)+"/posts", "")
		wantStatus(t, r, http.StatusOK)
		wantRateLimit(t, r, "", "", "", "")
	}
	if got := v.posts(t, alice); len(got) != 0 {
		t.Fatalf("a refused publish stored %+v", got)
	}
	// Without a valid token a client is its address, and a bad token
	// spends that bucket too.
	r = v.as(t, "", http.MethodGet, feed(alice), "")
	wantError(t, r, http.StatusUnauthorized, "unauthorized")
	wantRateLimit(t, r, "1", "0", "100", "")
	wantError(t, v.as(t, "", http.MethodGet, feed(alice), ""), http.StatusTooManyRequests, "rate_limited")
	wantError(t, v.as(t, "bad", http.MethodGet, feed(alice), ""), http.StatusTooManyRequests, "rate_limited")
	// Outside /v1 nothing is limited.
	for range 2 {
		wantStatus(t, v.as(t, "", http.MethodGet, "/healthz", ""), http.StatusOK)
	}
	m := v.as(t, "", http.MethodGet, "/metrics", "")
	if want := "feed_http_rate_limited_total 6\n"; !bytes.Contains(m.body, []byte(want)) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestRateLimitService limits the service token by its address when
// asked to.
func TestRateLimitService(t *testing.T) {
	t.Parallel()
	const service = "s3rvice"
	v := setup(t, envOpts{token: service, rateLimit: 0.01, rateLimitService: true})
	user := v.id()
	wantStatus(t, v.as(t, service, http.MethodGet, "/v1/users/"+u(user)+"/feed", ""), http.StatusOK)
	r := v.as(t, service, http.MethodGet, "/v1/users/"+u(user)+"/feed", "")
	wantError(t, r, http.StatusTooManyRequests, "rate_limited")
	wantRateLimit(t, r, "1", "0", "100", "100")
}

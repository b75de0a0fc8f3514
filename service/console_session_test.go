package service_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed/service"
)

// TestConsoleSessions: a session opens the console with the token it
// signed in with only, until it ends or expires; each sign-in has a cookie
// of its own; a cookie that was tampered with or never issued opens
// nothing; sign-ins clean up expired sessions.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	h := newHarness(t, harnessOpts{noWorkers: true, now: func() time.Time { return time.UnixMilli(clock.Load()) }})
	ctx := t.Context()
	tokenA, tokenB := []byte(strings.Repeat("a", 32)), []byte(strings.Repeat("b", 32))
	check := func(what, cookie string, mac []byte, want bool) {
		t.Helper()
		if ok, err := h.svc.CheckConsoleSession(ctx, cookie, mac); err != nil || ok != want {
			t.Errorf("%s: %v (%v), want %v", what, ok, err, want)
		}
	}
	one, err := h.svc.StartConsoleSession(ctx, tokenA)
	if err != nil {
		t.Fatal(err)
	}
	two, err := h.svc.StartConsoleSession(ctx, tokenA)
	if err != nil {
		t.Fatal(err)
	}
	if one == two {
		t.Fatalf("two sign-ins share the cookie %q", one)
	}
	check("a session", one, tokenA, true)
	check("a session under another token", one, tokenB, false)
	id, secret, _ := strings.Cut(one, ".")
	flipped := strings.Map(func(r rune) rune {
		if r == '0' {
			return '1'
		}
		return '0'
	}, secret[:1]) + secret[1:]
	for _, bad := range []string{"", "x", id, id + ".", id + "." + flipped, "1." + secret, id + "." + secret + "00", one + " "} {
		check("cookie "+bad, bad, tokenA, false)
	}
	if err := h.svc.EndConsoleSession(ctx, one); err != nil {
		t.Fatal(err)
	}
	check("an ended session", one, tokenA, false)
	check("another sign-in after one ended", two, tokenA, true)
	clock.Add(service.ConsoleSessionTTL.Milliseconds())
	check("a session at its expiry", two, tokenA, true)
	clock.Add(1)
	check("an expired session", two, tokenA, false)
	if _, err := h.svc.StartConsoleSession(ctx, tokenA); err != nil {
		t.Fatal(err)
	}
	var left int
	for _, sh := range h.store.Shards() {
		var n int
		if err := sh.DB.GetContext(ctx, &n, "SELECT COUNT(*) FROM console_sessions"); err != nil {
			t.Fatal(err)
		}
		left += n
	}
	if left != 1 {
		t.Errorf("%d sessions kept after a sign-in past the expiry, want the new one", left)
	}
}

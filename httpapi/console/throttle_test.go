package console

import (
	"strconv"
	"testing"
	"time"
)

// TestLoginThrottle: the first wrong tokens are free, then each doubles
// the wait up to its cap; a right one clears the client; other clients are
// not held; the clients kept stay bounded.
func TestLoginThrottle(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := newLoginThrottle(func() time.Time { return now })
	const a, b = "198.51.100.1", "198.51.100.2"
	for range loginFreeFailures {
		if w := l.wait(a); w != 0 {
			t.Fatalf("wait %s before the free failures are spent", w)
		}
		l.failed(a)
	}
	if w := l.wait(a); w != 0 {
		t.Fatalf("wait %s after the free failures", w)
	}
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		l.failed(a)
		if w := l.wait(a); w != want {
			t.Fatalf("wait %s, want %s", w, want)
		}
		if w := l.wait(b); w != 0 {
			t.Fatalf("another client waits %s", w)
		}
		now = now.Add(want)
		if w := l.wait(a); w != 0 {
			t.Fatalf("wait %s once the wait passed", w)
		}
	}
	for range 30 {
		l.failed(a)
	}
	if w := l.wait(a); w != loginMaxDelay {
		t.Fatalf("wait %s after many failures, want the cap %s", w, loginMaxDelay)
	}
	l.succeeded(a)
	if w := l.wait(a); w != 0 {
		t.Fatalf("wait %s after a right token", w)
	}
	for i := range loginClientsMax + 100 {
		l.failed(strconv.Itoa(i))
	}
	if n := len(l.clients); n > loginClientsMax {
		t.Fatalf("%d clients kept, want at most %d", n, loginClientsMax)
	}
}

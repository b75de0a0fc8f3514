package httpapi

import (
	"fmt"
	"testing"
	"time"
)

// clock is a time the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Unix(1_800_000_000, 0)} }
func wantQuota(t *testing.T, what string, got, want quota) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %+v, want %+v", what, got, want)
	}
}

// TestRateLimitBucket spends a burst of twice the rate, refuses the next
// request until a token is back, and refills at the rate.
func TestRateLimitBucket(t *testing.T) {
	c := newClock()
	l := newRateLimiter(5, 10, c.now) // burst 10, a token every 200 ms
	for i := range 10 {
		wantQuota(t, fmt.Sprintf("request %d", i), l.take("a"),
			quota{allowed: true, remaining: 9 - i, reset: time.Duration(i+1) * 200 * time.Millisecond})
	}
	wantQuota(t, "past the burst", l.take("a"), quota{remaining: 0, reset: 2 * time.Second, retry: 200 * time.Millisecond})
	wantQuota(t, "another client", l.take("b"), quota{allowed: true, remaining: 9, reset: 200 * time.Millisecond})
	c.add(100 * time.Millisecond)
	wantQuota(t, "half a token later", l.take("a"), quota{remaining: 0, reset: 1900 * time.Millisecond, retry: 100 * time.Millisecond})
	c.add(100 * time.Millisecond)
	wantQuota(t, "a token later", l.take("a"), quota{allowed: true, remaining: 0, reset: 2 * time.Second})
	c.add(time.Hour)
	wantQuota(t, "an hour later", l.take("a"), quota{allowed: true, remaining: 9, reset: 200 * time.Millisecond})

	// Below one request a second the burst is one request.
	slow := newRateLimiter(0.1, 10, c.now)
	wantQuota(t, "slow", slow.take("a"), quota{allowed: true, remaining: 0, reset: 10 * time.Second})
	wantQuota(t, "slow again", slow.take("a"), quota{remaining: 0, reset: 10 * time.Second, retry: 10 * time.Second})
}

// TestRateLimitIdleBucketsExpire drops the buckets of clients idle long
// enough to be full again, and no others.
func TestRateLimitIdleBucketsExpire(t *testing.T) {
	c := newClock()
	l := newRateLimiter(1, 1000, c.now) // burst 2: full 2 s after the last request
	for i := range 100 {
		l.take(fmt.Sprint("idle ", i))
	}
	c.add(time.Second)
	l.take("busy")
	l.take("busy")
	if n := l.clients(); n != 101 {
		t.Fatalf("%d buckets, want 101", n)
	}
	c.add(time.Second) // the idle clients' buckets are full again; busy's is not
	l.take("new")
	if n := l.clients(); n != 2 {
		t.Fatalf("%d buckets after the idle ones filled up, want busy's and new's", n)
	}
	// busy's bucket was kept: it is still short of its burst.
	wantQuota(t, "busy", l.take("busy"), quota{allowed: true, remaining: 0, reset: 2 * time.Second})
}

// TestRateLimitClientsCapped keeps at most the cap of buckets, dropping
// the least recently used.
func TestRateLimitClientsCapped(t *testing.T) {
	c := newClock()
	l := newRateLimiter(0.001, 3, c.now) // buckets never fill up within the test
	for _, k := range []string{"a", "b", "c"} {
		l.take(k)
	}
	wantQuota(t, "a, kept", l.take("a"), quota{remaining: 0, reset: 1000 * time.Second, retry: 1000 * time.Second})
	l.take("d") // drops b, the least recently used
	if n := l.clients(); n != 3 {
		t.Fatalf("%d buckets, want the cap of 3", n)
	}
	wantQuota(t, "b, dropped, starts again full", l.take("b"), quota{allowed: true, remaining: 0, reset: 1000 * time.Second})
	wantQuota(t, "d, kept", l.take("d"), quota{remaining: 0, reset: 1000 * time.Second, retry: 1000 * time.Second})
}

func TestRateLimitClientAddress(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5555":                  "192.0.2.7",
		"[::ffff:192.0.2.7]:5555":         "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443":      "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1%eth0]:443": "2001:db8:1:2::/64",
		"[::1]:80":                        "::/64",
		"not an address":                  "not an address",
	} {
		if got := ClientAddress(remote); got != want {
			t.Errorf("ClientAddress(%q) = %q, want %q", remote, got, want)
		}
	}
}

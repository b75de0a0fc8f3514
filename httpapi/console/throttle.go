package console

import (
	"sync"
	"time"
)

// Guessing the token is slowed per client address (an IPv6 one by its
// /64): the first loginFreeFailures wrong tokens cost nothing, then each
// one doubles the wait before the next attempt from that client, from
// loginFirstDelay up to loginMaxDelay. An attempt within the wait is
// refused (429 with Retry-After) without the token being compared, at the
// login form and as a bearer token alike. A right token clears the
// client. A client is forgotten loginForget after its wait ends, and at
// most loginClientsMax are kept: past that the ones forgotten soonest go
// first, so memory stays bounded whatever the number of addresses.
const (
	loginFreeFailures = 3
	loginFirstDelay   = time.Second
	loginMaxDelay     = 5 * time.Minute
	loginForget       = 15 * time.Minute
	loginClientsMax   = 10_000
)

// loginFailures are one client's wrong tokens in a row and the time before
// which its next attempt is refused.
type loginFailures struct {
	n     int
	until time.Time
}

type loginThrottle struct {
	mu      sync.Mutex
	now     func() time.Time
	clients map[string]loginFailures
}

func newLoginThrottle(now func() time.Time) *loginThrottle {
	return &loginThrottle{now: now, clients: map[string]loginFailures{}}
}

// wait returns how long the client must wait before its next attempt; 0
// lets it try.
func (l *loginThrottle) wait(client string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.clients[client].until.Sub(l.now()), 0)
}

// failed records a wrong token from the client.
func (l *loginThrottle) failed(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	f := l.clients[client]
	f.n++
	if f.n > loginFreeFailures {
		delay := loginMaxDelay
		if shift := f.n - loginFreeFailures - 1; shift < 20 {
			delay = min(loginFirstDelay<<shift, loginMaxDelay)
		}
		f.until = now.Add(delay)
	} else {
		f.until = now
	}
	if _, known := l.clients[client]; !known && len(l.clients) >= loginClientsMax {
		l.forget(now)
	}
	l.clients[client] = f
}

// succeeded clears the client.
func (l *loginThrottle) succeeded(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.clients, client)
}

// forget drops the clients whose wait ended loginForget ago, and while the
// map is still full, the ones whose wait ends soonest. The caller holds mu.
func (l *loginThrottle) forget(now time.Time) {
	for c, f := range l.clients {
		if now.Sub(f.until) > loginForget {
			delete(l.clients, c)
		}
	}
	for len(l.clients) >= loginClientsMax {
		var soonest string
		for c, f := range l.clients {
			if soonest == "" || f.until.Before(l.clients[soonest].until) {
				soonest = c
			}
		}
		delete(l.clients, soonest)
	}
}

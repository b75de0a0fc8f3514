package httpapi

import (
	"container/list"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/feedhq/feed"
)

// The rate limit gives each client a token bucket: Options.RateLimit
// requests a second, with a burst of twice that. A user token is one
// client, by its user; any other caller is one client by its address (an
// IPv6 address by its /64, what one host is usually given): its
// connection's, or the one a trusted proxy forwards it for
// (TrustedProxies), never one from a header it could write itself. The service
// token is exempt unless Options.RateLimitService. The buckets are this
// process's: behind a load balancer each instance limits on its own
// (docs/OPERATIONS.md has the arithmetic).

// RateLimitClientsMax bounds the buckets one process keeps. Past it the
// bucket used least recently is dropped, so its client starts again with a
// full bucket: memory stays bounded whatever the number of clients.
const RateLimitClientsMax = 100_000

// bucket is one client's token bucket.
type bucket struct {
	key  string
	lim  *rate.Limiter
	last time.Time // when the client last asked
}

// rateLimiter holds a bucket per client, most recently used first. A
// bucket unused for as long as an empty one takes to fill is full: it is
// dropped, and a client back later gets a new, equally full one.
type rateLimiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration
	max   int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*list.Element
	lru     list.List // of *bucket, most recently used at the front
}

// newRateLimiter limits each client to perSecond requests a second with a
// burst of twice that (at least one), keeping at most maxClients buckets.
func newRateLimiter(perSecond float64, maxClients int, now func() time.Time) *rateLimiter {
	burst := max(1, int(math.Ceil(2*perSecond)))
	return &rateLimiter{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		idle:    time.Duration(float64(burst) / perSecond * float64(time.Second)),
		max:     maxClients,
		now:     now,
		buckets: map[string]*list.Element{},
	}
}

// quota is what a client has left after a request.
type quota struct {
	allowed   bool
	remaining int           // whole requests left now
	reset     time.Duration // until the bucket is full again
	retry     time.Duration // until the next request is allowed (refused ones)
}

// take spends one request of key's bucket, if it has one.
func (l *rateLimiter) take(key string) quota {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(now)
	el, ok := l.buckets[key]
	if ok {
		l.lru.MoveToFront(el)
	} else {
		if l.lru.Len() >= l.max {
			l.drop(l.lru.Back())
		}
		el = l.lru.PushFront(&bucket{key: key, lim: rate.NewLimiter(l.limit, l.burst)})
		l.buckets[key] = el
	}
	b := el.Value.(*bucket)
	b.last = now
	q := quota{allowed: b.lim.AllowN(now, 1)}
	tokens := b.lim.TokensAt(now)
	q.remaining = max(0, int(math.Floor(tokens)))
	q.reset = l.wait(float64(l.burst) - tokens)
	if !q.allowed {
		q.retry = l.wait(1 - tokens)
	}
	return q
}

// wait is how long the bucket takes to gain tokens.
func (l *rateLimiter) wait(tokens float64) time.Duration {
	return time.Duration(max(0, tokens) / float64(l.limit) * float64(time.Second))
}

// expire drops the buckets idle long enough to be full.
func (l *rateLimiter) expire(now time.Time) {
	for el := l.lru.Back(); el != nil && now.Sub(el.Value.(*bucket).last) >= l.idle; el = l.lru.Back() {
		l.drop(el)
	}
}

func (l *rateLimiter) drop(el *list.Element) {
	delete(l.buckets, el.Value.(*bucket).key)
	l.lru.Remove(el)
}

// clients is the number of buckets kept.
func (l *rateLimiter) clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// seconds rounds d up to whole seconds, as the headers carry it.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}

// Rate limit headers (IETF draft-ietf-httpapi-ratelimit-headers): the burst,
// the requests left, and the seconds until the bucket is full.
const (
	headerRateLimitLimit     = "RateLimit-Limit"
	headerRateLimitRemaining = "RateLimit-Remaining"
	headerRateLimitReset     = "RateLimit-Reset"
)

// rateLimit spends a request of the caller's bucket on each /v1 request and
// puts the quota in the headers; past it the answer is 429 rate_limited
// with Retry-After, counted by limited. It comes after authenticate and
// before authorize, so a client sending bad tokens is limited too.
func rateLimit(l *rateLimiter, limitService bool, limited prometheus.Counter) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !isV1(c.Request().URL.Path) {
				return next(c)
			}
			cl := callerOf(c)
			if cl.kind == serviceCaller && !limitService {
				return next(c)
			}
			key := "address " + ClientAddress(c.RealIP())
			if cl.kind == userCaller {
				key = "user " + strconv.FormatUint(cl.user, 10)
			}
			q := l.take(key)
			h := c.Response().Header()
			h.Set(headerRateLimitLimit, strconv.Itoa(l.burst))
			h.Set(headerRateLimitRemaining, strconv.Itoa(q.remaining))
			h.Set(headerRateLimitReset, seconds(q.reset))
			if !q.allowed {
				limited.Inc()
				h.Set(echo.HeaderRetryAfter, seconds(max(q.retry, time.Second)))
				return feed.Errorf(feed.ERATELIMITED, "more than %g requests a second (burst %d): retry after %s s",
					float64(l.limit), l.burst, seconds(max(q.retry, time.Second)))
			}
			return next(c)
		}
	}
}

// ClientAddress is the client an address (with or without port) stands
// for: the IP of an IPv4 client, the /64 of an IPv6 one.
func ClientAddress(remoteAddr string) string {
	host, ip, err := parseAddress(remoteAddr)
	if err != nil {
		return host
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64) // cannot fail: 64 bits of an IPv6 address without zone
		return p.String()
	}
	return ip.String()
}

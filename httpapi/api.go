// Package httpapi speaks the REST contract (docs/API.md): it parses
// and validates requests, makes one service call per request and writes the
// JSON envelope. No rules live here.
package httpapi

import (
	_ "embed"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/feedhq/feed/service"
)

//go:embed openapi.json
var openAPISpec []byte

// Options configure the HTTP API.
type Options struct {
	// Token, the service token, acts as every user on /v1, as
	// "Authorization: Bearer <token>". When Token or UserTokenKeys is set,
	// every /v1 request needs one or a user token.
	Token string
	// UserTokenKeys, when set, verifies user tokens: JWTs signed by one of
	// its keys, each acting as one user within its scopes (auth.go).
	UserTokenKeys *UserTokenKeys
	// RateLimit is the requests a second each client may make on /v1,
	// with a burst of twice that; 0: no limit (ratelimit.go).
	RateLimit float64
	// RateLimitService limits the service token's requests too, by address.
	RateLimitService bool
	// TrustedProxies may name the clients they forward (proxy.go).
	TrustedProxies TrustedProxies
	Log            *slog.Logger
	Registry       *prometheus.Registry
	// ReadDeadline and WriteDeadline bound GET/HEAD and other /v1 requests
	// (zero: the defaults).
	ReadDeadline, WriteDeadline time.Duration
}

type api struct {
	svc *service.Service
	log *slog.Logger
	// readTimeout bounds each read of a stream, writeTimeout each write.
	readTimeout, writeTimeout time.Duration
}

// New returns the echo instance serving every route of the contract. Every
// GET route answers HEAD too (HTTP requires it; net/http drops the body).
func New(svc *service.Service, opt Options) *echo.Echo {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Registry == nil {
		opt.Registry = prometheus.NewRegistry()
	}
	if opt.ReadDeadline == 0 {
		opt.ReadDeadline = ReadDeadlineDefault
	}
	if opt.WriteDeadline == 0 {
		opt.WriteDeadline = WriteDeadlineDefault
	}
	a := &api{svc: svc, log: opt.Log, readTimeout: opt.ReadDeadline, writeTimeout: opt.WriteDeadline}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = opt.TrustedProxies.ipExtractor()
	e.HTTPErrorHandler = a.handleError
	e.Use(middleware.Recover())
	e.Use(instrument(opt.Registry))
	// Global rather than on the group: every /v1 request needs a token,
	// also one that matches no route or method, and the checks come
	// before the body is read.
	// Without a token or keys /v1 is open, and a request pays for none of
	// the checks.
	auth := opt.Token != "" || opt.UserTokenKeys != nil
	if auth {
		e.Use(authenticate(opt.Token, opt.UserTokenKeys, streamRoute, time.Now))
	}
	limited := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "feed_http_rate_limited_total", Help: "Requests refused with 429 by the rate limit."})
	opt.Registry.MustRegister(limited)
	if opt.RateLimit > 0 {
		e.Use(rateLimit(newRateLimiter(opt.RateLimit, RateLimitClientsMax, time.Now), opt.RateLimitService, limited))
	}
	if auth {
		e.Use(authorize)
	}
	e.Use(limitBody)
	e.Use(withDeadline(opt.ReadDeadline, opt.WriteDeadline, streamRoute, exportRoute))

	get(e, "/healthz", a.healthz)
	get(e, "/readyz", a.readyz)
	get(e, "/metrics", echo.WrapHandler(promhttp.HandlerFor(opt.Registry, promhttp.HandlerOpts{})))
	get(e, "/openapi.json", func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPISpec) })

	v1 := e.Group("/v1")
	v1.POST("/users/:id/posts", a.publishPost)
	get(v1, "/users/:id/posts", a.listPosts)
	v1.DELETE("/users/:id/posts/:content_id", a.deletePost)
	get(v1, "/users/:id/posts/:content_id/delivery", a.getDelivery)
	v1.PUT("/users/:id/following/:author_id", a.followAuthor)
	v1.DELETE("/users/:id/following/:author_id", a.unfollowAuthor)
	v1.POST("/follows", a.followMany)
	get(v1, "/users/:id/following", a.listFollowing)
	get(v1, "/users/:id/followers", a.listFollowers)
	v1.PUT("/users/:id/muted/:author_id", pairAction("author_id", filterAction(a.svc.Mute, true)))
	v1.DELETE("/users/:id/muted/:author_id", pairAction("author_id", filterAction(a.svc.Mute, false)))
	get(v1, "/users/:id/muted", a.listMuted)
	v1.PUT("/users/:id/hidden_from/:user_id", pairAction("user_id", filterAction(a.svc.Hide, true)))
	v1.DELETE("/users/:id/hidden_from/:user_id", pairAction("user_id", filterAction(a.svc.Hide, false)))
	get(v1, "/users/:id/hidden_from", a.listHiddenFrom)
	get(v1, "/users/:id/feed", a.getFeed)
	get(v1, "/users/:id/feed/marker", a.getMarker)
	get(v1, "/users/:id/feed/stream", a.streamFeed)
	v1.PUT("/users/:id/feed/marker", a.putMarker)
	v1.POST("/users/:id/streams", a.createStream)
	get(v1, "/users/:id/streams/:stream_id", a.getStream)
	v1.DELETE("/users/:id/streams/:stream_id", a.deleteStream)
	v1.POST("/users/:id/streams/:stream_id/start", a.startStream)
	v1.POST("/users/:id/streams/:stream_id/end", a.endStream)
	get(v1, "/users/:id/live", a.getLive)
	get(v1, "/users/:id/export", a.exportUser)
	v1.POST("/users/:id/move", a.startMove)
	get(v1, "/users/:id/move", a.getMove)
	return e
}

// router is what *echo.Echo and *echo.Group share for registering routes.
type router interface {
	GET(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
	HEAD(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
}

// get registers h for GET and HEAD.
func get(r router, path string, h echo.HandlerFunc) {
	r.GET(path, h)
	r.HEAD(path, h)
}

// routeKey names the metrics of one route, method and status.
type routeKey struct {
	route, method string
	status        int
}

// routeMetrics are a routeKey's children of the request metrics.
type routeMetrics struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// instrument counts requests and their latency by route template and
// status, and the requests in flight. Each key's children are looked up
// once and kept: resolving label values hashes them on every call.
func instrument(reg *prometheus.Registry) echo.MiddlewareFunc {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "feed_http_requests_total", Help: "HTTP requests by route, method and status."},
		[]string{"route", "method", "status"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "feed_http_request_seconds", Help: "HTTP request latency by route.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"route", "method"})
	inFlight := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "feed_http_requests_in_flight", Help: "HTTP requests being served."})
	reg.MustRegister(requests, latency, inFlight)
	var children sync.Map // routeKey → *routeMetrics
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			inFlight.Inc()
			defer inFlight.Dec()
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			k := routeKey{route: c.Path(), method: c.Request().Method, status: c.Response().Status}
			if k.route == "" {
				k.route = "unmatched"
			}
			m, ok := children.Load(k)
			if !ok {
				m, _ = children.LoadOrStore(k, &routeMetrics{
					requests: requests.WithLabelValues(k.route, k.method, strconv.Itoa(k.status)),
					latency:  latency.WithLabelValues(k.route, k.method),
				})
			}
			rm := m.(*routeMetrics)
			rm.requests.Inc()
			rm.latency.Observe(time.Since(start).Seconds())
			return nil
		}
	}
}

func (a *api) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

type readiness struct {
	Status    string            `json:"status"`
	Databases map[string]string `json:"databases"`
}

// readyz answers from the background probes' last results, so it never
// waits for a database.
func (a *api) readyz(c echo.Context) error {
	r := a.svc.Readiness()
	switch {
	case r.Draining:
		return c.JSON(http.StatusServiceUnavailable, readiness{Status: "draining", Databases: r.Databases})
	case !r.Ready:
		return c.JSON(http.StatusServiceUnavailable, readiness{Status: "unavailable", Databases: r.Databases})
	}
	return c.JSON(http.StatusOK, readiness{Status: "ready", Databases: r.Databases})
}

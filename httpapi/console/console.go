// Package console is the operator's console that feedd serves at /console:
// server-rendered pages of the databases, the deliveries, a reshard under
// way and any user's feed. Each page reads through the service as the API
// does; its running state is a fragment of the same page that a small
// script fetches again every few seconds, so every page works without
// JavaScript and updates itself with it.
package console

import (
	"embed"
	"encoding/base64"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/service"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the console is served.
const Prefix = "/console"

// contentSecurityPolicy allows the console's own script, style and forms
// only: no inline script or style, nothing from elsewhere, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Options configure the console.
type Options struct {
	// Token, when set, is asked for at a login form (or taken as
	// "Authorization: Bearer <token>"): the API's token.
	Token string
	// TrustedProxies may say a request came over TLS (the cookies are
	// Secure then) and which client they forward (the throttling of wrong
	// tokens and the logs go by it): httpapi.New's, whose echo instance
	// finds the client.
	TrustedProxies httpapi.TrustedProxies
	Log            *slog.Logger
}

type console struct {
	svc   *service.Service
	log   *slog.Logger
	auth  auth
	pages map[string]*template.Template
}

// Mount adds the console's routes under Prefix to e.
func Mount(e *echo.Echo, svc *service.Service, opt Options) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	c := &console{svc: svc, log: opt.Log, auth: newAuth(svc, opt.Token, opt.TrustedProxies), pages: parsePages()}
	g := e.Group(Prefix, secureHeaders, c.auth.require, c.auth.checkCSRF)
	static, _ := fs.Sub(staticFS, "static")
	g.GET("/static/*", echo.WrapHandler(http.StripPrefix(Prefix+"/static/", http.FileServerFS(static))))
	g.GET("/login", c.loginForm)
	g.POST("/login", c.login)
	g.POST("/logout", c.logout)
	g.GET("", c.overview)
	g.GET("/deliveries", c.deliveries)
	g.POST("/deliveries/retry", c.retryTask)
	g.GET("/reshard", c.reshard)
	g.POST("/reshard/abort", c.abortReshard)
	g.GET("/users", c.findUser)
	g.GET("/users/:id", c.user)
}

// secureHeaders sets the Content-Security-Policy and keeps the pages out
// of caches and frames.
func secureHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(c.Request().URL.Path, Prefix+"/static/") {
			h.Set("Cache-Control", "no-store")
		}
		return next(c)
	}
}

// page is what every template gets: the page's data, its name for the
// navigation, the CSRF token for its forms and whether a login is on.
type page struct {
	Name  string
	CSRF  string
	Login bool
	Flash string
	Data  any
}

// render writes the page, or with ?partial=live only its live region: what
// the script fetches to update the page in place.
func (c *console) render(ec echo.Context, status int, name string, data any) error {
	p := page{Name: name, CSRF: csrfToken(ec), Login: c.auth.on(), Data: data}
	tmpl := "layout"
	if ec.QueryParam("partial") == "live" {
		tmpl = "live"
	} else {
		p.Flash = c.takeFlash(ec)
	}
	var b strings.Builder
	if err := c.pages[name].ExecuteTemplate(&b, tmpl, p); err != nil {
		c.log.Error("console: render", "page", name, "error", err)
		return ec.String(http.StatusInternalServerError, "internal error")
	}
	return ec.HTML(status, b.String())
}

// fail renders an error page: a feed error's message, else a generic one
// (the cause is logged: it may name a server's address).
func (c *console) fail(ec echo.Context, err error) error {
	status, msg := http.StatusInternalServerError, "internal error (the cause is in feedd's log)"
	switch feed.ErrorCode(err) {
	case feed.EINVALID:
		status, msg = http.StatusBadRequest, feed.ErrorMessage(err)
	case feed.ENOTFOUND:
		status, msg = http.StatusNotFound, feed.ErrorMessage(err)
	case feed.EUNAVAILABLE:
		status, msg = http.StatusServiceUnavailable, feed.ErrorMessage(err)
	default:
		if ec.Request().Context().Err() != nil {
			status, msg = http.StatusServiceUnavailable, "the databases did not answer in time"
		}
		c.log.Error("console: request failed", "path", ec.Request().URL.Path, "error", err)
	}
	return c.render(ec, status, "error", msg)
}

// safeError is the text of an error the console may show: a feed error's
// message, else a pointer to the log.
func safeError(err error) string {
	if err == nil {
		return ""
	}
	if feed.ErrorCode(err) != feed.EINTERNAL {
		return feed.ErrorMessage(err)
	}
	return "failed (the cause is in feedd's log)"
}

// redirect answers a form's POST with a GET of path (303 See Other), so a
// reload does not post it again.
func redirect(ec echo.Context, path string) error {
	return ec.Redirect(http.StatusSeeOther, path)
}

// flashCookie carries an action's outcome to the page it redirects to,
// once. A cookie and not the URL: a link from elsewhere cannot make the
// console show a message of its own.
const flashCookie = "feed_console_flash"

// redirectWith redirects to path, which shows msg once.
func (c *console) redirectWith(ec echo.Context, path, msg string) error {
	ck := c.auth.cookie(ec.Request(), flashCookie, base64.RawURLEncoding.EncodeToString([]byte(msg)))
	ck.MaxAge = 60
	ec.SetCookie(ck)
	return redirect(ec, path)
}

// takeFlash returns the message an action left for this page and clears it.
func (c *console) takeFlash(ec echo.Context) string {
	ck, err := ec.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	gone := c.auth.cookie(ec.Request(), flashCookie, "")
	gone.MaxAge = -1
	ec.SetCookie(gone)
	b, _ := base64.RawURLEncoding.DecodeString(ck.Value)
	return string(b)
}

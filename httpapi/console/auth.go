package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/service"
)

// A browser cannot put a bearer token on a link it follows or a form it
// posts, so with a token set the console asks for it once, at a login
// form, and keeps a session cookie: HttpOnly (no script reads it),
// SameSite=Strict (no other site's page sends it) and scoped to /console,
// so it never reaches /v1, and Secure when the request came over TLS (to
// feedd or to a trusted proxy that says so). Its value names a session
// kept in the database (service.StartConsoleSession): random, one per
// sign-in, ended by signing out, by its expiry or by a change of the token,
// on every instance at once. Basic authentication would work without a
// form, but a browser keeps sending it with no way to log out. Scripts may
// send "Authorization: Bearer <token>" instead. Wrong tokens, at the form
// or as a bearer token, are throttled per client (throttle.go).

const (
	sessionCookie = "feed_console"
	csrfCookie    = "feed_console_csrf"
	csrfField     = "csrf"
)

type auth struct {
	svc   *service.Service
	token []byte
	// tokenMAC names the token in the sessions signed in with it, nil
	// when no token is set.
	tokenMAC []byte
	proxies  httpapi.TrustedProxies
	throttle *loginThrottle
}

func newAuth(svc *service.Service, token string, proxies httpapi.TrustedProxies) auth {
	a := auth{svc: svc, proxies: proxies, throttle: newLoginThrottle(time.Now)}
	if token == "" {
		return a
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("feed console session"))
	a.token, a.tokenMAC = []byte(token), mac.Sum(nil)
	return a
}

func (a auth) on() bool { return a.tokenMAC != nil }

// hasSession says whether the request carries the cookie of a session
// signed in with the token that has not ended.
func (a auth) hasSession(r *http.Request) (bool, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return false, nil
	}
	return a.svc.CheckConsoleSession(r.Context(), ck.Value, a.tokenMAC)
}

// sessionsDown answers a request whose session could not be read.
func sessionsDown(c echo.Context) error {
	return c.String(http.StatusServiceUnavailable, "the console's sessions cannot be read now: try again")
}

// cookie is one of the console's cookies for the request, scoped to it.
func (a auth) cookie(r *http.Request, name, value string) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: Prefix, HttpOnly: true,
		Secure: a.proxies.Secure(r), SameSite: http.SameSiteStrictMode}
}

// check compares a token the client gave with the console's, unless the
// client is throttled: ok is whether it matched, wait (when not zero) how
// long the client must wait before trying again.
func (a auth) check(c echo.Context, given string) (ok bool, wait time.Duration) {
	client := httpapi.ClientAddress(c.RealIP())
	if wait := a.throttle.wait(client); wait > 0 {
		return false, wait
	}
	if subtle.ConstantTimeCompare([]byte(given), a.token) != 1 {
		a.throttle.failed(client)
		return false, 0
	}
	a.throttle.succeeded(client)
	return true, 0
}

// throttled sets Retry-After and returns the message of a refused attempt.
func throttled(c echo.Context, wait time.Duration) string {
	secs := int(math.Ceil(wait.Seconds()))
	c.Response().Header().Set(echo.HeaderRetryAfter, strconv.Itoa(secs))
	return fmt.Sprintf("too many wrong tokens: try again in %d s", secs)
}

// require sends a request without a session to the login form (a page) or
// answers 401 (an action or a live fragment); the login form and the
// static files need none. A bearer token is checked as at the login form.
func (a auth) require(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !a.on() || r.URL.Path == Prefix+"/login" || strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
			return next(c)
		}
		if ok, err := a.hasSession(r); err != nil {
			return sessionsDown(c)
		} else if ok {
			return next(c)
		}
		if scheme, given, _ := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " "); strings.EqualFold(scheme, "Bearer") {
			ok, wait := a.check(c, given)
			if ok {
				return next(c)
			} else if wait > 0 {
				return c.String(http.StatusTooManyRequests, throttled(c, wait))
			}
		}
		if r.Method != http.MethodGet || c.QueryParam("partial") != "" {
			return c.String(http.StatusUnauthorized, "sign in to the console first")
		}
		return c.Redirect(http.StatusSeeOther, Prefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()))
	}
}

func (c *console) loginForm(ec echo.Context) error {
	if !c.auth.on() {
		return redirect(ec, Prefix)
	}
	return c.render(ec, http.StatusOK, "login", map[string]string{"Next": safeNext(ec.QueryParam("next"))})
}

// login checks the token in constant time and sets the session cookie.
func (c *console) login(ec echo.Context) error {
	next := safeNext(ec.FormValue("next"))
	if !c.auth.on() {
		return redirect(ec, next)
	}
	switch ok, wait := c.auth.check(ec, ec.FormValue("token")); {
	case wait > 0:
		c.log.Warn("console: login throttled", "remote", ec.RealIP(), "wait", wait.Round(time.Second).String())
		return c.render(ec, http.StatusTooManyRequests, "login", map[string]string{"Next": next, "Error": throttled(ec, wait)})
	case !ok:
		c.log.Warn("console: wrong token at login", "remote", ec.RealIP())
		return c.render(ec, http.StatusUnauthorized, "login", map[string]string{"Next": next, "Error": "wrong token"})
	}
	session, err := c.svc.StartConsoleSession(ec.Request().Context(), c.auth.tokenMAC)
	if err != nil {
		c.log.Warn("console: session not stored", "error", err)
		return sessionsDown(ec)
	}
	ec.SetCookie(c.auth.cookie(ec.Request(), sessionCookie, session))
	return redirect(ec, next)
}

// logout ends the session everywhere and drops its cookie.
func (c *console) logout(ec echo.Context) error {
	if ck, err := ec.Cookie(sessionCookie); err == nil {
		if err := c.svc.EndConsoleSession(ec.Request().Context(), ck.Value); err != nil {
			c.log.Warn("console: session not ended", "error", err)
			return sessionsDown(ec)
		}
	}
	ck := c.auth.cookie(ec.Request(), sessionCookie, "")
	ck.MaxAge = -1
	ec.SetCookie(ck)
	return redirect(ec, Prefix+"/login")
}

// safeNext keeps a redirect target within the console.
func safeNext(next string) string {
	if next == Prefix || (strings.HasPrefix(next, Prefix+"/") && !strings.HasPrefix(next, "//")) {
		return next
	}
	return Prefix
}

// checkCSRF guards every POST with a double-submitted token: a random
// value in a SameSite=Strict cookie that the page's forms repeat in a
// hidden field, which another site can neither read nor set. A browser's
// Sec-Fetch-Site header, when sent, must also say the request came from
// the console's own origin. GETs change nothing and get the cookie.
func (a auth) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ck, err := c.Cookie(csrfCookie)
		if c.Request().Method != http.MethodPost {
			if err != nil || len(ck.Value) != 64 {
				var b [32]byte
				_, _ = rand.Read(b[:])
				ck = a.cookie(c.Request(), csrfCookie, hex.EncodeToString(b[:]))
				c.SetCookie(ck)
			}
			c.Set(csrfField, ck.Value)
			return next(c)
		}
		site := c.Request().Header.Get("Sec-Fetch-Site")
		if err != nil || subtle.ConstantTimeCompare([]byte(c.FormValue(csrfField)), []byte(ck.Value)) != 1 ||
			(site != "" && site != "same-origin" && site != "none") {
			return c.String(http.StatusForbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
		}
		c.Set(csrfField, ck.Value)
		return next(c)
	}
}

// csrfToken is the value the page's forms post back.
func csrfToken(c echo.Context) string {
	s, _ := c.Get(csrfField).(string)
	return s
}

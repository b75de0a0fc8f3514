package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
)

// A browser cannot put a bearer token on a link it follows or a form it
// posts, so with a token set the console asks for it once, at a login
// form, and keeps a session cookie: HttpOnly (no script reads it),
// SameSite=Strict (no other site's page sends it) and scoped to /console,
// so it never reaches /v1. Its value is a MAC of the token, not the token,
// and changing the token ends every session. Basic authentication would
// work without a form, but a browser keeps sending it with no way to log
// out. Scripts may send "Authorization: Bearer <token>" instead.

const (
	sessionCookie = "feed_console"
	csrfCookie    = "feed_console_csrf"
	csrfField     = "csrf"
)

type auth struct {
	token   []byte
	session string // the session cookie's value, "" when no token is set
}

func newAuth(token string) auth {
	if token == "" {
		return auth{}
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("feed console session"))
	return auth{token: []byte(token), session: hex.EncodeToString(mac.Sum(nil))}
}

func (a auth) on() bool { return a.session != "" }

// signedIn says whether the request carries the session cookie or the token.
func (a auth) signedIn(r *http.Request) bool {
	if ck, err := r.Cookie(sessionCookie); err == nil && subtle.ConstantTimeCompare([]byte(ck.Value), []byte(a.session)) == 1 {
		return true
	}
	scheme, got, _ := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " ")
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(got), a.token) == 1
}

// require sends a request without a session to the login form (a page) or
// answers 401 (an action or a live fragment); the login form and the
// static files need none.
func (a auth) require(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !a.on() || a.signedIn(r) || r.URL.Path == Prefix+"/login" || strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
			return next(c)
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
	if subtle.ConstantTimeCompare([]byte(ec.FormValue("token")), c.auth.token) != 1 {
		c.log.Warn("console: wrong token at login", "remote", ec.RealIP())
		return c.render(ec, http.StatusUnauthorized, "login", map[string]string{"Next": next, "Error": "wrong token"})
	}
	ec.SetCookie(&http.Cookie{Name: sessionCookie, Value: c.auth.session, Path: Prefix, HttpOnly: true,
		Secure: ec.Request().TLS != nil, SameSite: http.SameSiteStrictMode})
	return redirect(ec, next)
}

func (c *console) logout(ec echo.Context) error {
	ec.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		Secure: ec.Request().TLS != nil, SameSite: http.SameSiteStrictMode})
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
func checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ck, err := c.Cookie(csrfCookie)
		if c.Request().Method != http.MethodPost {
			if err != nil || len(ck.Value) != 64 {
				var b [32]byte
				_, _ = rand.Read(b[:])
				ck = &http.Cookie{Name: csrfCookie, Value: hex.EncodeToString(b[:]), Path: Prefix, HttpOnly: true,
					Secure: c.Request().TLS != nil, SameSite: http.SameSiteStrictMode}
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

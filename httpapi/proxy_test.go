package httpapi

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

// TestTrustedProxies: X-Forwarded-For names the client only when the
// connection comes from a trusted proxy, and then the nearest address that
// is not one; X-Forwarded-Proto says TLS only from a trusted proxy.
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	trusted, err := ParseTrustedProxies(" 10.0.0.0/8, 192.168.1.7 ,2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	if got := trusted.String(); got != "10.0.0.0/8,192.168.1.7/32,2001:db8::/32" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.example", "10.0.0"} {
		if _, err := ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q): no error", bad)
		}
	}
	if none, err := ParseTrustedProxies(""); err != nil || len(none) != 0 {
		t.Errorf("empty list: %v, %v", none, err)
	}
	for _, c := range []struct {
		proxies   TrustedProxies
		peer, xff string
		proto     string
		client    string
		secure    bool
	}{
		{nil, "203.0.113.9:5000", "198.51.100.1", "https", "203.0.113.9", false},
		{trusted, "203.0.113.9:5000", "198.51.100.1", "https", "203.0.113.9", false},
		{trusted, "10.1.2.3:5000", "", "", "10.1.2.3", false},
		{trusted, "10.1.2.3:5000", "198.51.100.1", "https", "198.51.100.1", true},
		{trusted, "10.1.2.3:5000", "198.51.100.1, 192.168.1.7", "HTTPS", "198.51.100.1", true},
		{trusted, "10.1.2.3:5000", "6.6.6.6, 198.51.100.1, 10.9.9.9", "http", "198.51.100.1", false},
		{trusted, "[2001:db8::1]:5000", "2001:db9::5", "", "2001:db9::5", false},
	} {
		e := echo.New()
		e.IPExtractor = c.proxies.ipExtractor()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = c.peer
		if c.xff != "" {
			req.Header.Set(echo.HeaderXForwardedFor, c.xff)
		}
		if c.proto != "" {
			req.Header.Set(echo.HeaderXForwardedProto, c.proto)
		}
		ctx := e.NewContext(req, httptest.NewRecorder())
		if got := ctx.RealIP(); got != c.client {
			t.Errorf("proxies %v, peer %s, X-Forwarded-For %q: client %s, want %s", c.proxies, c.peer, c.xff, got, c.client)
		}
		if got := c.proxies.Secure(req); got != c.secure {
			t.Errorf("proxies %v, peer %s, X-Forwarded-Proto %q: secure %v, want %v", c.proxies, c.peer, c.proto, got, c.secure)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.TLS = &tls.ConnectionState{}
	if !TrustedProxies(nil).Secure(req) {
		t.Error("a TLS connection is not secure")
	}
}

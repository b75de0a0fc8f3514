package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// TrustedProxies are the networks whose connections may say which client
// they forward (X-Forwarded-For) and whether it came over TLS
// (X-Forwarded-Proto). Nobody else's headers are believed: a client can
// write anything into them. The client's address decides its rate-limit
// bucket, the console's login throttling and the address in the logs.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies reads a comma-separated list of CIDRs or addresses
// ("10.0.0.0/8, 192.168.1.7"); "" trusts no proxy.
func ParseTrustedProxies(s string) (TrustedProxies, error) {
	var out TrustedProxies
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("trusted proxies: %q is neither a CIDR nor an address", f)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// parseAddress reads an address with or without port: its host part, and
// the IP it names without its zone and with an IPv4-mapped IPv6 address as
// IPv4.
func parseAddress(addr string) (host string, ip netip.Addr, err error) {
	host, _, err = net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip, err = netip.ParseAddr(host)
	return host, ip.Unmap().WithZone(""), err
}

// String is the list as ParseTrustedProxies reads it.
func (t TrustedProxies) String() string {
	s := make([]string, len(t))
	for i, p := range t {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// Set parses s as the list (a flag.Value).
func (t *TrustedProxies) Set(s string) error {
	p, err := ParseTrustedProxies(s)
	if err == nil {
		*t = p
	}
	return err
}

// trusts says whether the connection's peer is a trusted proxy.
func (t TrustedProxies) trusts(remoteAddr string) bool {
	_, a, err := parseAddress(remoteAddr)
	if err != nil {
		return false
	}
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ipExtractor finds a request's client address: the peer's, or behind
// trusted proxies the nearest X-Forwarded-For address that is not one.
func (t TrustedProxies) ipExtractor() echo.IPExtractor {
	if len(t) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range t {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// Secure says whether the request came over TLS: to this server, or to a
// trusted proxy that says so in X-Forwarded-Proto.
func (t TrustedProxies) Secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return t.trusts(r.RemoteAddr) && strings.EqualFold(strings.TrimSpace(r.Header.Get(echo.HeaderXForwardedProto)), "https")
}

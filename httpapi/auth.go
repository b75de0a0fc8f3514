package httpapi

import (
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
)

// Two kinds of bearer token open /v1. The service token (Options.Token)
// acts as every user: it is the app's backend's. A user token is a JWT the
// app mints for one of its users with a key of the set UserTokenKeys holds;
// it acts as that user only, within its scopes, so a mobile or web client
// can page its own feed without the app proxying each request. Both are
// checked without a database round trip: a bad token costs a signature
// check at most.

// Scopes of a user token (its "scope" claim, space-separated).
const (
	ScopeRead  = "feed:read"
	ScopeWrite = "feed:write"
)

// userTokenAlgs are the signature algorithms a user token may have: HS256
// with an "oct" key, EdDSA with an "OKP" Ed25519 key. Any other, "none"
// included, is refused before a key is looked at.
var userTokenAlgs = []jose.SignatureAlgorithm{jose.HS256, jose.EdDSA}

// userTokenLeeway is the clock difference allowed between the app that
// mints a token and feed, on exp, nbf and iat.
const userTokenLeeway = time.Minute

// minHS256KeyBytes is the shortest HS256 key taken: RFC 7518, 3.2, wants a
// key at least as long as the hash.
const minHS256KeyBytes = 32

// userTokenKey is one key of the set: the one algorithm it verifies and the
// key to verify with ([]byte or ed25519.PublicKey).
type userTokenKey struct {
	alg jose.SignatureAlgorithm
	key any
}

// UserTokenKeys is the JSON Web Key Set (RFC 7517) user tokens are verified
// with, read from a file. Reload reads the file again and replaces the
// whole set at once, so a key removed from the file stops opening anything
// (key rotation); requests in flight keep the set they started with.
type UserTokenKeys struct {
	path string
	keys atomic.Pointer[map[string]userTokenKey]
}

// LoadUserTokenKeys reads the key set in the file at path.
func LoadUserTokenKeys(path string) (*UserTokenKeys, error) {
	k := &UserTokenKeys{path: path}
	if _, err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload reads the file again and returns the number of keys. On an error
// the set in use stays.
func (k *UserTokenKeys) Reload() (int, error) {
	b, err := os.ReadFile(k.path)
	if err != nil {
		return 0, fmt.Errorf("user token keys: %w", err)
	}
	keys, err := parseUserTokenKeys(b)
	if err != nil {
		return 0, fmt.Errorf("user token keys: %s: %w", k.path, err)
	}
	k.keys.Store(&keys)
	return len(keys), nil
}

// parseUserTokenKeys reads a JWKS whose every key has a kid (unique), is
// for signing and is either "oct" of at least 32 bytes (HS256) or "OKP"
// Ed25519 (EdDSA). A key whose "alg" says otherwise is refused, and so is
// any other type: a file the operator thinks is in force must be whole.
// An Ed25519 key may be given with its private part; only the public one
// is kept.
func parseUserTokenKeys(b []byte) (map[string]userTokenKey, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("the set has no keys")
	}
	keys := make(map[string]userTokenKey, len(set.Keys))
	for i, jwk := range set.Keys {
		if jwk.KeyID == "" {
			return nil, fmt.Errorf("key %d has no kid", i)
		}
		if _, dup := keys[jwk.KeyID]; dup {
			return nil, fmt.Errorf("kid %q names two keys", jwk.KeyID)
		}
		if jwk.Use != "" && jwk.Use != "sig" {
			return nil, fmt.Errorf("key %q: use %q, want sig", jwk.KeyID, jwk.Use)
		}
		var k userTokenKey
		switch key := jwk.Key.(type) {
		case []byte:
			if len(key) < minHS256KeyBytes {
				return nil, fmt.Errorf("key %q: an oct key needs at least %d bytes, has %d", jwk.KeyID, minHS256KeyBytes, len(key))
			}
			k = userTokenKey{alg: jose.HS256, key: key}
		case ed25519.PublicKey:
			k = userTokenKey{alg: jose.EdDSA, key: key}
		case ed25519.PrivateKey:
			k = userTokenKey{alg: jose.EdDSA, key: key.Public()}
		default:
			return nil, fmt.Errorf("key %q: type %T; want oct (HS256) or OKP Ed25519 (EdDSA)", jwk.KeyID, jwk.Key)
		}
		if jwk.Algorithm != "" && jwk.Algorithm != string(k.alg) {
			return nil, fmt.Errorf("key %q: alg %q, want %s for its type", jwk.KeyID, jwk.Algorithm, k.alg)
		}
		keys[jwk.KeyID] = k
	}
	return keys, nil
}

// userTokenClaims are the claims a user token is read for.
type userTokenClaims struct {
	jwt.Claims
	Scope string `json:"scope"`
}

// verify checks a user token at now: its header names a key of the set and
// that key's algorithm, its signature is the key's, it has exp, and
// exp, nbf and iat hold (with userTokenLeeway). aud is not checked. Every
// failure is EUNAUTHORIZED.
func (k *UserTokenKeys) verify(token string, now time.Time) (*caller, error) {
	tok, err := jwt.ParseSigned(token, userTokenAlgs)
	if err != nil {
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "not the service token, nor a user token signed with HS256 or EdDSA")
	}
	h := tok.Headers[0]
	key, ok := (*k.keys.Load())[h.KeyID]
	if !ok {
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "user token signed with an unknown key (kid %q)", truncate(h.KeyID, 64))
	}
	if jose.SignatureAlgorithm(h.Algorithm) != key.alg {
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "user token signed with %s; key %q is %s", h.Algorithm, h.KeyID, key.alg)
	}
	var c userTokenClaims
	if err := tok.Claims(key.key, &c); err != nil {
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "user token with a bad signature or claims")
	}
	if c.Expiry == nil {
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "user token without exp")
	}
	switch err := c.ValidateWithLeeway(jwt.Expected{Time: now}, userTokenLeeway); {
	case errors.Is(err, jwt.ErrExpired):
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "user token expired")
	case err != nil:
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "user token not valid yet")
	}
	user, err := strconv.ParseUint(c.Subject, 10, 64)
	if err != nil || user == 0 {
		return nil, feed.Errorf(feed.EUNAUTHORIZED, "user token sub must be a user id, a decimal integer in 1..18446744073709551615")
	}
	scopes := strings.Fields(c.Scope)
	return &caller{kind: userCaller, user: user,
		read: slices.Contains(scopes, ScopeRead), write: slices.Contains(scopes, ScopeWrite)}, nil
}

// callerKind says what a request's credentials let it be.
type callerKind int

const (
	// anonymous: no credentials, or refused ones (caller.err says why).
	anonymous callerKind = iota
	serviceCaller
	userCaller
)

// caller is who a request comes from, as authenticate found it.
type caller struct {
	kind callerKind
	// user, read and write are a user token's sub and scopes.
	user        uint64
	read, write bool
	// err is why the credentials are refused (anonymous only; nil when the
	// request carries none).
	err error
}

// callerKey holds the request's *caller in the echo context.
const callerKey = "feed.caller"

func callerOf(c echo.Context) *caller {
	if cl, ok := c.Get(callerKey).(*caller); ok {
		return cl
	}
	return &caller{}
}

// isV1 says whether a path is under /v1, where tokens and rate limits apply.
func isV1(path string) bool { return path == "/v1" || strings.HasPrefix(path, "/v1/") }

// authenticate finds who each /v1 request comes from: the service token
// (compared in constant time), a user token keys verifies (keys may be
// nil), or neither. It refuses nothing itself: the rate limit comes first,
// keyed by the caller, then authorize. The scheme name is case-insensitive
// (RFC 9110, 11.1). On the route queryRoute the token may come as
// ?access_token= instead: a browser's EventSource cannot send headers.
func authenticate(service string, keys *UserTokenKeys, queryRoute string, now func() time.Time) echo.MiddlewareFunc {
	want := []byte(service)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !isV1(c.Request().URL.Path) {
				return next(c)
			}
			scheme, got, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			if q := c.QueryParam("access_token"); scheme == "" && q != "" && c.Path() == queryRoute {
				scheme, got = "Bearer", q
			}
			cl := &caller{}
			switch {
			case !strings.EqualFold(scheme, "Bearer") || got == "":
				cl.err = feed.Errorf(feed.EUNAUTHORIZED, "missing or wrong bearer token")
			case len(want) > 0 && subtle.ConstantTimeCompare([]byte(got), want) == 1:
				cl.kind = serviceCaller
			case keys == nil:
				cl.err = feed.Errorf(feed.EUNAUTHORIZED, "missing or wrong bearer token")
			default:
				if ut, err := keys.verify(got, now()); err != nil {
					cl.err = err
				} else {
					cl = ut
				}
			}
			c.Set(callerKey, cl)
			return next(c)
		}
	}
}

// access is what a user token may do on a route.
type access int

const (
	// serviceOnly: nothing; the service token's alone (a route not in
	// userAccess).
	serviceOnly access = iota
	// ownUser: only when the path's user is the token's.
	ownUser
	// anyUser: on any user: public reads.
	anyUser
	// bodyUsers: the handler checks each user the body names (actAs).
	bodyUsers
)

// userAccess is what a user token may do on each route, by method and
// route template (HEAD as GET). Its user's own data it may read and
// write; an author's posts and followers are public reads. Any other
// route (a move, and any route added without a line here) is 403.
var userAccess = map[string]access{
	"POST /v1/users/:id/posts":                     ownUser,
	"GET /v1/users/:id/posts":                      anyUser,
	"DELETE /v1/users/:id/posts/:content_id":       ownUser,
	"GET /v1/users/:id/posts/:content_id/delivery": ownUser,
	"PUT /v1/users/:id/following/:author_id":       ownUser,
	"DELETE /v1/users/:id/following/:author_id":    ownUser,
	"POST " + followsRoute:                         bodyUsers,
	"GET /v1/users/:id/following":                  ownUser,
	"GET /v1/users/:id/followers":                  anyUser,
	"PUT /v1/users/:id/muted/:author_id":           ownUser,
	"DELETE /v1/users/:id/muted/:author_id":        ownUser,
	"GET /v1/users/:id/muted":                      ownUser,
	"PUT /v1/users/:id/hidden_from/:user_id":       ownUser,
	"DELETE /v1/users/:id/hidden_from/:user_id":    ownUser,
	"GET /v1/users/:id/hidden_from":                ownUser,
	"GET /v1/users/:id/feed":                       ownUser,
	"GET /v1/users/:id/feed/marker":                ownUser,
	"GET " + streamRoute:                           ownUser,
	"PUT /v1/users/:id/feed/marker":                ownUser,
	"POST /v1/users/:id/streams":                   ownUser,
	"GET /v1/users/:id/streams/:stream_id":         ownUser,
	"DELETE /v1/users/:id/streams/:stream_id":      ownUser,
	"POST /v1/users/:id/streams/:stream_id/start":  ownUser,
	"POST /v1/users/:id/streams/:stream_id/end":    ownUser,
	"GET /v1/users/:id/live":                       ownUser,
	"GET " + exportRoute:                           ownUser,
}

// authorize refuses a /v1 request that may not go on, when the service has
// a token or keys: 401 for an anonymous caller, 403 for a user token
// outside its scopes or its user. A request that matches no route goes on
// to its 404. It runs before the body is read.
func authorize(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !isV1(c.Request().URL.Path) {
			return next(c)
		}
		cl := callerOf(c)
		switch {
		case cl.kind == anonymous:
			return cl.err
		case cl.kind == serviceCaller || c.Path() == "":
			return next(c)
		}
		method := c.Request().Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		if method == http.MethodGet && !cl.read {
			return feed.Errorf(feed.EFORBIDDEN, "a read needs a user token with scope %s", ScopeRead)
		}
		if method != http.MethodGet && !cl.write {
			return feed.Errorf(feed.EFORBIDDEN, "a write needs a user token with scope %s", ScopeWrite)
		}
		switch userAccess[method+" "+c.Path()] {
		case serviceOnly:
			return feed.Errorf(feed.EFORBIDDEN, "a user token may not use %s %s", method, c.Path())
		case ownUser:
			id, err := pathID(c, "id")
			if err != nil {
				return err
			}
			if err := actAs(c, id); err != nil {
				return err
			}
		}
		return next(c)
	}
}

// actAs refuses (EFORBIDDEN) a request by a user token to act as another
// user than its own. The service token, or any caller when the service has
// no token, acts as anyone.
func actAs(c echo.Context, user uint64) error {
	if cl := callerOf(c); cl.kind == userCaller && cl.user != user {
		return feed.Errorf(feed.EFORBIDDEN, "a user token of user %d may not act as user %d", cl.user, user)
	}
	return nil
}

package httpapi_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/httpapi/client"
)

// userKeys are the keys of a test's JWKS file: an HS256 secret (kid "hs")
// and an Ed25519 pair (kid "ed").
type userKeys struct {
	path string
	hs   []byte
	ed   ed25519.PrivateKey
}

// newUserKeys writes a JWKS file of both keys (the Ed25519 one public
// only) and loads it.
func newUserKeys(t *testing.T) (*userKeys, *httpapi.UserTokenKeys) {
	t.Helper()
	k := &userKeys{path: filepath.Join(t.TempDir(), "jwks.json"), hs: make([]byte, 32)}
	_, _ = rand.Read(k.hs)
	_, k.ed, _ = ed25519.GenerateKey(rand.Reader)
	k.write(t, "hs", "ed")
	keys, err := httpapi.LoadUserTokenKeys(k.path)
	if err != nil {
		t.Fatal(err)
	}
	return k, keys
}

// write writes the JWKS file with the keys named.
func (k *userKeys) write(t *testing.T, kids ...string) {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, kid := range kids {
		switch kid {
		case "hs":
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.hs, KeyID: "hs", Algorithm: "HS256", Use: "sig"})
		case "ed":
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.ed.Public(), KeyID: "ed", Use: "sig"})
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// claims are a user token's claims for sub and scope, valid for an hour.
func claims(sub uint64, scope string) map[string]any {
	return map[string]any{"sub": u(sub), "scope": scope, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
}

// sign signs claims with key and alg, kid in the header.
func sign(t *testing.T, key any, alg jose.SignatureAlgorithm, kid string, c map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// hs and ed are tokens of sub with scope, signed by each key.
func (k *userKeys) hsToken(t *testing.T, sub uint64, scope string) string {
	return sign(t, k.hs, jose.HS256, "hs", claims(sub, scope))
}

func (k *userKeys) edToken(t *testing.T, sub uint64, scope string) string {
	return sign(t, k.ed, jose.EdDSA, "ed", claims(sub, scope))
}

// b64 is base64url without padding, as JWS has it.
func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

const both = httpapi.ScopeRead + " " + httpapi.ScopeWrite

// TestUserTokenRefused holds every kind of bad user token to 401
// unauthorized, with the service token next to it still opening /v1.
func TestUserTokenRefused(t *testing.T) {
	t.Parallel()
	const service = "s3rvice"
	k, keys := newUserKeys(t)
	v := setup(t, envOpts{token: service, keys: keys})
	user := v.id()
	feed := "/v1/users/" + u(user) + "/feed"
	wantStatus(t, v.as(t, k.hsToken(t, user, both), http.MethodGet, feed, ""), http.StatusOK)
	wantStatus(t, v.as(t, k.edToken(t, user, both), http.MethodGet, feed, ""), http.StatusOK)
	wantStatus(t, v.as(t, service, http.MethodGet, feed, ""), http.StatusOK)

	c := claims(user, both)
	with := func(key string, val any) map[string]any {
		m := map[string]any{}
		for k, v := range c {
			m[k] = v
		}
		if val == nil {
			delete(m, key)
		} else {
			m[key] = val
		}
		return m
	}
	good := k.hsToken(t, user, both)
	header, payload, _ := strings.Cut(good, ".")
	payload, _, _ = strings.Cut(payload, ".")
	edPublic := []byte(k.ed.Public().(ed25519.PublicKey))
	hmacWith := func(key []byte, signed string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(signed))
		return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	hsOnEd := b64(`{"alg":"HS256","kid":"ed","typ":"JWT"}`) + "." + payload
	hsOnEd += "." + hmacWith(edPublic, hsOnEd)
	otherHS := make([]byte, 32)
	_, _ = rand.Read(otherHS)

	for name, tok := range map[string]string{
		"expired":       sign(t, k.hs, jose.HS256, "hs", with("exp", time.Now().Add(-2*time.Hour).Unix())),
		"nbf in future": sign(t, k.hs, jose.HS256, "hs", with("nbf", time.Now().Add(2*time.Hour).Unix())),
		"iat in future": sign(t, k.hs, jose.HS256, "hs", with("iat", time.Now().Add(2*time.Hour).Unix())),
		"missing exp":   sign(t, k.hs, jose.HS256, "hs", with("exp", nil)),
		"unknown kid":   sign(t, k.hs, jose.HS256, "nope", c),
		"no kid":        sign(t, k.hs, jose.HS256, "", c),
		"other secret":  sign(t, otherHS, jose.HS256, "hs", c),
		"alg none":      b64(`{"alg":"none","kid":"hs","typ":"JWT"}`) + "." + payload + ".",
		"alg none signed": b64(`{"alg":"none","kid":"hs","typ":"JWT"}`) + "." + payload + "." +
			hmacWith(k.hs, b64(`{"alg":"none","kid":"hs","typ":"JWT"}`)+"."+payload),
		"HS256 on the OKP key": hsOnEd,
		"EdDSA on the oct key": sign(t, k.ed, jose.EdDSA, "hs", c),
		"HS384":                sign(t, append(slices.Clone(k.hs), k.hs[:16]...), jose.HS384, "hs", c),
		"bad signature":        good[:len(good)-4] + strings.Map(func(r rune) rune { return 'A' + (r+1)%26 }, good[len(good)-4:]),
		"two parts":            header + "." + payload,
		"not a JWT":            "abc",
		"JSON":                 `{"sub":"1"}`,
		"sub not an id":        sign(t, k.hs, jose.HS256, "hs", with("sub", "alice")),
		"sub zero":             sign(t, k.hs, jose.HS256, "hs", with("sub", "0")),
		"sub a number":         sign(t, k.hs, jose.HS256, "hs", with("sub", user)),
		"no sub":               sign(t, k.hs, jose.HS256, "hs", with("sub", nil)),
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, v.as(t, tok, http.MethodGet, feed, ""), http.StatusUnauthorized, "unauthorized")
			wantError(t, v.as(t, tok, http.MethodPost, "/v1/users/"+u(user)+"/posts", `{}`), http.StatusUnauthorized, "unauthorized")
		})
	}
	if got := v.posts(t, user); len(got) != 0 {
		t.Fatalf("refused publishes stored %+v", got)
	}
	// A token is not the service token by prefix, and an empty one is none.
	wantError(t, v.as(t, service+"x", http.MethodGet, feed, ""), http.StatusUnauthorized, "unauthorized")
	wantError(t, v.as(t, "", http.MethodGet, feed, ""), http.StatusUnauthorized, "unauthorized")
}

// TestUserTokenAccess holds a user token to its user and scopes: its own
// data read and written, public reads of others open, the rest 403
// forbidden with nothing changed; the service token keeps full access.
func TestUserTokenAccess(t *testing.T) {
	t.Parallel()
	const service = "s3rvice"
	k, keys := newUserKeys(t)
	v := setup(t, envOpts{token: service, keys: keys})
	me, other, author := v.id(), v.id(), v.id()
	rw, ro, wo := k.edToken(t, me, both), k.hsToken(t, me, httpapi.ScopeRead), k.hsToken(t, me, httpapi.ScopeWrite)
	none := k.hsToken(t, me, "")
	theirs := v.as(t, service, http.MethodPost, "/v1/users/"+u(author)+"/posts", `{}`)
	wantStatus(t, theirs, http.StatusCreated)
	wantStatus(t, v.as(t, service, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", other, author), ""), http.StatusNoContent)

	// Its own data, read and written.
	mine := v.as(t, rw, http.MethodPost, "/v1/users/"+u(me)+"/posts", `{}`)
	wantStatus(t, mine, http.StatusCreated)
	var p post
	mine.decode(t, &p)
	for _, c := range []struct {
		method, target, body string
		status               int
	}{
		{http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", me, author), "", http.StatusNoContent},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/following", me), "", http.StatusOK},
		{http.MethodHead, fmt.Sprintf("/v1/users/%d/feed", me), "", http.StatusOK},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/feed", me), "", http.StatusOK},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/posts/%s/delivery", me, p.ContentID), "", http.StatusOK},
		{http.MethodPut, fmt.Sprintf("/v1/users/%d/muted/%d", me, other), "", http.StatusNoContent},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/muted", me), "", http.StatusOK},
		{http.MethodPut, fmt.Sprintf("/v1/users/%d/hidden_from/%d", me, other), "", http.StatusNoContent},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/hidden_from", me), "", http.StatusOK},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/feed/marker", me), "", http.StatusOK},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/live", me), "", http.StatusOK},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/export", me), "", http.StatusOK},
		{http.MethodPost, "/v1/follows", fmt.Sprintf(`{"follows":[{"user_id":"%d","author_id":"%d"}]}`, me, other), http.StatusOK},
		{http.MethodDelete, fmt.Sprintf("/v1/users/%d/posts/%s", me, p.ContentID), "", http.StatusNoContent},
		// Public reads of another user.
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/posts", author), "", http.StatusOK},
		{http.MethodHead, fmt.Sprintf("/v1/users/%d/posts", author), "", http.StatusOK},
		{http.MethodGet, fmt.Sprintf("/v1/users/%d/followers", author), "", http.StatusOK},
		// A user id that is not one is a bad request, before whose it is.
		{http.MethodGet, "/v1/users/0/feed", "", http.StatusBadRequest},
		// No route is still 404.
		{http.MethodGet, "/v1/nope", "", http.StatusNotFound},
	} {
		wantStatus(t, v.as(t, rw, c.method, c.target, c.body), c.status)
	}

	// Anything else is 403, and changes nothing.
	for _, c := range []struct {
		token, method, target, body string
	}{
		{rw, http.MethodGet, fmt.Sprintf("/v1/users/%d/feed", other), ""},
		{rw, http.MethodHead, fmt.Sprintf("/v1/users/%d/feed", other), ""},
		{rw, http.MethodGet, fmt.Sprintf("/v1/users/%d/following", other), ""},
		{rw, http.MethodGet, fmt.Sprintf("/v1/users/%d/feed/marker", other), ""},
		{rw, http.MethodGet, fmt.Sprintf("/v1/users/%d/export", other), ""},
		{rw, http.MethodGet, fmt.Sprintf("/v1/users/%d/posts/%s/delivery", author, theirsID(t, theirs)), ""},
		{rw, http.MethodPost, fmt.Sprintf("/v1/users/%d/posts", other), `{}`},
		{rw, http.MethodDelete, fmt.Sprintf("/v1/users/%d/posts/%s", author, theirsID(t, theirs)), ""},
		{rw, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", other, me), ""},
		{rw, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d", other, author), ""},
		{rw, http.MethodPut, fmt.Sprintf("/v1/users/%d/muted/%d", other, me), ""},
		{rw, http.MethodPut, fmt.Sprintf("/v1/users/%d/hidden_from/%d", other, me), ""},
		{rw, http.MethodPost, fmt.Sprintf("/v1/users/%d/streams", other), `{}`},
		{rw, http.MethodPost, "/v1/follows", fmt.Sprintf(`{"follows":[{"user_id":"%d","author_id":"%d"},{"user_id":"%d","author_id":"%d"}]}`, me, author, other, me)},
		// Moves are the service's.
		{rw, http.MethodPost, fmt.Sprintf("/v1/users/%d/move", me), fmt.Sprintf(`{"to":"%d"}`, other)},
		{rw, http.MethodGet, fmt.Sprintf("/v1/users/%d/move", me), ""},
		// Writes without feed:write, reads without feed:read.
		{ro, http.MethodPost, fmt.Sprintf("/v1/users/%d/posts", me), `{}`},
		{ro, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", me, other), ""},
		{ro, http.MethodPut, fmt.Sprintf("/v1/users/%d/feed/marker", me), `{"cursor":"AWYAAAGJRZS9OAAAAAAAAIBT"}`},
		{ro, http.MethodPost, "/v1/follows", fmt.Sprintf(`{"follows":[{"user_id":"%d","author_id":"%d"}]}`, me, other)},
		{wo, http.MethodGet, fmt.Sprintf("/v1/users/%d/feed", me), ""},
		{wo, http.MethodGet, fmt.Sprintf("/v1/users/%d/posts", author), ""},
		{none, http.MethodGet, fmt.Sprintf("/v1/users/%d/feed", me), ""},
		{none, http.MethodPost, fmt.Sprintf("/v1/users/%d/posts", me), `{}`},
	} {
		r := v.as(t, c.token, c.method, c.target, c.body)
		if c.method == http.MethodHead {
			wantStatus(t, r, http.StatusForbidden)
		} else {
			wantError(t, r, http.StatusForbidden, "forbidden")
		}
	}
	if got := v.posts(t, other); len(got) != 0 {
		t.Errorf("other has posts %+v", got)
	}
	if got := v.posts(t, author); len(got) != 1 {
		t.Errorf("author's post deleted: %+v", got)
	}
	if got := v.following(t, other); len(got) != 1 || got[0].AuthorID != u(author) {
		t.Errorf("other follows %+v, want only the author", got)
	}
	if got := ids(v.followers(t, me), func(f follower) string { return f.UserID }); len(got) != 0 {
		t.Errorf("me followed by %v after a refused batch", got)
	}
	if got := ids(v.following(t, me), func(f following) string { return f.AuthorID }); !slices.Equal(got, []string{u(other), u(author)}) && !slices.Equal(got, []string{u(author), u(other)}) {
		t.Errorf("me follows %v", got)
	}

	// The feed stream takes a user token as ?access_token=, for its user
	// only.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Cleanup(v.svc.CloseStreams)
	if _, err := client.New(v.srv.URL, rw, v.srv.Client()).StreamFeed(ctx, me, client.StreamRequest{TokenInQuery: true}); err != nil {
		t.Errorf("stream with a user token in the query: %v", err)
	}
	_, err := client.New(v.srv.URL, rw, v.srv.Client()).StreamFeed(ctx, other, client.StreamRequest{TokenInQuery: true})
	if ce, ok := err.(*client.Error); !ok || ce.Status != http.StatusForbidden || ce.Code != "forbidden" {
		t.Errorf("stream of another user: %v, want 403 forbidden", err)
	}
	// The client's WithToken swaps the token on the same connections.
	svc := client.New(v.srv.URL, service, v.srv.Client())
	if _, err := svc.WithToken(ro).Feed(ctx, me, 10, ""); err != nil {
		t.Errorf("feed through WithToken: %v", err)
	}
	if _, err := svc.Feed(ctx, other, 10, ""); err != nil {
		t.Errorf("feed of another user with the service token: %v", err)
	}
}

func theirsID(t *testing.T, r resp) string {
	t.Helper()
	var p post
	r.decode(t, &p)
	return p.ContentID
}

// TestUserTokenKeysReload rewrites the key set without the Ed25519 key:
// after Reload its tokens are 401, the HS256 key's still open; a file that
// does not load leaves the set in use.
func TestUserTokenKeysReload(t *testing.T) {
	t.Parallel()
	k, keys := newUserKeys(t)
	v := setup(t, envOpts{keys: keys})
	user := v.id()
	feed := "/v1/users/" + u(user) + "/feed"
	ed, hs := k.edToken(t, user, both), k.hsToken(t, user, both)
	wantStatus(t, v.as(t, ed, http.MethodGet, feed, ""), http.StatusOK)

	k.write(t, "hs")
	if n, err := keys.Reload(); err != nil || n != 1 {
		t.Fatalf("Reload = %d, %v; want 1 key", n, err)
	}
	wantError(t, v.as(t, ed, http.MethodGet, feed, ""), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, v.as(t, hs, http.MethodGet, feed, ""), http.StatusOK)

	for name, body := range map[string]string{
		"not JSON":       "{",
		"no keys":        `{"keys":[]}`,
		"no kid":         `{"keys":[{"kty":"oct","k":"` + b64(strings.Repeat("k", 32)) + `"}]}`,
		"short secret":   `{"keys":[{"kty":"oct","kid":"a","k":"` + b64("short") + `"}]}`,
		"wrong alg":      `{"keys":[{"kty":"oct","kid":"a","alg":"HS512","k":"` + b64(strings.Repeat("k", 32)) + `"}]}`,
		"two of a kid":   `{"keys":[{"kty":"oct","kid":"a","k":"` + b64(strings.Repeat("k", 32)) + `"},{"kty":"oct","kid":"a","k":"` + b64(strings.Repeat("j", 32)) + `"}]}`,
		"for encryption": `{"keys":[{"kty":"oct","kid":"a","use":"enc","k":"` + b64(strings.Repeat("k", 32)) + `"}]}`,
		"EC key":         `{"keys":[{"kty":"EC","kid":"a","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`,
	} {
		if err := os.WriteFile(k.path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := keys.Reload(); err == nil {
			t.Errorf("%s: Reload took %s", name, body)
		}
	}
	if err := os.Remove(k.path); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Reload(); err == nil {
		t.Error("Reload of a missing file: no error")
	}
	wantStatus(t, v.as(t, hs, http.MethodGet, feed, ""), http.StatusOK)
	wantError(t, v.as(t, ed, http.MethodGet, feed, ""), http.StatusUnauthorized, "unauthorized")
	if _, err := httpapi.LoadUserTokenKeys(k.path); err == nil {
		t.Error("LoadUserTokenKeys of a missing file: no error")
	}
}

// TestUserTokenWithoutDatabase answers bad and forbidden tokens from a
// server whose database does not answer: neither costs a round trip.
func TestUserTokenWithoutDatabase(t *testing.T) {
	t.Parallel()
	k, keys := newUserKeys(t)
	v := setup(t, envOpts{store: unreachableStore(t), keys: keys})
	c := claims(1, both)
	c["exp"] = time.Now().Add(-time.Hour).Unix()
	wantError(t, v.as(t, sign(t, k.hs, jose.HS256, "hs", c), http.MethodGet, "/v1/users/1/feed", ""), http.StatusUnauthorized, "unauthorized")
	wantError(t, v.as(t, "abc", http.MethodGet, "/v1/users/1/feed", ""), http.StatusUnauthorized, "unauthorized")
	wantError(t, v.as(t, k.hsToken(t, 1, both), http.MethodGet, "/v1/users/2/feed", ""), http.StatusForbidden, "forbidden")
	wantError(t, v.as(t, k.hsToken(t, 1, httpapi.ScopeRead), http.MethodPost, "/v1/users/1/posts", `{}`), http.StatusForbidden, "forbidden")
	wantError(t, v.as(t, k.hsToken(t, 1, both), http.MethodGet, "/v1/users/1/feed", ""), http.StatusServiceUnavailable, "unavailable")
}

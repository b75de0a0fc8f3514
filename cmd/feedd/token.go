package main

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/feedhq/feed/httpapi"
)

const tokenUsage = `usage: feedd token --sub USER [--scope SCOPES] [--ttl 1h] [--key FILE] [--kid K]

Prints a user token: a JWT that acts as user USER only, within SCOPES
(space-separated: feed:read, feed:write), until --ttl from now. It is
signed with the key K of FILE, a JSON Web Key Set or a single JWK: an
"oct" key (HS256) or an Ed25519 "OKP" key with its private part (EdDSA).
The service verifies it with the same kid in its --jwks-file.`

// tokenConfig is the token command's settings.
type tokenConfig struct {
	Sub   uint64
	Scope string
	TTL   time.Duration
	Key   string
	KID   string
}

func (c *tokenConfig) parse(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("feedd token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, tokenUsage)
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	fs.Uint64Var(&c.Sub, "sub", 0, "the user id the token acts as (required)")
	fs.StringVar(&c.Scope, "scope", httpapi.ScopeRead, "space-separated scopes: "+httpapi.ScopeRead+", "+httpapi.ScopeWrite)
	fs.DurationVar(&c.TTL, "ttl", time.Hour, "how long the token is valid (its exp)")
	fs.StringVar(&c.Key, "key", os.Getenv(envName("jwks-file")), "JWKS or JWK file holding the signing key (default: FEED_JWKS_FILE)")
	fs.StringVar(&c.KID, "kid", "", "the kid of the signing key (needed when the file holds several)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	case c.Sub == 0:
		return errors.New("token: --sub USER is required, a user id in 1..18446744073709551615")
	case c.TTL <= 0:
		return errors.New("token: --ttl must be > 0")
	case c.Key == "":
		return errors.New("token: --key FILE is required (or FEED_JWKS_FILE)")
	}
	for _, s := range strings.Fields(c.Scope) {
		if s != httpapi.ScopeRead && s != httpapi.ScopeWrite {
			return fmt.Errorf("token: unknown scope %q; want %s or %s", s, httpapi.ScopeRead, httpapi.ScopeWrite)
		}
	}
	return nil
}

// runToken writes a token signed with the configured key, valid from now.
func runToken(c tokenConfig, now time.Time, w io.Writer) error {
	key, alg, err := signingKey(c.Key, c.KID)
	if err != nil {
		return err
	}
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", key.KeyID)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key.Key}, opts)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	claims := struct {
		jwt.Claims
		Scope string `json:"scope"`
	}{jwt.Claims{
		Subject:  fmt.Sprint(c.Sub),
		IssuedAt: jwt.NewNumericDate(now),
		Expiry:   jwt.NewNumericDate(now.Add(c.TTL)),
	}, strings.Join(strings.Fields(c.Scope), " ")}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	_, err = fmt.Fprintln(w, tok)
	return err
}

// signingKey reads the key kid ("": the only one) of a JWKS or JWK file and
// the algorithm it signs with.
func signingKey(path, kid string) (jose.JSONWebKey, jose.SignatureAlgorithm, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return jose.JSONWebKey{}, "", fmt.Errorf("token: %w", err)
	}
	var set jose.JSONWebKeySet
	if json.Unmarshal(b, &set) != nil || len(set.Keys) == 0 {
		var one jose.JSONWebKey
		if err := json.Unmarshal(b, &one); err != nil {
			return jose.JSONWebKey{}, "", fmt.Errorf("token: %s is neither a JSON Web Key Set nor a JSON Web Key: %w", path, err)
		}
		set.Keys = []jose.JSONWebKey{one}
	}
	keys := set.Keys
	if kid != "" {
		keys = set.Key(kid)
	}
	switch {
	case len(keys) == 0:
		return jose.JSONWebKey{}, "", fmt.Errorf("token: %s has no key with kid %q", path, kid)
	case len(keys) > 1:
		return jose.JSONWebKey{}, "", fmt.Errorf("token: %s holds %d keys: name one with --kid", path, len(keys))
	case keys[0].KeyID == "":
		return jose.JSONWebKey{}, "", fmt.Errorf("token: the key in %s has no kid, which the service needs to find it", path)
	}
	key := keys[0]
	switch key.Key.(type) {
	case []byte:
		return key, jose.HS256, nil
	case ed25519.PrivateKey:
		return key, jose.EdDSA, nil
	case ed25519.PublicKey:
		return jose.JSONWebKey{}, "", fmt.Errorf("token: key %q is the public half of an Ed25519 key: signing needs the private part (d)", key.KeyID)
	}
	return jose.JSONWebKey{}, "", fmt.Errorf("token: key %q is %T; want oct (HS256) or OKP Ed25519 (EdDSA)", key.KeyID, key.Key)
}

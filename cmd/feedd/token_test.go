package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store/storetest"
)

// keyFile writes a JWKS file of the keys named: "hs", an HS256 secret;
// "ed", an Ed25519 key with its private part; "ed-public", its public half
// only. The keys are the same at each call with the same secrets.
type keyFile struct {
	path string
	hs   []byte
	ed   ed25519.PrivateKey
}

func newKeyFile(t *testing.T) *keyFile {
	t.Helper()
	k := &keyFile{path: filepath.Join(t.TempDir(), "jwks.json"), hs: make([]byte, 32)}
	_, _ = rand.Read(k.hs)
	_, k.ed, _ = ed25519.GenerateKey(rand.Reader)
	return k
}

func (k *keyFile) write(t *testing.T, kids ...string) {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, kid := range kids {
		switch kid {
		case "hs":
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.hs, KeyID: kid})
		case "ed":
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.ed, KeyID: kid})
		case "ed-public":
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.ed.Public(), KeyID: kid})
		}
	}
	b, err := json.Marshal(set)
	must(t, err)
	must(t, os.WriteFile(k.path, b, 0o600))
}

// mintToken runs `feedd token` in-process with args and returns what it
// printed.
func mintToken(t *testing.T, args ...string) (string, error) {
	t.Helper()
	m := NewMain()
	var out, stderr bytes.Buffer
	m.Stdout, m.Stderr = &out, &stderr
	if err := m.ParseFlags(append([]string{"token"}, args...)); err != nil {
		return "", fmt.Errorf("%w (stderr %s)", err, stderr.String())
	}
	err := m.Run(context.Background())
	return out.String(), err
}

func mustMint(t *testing.T, args ...string) string {
	t.Helper()
	out, err := mintToken(t, args...)
	if err != nil {
		t.Fatalf("feedd token %q: %v", args, err)
	}
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("feedd token printed %q, want one line", out)
	}
	return strings.TrimSuffix(out, "\n")
}

// TestTokenCommand mints user tokens with `feedd token` and uses them on a
// feedd serving the same key set: each acts as its user within its scope,
// for its TTL. The command refuses what would mint a token the service
// cannot verify.
func TestTokenCommand(t *testing.T) {
	clearFeedEnv(t) // and not parallel: it sets FEED_JWKS_FILE
	k := newKeyFile(t)
	k.write(t, "hs", "ed")
	m, _ := startMain(t, serveArgs(storetest.DatabaseDSN(t), "--api-token", "svc-tok", "--jwks-file", k.path)...)
	ctx := context.Background()

	reader := mustMint(t, "--sub", "100", "--scope", "feed:read", "--ttl", "1h", "--key", k.path, "--kid", "hs")
	writer := mustMint(t, "--sub", "100", "--scope", "feed:read feed:write", "--ttl", "10m", "--key", k.path, "--kid", "ed")
	tok, err := jwt.ParseSigned(writer, []jose.SignatureAlgorithm{jose.EdDSA})
	must(t, err)
	var c struct {
		jwt.Claims
		Scope string `json:"scope"`
	}
	must(t, tok.Claims(k.ed.Public(), &c))
	if tok.Headers[0].KeyID != "ed" || c.Subject != "100" || c.Scope != "feed:read feed:write" ||
		c.Expiry.Time().Sub(c.IssuedAt.Time()) != 10*time.Minute || time.Since(c.IssuedAt.Time()) > time.Minute {
		t.Errorf("token: kid %q, claims %+v", tok.Headers[0].KeyID, c)
	}

	w := newClient(t, m, writer)
	if _, _, err := w.Publish(ctx, 100, client.PublishRequest{}); err != nil {
		t.Fatalf("publish with a feed:write token: %v", err)
	}
	_, _, err = w.Publish(ctx, 200, client.PublishRequest{})
	wantAPIError(t, err, http.StatusForbidden, "forbidden")
	r := w.WithToken(reader)
	if p, err := r.Posts(ctx, 100, 10, ""); err != nil || len(p.Items) != 1 {
		t.Fatalf("posts with a feed:read token: %+v, %v", p, err)
	}
	_, _, err = r.Publish(ctx, 100, client.PublishRequest{})
	wantAPIError(t, err, http.StatusForbidden, "forbidden")
	_, err = r.Feed(ctx, 200, 10, "")
	wantAPIError(t, err, http.StatusForbidden, "forbidden")

	// The key defaults to FEED_JWKS_FILE; a file of one key needs no kid.
	one := filepath.Join(t.TempDir(), "one.json")
	b, err := json.Marshal(jose.JSONWebKey{Key: k.hs, KeyID: "hs"})
	must(t, err)
	must(t, os.WriteFile(one, b, 0o600))
	t.Setenv("FEED_JWKS_FILE", one)
	if _, err := newClient(t, m, mustMint(t, "--sub", "100")).Feed(ctx, 100, 10, ""); err != nil {
		t.Fatalf("a token of a single-key file: %v", err)
	}

	k2 := newKeyFile(t)
	k2.write(t, "hs", "ed-public")
	for name, args := range map[string][]string{
		"no sub":          {"--key", k.path, "--kid", "hs"},
		"sub zero":        {"--sub", "0", "--key", k.path, "--kid", "hs"},
		"unknown scope":   {"--sub", "1", "--scope", "feed:admin", "--key", k.path, "--kid", "hs"},
		"ttl zero":        {"--sub", "1", "--ttl", "0s", "--key", k.path, "--kid", "hs"},
		"unknown kid":     {"--sub", "1", "--key", k.path, "--kid", "nope"},
		"several keys":    {"--sub", "1", "--key", k.path},
		"public key only": {"--sub", "1", "--key", k2.path, "--kid", "ed-public"},
		"no such file":    {"--sub", "1", "--key", filepath.Join(t.TempDir(), "none.json")},
		"stray argument":  {"--sub", "1", "--key", k.path, "--kid", "hs", "extra"},
	} {
		if out, err := mintToken(t, args...); err == nil || out != "" {
			t.Errorf("%s: printed %q, error %v; want an error and nothing printed", name, out, err)
		}
	}
}

// TestTokenKeysReloadOnSIGHUP rotates the key set of a running feedd: after
// SIGHUP a token of a key removed from the file is 401 and one of a key
// added opens; a file that does not load leaves the set in use.
func TestTokenKeysReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	bin := feeddBinary(t)
	k := newKeyFile(t)
	k.write(t, "hs")
	p := startFeedd(t, bin, "feedd", "serve", "--mysql-dsn", storetest.DatabaseDSN(t),
		"--http-addr", "127.0.0.1:0", "--drain-delay", "0s", "--jwks-file", k.path)
	var base string
	wait.For(t, "the listen address in the log", func() error {
		out := p.out.String()
		m := regexp.MustCompile(`msg="feedd: listening" addr=(\S+)`).FindStringSubmatch(out)
		if m == nil {
			if p.exited() {
				t.Fatalf("feedd exited: %v", p.err)
			}
			return fmt.Errorf("the log:\n%s", out)
		}
		base = "http://" + m[1]
		return nil
	})
	ctx := context.Background()
	old := client.New(base, mustMint(t, "--sub", "7", "--key", k.path, "--kid", "hs"), &http.Client{Timeout: 10 * time.Second})
	if _, err := old.Feed(ctx, 7, 10, ""); err != nil {
		t.Fatalf("feed with the first key's token: %v", err)
	}

	k.write(t, "ed")
	next := old.WithToken(mustMint(t, "--sub", "7", "--key", k.path, "--kid", "ed"))
	_, err := next.Feed(ctx, 7, 10, "")
	wantAPIError(t, err, http.StatusUnauthorized, "unauthorized")
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	wait.For(t, "the new key to open and the old one to stop", func() error {
		if _, err := next.Feed(ctx, 7, 10, ""); err != nil {
			return fmt.Errorf("new key: %w", err)
		}
		if _, err := old.Feed(ctx, 7, 10, ""); err == nil {
			return fmt.Errorf("the removed key still opens")
		}
		return nil
	})
	_, err = old.Feed(ctx, 7, 10, "")
	wantAPIError(t, err, http.StatusUnauthorized, "unauthorized")

	must(t, os.WriteFile(k.path, []byte("{"), 0o600))
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	wait.For(t, "the log to say the file did not load", func() error {
		if !strings.Contains(p.out.String(), "user token keys not reloaded") {
			return fmt.Errorf("the log:\n%s", p.out.String())
		}
		return nil
	})
	if _, err := next.Feed(ctx, 7, 10, ""); err != nil {
		t.Fatalf("after a bad file, the set in use: %v", err)
	}
	if p.exited() {
		t.Fatalf("feedd exited: %v", p.err)
	}
}

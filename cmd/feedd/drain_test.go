package main

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store/storetest"
)

// TestDrain sends SIGTERM to a serving feedd: /readyz answers 503 at once
// while feed requests are still answered for the drain delay, then the
// process stops cleanly with exit status 0 and says so in its log.
func TestDrain(t *testing.T) {
	t.Parallel()
	bin := feeddBinary(t)
	p := startFeedd(t, bin, "feedd", "serve", "--mysql-dsn", storetest.DatabaseDSN(t),
		"--http-addr", "127.0.0.1:0", "--drain-delay", "3s")
	p.waitStarted(t)
	base := p.listenAddr(t)
	c := client.New(base, "", &http.Client{Timeout: 10 * time.Second})
	ctx := t.Context()
	must(t, c.Follow(ctx, 100, 200))
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz before the signal: %d %s", code, body)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "readyz 503 draining", func() error {
		code, body := httpGet(t, base+"/readyz")
		if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, `{"status":"draining"`) {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})
	if _, err := c.Feed(ctx, 100, 10, ""); err != nil {
		t.Fatalf("a feed request while draining: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("feedd did not stop within 30 s of SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("feedd exited with %v, want status 0", p.err)
	}
	out := p.out.String()
	for _, line := range []string{`msg="feedd: draining"`, `msg="feedd: stopped"`} {
		if n := strings.Count(out, line); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", line, n, out)
		}
	}
}

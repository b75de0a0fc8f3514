package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// feeddProc is `feedd serve` run as a process of its own on the loopback
// interface, so that the load generator's CPU and garbage collection are
// not charged to the server.
type feeddProc struct {
	*child
	url string // http://127.0.0.1:port
}

// feeddBinary builds ./cmd/feedd once per run into the run's temporary
// directory and returns its path.
func (b *bench) feeddBinary() (string, error) {
	if b.feeddBin != "" {
		return b.feeddBin, nil
	}
	dir, err := b.tempDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "feedd")
	b.log.Info("feedbench: building feedd", "path", bin)
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/feedhq/feed/cmd/feedd").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build feedd: %w\n%s", err, out)
	}
	b.feeddBin = bin
	return bin, nil
}

// tempDir is the run's temporary directory, removed when the run ends.
func (b *bench) tempDir() (string, error) {
	if b.tmp == "" {
		dir, err := os.MkdirTemp("", "feedbench-")
		if err != nil {
			return "", err
		}
		b.tmp = dir
	}
	return b.tmp, nil
}

// startFeedd starts `feedd serve` on the database dsn names (with its
// name) with workers on, on a free loopback port, with flags added to the
// command line, and waits until /readyz answers 200.
func (b *bench) startFeedd(ctx context.Context, dsn string, flags ...string) (*feeddProc, error) {
	bin, err := b.feeddBinary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"serve", "--mysql-dsn", dsn, "--http-addr", addr, "--workers=true",
		"--drain-delay", "0s", "--log-level", "warn", "--inbox-engine", b.opt.InboxEngine}, flags...)
	c, _, err := startChild("feedd", bin, args, b.opt.ServerProcs, false)
	if err != nil {
		return nil, err
	}
	f := &feeddProc{child: c, url: "http://" + addr}
	if err := waitReady(ctx, f.url, c); err != nil {
		_ = c.stop()
		return nil, err
	}
	b.log.Info("feedbench: feedd started", "addr", addr, "pid", c.pid(), "flags", strings.Join(flags, " "))
	return f, nil
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls url's /readyz until it answers 200, the child ends or two
// minutes pass.
func waitReady(ctx context.Context, url string, c *child) error {
	deadline := time.Now().Add(2 * time.Minute)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		switch {
		case c.exited():
			return fmt.Errorf("%s exited before it was ready: %w", c.name, c.exitErr())
		case time.Now().After(deadline):
			return fmt.Errorf("%s not ready after 2 minutes (last: %v)\n%s", c.name, err, c.out.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// metrics scrapes the process's /metrics.
func (f *feeddProc) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape feedd metrics: %w", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse feedd metrics: %w", err)
	}
	return mfs, nil
}

// serverHist is a histogram series of the server's, as cumulative counts
// at each upper bound (the last is +Inf).
type serverHist struct {
	bounds []float64 // seconds
	cum    []uint64
}

// routeHist returns the histogram family name's series for route and
// method in mfs.
func routeHist(mfs map[string]*dto.MetricFamily, name, route, method string) serverHist {
	var h serverHist
	mf := mfs[name]
	if mf == nil {
		return h
	}
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["route"] != route || labels["method"] != method {
			continue
		}
		for _, bk := range m.GetHistogram().GetBucket() {
			h.bounds = append(h.bounds, bk.GetUpperBound())
			h.cum = append(h.cum, bk.GetCumulativeCount())
		}
		h.bounds = append(h.bounds, math.Inf(1))
		h.cum = append(h.cum, m.GetHistogram().GetSampleCount())
	}
	return h
}

// since is the histogram of the observations after earlier's.
func (h serverHist) since(earlier serverHist) serverHist {
	d := serverHist{bounds: h.bounds, cum: make([]uint64, len(h.cum))}
	for i := range h.cum {
		d.cum[i] = h.cum[i]
		if i < len(earlier.cum) {
			d.cum[i] -= earlier.cum[i]
		}
	}
	return d
}

// count is the number of observations.
func (h serverHist) count() uint64 {
	if len(h.cum) == 0 {
		return 0
	}
	return h.cum[len(h.cum)-1]
}

// quantile returns the bucket the q-quantile falls in: lo < value ≤ hi
// (seconds; hi is +Inf past the last bound).
func (h serverHist) quantile(q float64) (lo, hi float64) {
	n := h.count()
	if n == 0 {
		return 0, 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	for i, c := range h.cum {
		if c >= rank {
			if i > 0 {
				lo = h.bounds[i-1]
			}
			return lo, h.bounds[i]
		}
	}
	return h.bounds[len(h.bounds)-1], math.Inf(1)
}

// dbServerPID finds the process of the database server db is connected to,
// by its pid file; 0 when it is not on this machine (or says no pid file).
func dbServerPID(ctx context.Context, db *sqlx.DB) int {
	var path string
	if err := db.QueryRowContext(ctx, `SELECT @@pid_file`).Scan(&path); err != nil {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	if _, comm, err := pidCPU(pid); err != nil || !databaseServers[comm] {
		return 0
	}
	return pid
}

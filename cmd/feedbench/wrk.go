package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedhq/feed/store/storeload"
)

// wrkOptions are phase W's settings.
type wrkOptions struct {
	WrkDuration time.Duration // one slice of one server
	WrkSlices   int
	RedisAddr   string
	ServerProcs int // GOMAXPROCS of feedd and the Redis anchor, 0 for Go's default
}

func (o *wrkOptions) flags(fs *flag.FlagSet) {
	fs.DurationVar(&o.WrkDuration, "wrk-duration", 10*time.Second, "W: length of one wrk slice")
	fs.IntVar(&o.WrkSlices, "wrk-slices", 3, "W: slices per server, taking turns")
	fs.StringVar(&o.RedisAddr, "redis-addr", "127.0.0.1:6379", "O, W: the Redis server of the Redis anchor")
	fs.IntVar(&o.ServerProcs, "server-procs", 0, "O, W: GOMAXPROCS of the feedd and Redis anchor processes (0: Go's default, the machine's CPUs)")
}

func (o wrkOptions) validate() error {
	if o.ServerProcs < 0 {
		return fmt.Errorf("-server-procs must be >= 0")
	}
	if o.WrkDuration < time.Second || o.WrkSlices < 1 {
		return fmt.Errorf("-wrk-duration must be >= 1s and -wrk-slices >= 1")
	}
	return nil
}

// wrk's settings in phase W: the issue's, 2 threads and 16 connections.
const (
	wrkThreads     = 2
	wrkConnections = 16
	// targetPageCost is feedd's first pages/s over the Redis anchor's.
	targetPageCost = 0.6
)

// wrkRun is what one wrk run measured.
type wrkRun struct {
	Requests int64
	Seconds  float64
	P50, P99 time.Duration
	Errors   int64 // non-2xx responses and socket errors
}

// wrkSide is one server's slices in phase W.
type wrkSide struct {
	Name      string
	Runs      []wrkRun
	ServerCPU float64 // seconds, over the runs
	StoreCPU  float64 // seconds; 0 when the store's process is not found
}

func (s wrkSide) requests() int64 {
	var n int64
	for _, r := range s.Runs {
		n += r.Requests
	}
	return n
}

func (s wrkSide) rate() float64 {
	var t float64
	for _, r := range s.Runs {
		t += r.Seconds
	}
	if t == 0 {
		return 0
	}
	return float64(s.requests()) / t
}

// meanOf is the mean over the runs of a latency.
func (s wrkSide) meanOf(f func(wrkRun) time.Duration) time.Duration {
	var sum time.Duration
	for _, r := range s.Runs {
		sum += f(r)
	}
	return sum / time.Duration(max(1, len(s.Runs)))
}

func (s wrkSide) errors() int64 {
	var n int64
	for _, r := range s.Runs {
		n += r.Errors
	}
	return n
}

// perRequest is CPU seconds per request in µs.
func (s wrkSide) perRequest(cpu float64) float64 {
	if n := s.requests(); n > 0 {
		return cpu * 1e6 / float64(n)
	}
	return 0
}

// wrkResult is phase W.
type wrkResult struct {
	Users, Entries int
	Version        string // wrk's
	Sides          [2]wrkSide
}

// pageCost runs phase W: wrk against feedd's first page and against the
// Redis anchor holding the same feeds, in interleaved slices.
func (b *bench) pageCost(ctx context.Context) error {
	bin, err := exec.LookPath("wrk")
	if err != nil {
		return fmt.Errorf("phase W needs the load generator wrk on PATH (Debian: apt-get install wrk): %w", err)
	}
	users := b.data.users
	now := time.Now()
	for a := range inboxAuthors {
		if err := storeload.Followers(ctx, b.st, inboxAuthorBase+uint64(a), users, b.data.t0, false); err != nil {
			return err
		}
	}
	if err := storeload.Activity(ctx, b.st, users, now.UnixMilli(), now.Add(-24*time.Hour).UnixMilli(), nil); err != nil {
		return err
	}
	cfg := *b.server
	cfg.DBName = b.rep.Database
	f, err := b.startFeedd(ctx, cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer func() {
		if err := f.stop(); err != nil {
			b.log.Warn("feedbench: feedd", "err", err)
		}
	}()
	a, err := b.startAnchor(ctx, "wrk")
	if err != nil {
		return err
	}
	defer a.close()
	if err := b.loadAnchor(ctx, a); err != nil {
		return err
	}
	script, err := b.wrkScript()
	if err != nil {
		return err
	}
	res := &wrkResult{Users: len(users), Entries: b.opt.InboxRows, Version: wrkVersion(bin)}
	b.rep.PageCost = res
	type side struct {
		url      string
		server   *child
		storePID int
		warm     bool
	}
	sides := [2]side{{url: f.url, server: f.child, storePID: dbServerPID(ctx, b.db)}, {url: "http://" + a.addr, server: a.child, storePID: a.redisPID}}
	res.Sides[0].Name, res.Sides[1].Name = "feedd", "Redis anchor"
	for slice := range b.opt.WrkSlices {
		for i := range sides {
			sd := &sides[i]
			if !sd.warm {
				// Unmeasured: caches, pools and connections warm up.
				if _, err := runWrk(ctx, bin, script, sd.url, min(b.opt.WrkDuration, 2*time.Second)); err != nil {
					return err
				}
				sd.warm = true
			}
			cpu0, store0 := sd.server.cpu(), storeCPU(sd.storePID)
			run, err := runWrk(ctx, bin, script, sd.url, b.opt.WrkDuration)
			if err != nil {
				return err
			}
			s := &res.Sides[i]
			s.ServerCPU += sd.server.cpu() - cpu0
			s.StoreCPU += storeCPU(sd.storePID) - store0
			s.Runs = append(s.Runs, run)
			b.log.Info("feedbench: W slice", "server", s.Name, "slice", slice+1, "requests_per_second", int(float64(run.Requests)/run.Seconds),
				"p50_ms", ms(run.P50), "p99_ms", ms(run.P99), "errors", run.Errors)
		}
	}
	return nil
}

// loadAnchor writes the loaded inboxes' rows into the anchor's feeds: the
// same users and entries feedd serves.
func (b *bench) loadAnchor(ctx context.Context, a *anchor) error {
	users, per := b.data.users, b.opt.InboxRows
	const usersPerPipe = 50
	return spread(4, (len(users)+usersPerPipe-1)/usersPerPipe, func(k int) error {
		pipe := a.rdb.Pipeline()
		for i := k * usersPerPipe; i < min((k+1)*usersPerPipe, len(users)); i++ {
			zs := make([]redis.Z, per)
			for r := range per {
				p := b.data.loadedPost(r, (i+7*r)%inboxAuthors, per)
				zs[r] = redis.Z{Score: float64(p.PublishTime), Member: anchorMember(p)}
			}
			pipe.ZAdd(ctx, a.keys.feed(users[i]), zs...)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// wrkScript writes the Lua script that spreads wrk's requests over the
// loaded users' first pages.
func (b *bench) wrkScript() (string, error) {
	dir, err := b.tempDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "pages.lua")
	script := fmt.Sprintf(`-- first pages of random loaded users
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end
function init(args)
  math.randomseed(%d + id * 7919)
end
function request()
  local u = %d + math.random(0, %d) * %d
  return wrk.format("GET", "/v1/users/" .. u .. "/feed?limit=%d")
end
`, b.opt.Seed, userBase, len(b.data.users)-1, userStep, pageLimit)
	return path, os.WriteFile(path, []byte(script), 0o644)
}

// runWrk runs wrk for d against url's root with script, and reads its
// report.
func runWrk(ctx context.Context, bin, script, url string, d time.Duration) (wrkRun, error) {
	cmd := exec.CommandContext(ctx, bin, "-t", strconv.Itoa(wrkThreads), "-c", strconv.Itoa(wrkConnections),
		"-d", strconv.Itoa(int(d.Seconds()))+"s", "--latency", "-s", script, url)
	cmd.Env = childEnv()
	out, err := cmd.Output()
	if err != nil {
		return wrkRun{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	return parseWrk(string(out))
}

// parseWrk reads wrk's --latency report: the requests and seconds of the
// summary line, the 50 % and 99 % latencies, and errors.
func parseWrk(out string) (wrkRun, error) {
	var r wrkRun
	var haveSummary bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 5 && f[1] == "requests" && f[2] == "in":
			n, err1 := strconv.ParseInt(f[0], 10, 64)
			d, err2 := parseWrkDuration(strings.TrimSuffix(f[3], ","))
			if err1 != nil || err2 != nil {
				return r, fmt.Errorf("wrk: bad summary line %q", sc.Text())
			}
			r.Requests, r.Seconds, haveSummary = n, d.Seconds(), true
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			d, err := parseWrkDuration(f[1])
			if err != nil {
				return r, fmt.Errorf("wrk: bad latency line %q", sc.Text())
			}
			if f[0] == "50%" {
				r.P50 = d
			} else {
				r.P99 = d
			}
		case len(f) >= 5 && f[0] == "Non-2xx":
			n, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
			r.Errors += n
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			for i := 2; i+1 < len(f); i += 2 {
				n, _ := strconv.ParseInt(strings.TrimSuffix(f[i+1], ","), 10, 64)
				r.Errors += n
			}
		}
	}
	if !haveSummary || r.P50 == 0 {
		return r, fmt.Errorf("wrk: no summary or latency distribution in %q", out)
	}
	return r, nil
}

// parseWrkDuration reads wrk's durations: 812.00us, 1.23ms, 10.01s, 1.00m.
func parseWrkDuration(s string) (time.Duration, error) {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(f * float64(u.unit)), nil
		}
	}
	return 0, fmt.Errorf("bad wrk duration %q", s)
}

// wrkVersion is `wrk -v`'s version, as "wrk 4.1.0".
func wrkVersion(bin string) string {
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	line, _, _ := strings.Cut(string(out), " [")
	return strings.TrimSpace(line)
}

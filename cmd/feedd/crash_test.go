package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/sqlconn"
	"github.com/feedhq/feed/store/storeload"
	"github.com/feedhq/feed/store/storetest"
)

// The crash tests run the real binary as a subprocess and SIGKILL it at
// random instants while it works. `make crash` sets FEED_CRASH_FULL=1 for
// the full sizes (README.md, `make crash`); FEED_CRASH_SEED replays the kill
// times of a run.

// build is the feedd binary, built once per test binary.
var build struct {
	once sync.Once
	dir  string
	path string
	out  []byte
	err  error
}

// feeddBinary builds ./cmd/feedd into a temporary directory (once).
func feeddBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		var root string
		if root, build.err = storetest.ModuleRoot(); build.err != nil {
			return
		}
		if build.dir, build.err = os.MkdirTemp("", "feedd-crash-"); build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "feedd")
		// go test puts the bin directory of its own toolchain first on PATH.
		cmd := exec.Command("go", "build", "-o", build.path, "./cmd/feedd")
		cmd.Dir = root
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("build feedd: %v\n%s", build.err, build.out)
	}
	return build.path
}

// removeBuild deletes the built binary (TestMain calls it).
func removeBuild() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// childEnv is the environment of feedd subprocesses: the test's without any
// FEED_ setting, so only the flags configure them, but for the inbox engine
// of the tests' stores (storetest.EnvEngine).
func childEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "FEED_") })
	return append(env, "FEED_INBOX_ENGINE="+os.Getenv(storetest.EnvEngine))
}

// proc is a feedd subprocess.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startFeedd starts the binary; when the test ends the process is killed if
// it still runs, and its output goes to the test log if the test failed.
func startFeedd(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s (%v) output:\n%s", p.name, p.err, tail(p.out.String(), 8<<10))
		}
	})
	return p
}

// listening is the log line with a serving feedd's address.
var listening = regexp.MustCompile(`msg="feedd: listening" addr=(\S+)`)

// listenAddr waits for the process's listen address in its log and
// returns its base URL.
func (p *proc) listenAddr(t *testing.T) string {
	t.Helper()
	var base string
	wait.For(t, "the listen address in the log", func() error {
		out := p.out.String()
		m := listening.FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("the log:\n%s", out)
		}
		base = "http://" + m[1]
		return nil
	})
	return base
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (if it still runs) and reaps the process.
func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// stop sends SIGTERM and expects a clean exit within timeout. It waits for
// the workers to start first: before main installs its signal handler,
// SIGTERM kills a Go program outright.
func (p *proc) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	p.waitStarted(t)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not stop within %s of SIGTERM", p.name, timeout)
	}
	if p.err != nil {
		t.Fatalf("%s exited with %v after SIGTERM", p.name, p.err)
	}
}

// crashDatabase gives a crash test the feedd binary and a migrated database:
// its DSN, a store on it, and a raw connection for checks (closed at cleanup).
func crashDatabase(t *testing.T) (bin, dsn string, st *store.Store, raw *sql.DB) {
	t.Helper()
	dsn = storetest.DatabaseDSN(t)
	bin, st, raw = crashDatabaseAt(t, dsn)
	return bin, dsn, st, raw
}

// leaseFlag is the worker lease of the crash tests: short, so that a killed
// worker's claims are taken up soon. On TiDB a statement blocked by a lock
// of a killed process's transaction waits out the storage's lock wait (1 s,
// TiKV's wait-for-lock-timeout) before the lock's owner is found gone and
// the lock cleared: a step bounded by a 1 s lease is cut off first, every
// time, and never gets past the lock.
func leaseFlag(t *testing.T) string {
	t.Helper()
	if storetest.TiDB(t) {
		return "--lease=3s"
	}
	return "--lease=1s"
}

// crashDatabaseAt is crashDatabase for the database at dsn, migrated with
// feedd's flags.
func crashDatabaseAt(t *testing.T, dsn string, flags ...string) (bin string, st *store.Store, raw *sql.DB) {
	t.Helper()
	bin = feeddBinary(t)
	runFeedd(t, bin, append([]string{"migrate", "--mysql-dsn", dsn}, flags...)...)
	st = openStore(t, shardmap.Single(dsn))
	raw, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return bin, st, raw
}

// runFeedd runs the binary to completion (e.g. migrate).
func runFeedd(t *testing.T, bin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("feedd %s: %v\n%s", args[0], err, out)
	}
}

// crashSeed returns the seed of the kill times, from FEED_CRASH_SEED or the clock.
func crashSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("FEED_CRASH_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FEED_CRASH_SEED: %v", err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: builds and kills the real binary; not in -short mode")
	}
}

func crashFull() bool { return os.Getenv("FEED_CRASH_FULL") == "1" }

// killPoint picks the next kill: a random instant 50–700 ms after the
// process first commits work, or earlier once progress reaches a random
// target within an even share of the work left among the kills still to
// land and the last, unkilled process. So on a fast server kills still land
// inside the work, and on a loaded one the batches that commit between a
// progress poll and the kill do not finish the work before the later kills.
func killPoint(rng *rand.Rand, done, total int64, killsLeft int) (time.Duration, int64) {
	delay := 50*time.Millisecond + time.Duration(rng.Int64N(int64(650*time.Millisecond)))
	share := (total - done) / int64(killsLeft+1)
	return delay, done + 1 + rng.Int64N(max(share, 1))
}

// killRounds starts feedd with args and SIGKILLs it at killPoint instants
// until kills of the kills landed in the middle of the work (progress, read
// after the kill, above the last kill's and below total). A kill misses
// when the batches in flight finish the work first, so up to 4×kills are
// tried; the test fails if fewer than kills landed. check, if not nil,
// inspects the state each kill left. It returns the kills tried.
// A non-nil crash runs at each kill point before the process is killed: a
// test that crashes the database server too does it there.
func killRounds(t *testing.T, rng *rand.Rand, bin string, args []string, kills int, total int64, progress func() int64, crash, check func(k int)) int {
	t.Helper()
	midway, done, k := 0, int64(0), 0
	for ; midway < kills && done < total && k < 4*kills; k++ {
		delay, target := killPoint(rng, done, total, kills-midway)
		p := startFeedd(t, bin, fmt.Sprintf("feedd #%d", k), args...)
		waited := waitKillPoint(t, p, done, delay, target, progress)
		if crash != nil {
			crash(k)
		}
		p.kill()
		n := progress()
		t.Logf("kill %d after %s (delay %s, target %d): %d of %d done",
			k, waited.Round(time.Millisecond), delay.Round(time.Millisecond), target, n, total)
		if n < done {
			t.Fatalf("kill %d: progress went back from %d to %d", k, done, n)
		}
		if check != nil {
			check(k)
		}
		if done < n && n < total {
			midway++
		}
		done = n
	}
	if midway < kills {
		t.Fatalf("%d of %d kills landed in the middle of the work, want %d", midway, k, kills)
	}
	return k
}

// finalIdle bounds the wait of a crash test's last process for the work
// the killed ones left, expired leases included: on a loaded machine (or
// MyRocks) it can take longer than wait.Deadline. It only guards a hang.
const finalIdle = 2 * time.Minute

// workersStarted is the log line of a feedd whose workers run.
const workersStarted = "feedd: workers started"

// waitStarted waits until the process logs that its workers run: on a busy
// machine starting can take longer than the kill delays.
func (p *proc) waitStarted(t *testing.T) {
	t.Helper()
	wait.For(t, p.name+" running its workers", func() error {
		out := p.out.String()
		if strings.Contains(out, workersStarted) {
			return nil
		}
		if p.exited() {
			t.Fatalf("%s exited by itself: %v", p.name, p.err)
		}
		return fmt.Errorf("its log:\n%s", out)
	})
}

// waitKillPoint waits, once the process runs its workers, until progress
// passes done (its first commit: on a loaded machine, or behind the leases
// a killed process left, that can take longer than any kill delay), then
// until delay has passed or progress reports target, whichever comes
// first; it reports the time waited since the workers started.
func waitKillPoint(t *testing.T, p *proc, done int64, delay time.Duration, target int64, progress func() int64) time.Duration {
	t.Helper()
	p.waitStarted(t)
	start := time.Now()
	var begun time.Time // when progress first passed done
	// Not a wait for an event: the kill lands at a random instant, and the
	// 2 ms grain of this progress poll bounds how far the work runs past
	// its target before the kill.
	for {
		if p.exited() {
			t.Fatalf("%s exited by itself: %v", p.name, p.err)
		}
		n := progress()
		switch {
		case n >= target:
			return time.Since(start)
		case begun.IsZero() && n > done:
			begun = time.Now()
		case begun.IsZero() && time.Since(start) > wait.Deadline:
			t.Fatalf("%s committed no work in %s: progress %d", p.name, wait.Deadline, n)
		case !begun.IsZero() && time.Since(begun) >= delay:
			return time.Since(start)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// fanoutSnapshot is the fan-out state of one post, read in one consistent
// snapshot: the delivered count and the inbox rows holding the post.
type fanoutSnapshot struct {
	State     int   // deliveries.state: 0 pending, 1 running, 2 done
	Delivered int64 // followers processed so far
	Rows      int64 // inbox rows of the post, the author's own included
}

func snapshotFanout(t *testing.T, db *sql.DB, contentID uint64) fanoutSnapshot {
	t.Helper()
	ctx := context.Background()
	// A killed feedd's last COMMIT can still be running in the server. With
	// the inbox in RocksDB and the progress in InnoDB, a plain transaction
	// takes each engine's snapshot at its first read there, so that commit
	// could land between them; WITH CONSISTENT SNAPSHOT takes both at once.
	conn, err := sqlconn.OpenConsistentRead(ctx, sqlx.NewDb(db, "mysql"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s fanoutSnapshot
	var doneDelivered int64
	if err := conn.QueryRowContext(ctx, `SELECT state, delivered FROM deliveries WHERE content_id = ?`, contentID).Scan(&s.State, &doneDelivered); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, `SELECT COALESCE(SUM(delivered), 0) FROM fanout_tasks WHERE content_id = ?`, contentID).Scan(&s.Delivered); err != nil {
		t.Fatal(err)
	}
	if s.State == 2 {
		s.Delivered = doneDelivered
	}
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox WHERE content_id = ?`, contentID).Scan(&s.Rows); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCrashFanout SIGKILLs the worker process at random points of one
// post's fan-out to F followers, K times, then lets a last process finish.
// With one shard every batch is one transaction, so at every kill the inbox
// rows equal the delivered count, and at the end each follower has the
// post exactly once.
func TestCrashFanout(t *testing.T) {
	skipShort(t)
	t.Parallel()
	crashFanout(t, nil)
}

// TestCrashServerFanout is TestCrashFanout with the inbox in MyRocks and the
// database server SIGKILLed at each kill as well. A batch's inbox rows
// (RocksDB) and its progress (InnoDB) commit in both engines or in
// neither: two-phase commit, coordinated by the server's tc.log.
func TestCrashServerFanout(t *testing.T) {
	skipShort(t)
	t.Parallel()
	crashFanout(t, storetest.StartRocksDBServer(t))
}

// crashFanout SIGKILLs feedd, and the server srv too when it is given (its
// database then holds the inbox in rocksdb), while a post fans out.
func crashFanout(t *testing.T, srv *storetest.Server) {
	// Small batches keep the fan-out running across the kills: each
	// restart resumes from the progress mark, so every kill lands mid-way.
	// The audience leaves each kill room: after an expired lease the tasks
	// run over a thousand rows between two looks at the progress.
	followers, kills, batch := 10_000, 5, 50
	if crashFull() {
		followers, kills = 20_000, 20
	}
	seed := crashSeed(t)
	t.Logf("followers=%d kills=%d batch=%d seed=%d (FEED_CRASH_SEED=%d replays the kill times)", followers, kills, batch, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()

	var bin, dsn string
	var st *store.Store
	var raw *sql.DB
	var crash func(k int)
	var flags []string
	if srv == nil {
		bin, dsn, st, raw = crashDatabase(t)
	} else {
		flags = []string{"--inbox-engine=rocksdb"}
		dsn = srv.DSN + "feed"
		bin, st, raw = crashDatabaseAt(t, dsn, flags...)
		crash = func(int) {
			srv.Kill()
			srv.Restart(t)
		}
	}

	const author = 42
	users, post := seedFanout(t, st, author, followers)

	args := []string{"serve", "--mysql-dsn", dsn, "--api=false", "--workers=true",
		leaseFlag(t), "--poll-interval=20ms", "--batch-size=" + strconv.Itoa(batch), "--task-size=1000",
		"--worker-concurrency=4", "--push-threshold=" + strconv.Itoa(10*followers), "--soft-stop=5s"}
	args = append(args, flags...)
	start := time.Now()
	delivered := func() int64 { return snapshotFanout(t, raw, post.ContentID).Delivered }
	tried := killRounds(t, rng, bin, args, kills, int64(followers), delivered, crash, func(k int) {
		s := snapshotFanout(t, raw, post.ContentID)
		t.Logf("kill %d: state %d, delivered %d/%d, inbox rows %d", k, s.State, s.Delivered, followers, s.Rows)
		if s.Rows != s.Delivered+1 {
			t.Fatalf("kill %d: %d inbox rows but %d delivered (+1 own): a batch was torn", k, s.Rows, s.Delivered)
		}
	})

	p := startFeedd(t, bin, "feedd final", args...)
	wait.Within(t, finalIdle, "the system at rest", idle(st))
	p.stop(t, 10*time.Second)
	t.Logf("%d of %d kills mid-fan-out; %d followers delivered in %s", kills, tried, followers, time.Since(start).Round(time.Millisecond))

	d, err := st.GetDelivery(ctx, author, post.ContentID)
	if err != nil {
		t.Fatal(err)
	}
	if want := (feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: int64(followers), Delivered: int64(followers)}); !reflect.DeepEqual(d, want) {
		t.Fatalf("delivery = %+v, want %+v", d, want)
	}
	// Exactly the followers and the author hold the post, once each.
	rows, err := raw.Query(`SELECT user_id, COUNT(*) FROM inbox WHERE content_id = ? GROUP BY user_id ORDER BY user_id`, post.ContentID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []uint64
	for rows.Next() {
		var u uint64
		var n int
		if err := rows.Scan(&u, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("user %d has the post %d times", u, n)
		}
		got = append(got, u)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := append([]uint64{author}, users...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		missing, extra := diff(want, got), diff(got, want)
		t.Fatalf("inboxes holding the post: %d, want %d; missing %v, extra %v", len(got), len(want), head(missing), head(extra))
	}
	// The store's view of a sample of inboxes agrees.
	for range 20 {
		u := users[rng.IntN(len(users))]
		inbox, err := st.InboxKeys(ctx, u)
		if err != nil || len(inbox) != 1 || inbox[0] != post {
			t.Fatalf("inbox of %d = %+v, %v; want just %+v", u, inbox, err, post)
		}
	}
	var tasks int
	if err := raw.QueryRow(`SELECT COUNT(*) FROM fanout_tasks`).Scan(&tasks); err != nil || tasks != 0 {
		t.Fatalf("fanout_tasks left: %d, %v", tasks, err)
	}
}

// TestCrashBackfill SIGKILLs the worker process while it applies follow
// events and backfills 200 new followers with an author's 300 posts; at the
// end each follower has exactly the author's newest inbox-limit posts, once.
func TestCrashBackfill(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const (
		author     = 77
		numPosts   = 300
		numFollows = 600
		inboxLimit = 200
	)
	kills := 4
	if crashFull() {
		kills = 10
	}
	seed := crashSeed(t)
	t.Logf("kills=%d seed=%d (FEED_CRASH_SEED=%d replays the kill times)", kills, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()

	bin, dsn, st, raw := crashDatabase(t)

	start := time.Now()
	now := start.UnixMilli()
	posts := make([]feed.Post, numPosts) // oldest first
	for i := range posts {
		posts[i] = feed.Post{ContentID: 5_000_000 + uint64(i), AuthorID: author, PublishTime: now - int64(numPosts-i)*1000, Kind: feed.KindPost}
	}
	inParallel(t, numPosts, func(i int) error {
		_, _, err := st.PublishPost(ctx, posts[i], now)
		return err
	})
	args := []string{"serve", "--mysql-dsn", dsn, "--api=false", "--workers=true",
		leaseFlag(t), "--poll-interval=20ms", "--inbox-limit=" + strconv.Itoa(inboxLimit), "--soft-stop=5s"}
	// Plan the posts' deliveries while nobody follows, and stop gracefully.
	p := startFeedd(t, bin, "feedd plan", args...)
	waitIdle(t, st)
	p.stop(t, 10*time.Second)
	t.Logf("published and planned %d posts in %s", numPosts, time.Since(start).Round(time.Millisecond))

	users := make([]uint64, numFollows)
	for i := range users {
		users[i] = 2_000_000 + uint64(i)*104_729
	}
	inParallel(t, numFollows, func(i int) error {
		_, err := st.Follow(ctx, users[i], author, 2000, now)
		return err
	})
	t.Logf("followed by %d users at %s", numFollows, time.Since(start).Round(time.Millisecond))
	applied := func() int64 {
		var left int64
		if err := raw.QueryRow(`SELECT COUNT(*) FROM follow_events`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return numFollows - left
	}
	tried := killRounds(t, rng, bin, args, kills, numFollows, applied, nil, nil)
	p = startFeedd(t, bin, "feedd final", args...)
	waitIdle(t, st)
	p.stop(t, 10*time.Second)
	t.Logf("%d of %d kills mid-backfill; all followers backfilled at %s", kills, tried, time.Since(start).Round(time.Millisecond))

	want := slices.Clone(posts[numPosts-inboxLimit:])
	slices.Reverse(want) // newest first, as InboxKeys lists
	for _, u := range users {
		inbox, err := st.InboxKeys(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(inbox, want) {
			t.Fatalf("inbox of %d has %d entries, want the author's newest %d once each", u, len(inbox), len(want))
		}
	}
	var count, rowsFollowers, pending int64
	if err := raw.QueryRow(`SELECT follower_count FROM authors WHERE author_id = ?`, author).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRow(`SELECT COUNT(*) FROM followers WHERE author_id = ?`, author).Scan(&rowsFollowers); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRow(`SELECT COUNT(*) FROM following WHERE author_id = ? AND pull <> 0`, author).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if count != numFollows || rowsFollowers != numFollows || pending != 0 {
		t.Fatalf("follower_count %d, followers rows %d, following rows with pull bits %d; want %d, %d, 0",
			count, rowsFollowers, pending, numFollows, numFollows)
	}
}

// inParallel runs fn(0..n-1) on a few goroutines: setup commits are
// fsync-bound, and concurrent ones share the server's group commit.
func inParallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// diff returns the elements of a (sorted) not in b (sorted).
func diff(a, b []uint64) []uint64 {
	var out []uint64
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			out = append(out, x)
		}
	}
	return out
}

func head(s []uint64) []uint64 { return s[:min(len(s), 10)] }

// seedFanout gives author n followers spread over the hash space and
// publishes one post for them.
func seedFanout(t *testing.T, st *store.Store, author uint64, n int) ([]uint64, feed.Post) {
	t.Helper()
	users := make([]uint64, n)
	for i := range users {
		users[i] = 1_000_000 + uint64(i)*7919
	}
	now := time.Now().UnixMilli()
	if err := storeload.Followers(t.Context(), st, author, users, now-1000, false); err != nil {
		t.Fatal(err)
	}
	post := feed.Post{ContentID: 9_000_001, AuthorID: author, PublishTime: now, Kind: feed.KindPost}
	if _, created, err := st.PublishPost(t.Context(), post, now); err != nil || !created {
		t.Fatalf("publish: created=%v err=%v", created, err)
	}
	return users, post
}

// TestCrashFanoutSharded SIGKILLs the workers of two databases during one
// post's fan-out to followers on both, whose tasks each write one target
// database: after the last process finishes, every follower holds the post
// exactly once and the delivery counts each of them once.
func TestCrashFanoutSharded(t *testing.T) {
	skipShort(t)
	t.Parallel()
	followers, kills, batch := 2000, 4, 50
	if crashFull() {
		followers, kills = 10_000, 10
	}
	seed := crashSeed(t)
	t.Logf("followers=%d kills=%d batch=%d seed=%d (FEED_CRASH_SEED=%d replays the kill times)", followers, kills, batch, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()

	bin := feeddBinary(t)
	dsns := map[string]string{"a": storetest.DatabaseDSN(t), "b": storetest.DatabaseDSN(t)}
	path := twoDatabases(t, dsns["a"], dsns["b"])
	runFeedd(t, bin, "migrate", "--sharding", path)
	m, err := shardmap.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, m)

	const author = 42
	users, post := seedFanout(t, st, author, followers)
	home, err := sql.Open("mysql", dsns[st.ShardOf(author).Name])
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()

	args := []string{"serve", "--sharding", path, "--api=false", "--workers=true",
		leaseFlag(t), "--poll-interval=20ms", "--batch-size=" + strconv.Itoa(batch), "--task-size=500",
		"--worker-concurrency=4", "--push-threshold=" + strconv.Itoa(10*followers), "--soft-stop=5s"}
	delivered := func() int64 { return snapshotFanout(t, home, post.ContentID).Delivered }
	killRounds(t, rng, bin, args, kills, int64(followers), delivered, nil, nil)
	p := startFeedd(t, bin, "feedd final", args...)
	wait.Within(t, finalIdle, "the system at rest", idle(st))
	p.stop(t, 10*time.Second)

	d, err := st.GetDelivery(ctx, author, post.ContentID)
	if err != nil {
		t.Fatal(err)
	}
	if want := (feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: int64(followers), Delivered: int64(followers)}); !reflect.DeepEqual(d, want) {
		t.Fatalf("delivery = %+v, want %+v", d, want)
	}
	count := map[uint64]int{}
	for _, d := range dsns {
		db, err := sql.Open("mysql", d)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.Query(`SELECT user_id FROM inbox WHERE content_id = ?`, post.ContentID)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var u uint64
			if err := rows.Scan(&u); err != nil {
				t.Fatal(err)
			}
			count[u]++
		}
		rows.Close()
		db.Close()
	}
	for _, u := range append([]uint64{author}, users...) {
		if count[u] != 1 {
			t.Errorf("user %d holds the post %d times", u, count[u])
		}
	}
	if len(count) != followers+1 {
		t.Errorf("%d inboxes hold the post, want %d", len(count), followers+1)
	}
}

// TestCrashSmallPosts SIGKILLs the workers of two databases while they
// deliver many posts of few followers each, which are pushed a batch of
// posts at a time. At every kill a post counted done is in every follower's
// inbox (a batch's pushes to the other database commit before it is
// counted); after the last process finishes, each follower holds each post
// of its authors exactly once, and each delivery counts its followers once.
func TestCrashSmallPosts(t *testing.T) {
	skipShort(t)
	t.Parallel()
	authors, perAuthor, kills, batch := 100, 20, 4, 40
	if crashFull() {
		authors, perAuthor, kills = 400, 50, 10
	}
	seed := crashSeed(t)
	t.Logf("posts=%d kills=%d batch=%d seed=%d (FEED_CRASH_SEED=%d replays the kill times)", authors*perAuthor, kills, batch, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()

	bin := feeddBinary(t)
	dsns := []string{storetest.DatabaseDSN(t), storetest.DatabaseDSN(t)}
	path := twoDatabases(t, dsns[0], dsns[1])
	runFeedd(t, bin, "migrate", "--sharding", path)
	m, err := shardmap.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, m)
	dbs := make([]*sql.DB, len(dsns))
	for i, d := range dsns {
		if dbs[i], err = sql.Open("mysql", d); err != nil {
			t.Fatal(err)
		}
		defer dbs[i].Close()
	}

	// Authors 1..authors, each followed by 1 to 5 of 500 users spread over
	// both databases, publish perAuthor posts each before any worker runs.
	now := time.Now().UnixMilli()
	followers := map[uint64][]uint64{} // by author
	want := map[uint64]int{}           // inbox rows per post: followers + the author's own
	var posts []feed.Post
	for a := uint64(1); a <= uint64(authors); a++ {
		for _, i := range rng.Perm(500)[:1+rng.IntN(5)] {
			followers[a] = append(followers[a], 1_000_000+uint64(i)*7919)
		}
		if err := storeload.Followers(ctx, st, a, followers[a], now-1000, false); err != nil {
			t.Fatal(err)
		}
		for j := range perAuthor {
			p := feed.Post{ContentID: a*1000 + uint64(j), AuthorID: a, PublishTime: now - int64(rng.IntN(1000)), Kind: feed.KindPost}
			posts = append(posts, p)
			want[p.ContentID] = len(followers[a]) + 1
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for chunk := range slices.Chunk(posts, (len(posts)+7)/8) {
		wg.Go(func() {
			for _, p := range chunk {
				if _, _, err := st.PublishPost(ctx, p, now); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// state reads, per database, the posts counted done and every post's
	// inbox rows. A post's delivery row is on its author's database, its
	// rows on both.
	state := func() (done []uint64, rows map[uint64]int) {
		rows = map[uint64]int{}
		for _, db := range dbs {
			ids, err := queryIDs(db, `SELECT content_id FROM deliveries WHERE state = 2`)
			if err != nil {
				t.Fatal(err)
			}
			done = append(done, ids...)
			inboxed, err := queryIDs(db, `SELECT content_id FROM inbox WHERE content_id <> 18446744073709551615`)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range inboxed {
				rows[id]++
			}
		}
		return done, rows
	}
	args := []string{"serve", "--sharding", path, "--api=false", "--workers=true",
		leaseFlag(t), "--poll-interval=20ms", "--batch-size=" + strconv.Itoa(batch),
		"--worker-concurrency=4", "--soft-stop=5s"}
	progress := func() int64 { done, _ := state(); return int64(len(done)) }
	killRounds(t, rng, bin, args, kills, int64(len(posts)), progress, nil, func(k int) {
		done, rows := state()
		for _, id := range done {
			if rows[id] != want[id] {
				t.Fatalf("kill %d: post %d is done with %d inbox rows, want %d", k, id, rows[id], want[id])
			}
		}
	})
	p := startFeedd(t, bin, "feedd final", args...)
	wait.Within(t, finalIdle, "the system at rest", idle(st))
	p.stop(t, 10*time.Second)

	done, rows := state()
	if len(done) != len(posts) {
		t.Fatalf("%d of %d posts done", len(done), len(posts))
	}
	for _, p := range posts {
		if rows[p.ContentID] != want[p.ContentID] {
			t.Errorf("post %d: %d inbox rows, want %d", p.ContentID, rows[p.ContentID], want[p.ContentID])
		}
		d, err := st.GetDelivery(ctx, p.AuthorID, p.ContentID)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(len(followers[p.AuthorID]))
		if w := (feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: n, Delivered: n}); !reflect.DeepEqual(d, w) {
			t.Errorf("delivery of %d = %+v, want %+v", p.ContentID, d, w)
		}
	}
	// The primary key holds one row of a post per inbox, so with the counts
	// above each follower has each post once if no post landed elsewhere.
	for _, db := range dbs {
		var stray int
		must(t, db.QueryRow(`SELECT COUNT(*) FROM inbox i WHERE content_id <> 18446744073709551615 AND user_id <> author_id
 AND NOT EXISTS (SELECT 1 FROM following f WHERE f.user_id = i.user_id AND f.author_id = i.author_id)`).Scan(&stray))
		if stray > 0 {
			t.Errorf("%d inbox rows of posts outside their authors' followers", stray)
		}
	}
}

// queryIDs returns the first column of q's rows.
func queryIDs(db *sql.DB, q string) ([]uint64, error) {
	rows, err := db.Query(q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store/reshard"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// TestReshard moves data one database → two → three → back to two with
// feedd reshard while a feedd process serves a continuous load of
// publishes, deletes, follows, unfollows and feed reads, and kills the
// first move's apply four times on the way. The first move copies within
// one server, the others between two. After each move every feed equals a brute-force sort of
// the acknowledged writes, every acknowledged post is there once, no
// request failed other than with 503, a process started with the old map
// refuses to start, and cleanup leaves each database only its own rows.
func TestReshard(t *testing.T) {
	t.Parallel()
	// b shares a's server, so the first move's copy stays in the server;
	// c has its own, so the later moves' rows go through the client.
	shared := storetest.StartServer(t).DSN
	dsn := map[string]string{"a": shared + "feed", "b": shared + "feed_b", "c": storetest.StartServer(t).DSN + "feed"}
	dir := t.TempDir()
	writeMap := func(name string, ranges map[string]string, empty ...string) string {
		var b strings.Builder
		b.WriteString("virtual_shards: 1024\ndatabases:\n")
		for _, db := range slices.Sorted(maps.Keys(dsn)) {
			if _, ok := ranges[db]; ok || slices.Contains(empty, db) {
				fmt.Fprintf(&b, "  %s: {dsn: %q}\n", db, dsn[db])
			}
		}
		b.WriteString("ranges:\n")
		for _, db := range slices.Sorted(maps.Keys(ranges)) {
			fmt.Fprintf(&b, "  - {vshards: %s, database: %s}\n", ranges[db], db)
		}
		path := filepath.Join(dir, name)
		must(t, os.WriteFile(path, []byte(b.String()), 0o600))
		return path
	}
	// The serving process knows every database from the start.
	one := writeMap("one.yaml", map[string]string{"a": "0-1023"}, "b", "c")
	two := writeMap("two.yaml", map[string]string{"a": "0-511", "b": "512-1023"}, "c")
	three := writeMap("three.yaml", map[string]string{"a": "0-511", "b": "512-767", "c": "768-1023"})
	merge := writeMap("merge.yaml", map[string]string{"a": "0-511", "b": "512-1023"}, "c")

	ctx := t.Context()
	m, _ := startMain(t, "serve", "--sharding", one, "--http-addr", "127.0.0.1:0", "--poll-interval", "20ms",
		"--lease", "2s", "--probe-interval", "100ms")
	c := client.New("http://"+m.Addr(), "", &http.Client{Timeout: 20 * time.Second})
	reshardCmd := func(step, path string) error {
		m := NewMain()
		m.Stderr = &syncBuffer{}
		must(t, m.ParseFlags(withEngine(t, []string{"reshard", step, "--sharding", path, "--progress=false", "--batch-size", "50"})))
		err := m.Run(ctx)
		if err != nil {
			t.Logf("reshard %s: %v\n%s", step, err, m.Stderr.(*syncBuffer).String())
		}
		return err
	}
	w := newWorkload(c, 24, 6)
	w.seed(t)
	moveUnderLoad := func(path string, during func()) {
		t.Helper()
		stop := w.run(ctx, 3)
		during()
		// Writes after the cut-over too.
		after := w.published() + 5
		wait.For(t, fmt.Sprintf("%d posts published", after), func() error {
			if n := w.published(); n < after {
				return fmt.Errorf("%d published", n)
			}
			return nil
		})
		if err := stop(); err != nil {
			t.Fatalf("load during the move to %s: %v", filepath.Base(path), err)
		}
		settle(t, dsn)
		w.check(t)
		must(t, reshardCmd("cleanup", path))
		wantOnly(t, dsn, path)
		w.check(t)
	}

	// One → two, with apply killed part-way and run again.
	must(t, reshardCmd("plan", two))
	bin := feeddBinary(t)
	moveUnderLoad(two, func() {
		// Killed while copying, while catching up, while verifying, and
		// just after the cut-over's commit (moving the work queues); each
		// run goes on from where the last one was.
		for i, at := range []string{`copy +\w+`, `catch-up +changes`, `verify +\w+`, `cut over a`} {
			batch := []string{"--batch-size", "200"} // to the later steps in time
			if i == 0 {
				batch = []string{"--batch-size", "5", "--throttle", "2ms"} // a copy long enough to kill
			}
			p := startFeedd(t, bin, "reshard apply", append([]string{"reshard", "apply", "--sharding", two}, batch...)...)
			// Creating the triggers waits for the load's metadata locks,
			// and the last run does the whole apply to its cut-over beside
			// the load (on MyRocks, with fan-out waiting out row locks): the
			// bound catches a hang, not a slow machine.
			wait.Within(t, 3*time.Minute, fmt.Sprintf("reshard apply at %q", at), func() error {
				exited := p.exited() // before the log is read: an exit's last lines are in it
				out := p.out.String()
				switch {
				case regexp.MustCompile(at).MatchString(out):
					return nil
				case exited && p.err == nil:
					return nil // an earlier kill came after the cut-over: nothing was left
				case exited:
					t.Fatalf("reshard apply exited before %q: %v\n%s", at, p.err, out)
				}
				return fmt.Errorf("its log:\n%s", out)
			})
			p.kill()
			if i == 0 && !strings.Contains(p.out.String(), "the copy stays within the server") {
				t.Fatalf("reshard apply from a to b, on one server, copied through the client:\n%s", p.out.String())
			}
			if strings.HasPrefix(at, "verify") {
				// The serving process reports the reshard it probes.
				wait.For(t, "reshard metrics", func() error {
					if v := metricValue(t, "http://"+m.Addr(), `feed_reshard_copied_rows{database="a"}`); v <= 0 {
						return fmt.Errorf("feed_reshard_copied_rows %v", v)
					}
					return nil
				})
			}
		}
		must(t, reshardCmd("apply", two))
	})
	if _, err := startMainErr(t, "serve", "--sharding", one); err == nil || !strings.Contains(err.Error(), "feedd reshard") {
		t.Fatalf("serve with the old map after the cut-over: %v, want a refusal", err)
	}
	// Two → three, then three → two: c is emptied into b.
	moveUnderLoad(three, func() { must(t, reshardCmd("apply", three)) })
	moveUnderLoad(merge, func() { must(t, reshardCmd("apply", merge)) })
}

// workload drives a feedd process with publishes, deletes, follows,
// unfollows and feed reads, retrying each write that gets 503 until it is
// acknowledged, and keeps the acknowledged state to check feeds against.
type workload struct {
	c       *client.Client
	users   []uint64
	authors []uint64

	mu      sync.Mutex
	follows map[[2]uint64]bool // user, author → following
	posts   map[uint64]loadPost
	nextID  atomic.Uint64
}

type loadPost struct {
	author, time uint64
	deleted      bool
}

func newWorkload(c *client.Client, users, authors int) *workload {
	w := &workload{c: c, follows: map[[2]uint64]bool{}, posts: map[uint64]loadPost{}}
	for i := range users {
		w.users = append(w.users, uint64(1000+37*i))
	}
	for i := range authors {
		w.authors = append(w.authors, uint64(5000+101*i))
	}
	w.nextID.Store(1 << 40)
	return w
}

// retry runs op until it succeeds; a 503 is retried, any other error
// returned.
func retry(ctx context.Context, op func() error) error {
	for {
		err := op()
		var apiErr *client.Error
		if err == nil || !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // a client's pause before it retries a 503: not a wait
	}
}

func (w *workload) follow(ctx context.Context, u, a uint64, on bool) error {
	err := retry(ctx, func() error {
		if on {
			return w.c.Follow(ctx, u, a)
		}
		return w.c.Unfollow(ctx, u, a)
	})
	if err == nil {
		w.mu.Lock()
		w.follows[[2]uint64{u, a}] = on
		w.mu.Unlock()
	}
	return err
}

func (w *workload) publish(ctx context.Context, a uint64) (uint64, error) {
	id := w.nextID.Add(1)
	err := retry(ctx, func() error {
		_, _, err := w.c.Publish(ctx, a, client.PublishRequest{ContentID: strconv.FormatUint(id, 10), PublishTime: 1_700_000_000_000 + int64(id%5000)})
		return err
	})
	if err == nil {
		w.mu.Lock()
		w.posts[id] = loadPost{author: a, time: id % 5000}
		w.mu.Unlock()
	}
	return id, err
}

func (w *workload) delete(ctx context.Context, id uint64) error {
	w.mu.Lock()
	p := w.posts[id]
	w.mu.Unlock()
	err := retry(ctx, func() error { return w.c.DeletePost(ctx, p.author, id) })
	if err == nil {
		w.mu.Lock()
		p.deleted = true
		w.posts[id] = p
		w.mu.Unlock()
	}
	return err
}

// published is how many posts the workload's publishes were acknowledged.
func (w *workload) published() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.posts)
}

// seed gives every user three authors and every author four posts.
func (w *workload) seed(t *testing.T) {
	ctx := t.Context()
	for i, u := range w.users {
		for k := range 3 {
			must(t, w.follow(ctx, u, w.authors[(i+k)%len(w.authors)], true))
		}
	}
	for range 4 {
		for _, a := range w.authors {
			_, err := w.publish(ctx, a)
			must(t, err)
		}
	}
}

// run starts n writers, each on its own users (so its follow operations
// are ordered) and its own authors' posts, and a reader; stop ends them
// and returns the first error other than a retried 503.
func (w *workload) run(ctx context.Context, n int) (stop func() error) {
	// Operations in flight finish: one cut off would leave the model
	// unsure whether it happened.
	var stopping atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for i := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			var mine []uint64 // posts of this writer
			for !stopping.Load() {
				var err error
				switch op := rng.IntN(10); {
				case op < 4:
					u := w.users[i+n*rng.IntN(len(w.users)/n)]
					a := w.authors[rng.IntN(len(w.authors))]
					err = w.follow(ctx, u, a, op < 3)
				case op < 8:
					var id uint64
					if id, err = w.publish(ctx, w.authors[i+n*rng.IntN(len(w.authors)/n)]); err == nil {
						mine = append(mine, id)
					}
				case len(mine) > 0:
					k := rng.IntN(len(mine))
					err = w.delete(ctx, mine[k])
					mine = slices.Delete(mine, k, k+1)
				}
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(5 * time.Millisecond) // a load, not a flood
			}
		})
	}
	wg.Go(func() {
		for !stopping.Load() {
			u := w.users[rand.IntN(len(w.users))]
			err := retry(ctx, func() error { _, err := w.c.Feed(ctx, u, 20, ""); return err })
			if err != nil {
				errs <- fmt.Errorf("feed of %d: %w", u, err)
				return
			}
			time.Sleep(5 * time.Millisecond) // a load, not a flood
		}
	})
	return func() error {
		stopping.Store(true)
		wg.Wait()
		close(errs)
		return <-errs
	}
}

// check compares every feed with a brute-force sort of the acknowledged
// posts of the authors its user follows, and every author's posts with
// the acknowledged ones.
func (w *workload) check(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	w.mu.Lock()
	defer w.mu.Unlock()
	type entry struct{ id, time uint64 }
	byAuthor := map[uint64][]entry{}
	for id, p := range w.posts {
		if !p.deleted {
			byAuthor[p.author] = append(byAuthor[p.author], entry{id, p.time})
		}
	}
	newest := func(es []entry) []string {
		slices.SortFunc(es, func(a, b entry) int {
			if a.time != b.time {
				return cmp.Compare(b.time, a.time)
			}
			return cmp.Compare(b.id, a.id)
		})
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = strconv.FormatUint(e.id, 10)
		}
		return out
	}
	read := func(fetch func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error)) []string {
		var ids []string
		for p, err := range client.All(ctx, 7, fetch) {
			must(t, err)
			ids = append(ids, p.ContentID)
		}
		return ids
	}
	for _, a := range w.authors {
		want := newest(slices.Clone(byAuthor[a]))
		if got := read(func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error) {
			return w.c.Posts(ctx, a, limit, cursor)
		}); !slices.Equal(got, want) {
			t.Errorf("posts of %d: %v, want %v", a, got, want)
		}
	}
	for _, u := range w.users {
		var es []entry
		for _, a := range w.authors {
			if w.follows[[2]uint64{u, a}] {
				es = append(es, byAuthor[a]...)
			}
		}
		want := newest(es)
		// The last feed read, against the one wanted, says which write it
		// lost or kept.
		wait.For(t, fmt.Sprintf("the feed of %d", u), func() error {
			got := read(func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error) {
				return w.c.Feed(ctx, u, limit, cursor)
			})
			if !slices.Equal(got, want) {
				return fmt.Errorf("read %v, want %v", got, want)
			}
			return nil
		})
	}
}

// TestReshardAbort copies part of a move and aborts it: the new database
// is empty again and the old map serves. On TiDB, which has no triggers,
// apply refuses before it copies anything, and the same holds.
func TestReshardAbort(t *testing.T) {
	t.Parallel()
	dsnA, dsnB := storetest.DatabaseDSN(t), storetest.DatabaseDSN(t)
	dir := t.TempDir()
	one := filepath.Join(dir, "one.yaml")
	two := filepath.Join(dir, "two.yaml")
	must(t, os.WriteFile(one, fmt.Appendf(nil, "virtual_shards: 1024\ndatabases: {a: {dsn: %q}}\nranges: [{vshards: 0-1023, database: a}]\n", dsnA), 0o600))
	must(t, os.WriteFile(two, fmt.Appendf(nil, "virtual_shards: 1024\ndatabases: {a: {dsn: %q}, b: {dsn: %q}}\nranges: [{vshards: 0-511, database: a}, {vshards: 512-1023, database: b}]\n", dsnA, dsnB), 0o600))
	m, _ := startMain(t, "serve", "--sharding", one, "--http-addr", "127.0.0.1:0", "--probe-interval", "50ms")
	c := newClient(t, m, "")
	for u := uint64(1); u <= 30; u++ {
		must(t, c.Follow(t.Context(), u, 999))
	}
	must(t, m.Close())

	bin := feeddBinary(t)
	p := startFeedd(t, bin, "reshard apply", "reshard", "apply", "--sharding", two, "--batch-size", "2", "--throttle", "5ms")
	if storetest.TiDB(t) {
		<-p.done
		if out := p.out.String(); p.err == nil || !strings.Contains(out, "database a is on TiDB: "+reshard.ErrTiDB.Error()) {
			t.Fatalf("reshard apply on TiDB: %v, want it to refuse with %q:\n%s", p.err, reshard.ErrTiDB, out)
		}
	} else {
		// Creating the triggers waits for metadata locks, and the tables before
		// following are copied two rows a batch: a minute on a busy machine.
		wait.For(t, "reshard apply copying following", func() error {
			exited := p.exited() // before the log is read: an exit's last lines are in it
			out := p.out.String()
			if regexp.MustCompile(`copy +following`).MatchString(out) {
				return nil
			}
			if exited {
				t.Fatalf("reshard apply exited before copying following: %v\n%s", p.err, out)
			}
			return fmt.Errorf("its log:\n%s", out)
		})
		p.kill()
	}
	runFeedd(t, bin, "reshard", "abort", "--sharding", two, "--progress=false")
	db, err := sql.Open("mysql", dsnB)
	must(t, err)
	defer db.Close()
	for _, tbl := range []string{"following", "follow_events", "inbox", "followers", "authors", "reshard"} {
		var n int
		must(t, db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+tbl).Scan(&n))
		if n != 0 {
			t.Errorf("b holds %d rows of %s after the abort", n, tbl)
		}
	}
	startMain(t, "serve", "--sharding", one, "--http-addr", "127.0.0.1:0", "--workers=false")
}

// startMainErr runs feedd and returns Run's error instead of failing.
func startMainErr(t *testing.T, args ...string) (*Main, error) {
	t.Helper()
	m := NewMain()
	m.Stderr = &syncBuffer{}
	must(t, m.ParseFlags(withEngine(t, append(args, "--http-addr", "127.0.0.1:0", "--drain-delay=0s"))))
	err := m.Run(context.Background())
	m.Close()
	return m, err
}

// settle waits until the workers are idle on every database: deliveries
// and retractions done, follow events applied.
func settle(t *testing.T, dsn map[string]string) {
	t.Helper()
	wait.For(t, "idle workers", func() error {
		for name, d := range dsn {
			db, err := sql.Open("mysql", d)
			must(t, err)
			var n int
			err = db.QueryRowContext(t.Context(), `SELECT (SELECT COUNT(*) FROM deliveries WHERE state <> 2) + (SELECT COUNT(*) FROM follow_events)`).Scan(&n)
			db.Close()
			if err == nil && n > 0 {
				return fmt.Errorf("%d deliveries and follow events queued on %s", n, name)
			}
		}
		return nil
	})
}

// wantOnly checks that each database holds only rows of the virtual
// shards the map at path gives it.
func wantOnly(t *testing.T, dsn map[string]string, path string) {
	t.Helper()
	m, err := shardmap.Load(path)
	must(t, err)
	owner := map[int]string{}
	for _, r := range m.Ranges {
		var first, last int
		fmt.Sscanf(r.VShards, "%d-%d", &first, &last)
		for v := first; v <= last; v++ {
			owner[v] = r.Database
		}
	}
	for name, d := range dsn {
		db, err := sql.Open("mysql", d)
		must(t, err)
		for _, k := range reshard.Keyed {
			tbl := k.Name
			rows, err := db.QueryContext(t.Context(), "SELECT DISTINCT "+k.Key+" FROM "+tbl)
			if err != nil && strings.Contains(err.Error(), "1146") {
				break // a database the maps have not used yet
			}
			must(t, err)
			for rows.Next() {
				var id uint64
				must(t, rows.Scan(&id))
				if o := owner[shardmap.VirtualShard(id, 1024)]; o != name {
					t.Errorf("database %s holds %s rows of id %d, which %s owns", name, tbl, id, o)
				}
			}
			rows.Close()
		}
		db.Close()
	}
}

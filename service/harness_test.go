package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/dbserver"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// TestMain removes the data directory throwaway servers were copied from.
func TestMain(m *testing.M) {
	code := m.Run()
	dbserver.RemoveTemplate()
	os.Exit(code)
}

// harness is a service on fresh databases with its workers running.
type harness struct {
	svc   *service.Service
	store *store.Store
	cfg   service.Config
	reg   *prometheus.Registry // svc's metrics
	// shards is the map the store was opened from: another "process" opens
	// its own pools on the same databases with it.
	shards *shardmap.Map
	now    func() time.Time
	// refused is the first worker step the server refused as a statement
	// it cannot run: waits fail with it instead of timing out.
	refused *refusals
}

type harnessOpts struct {
	shards int
	// shardMap names the databases; nil creates shards fresh ones on the
	// test server.
	shardMap   *shardmap.Map
	noWorkers  bool
	configured func(*service.Config)
	now        func() time.Time
	// log, if not nil, gets the service's log records too.
	log slog.Handler
}

// newHarness starts a service with short leases on fresh databases; workers
// stop when the test ends.
func newHarness(t testing.TB, opt harnessOpts) *harness {
	t.Helper()
	shards := opt.shardMap
	if shards == nil {
		shards = storetest.NewShardMap(t, storetest.Options{Shards: opt.shards})
	}
	st, err := store.Open(shards)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	cfg := service.DefaultConfig()
	// Wake-ups drive the workers within a process; polling is only the
	// fallback (other processes' work, expired leases). Each idle harness
	// polls about 14 loops, so a short interval loads the shared server
	// for every test running beside it.
	cfg.PollInterval = 100 * time.Millisecond
	cfg.Lease = 2 * time.Second
	// A source read past its deadline is a test of its own (partial and
	// stream tests set theirs): elsewhere a loaded machine, or TiDB in
	// process on two cores, must not turn a slow read into a failure.
	cfg.SourceTimeout = 10 * time.Second
	if opt.configured != nil {
		opt.configured(&cfg)
	}
	now := opt.now
	if now == nil {
		now = time.Now
	}
	refused := &refusals{}
	log := slog.New(refused.handler())
	if opt.log != nil {
		log = slog.New(slog.NewMultiHandler(refused.handler(), opt.log))
	}
	reg := prometheus.NewRegistry()
	svc, err := service.New(st, cfg, log, service.NewMetrics(reg), now)
	if err != nil {
		t.Fatal(err)
	}
	if !opt.noWorkers {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); svc.RunWorkers(ctx, time.Second) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return &harness{svc: svc, store: st, cfg: cfg, reg: reg, shards: shards, now: now, refused: refused}
}

// waitIdle waits until no work is queued on any shard.
func (h *harness) waitIdle(t testing.TB) {
	t.Helper()
	storetest.WaitIdle(t, h.store, func() { h.failIfRefused(t) })
}

// failIfRefused ends the test at once when a worker step failed with a
// statement the server refuses (refusedSQL): its work would never end.
func (h *harness) failIfRefused(t testing.TB) {
	t.Helper()
	if err := h.refused.err(); err != nil {
		t.Fatalf("a worker step failed with a statement the server refuses, so its work never ends: %v", err)
	}
}

// feedAll pages through the user's whole feed with the given page size.
func (h *harness) feedAll(t testing.TB, user uint64, limit int) []feed.Post {
	t.Helper()
	return pageAll(t, "feed", feedPosts(h.svc), user, limit)
}

// feedPosts is svc.Feed as a list of posts; here every database answers,
// so a partial page is an error.
func feedPosts(svc *service.Service) func(context.Context, uint64, feed.Page) ([]feed.Post, string, error) {
	return func(ctx context.Context, user uint64, page feed.Page) ([]feed.Post, string, error) {
		p, err := svc.Feed(ctx, user, page)
		if err == nil && len(p.MissingAuthors) > 0 {
			err = fmt.Errorf("partial page: authors %v missing", p.MissingAuthors)
		}
		return p.Items, p.Next, err
	}
}

// pageAll pages through a whole list of posts (what names it in a failure)
// with the given page size.
func pageAll(t testing.TB, what string, list func(context.Context, uint64, feed.Page) ([]feed.Post, string, error), id uint64, limit int) []feed.Post {
	t.Helper()
	var all []feed.Post
	cursor := ""
	for range 10000 {
		items, next, err := list(context.Background(), id, feed.Page{Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, items...)
		if next == "" {
			return all
		}
		cursor = next
	}
	t.Fatal(what + " did not end")
	return nil
}

// publish publishes a post with the given id and time.
func (h *harness) publish(t testing.TB, author, id uint64, at int64) feed.Post {
	t.Helper()
	p, _, err := h.svc.Publish(context.Background(), service.PublishInput{AuthorID: author, ContentID: id, PublishTime: &at})
	if err != nil {
		t.Fatalf("publish %d by %d: %v", id, author, err)
	}
	return p
}

// follow makes user follow author.
func (h *harness) follow(t testing.TB, user, author uint64) {
	t.Helper()
	if err := h.svc.Follow(context.Background(), user, author); err != nil {
		t.Fatalf("follow %d→%d: %v", user, author, err)
	}
}

// startProcess starts another Service on the harness's databases, with its
// own connection pools, metrics and workers, as a second feedd process
// would. It stops when the test ends.
func (h *harness) startProcess(t testing.TB) (*service.Service, *prometheus.Registry) {
	t.Helper()
	st, err := store.Open(h.shards)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := h.cfg
	cfg.NodeID = -1
	refused := &refusals{}
	log := slog.New(refused.handler())
	reg := prometheus.NewRegistry()
	svc, err := service.New(st, cfg, log, service.NewMetrics(reg), h.now)
	if err != nil {
		t.Fatal(err)
	}
	stop := runWorkers(svc, time.Second)
	t.Cleanup(stop)
	return svc, reg
}

// runWorkers runs svc's workers until stop is called; stop cancels them and
// waits until RunWorkers returned. softStop is passed to RunWorkers: zero
// aborts batches in flight, as close to a crash as one process gets.
func runWorkers(svc *service.Service, softStop time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunWorkers(ctx, softStop) }()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// seedFollowers makes users follow author in bulk, writing the rows an
// applied follow leaves at rest (the edge without pending bits, the author's
// followers row and count), so fan-out tests get thousands of followers in
// a few statements. The author must have no posts yet (nothing to backfill)
// and stay below the push threshold.
func (h *harness) seedFollowers(t testing.TB, author uint64, users []uint64) {
	t.Helper()
	ctx := context.Background()
	const chunk = 1000
	now := h.now().UnixMilli()
	insert := func(db *sqlx.DB, head string, rows [][]any) {
		t.Helper()
		for start := 0; start < len(rows); start += chunk {
			part := rows[start:min(start+chunk, len(rows))]
			tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", len(part[0])), ",") + ")"
			q := head + " VALUES " + strings.TrimSuffix(strings.Repeat(tuple+",", len(part)), ",")
			var args []any
			for _, r := range part {
				args = append(args, r...)
			}
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				t.Fatalf("seed followers: %v", err)
			}
		}
	}
	byShard := map[*store.Shard][][]any{}
	states := map[*store.Shard][][]any{}
	for _, u := range users {
		sh := h.store.ShardOf(u)
		byShard[sh] = append(byShard[sh], []any{u, author, now})
		states[sh] = append(states[sh], []any{u, store.Top.PublishTime, store.Top.ContentID, 0, ""})
	}
	for sh, rows := range byShard {
		insert(sh.DB, "INSERT INTO following (user_id, author_id, followed_at)", rows)
		// The users' inbox header rows, as a follow would create them.
		insert(sh.DB, "INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)", states[sh])
	}
	home := h.store.ShardOf(author).DB
	rows := make([][]any, len(users))
	for i, u := range users {
		rows[i] = []any{author, u, now}
	}
	insert(home, "INSERT INTO followers (author_id, user_id, followed_at)", rows)
	if _, err := home.ExecContext(ctx, `INSERT INTO authors (author_id, follower_count) VALUES (?, ?)
ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count)`, author, len(users)); err != nil {
		t.Fatalf("seed followers: %v", err)
	}
}

// inbox returns the user's inbox rows, newest first.
func (h *harness) inbox(t testing.TB, user uint64) []feed.Post {
	t.Helper()
	rows, err := h.store.InboxKeys(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// delivery returns the fan-out status of a post.
func (h *harness) delivery(t testing.TB, author, id uint64) feed.Delivery {
	t.Helper()
	d, err := h.svc.Delivery(context.Background(), author, id)
	if err != nil {
		t.Fatalf("delivery of %d by %d: %v", id, author, err)
	}
	return d
}

// checkDelivered checks that each user's inbox holds the post exactly once,
// reading the inboxes with a few connections at a time.
func (h *harness) checkDelivered(t testing.TB, users []uint64, contentID uint64) {
	t.Helper()
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
		next   = make(chan uint64)
	)
	for range 8 {
		wg.Go(func() {
			for u := range next {
				rows, err := h.store.InboxKeys(context.Background(), u)
				n := 0
				for _, p := range rows {
					if p.ContentID == contentID {
						n++
					}
				}
				if err != nil || n != 1 {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("user %d: %d entries of post %d (err %v)", u, n, contentID, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, u := range users {
		next <- u
	}
	close(next)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d inboxes wrong, first: %s", len(failed), len(users), failed[0])
	}
}

// recipients returns the users whose inbox holds the post, with the number of
// entries each, scanning every shard's inbox once: for fan-outs too large to
// read inbox by inbox.
func (h *harness) recipients(t testing.TB, contentID uint64) map[uint64]int {
	t.Helper()
	out := map[uint64]int{}
	for _, sh := range h.store.Shards() {
		var rows []struct {
			User uint64 `db:"user_id"`
			N    int    `db:"n"`
		}
		if err := sqlx.SelectContext(context.Background(), sh.DB, &rows,
			`SELECT user_id, COUNT(*) AS n FROM inbox WHERE content_id = ? GROUP BY user_id`, contentID); err != nil {
			t.Fatalf("recipients of %d: %v", contentID, err)
		}
		for _, r := range rows {
			if h.store.ShardOf(r.User) != sh {
				t.Errorf("user %d's inbox entry of %d is on shard %s, not its own", r.User, contentID, sh.Name)
			}
			out[r.User] += r.N
		}
	}
	return out
}

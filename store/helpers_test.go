package store_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/dbserver"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

// Fixture defaults.
const (
	maxFollowing = 2000
	noThreshold  = math.MaxInt64 // AddFollower never switches the author
	lease        = 30_000        // ms
)

// t0 is a realistic "now" in Unix milliseconds; tests pass times explicitly.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixMilli()

// TestMain runs more tests at once than GOMAXPROCS (the default), unless
// -test.parallel says otherwise: these tests wait on the database server, not
// on the CPU.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "8"); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	dbserver.RemoveTemplate()
	if report := checkRouting(); code == 0 && report != "" {
		fmt.Fprint(os.Stderr, report)
		code = 1
	}
	os.Exit(code)
}

var tokens atomic.Uint64

// newToken returns a claim token no other claimer of the test binary uses.
func newToken() uint64 { return tokens.Add(1) + 1000 }

// newStore returns a migrated store on shards fresh databases.
func newStore(t *testing.T, shards int) *store.Store {
	t.Helper()
	return storetest.NewStore(t, storetest.Options{Shards: shards, Trace: observe})
}

// publish stores a post through PublishPost and fails the test unless it is new.
func publish(t *testing.T, st *store.Store, author, id uint64, tm int64) feed.Post {
	t.Helper()
	p := feed.Post{ContentID: id, AuthorID: author, PublishTime: tm, Kind: feed.KindPost}
	got, created, err := st.PublishPost(t.Context(), p, t0)
	if err != nil {
		t.Fatalf("publish %d/%d: %v", author, id, err)
	}
	if !created || got != p {
		t.Fatalf("publish %d/%d: got %+v created=%v", author, id, got, created)
	}
	return p
}

// insertPosts is a bulk fixture for tests of reads: it writes posts rows
// only (no delivery, no inbox entry), with multi-row statements.
func insertPosts(t *testing.T, st *store.Store, posts []feed.Post) {
	t.Helper()
	byShard := map[*store.Shard][][]any{}
	for _, p := range posts {
		sh := st.ShardOf(p.AuthorID)
		byShard[sh] = append(byShard[sh], []any{p.AuthorID, p.PublishTime, p.ContentID, p.Kind, t0})
	}
	for sh, rows := range byShard {
		insertRows(t, sh.DB, "INSERT INTO posts (author_id, publish_time, content_id, kind, created_at)", rows)
	}
}

// follow makes user follow author the way the follow worker would leave it
// before the backfill: the following edge (user shard), its event, and the
// followers row and count (author shard).
func follow(t *testing.T, st *store.Store, user, author uint64) {
	t.Helper()
	if _, err := st.Follow(t.Context(), user, author, maxFollowing, t0); err != nil {
		t.Fatalf("follow %d→%d: %v", user, author, err)
	}
	if _, err := st.AddFollower(t.Context(), feed.Follow{UserID: user, AuthorID: author, FollowedAt: t0}, noThreshold); err != nil {
		t.Fatalf("add follower %d→%d: %v", user, author, err)
	}
}

// followPending follows without running the follow event: the edge is
// there, the author's followers row is not yet.
func followPending(t *testing.T, st *store.Store, user, author uint64) {
	t.Helper()
	if _, err := st.Follow(t.Context(), user, author, maxFollowing, t0); err != nil {
		t.Fatalf("follow %d→%d: %v", user, author, err)
	}
}

// followMany is a bulk fixture for thousands of followers: it writes the
// settled following rows (pull = 0, user shards), the followers rows and the
// author's count (author shard) with multi-row statements instead of two
// transactions per edge.
func followMany(t *testing.T, st *store.Store, author uint64, users []uint64) {
	t.Helper()
	byShard := map[*store.Shard][][]any{}
	var followers [][]any
	for _, u := range users {
		sh := st.ShardOf(u)
		byShard[sh] = append(byShard[sh], []any{u, author, t0})
		followers = append(followers, []any{author, u, t0})
	}
	for sh, rows := range byShard {
		insertRows(t, sh.DB, "INSERT INTO following (user_id, author_id, followed_at)", rows)
	}
	home := st.ShardOf(author)
	insertRows(t, home.DB, "INSERT INTO followers (author_id, user_id, followed_at)", followers)
	mustExec(t, home.DB, `INSERT INTO authors (author_id, follower_count) VALUES (?, ?)
ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count)`, author, len(users))
}

// insertRows inserts rows with "<head> VALUES (…),(…)", 500 rows a statement.
func insertRows(t *testing.T, db sqlx.ExecerContext, head string, rows [][]any) {
	t.Helper()
	for part := range slices.Chunk(rows, 500) {
		tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", len(part[0])), ",") + ")"
		q := head + " VALUES " + strings.TrimSuffix(strings.Repeat(tuple+",", len(part)), ",")
		var args []any
		for _, r := range part {
			args = append(args, r...)
		}
		mustExec(t, db, q, args...)
	}
}

func mustExec(t *testing.T, db sqlx.ExecerContext, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), testSQL+q, args...); err != nil {
		t.Fatalf("exec %q: %v", q, err)
	}
}

// count runs a COUNT(*) query on one shard.
func count(t *testing.T, sh *store.Shard, q string, args ...any) int {
	t.Helper()
	var n int
	if err := sh.DB.GetContext(t.Context(), &n, testSQL+q, args...); err != nil {
		t.Fatalf("count %q: %v", q, err)
	}
	return n
}

// countAll runs a COUNT(*) query on every shard and sums the results.
func countAll(t *testing.T, st *store.Store, q string, args ...any) int {
	t.Helper()
	n := 0
	for _, sh := range st.Shards() {
		n += count(t, sh, q, args...)
	}
	return n
}

// idsOn returns n ids, from start upwards, that live on shard i of st.
func idsOn(st *store.Store, i int, start uint64, n int) []uint64 {
	sh := st.Shards()[i]
	var out []uint64
	for id := start; len(out) < n; id++ {
		if st.ShardOf(id) == sh {
			out = append(out, id)
		}
	}
	return out
}

// idOn returns the first id at or above start that lives on shard i.
func idOn(st *store.Store, i int, start uint64) uint64 { return idsOn(st, i, start, 1)[0] }

// inbox returns the content ids in the user's inbox, newest first.
func inbox(t *testing.T, st *store.Store, user uint64) []uint64 {
	t.Helper()
	posts, err := st.InboxKeys(t.Context(), user)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, len(posts))
	for i, p := range posts {
		ids[i] = p.ContentID
	}
	return ids
}

// snapshot reads the user's first feed page state.
func snapshot(t *testing.T, st *store.Store, user uint64) store.FeedSnapshot {
	t.Helper()
	snap, err := st.ReadFeed(t.Context(), user, store.Top, feed.Key{}, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// plan claims the author's pending deliveries at now and plans them.
func plan(t *testing.T, st *store.Store, author uint64, now int64, opt store.PlanOptions) []store.PlanResult {
	t.Helper()
	jobs, err := st.ClaimDeliveries(t.Context(), st.ShardOf(author), now, now+lease, 100, newToken())
	if err != nil {
		t.Fatal(err)
	}
	var out []store.PlanResult
	for _, j := range jobs {
		res, err := st.PlanDelivery(t.Context(), j, opt)
		if err != nil {
			t.Fatalf("plan %d: %v", j.ContentID, err)
		}
		out = append(out, res)
	}
	return out
}

// runAllTasks runs every ready task of every shard at now to its end, as a
// worker does: RunNextTask claims a task with its first batch, RunTaskBatch
// runs the rest. It returns the batches run.
func runAllTasks(t *testing.T, st *store.Store, now int64, opt store.BatchOptions) int {
	t.Helper()
	if opt.LeaseUntil == 0 {
		opt.LeaseUntil = now + lease
	}
	batches := 0
	for _, sh := range st.Shards() {
		for {
			task, res, err := st.RunNextTask(t.Context(), sh, now, newToken(), opt)
			if err != nil {
				t.Fatal(err)
			}
			if task == nil {
				break
			}
			for batches++; !res.TaskDone; batches++ {
				if res, err = st.RunTaskBatch(t.Context(), task, opt); err != nil {
					t.Fatalf("task %d/%d: %v", task.ContentID, task.Seq, err)
				}
			}
		}
	}
	return batches
}

// deliver plans the author's pending deliveries and runs their tasks.
func deliver(t *testing.T, st *store.Store, author uint64, now int64) {
	t.Helper()
	plan(t, st, author, now, store.PlanOptions{TaskSize: 1000})
	runAllTasks(t, st, now, store.BatchOptions{Size: 300})
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := feed.ErrorCode(err); got != code {
		t.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newestFirst orders posts as every list does: publish_time, then content_id, descending.
func newestFirst(a, b feed.Post) int {
	if c := cmp.Compare(b.PublishTime, a.PublishTime); c != 0 {
		return c
	}
	return cmp.Compare(b.ContentID, a.ContentID)
}

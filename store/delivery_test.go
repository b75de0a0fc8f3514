package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

// claimAll runs claimers goroutines, each claiming up to limit rows at a time
// with its own token until a claim comes back empty, and returns the keys each
// got, after checking every row carries its claimer's token. A claimer that
// sees nothing left stops: rows other claimers hold in open transactions are
// theirs.
func claimAll[T any](t *testing.T, claimers int, claim func(token uint64) ([]T, error), key func(T) (string, uint64)) [][]string {
	t.Helper()
	got := make([][]string, claimers)
	errs := make([]error, claimers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token := newToken()
			<-start
			for {
				rows, err := claim(token)
				if err != nil {
					errs[i] = err
					return
				}
				if len(rows) == 0 {
					return
				}
				for _, r := range rows {
					k, tok := key(r)
					if tok != token {
						errs[i] = fmt.Errorf("row %s claimed with token %d carries %d", k, token, tok)
						return
					}
					got[i] = append(got[i], k)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	must(t, errors.Join(errs...))
	return got
}

// checkDisjoint fails unless the claims cover want exactly once each.
func checkDisjoint(t *testing.T, got [][]string, want int) {
	t.Helper()
	owner := map[string]int{}
	busy := 0
	for i, keys := range got {
		if len(keys) > 0 {
			busy++
		}
		for _, k := range keys {
			if j, dup := owner[k]; dup {
				t.Errorf("row %s claimed by claimers %d and %d", k, j, i)
			}
			owner[k] = i
		}
	}
	if len(owner) != want {
		t.Errorf("%d rows claimed, want %d", len(owner), want)
	}
	t.Logf("%d rows over %d busy claimers", len(owner), busy)
}

func TestClaimsAreExclusive(t *testing.T) {
	t.Parallel()
	const rows, claimers, limit = 120, 6, 5

	t.Run("deliveries", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		var deliveries [][]any
		for i := range uint64(rows) {
			deliveries = append(deliveries, []any{1000 + i, 1 + i%7, t0, feed.KindPost, t0})
		}
		insertRows(t, st.Shards()[0].DB, "INSERT INTO deliveries (content_id, author_id, publish_time, kind, created_at)", deliveries)
		got := claimAll(t, claimers, func(token uint64) ([]store.DeliveryJob, error) {
			return st.ClaimDeliveries(t.Context(), st.Shards()[0], t0, t0+lease, limit, token)
		}, func(j store.DeliveryJob) (string, uint64) { return fmt.Sprint(j.ContentID), j.Token })
		checkDisjoint(t, got, rows)
		if n := count(t, st.Shards()[0], "SELECT COUNT(*) FROM deliveries WHERE claimed_until = ? AND attempts = 1", t0+lease); n != rows {
			t.Errorf("%d deliveries leased once, want %d", n, rows)
		}
	})

	t.Run("tasks", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		var users []uint64
		for u := range uint64(rows / 2) {
			users = append(users, 100+u)
		}
		followMany(t, st, 1, users)
		publish(t, st, 1, 10, t0)
		publish(t, st, 1, 11, t0)
		plan(t, st, 1, t0, store.PlanOptions{TaskSize: 1}) // one task per follower and post
		got := claimAll(t, claimers, func(token uint64) ([]store.Task, error) {
			return st.ClaimTasks(t.Context(), st.Shards()[0], t0, t0+lease, limit, token)
		}, func(tk store.Task) (string, uint64) { return fmt.Sprintf("%d/%d", tk.ContentID, tk.Seq), tk.Token })
		checkDisjoint(t, got, rows)
	})

	t.Run("follow events", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		var events [][]any
		for i := range uint64(rows) {
			events = append(events, []any{1 + i%10, 100 + i, t0})
		}
		insertRows(t, st.Shards()[0].DB, "INSERT INTO follow_events (user_id, author_id, created_at)", events)
		got := claimAll(t, claimers, func(token uint64) ([]store.FollowEvent, error) {
			return st.ClaimFollowEvents(t.Context(), st.Shards()[0], t0, t0+lease, limit, token)
		}, func(e store.FollowEvent) (string, uint64) {
			return fmt.Sprintf("%d→%d", e.UserID, e.AuthorID), e.Token
		})
		checkDisjoint(t, got, rows)
	})

	t.Run("expired lease is claimable again", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 1)
		sh := st.Shards()[0]
		publish(t, st, 1, 10, t0)
		first, err := st.ClaimDeliveries(t.Context(), sh, t0, t0+1000, 10, newToken())
		must(t, err)
		if len(first) != 1 {
			t.Fatalf("claimed %d", len(first))
		}
		during, err := st.ClaimDeliveries(t.Context(), sh, t0+999, t0+2000, 10, newToken())
		must(t, err)
		if len(during) != 0 {
			t.Fatalf("claimed a leased delivery: %+v", during)
		}
		after, err := st.ClaimDeliveries(t.Context(), sh, t0+1001, t0+2000, 10, newToken())
		must(t, err)
		if len(after) != 1 || after[0].Token == first[0].Token {
			t.Fatalf("after the lease: %+v", after)
		}
		// The first claimer lost it: planning with its token fails and writes nothing.
		follow(t, st, 2, 1)
		if _, err := st.PlanDelivery(t.Context(), first[0], store.PlanOptions{TaskSize: 10}); !errors.Is(err, store.ErrLostClaim) {
			t.Fatalf("stale plan: %v, want ErrLostClaim", err)
		}
		if n := count(t, sh, "SELECT COUNT(*) FROM fanout_tasks"); n != 0 {
			t.Errorf("stale plan wrote %d tasks", n)
		}
		// Releasing gives it back at once; a stale release does nothing.
		must(t, st.ReleaseDelivery(t.Context(), first[0]))
		if again, _ := st.ClaimDeliveries(t.Context(), sh, t0+1002, t0+3000, 10, newToken()); len(again) != 0 {
			t.Fatalf("a stale release freed the delivery")
		}
		must(t, st.ReleaseDelivery(t.Context(), after[0]))
		again, err := st.ClaimDeliveries(t.Context(), sh, t0+1002, t0+3000, 10, newToken())
		must(t, err)
		if len(again) != 1 {
			t.Fatalf("released delivery not claimable")
		}
		if _, err := st.PlanDelivery(t.Context(), again[0], store.PlanOptions{TaskSize: 10}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPlanDelivery(t *testing.T) {
	t.Parallel()
	// Cases run in turn on one store: planning claims every pending delivery.
	st := newStore(t, 1)
	sh := st.Shards()[0]
	for i, c := range []struct{ followers, taskSize, tasks int }{
		{0, 1000, 0},
		{1, 1000, 1},
		{7, 3, 3},
		{9, 3, 3},
		{2000, 1000, 2},
		{2500, 1000, 3},
	} {
		t.Run(fmt.Sprintf("%d followers by %d", c.followers, c.taskSize), func(t *testing.T) {
			author, id := uint64(1+i), uint64(100+i)
			var users []uint64
			for i := range uint64(c.followers) {
				users = append(users, 10+i*3)
			}
			if len(users) > 0 {
				followMany(t, st, author, users)
			}
			publish(t, st, author, id, t0)
			res := plan(t, st, author, t0, store.PlanOptions{TaskSize: c.taskSize})
			if len(res) != 1 {
				t.Fatalf("planned %d", len(res))
			}
			if res[0] != (store.PlanResult{Mode: store.ModePush, Recipients: int64(c.followers), Tasks: c.tasks}) {
				t.Errorf("plan = %+v", res[0])
			}
			var tasks []struct {
				Seq      int    `db:"seq"`
				Lo       uint64 `db:"lo"`
				Hi       uint64 `db:"hi"`
				LastUser uint64 `db:"last_user"`
			}
			must(t, sh.DB.SelectContext(t.Context(), &tasks, "SELECT seq, lo, hi, last_user FROM fanout_tasks WHERE content_id = ? ORDER BY seq", id))
			if len(tasks) != c.tasks {
				t.Fatalf("%d tasks, want %d", len(tasks), c.tasks)
			}
			// (lo, hi] ranges chain from 0 to the open end; all but the
			// last hold exactly taskSize followers.
			lo := uint64(0)
			for i, tk := range tasks {
				if tk.Seq != i || tk.Lo != lo || tk.LastUser != lo {
					t.Errorf("task %+v, want seq %d from %d", tk, i, lo)
				}
				n := count(t, sh, "SELECT COUNT(*) FROM followers WHERE author_id = ? AND user_id > ? AND user_id <= ?", author, tk.Lo, tk.Hi)
				if last := i == len(tasks)-1; last {
					if tk.Hi != math.MaxUint64 {
						t.Errorf("last task ends at %d, want open-ended", tk.Hi)
					}
				} else if n != c.taskSize {
					t.Errorf("task %d covers %d followers, want %d", i, n, c.taskSize)
				}
				lo = tk.Hi
			}
			d, err := st.GetDelivery(t.Context(), author, id)
			must(t, err)
			want := feed.Delivery{State: feed.DeliveryRunning, Mode: feed.ModePush, Recipients: int64(c.followers)}
			if c.tasks == 0 {
				want.State = feed.DeliveryDone
			}
			if !reflect.DeepEqual(d, want) {
				t.Errorf("delivery = %+v, want %+v", d, want)
			}
		})
	}
}

// TestRunTaskBatchAcrossShards delivers a post exactly once to every
// follower across shards, a replay after a crash between the databases'
// commits included.
func TestRunTaskBatchAcrossShards(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 1, 1)
	var users []uint64
	for i := range uint64(2500) {
		users = append(users, 100+i)
	}
	followMany(t, st, author, users)
	publish(t, st, author, 42, t0)

	// Three ranges of up to 1,000 followers, each split between the
	// two databases.
	res := plan(t, st, author, t0, store.PlanOptions{TaskSize: 1000})
	if len(res) != 1 || res[0].Tasks != 6 || res[0].Recipients != 2500 {
		t.Fatalf("plan = %+v", res)
	}
	home := st.ShardOf(author)
	tasks, err := st.ClaimTasks(t.Context(), home, t0, t0+lease, 10, newToken())
	must(t, err)
	if len(tasks) != 6 {
		t.Fatalf("claimed %d tasks", len(tasks))
	}
	opt := store.BatchOptions{Size: 300, LeaseUntil: t0 + lease}
	// One batch of the first range's task on the other database: the
	// delivery reports progress.
	i := slices.IndexFunc(tasks, func(k store.Task) bool { return k.Lo == 0 && k.Target != home.Name })
	other := st.Shards()[0]
	if other == home {
		other = st.Shards()[1]
	}
	on := func(lo, hi uint64) (n int64) {
		for u := lo; u < hi; u++ {
			if st.ShardOf(u) == other {
				n++
			}
		}
		return n
	}
	first, err := st.RunTaskBatch(t.Context(), &tasks[i], opt)
	must(t, err)
	if want := on(100, 400); int64(len(first.Users)) != want || first.Written != want || first.TaskDone {
		t.Fatalf("first batch: %d users, %d written, done=%v; want %d", len(first.Users), first.Written, first.TaskDone, want)
	}
	d, err := st.GetDelivery(t.Context(), author, 42)
	must(t, err)
	if !reflect.DeepEqual(d, feed.Delivery{State: feed.DeliveryRunning, Mode: feed.ModePush, Recipients: 2500, Delivered: on(100, 400)}) {
		t.Errorf("delivery mid-way = %+v", d)
	}
	// A crash after the other database committed but before the home
	// transaction did leaves inbox rows the replay must not repeat:
	// write the next batch's rows on the other database by hand.
	var pre [][]any
	for u := uint64(400); u < 700; u++ {
		if st.ShardOf(u) == other {
			pre = append(pre, []any{u, t0, 42, author, feed.KindPost})
		}
	}
	insertRows(t, other.DB, "INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind)", pre)

	var written int64
	for i := range tasks {
		for done := false; !done; {
			r, err := st.RunTaskBatch(t.Context(), &tasks[i], opt)
			must(t, err)
			written += r.Written
			done = r.TaskDone
		}
	}
	if want := 2500 - on(100, 400) - int64(len(pre)); written != want {
		t.Errorf("wrote %d rows after the first batch, want %d", written, want)
	}
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42 AND user_id <> ?", author); n != 2500 {
		t.Errorf("%d inbox rows, want 2500", n)
	}
	if n := countAll(t, st, "SELECT COUNT(DISTINCT user_id) FROM inbox WHERE content_id = 42 AND user_id BETWEEN 100 AND 2599"); n != 2500 {
		t.Errorf("%d distinct followers reached, want 2500", n)
	}
	for i, sh := range st.Shards() {
		if n := count(t, sh, "SELECT COUNT(*) FROM inbox WHERE content_id = 42"); n < 1000 {
			t.Errorf("shard %d got only %d inbox rows: followers not spread", i, n)
		}
	}
	d, err = st.GetDelivery(t.Context(), author, 42)
	must(t, err)
	if !reflect.DeepEqual(d, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: 2500, Delivered: 2500}) {
		t.Errorf("delivery = %+v, want done 2500/2500", d)
	}
	if n := count(t, home, "SELECT COUNT(*) FROM fanout_tasks"); n != 0 {
		t.Errorf("%d tasks left after the delivery finished", n)
	}
	b, err := st.Backlog(t.Context())
	must(t, err)
	if !b.Idle() {
		t.Errorf("backlog %+v, want idle", b)
	}
}

// TestRunTaskBatchLastBatchesSideBySide checks that the last batches of a
// post's tasks run side by side.
func TestRunTaskBatchLastBatchesSideBySide(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	author := uint64(1)
	var users []uint64
	for i := range uint64(20) {
		users = append(users, 100+i)
	}
	planPost42(t, st, author, users, 10)
	sh := st.ShardOf(author)
	tasks, err := st.ClaimTasks(t.Context(), sh, t0, t0+lease, 2, newToken())
	must(t, err)
	if len(tasks) != 2 {
		t.Fatalf("claimed %d tasks, want 2", len(tasks))
	}
	slices.SortFunc(tasks, func(a, b store.Task) int { return a.Seq - b.Seq })
	// Hold the first task's batch inside its push: its first follower's
	// following row is being deleted elsewhere (rolled back later).
	tx, err := sh.DB.BeginTxx(t.Context(), nil)
	must(t, err)
	defer tx.Rollback()
	mustExec(t, tx, "DELETE FROM following WHERE user_id = ? AND author_id = ?", users[0], author)
	opt := store.BatchOptions{Size: 11, LeaseUntil: t0 + lease}
	held := make(chan error, 1)
	go func() {
		r, err := st.RunTaskBatch(t.Context(), &tasks[0], opt)
		if err == nil && (!r.TaskDone || r.Written != 10) {
			err = fmt.Errorf("held batch: %+v", r)
		}
		held <- err
	}()
	waitBlocked(t, sh, "INSERT IGNORE INTO inbox", 1)
	// The other task's last batch commits meanwhile, its finish included:
	// the held batch has not reached the delivery row. (Every read of the
	// held batch locks, so it has no snapshot for MariaDB's
	// innodb_snapshot_isolation to check that row against.)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, err := st.RunTaskBatch(ctx, &tasks[1], opt)
	must(t, err)
	if !r.TaskDone || r.Written != 10 {
		t.Fatalf("second task: %+v", r)
	}
	if d, err := st.GetDelivery(t.Context(), author, 42); err != nil || d.State != feed.DeliveryRunning || d.Delivered != 10 {
		t.Errorf("delivery with one task left = %+v, %v", d, err)
	}
	must(t, tx.Rollback())
	must(t, <-held)
	if d, err := st.GetDelivery(t.Context(), author, 42); err != nil || d.State != feed.DeliveryDone || d.Delivered != 20 {
		t.Errorf("delivery = %+v, %v; want done 20", d, err)
	}
}

// TestRunTaskBatchNextSkipsHeldTask checks that RunNextTask skips a task
// held by another batch and leases one it does not finish.
func TestRunTaskBatchNextSkipsHeldTask(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	planPost42(t, st, 1, []uint64{100, 101, 102, 103, 104, 105}, 3)
	// Another worker's first batch holds task 0: it has claimed it and
	// not committed yet.
	conn, err := sh.DB.Connx(t.Context())
	must(t, err)
	defer conn.Close()
	holder := &store.Task{ContentID: 42, Seq: 0, AuthorID: 1, Token: newToken()}
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "UPDATE fanout_tasks SET claim_token = ?, claimed_until = ? WHERE content_id = 42 AND seq = 0", holder.Token, t0+lease)
	token := newToken()
	opt := store.BatchOptions{Size: 2, LeaseUntil: t0 + lease}
	if storetest.TiDB(t) {
		// TiDB ignores SKIP LOCKED: the worker waits for the row, and
		// its guarded claim then finds the task leased and takes nothing.
		waited := make(chan error, 1)
		go func() {
			task, _, err := st.RunNextTask(t.Context(), sh, t0, newToken(), opt)
			if err == nil && task != nil {
				err = fmt.Errorf("claimed task %d held by another worker", task.Seq)
			}
			waited <- err
		}()
		waitBlocked(t, sh, "UPDATE fanout_tasks", 1)
		mustExec(t, conn, "COMMIT")
		must(t, <-waited)
	}
	task, res, err := st.RunNextTask(t.Context(), sh, t0, token, opt)
	must(t, err)
	if task == nil || task.Seq != 1 || task.Token != token || task.LastUser != 104 || res.TaskDone || !slices.Equal(res.Users, []uint64{103, 104}) {
		t.Fatalf("RunNextTask = %+v, %+v; want task 1 leased after its first batch of 103, 104", task, res)
	}
	if n := count(t, sh, "SELECT COUNT(*) FROM fanout_tasks WHERE seq = 1 AND claim_token = ? AND claimed_until = ? AND last_user = 104 AND attempts = 1",
		token, t0+lease); n != 1 {
		t.Errorf("task 1 not leased with its progress")
	}
	if again, _, err := st.RunNextTask(t.Context(), sh, t0, newToken(), opt); err != nil || again != nil {
		t.Fatalf("RunNextTask with task 0 held and task 1 leased = %+v, %v; want nothing", again, err)
	}
	if storetest.TiDB(t) {
		must(t, st.ReleaseTask(t.Context(), holder))
	} else {
		mustExec(t, conn, "ROLLBACK")
	}
	if next, _, err := st.RunNextTask(t.Context(), sh, t0, newToken(), opt); err != nil || next == nil || next.Seq != 0 {
		t.Fatalf("RunNextTask once task 0 is free = %+v, %v", next, err)
	}
}

// TestRunTaskBatchUnfinishedWritesNothing checks that a last batch that
// cannot finish the task writes nothing.
func TestRunTaskBatchUnfinishedWritesNothing(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	author := uint64(1)
	users := []uint64{100, 101, 102}
	planPost42(t, st, author, users, 10)
	sh := st.ShardOf(author)
	tasks, err := st.ClaimTasks(t.Context(), sh, t0, t0+1000, 1, newToken())
	must(t, err)
	// The batch writes the inboxes, then cannot count the task off its
	// delivery (the row is locked elsewhere until the context ends),
	// as if the worker died there: the writes roll back with it.
	tx, err := sh.DB.BeginTxx(t.Context(), nil)
	must(t, err)
	mustExec(t, tx, "SELECT state FROM deliveries WHERE content_id = 42 FOR UPDATE")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err = st.RunTaskBatch(ctx, &tasks[0], store.BatchOptions{Size: 10, LeaseUntil: t0 + 1000})
	cancel()
	must(t, tx.Rollback())
	if err == nil {
		t.Fatal("the finish went through a locked delivery row")
	}
	// The driver gave up on the connection; the server rolls the batch
	// back when it notices, and until then its session holds the task
	// row, which a next claimant would skip.
	waitNoTransactions(t, sh)
	if d, err := st.GetDelivery(t.Context(), author, 42); err != nil || d.State != feed.DeliveryRunning || d.Delivered != 0 {
		t.Fatalf("delivery after the crash = %+v, %v", d, err)
	}
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42"); n != 1 {
		t.Errorf("%d inbox rows after the crash, want the author's own", n)
	}
	// After the lease, the next claimant redoes the batch and finishes.
	if n := runAllTasks(t, st, t0+2000, store.BatchOptions{Size: 10}); n != 1 {
		t.Errorf("%d batches to finish, want 1", n)
	}
	if d, err := st.GetDelivery(t.Context(), author, 42); err != nil || d.State != feed.DeliveryDone || d.Delivered != 3 {
		t.Errorf("delivery = %+v, %v; want done 3", d, err)
	}
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42"); n != 4 {
		t.Errorf("%d inbox rows, want 4", n)
	}
}

// TestRunTaskBatchStaleToken checks that a batch with a stale token writes
// nothing on any shard.
func TestRunTaskBatchStaleToken(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	users := idsOn(st, 1, 100, 10) // one task, on the other database
	planPost42(t, st, author, users, 1000)
	home := st.ShardOf(author)
	old, err := st.ClaimTasks(t.Context(), home, t0, t0+1000, 1, newToken())
	must(t, err)
	cur, err := st.ClaimTasks(t.Context(), home, t0+2000, t0+lease, 1, newToken())
	must(t, err)
	if len(old) != 1 || len(cur) != 1 {
		t.Fatalf("claims %+v then %+v", old, cur)
	}

	_, err = st.RunTaskBatch(t.Context(), &old[0], store.BatchOptions{Size: 100, LeaseUntil: t0 + lease})
	if !errors.Is(err, store.ErrLostClaim) {
		t.Fatalf("stale batch: %v, want ErrLostClaim", err)
	}
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42 AND user_id <> ?", author); n != 0 {
		t.Errorf("stale batch wrote %d inbox rows", n)
	}
	// ReleaseTask with the stale token leaves the current claim alone.
	must(t, st.ReleaseTask(t.Context(), &old[0]))
	if again, _ := st.ClaimTasks(t.Context(), home, t0+2001, t0+lease, 1, newToken()); len(again) != 0 {
		t.Fatal("a stale release freed the task")
	}
	r, err := st.RunTaskBatch(t.Context(), &cur[0], store.BatchOptions{Size: 100, LeaseUntil: t0 + lease})
	must(t, err)
	if !r.TaskDone || r.Written != 10 {
		t.Errorf("current claimant: %+v", r)
	}
}

// TestRunTaskBatchAfterDelete checks that a delete while pushing leaves the
// pusher writing nothing on any shard.
func TestRunTaskBatchAfterDelete(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	users := append(idsOn(st, 0, 100, 5), idsOn(st, 1, 100, 5)...)
	planPost42(t, st, author, users, 1000)
	tasks, err := st.ClaimTasks(t.Context(), st.ShardOf(author), t0, t0+lease, 1, newToken())
	must(t, err)
	must(t, st.DeletePost(t.Context(), author, 42))

	_, err = st.RunTaskBatch(t.Context(), &tasks[0], store.BatchOptions{Size: 100, LeaseUntil: t0 + lease})
	if !errors.Is(err, store.ErrLostClaim) {
		t.Fatalf("pusher after delete: %v, want ErrLostClaim", err)
	}
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42"); n != 0 {
		t.Errorf("%d inboxes hold the deleted post", n)
	}
}

// TestRunTaskBatchDeleteRacingWorkers checks that a delete racing with
// workers leaves no copy.
func TestRunTaskBatchDeleteRacingWorkers(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	var users []uint64
	for i := range uint64(600) {
		users = append(users, 100+i)
	}
	followMany(t, st, author, users)
	publish(t, st, author, 42, t0)
	home := st.ShardOf(author)

	ctx, cancel := context.WithCancel(t.Context())
	var clock atomic.Int64
	started := make(chan struct{})
	var startOnce sync.Once
	var wg sync.WaitGroup
	errs := make([]error, 4)
	var failed atomic.Bool
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	defer stop()
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				now := t0 + clock.Add(1)
				jobs, err := st.ClaimDeliveries(ctx, home, now, now+lease, 1, newToken())
				for _, j := range jobs {
					if err == nil {
						_, err = st.PlanDelivery(ctx, j, store.PlanOptions{TaskSize: 100})
					}
				}
				// As the service's fan-out loop does: the first batch
				// claims a task, later ones run under its lease.
				opt := store.BatchOptions{Size: 25, LeaseUntil: now + lease}
				task, r, err2 := st.RunNextTask(ctx, home, now, newToken(), opt)
				if err = errors.Join(err, err2); err == nil && task != nil {
					startOnce.Do(func() { close(started) })
					for err == nil && !r.TaskDone {
						if r, err = st.RunTaskBatch(ctx, task, opt); errors.Is(err, store.ErrLostClaim) {
							err = st.ReleaseTask(ctx, task)
							break
						}
					}
				}
				if err != nil {
					if ctx.Err() == nil {
						errs[w] = err
						failed.Store(true)
					}
					return
				}
			}
		}()
	}
	<-started
	must(t, st.DeletePost(t.Context(), author, 42))
	// The wait ends early when a worker fails: its error is the test's.
	wait.For(t, "the retraction at rest", func() error {
		if failed.Load() {
			return nil
		}
		state, retract := deliveryRow(t, st, author, 42)
		b, err := st.Backlog(t.Context())
		must(t, err)
		if state == 2 && retract && b.Idle() {
			return nil
		}
		return fmt.Errorf("delivery state %d retract %v, backlog %+v", state, retract, b)
	})
	stop()
	must(t, errors.Join(errs...))
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42"); n != 0 {
		t.Errorf("%d inboxes hold the deleted post at rest", n)
	}
}

// TestRunTaskBatchLookahead counts the batches per task at the lookahead's
// edges.
//
// A batch reads one follower more than it takes to know whether it ends
// its task: a task of exactly one batch needs no second, empty one.
func TestRunTaskBatchLookahead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		followers int
		gone      bool // followers rows removed after planning
		batches   int
	}{
		{"no follower left", 3, true, 1},
		{"batch size", 3, false, 1},
		{"batch size + 1", 4, false, 2},
		{"twice batch size", 6, false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t, 1)
			var users []uint64
			for i := range uint64(c.followers) {
				users = append(users, 100+i)
			}
			planPost42(t, st, 1, users, 1000)
			if c.gone {
				mustExec(t, st.ShardOf(1).DB, "DELETE FROM followers WHERE author_id = 1")
			}
			if got := runAllTasks(t, st, t0, store.BatchOptions{Size: 3}); got != c.batches {
				t.Errorf("%d batches, want %d", got, c.batches)
			}
			want := int64(c.followers)
			if c.gone {
				want = 0
			}
			if d, err := st.GetDelivery(t.Context(), 1, 42); err != nil || d.State != feed.DeliveryDone || d.Delivered != want {
				t.Errorf("delivery = %+v, %v; want done, %d delivered", d, err, want)
			}
			if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42 AND user_id <> 1"); n != int(want) {
				t.Errorf("%d follower inboxes hold the post, want %d", n, want)
			}
		})
	}
}

// TestRunTaskBatchSnapshotIsolation runs sibling tasks finishing together
// under snapshot isolation.
//
// MariaDB with innodb_snapshot_isolation refuses a locking read of a
// row changed after the transaction's snapshot (error 1020). Sibling
// tasks finishing together all update their delivery row last, so a
// batch that held a snapshot would meet it whenever one finished during
// the batch, and could run out of retries.
func TestRunTaskBatchSnapshotIsolation(t *testing.T) {
	t.Parallel()
	var vars []struct {
		Name  string `db:"Variable_name"`
		Value string `db:"Value"`
	}
	must(t, newStore(t, 1).Shards()[0].DB.SelectContext(t.Context(), &vars, "SHOW VARIABLES LIKE 'innodb_snapshot_isolation'"))
	if len(vars) == 0 {
		t.Skip("the server has no innodb_snapshot_isolation (MySQL, older MariaDB): no error 1020 to meet")
	}
	st := storetest.NewStore(t, storetest.Options{Vars: map[string]string{"innodb_snapshot_isolation": "ON"}})
	sh := st.Shards()[0]
	const author = 1
	var users []uint64
	for i := range uint64(1000) {
		users = append(users, 100+i)
	}
	planPost42(t, st, author, users, 10)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for errs[w] == nil {
				task, _, err := st.RunNextTask(t.Context(), sh, t0, newToken(), store.BatchOptions{Size: 10, LeaseUntil: t0 + lease})
				if errs[w] = err; task == nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	must(t, errors.Join(errs...))
	if d, err := st.GetDelivery(t.Context(), author, 42); err != nil || d.State != feed.DeliveryDone || d.Delivered != 1000 {
		t.Errorf("delivery = %+v, %v; want done over 1000", d, err)
	}
}

// TestRunTaskBatchConcurrentLastBatches checks that concurrent last batches
// complete the delivery.
func TestRunTaskBatchConcurrentLastBatches(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	followMany(t, st, 1, []uint64{100, 101, 102, 103, 104, 105})
	publish(t, st, 1, 42, t0)
	plan(t, st, 1, t0, store.PlanOptions{TaskSize: 3})
	tasks, err := st.ClaimTasks(t.Context(), sh, t0, t0+lease, 2, newToken())
	must(t, err)
	if len(tasks) != 2 {
		t.Fatalf("claimed %d tasks, want 2", len(tasks))
	}
	slices.SortFunc(tasks, func(a, b store.Task) int { return a.Seq - b.Seq })
	// Hold the delivery row so that both final batches begin before
	// either counts itself off. The second reaches it or waits at the
	// first edge of its range, which the first batch's push locked as
	// the end of its own range scan.
	conn, err := sh.DB.Connx(t.Context())
	must(t, err)
	defer conn.Close()
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "SELECT state FROM deliveries WHERE content_id = 42 FOR UPDATE")
	errs := make(chan error, 2)
	for i := range tasks {
		go func() {
			_, err := st.RunTaskBatch(t.Context(), &tasks[i], store.BatchOptions{Size: 10, LeaseUntil: t0 + lease})
			errs <- err
		}()
	}
	waitBlocked(t, sh, "UPDATE deliveries SET tasks_left = tasks_left - 1", 1)
	mustExec(t, conn, "COMMIT")
	must(t, errors.Join(<-errs, <-errs))
	d, err := st.GetDelivery(t.Context(), 1, 42)
	must(t, err)
	if !reflect.DeepEqual(d, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: 6, Delivered: 6}) {
		t.Errorf("delivery = %+v, want done 6/6", d)
	}
	if n := count(t, sh, "SELECT COUNT(*) FROM fanout_tasks"); n != 0 {
		t.Errorf("%d tasks left", n)
	}
}

// TestRunTaskBatchPushActive checks that push_active writes only to recent
// readers.
func TestRunTaskBatchPushActive(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	users := followersOnBothShards(t, st, author, 6)
	mustExec(t, st.ShardOf(author).DB, "UPDATE authors SET mode = ? WHERE author_id = ?", store.AuthorPull, author)
	const day = 24 * 3600 * 1000
	activeAfter := t0 - 7*day
	var active []uint64
	for i, u := range users {
		switch i % 3 {
		case 0: // read an hour ago
			must(t, st.MarkRead(t.Context(), u, t0-3600_000, t0-3600_000, 0))
			active = append(active, u)
		case 1: // read exactly at the cutoff
			must(t, st.MarkRead(t.Context(), u, activeAfter, activeAfter, 0))
			active = append(active, u)
		case 2: // read before the window
			must(t, st.MarkRead(t.Context(), u, activeAfter-1, activeAfter-1, 0))
		}
	}
	never := idOn(st, 1, 5000) // follows but never read: no header row
	followMany(t, st, author, []uint64{never})
	mustExec(t, st.ShardOf(never).DB, "DELETE FROM inbox WHERE user_id = ? AND "+store.HeaderKeySQL, never)

	publish(t, st, author, 42, t0)
	res := plan(t, st, author, t0, store.PlanOptions{TaskSize: 5})
	if len(res) != 1 || res[0].Mode != store.ModePushActive {
		t.Fatalf("plan = %+v, want push_active", res)
	}
	runAllTasks(t, st, t0, store.BatchOptions{Size: 4, ActiveAfter: activeAfter})

	var reached []uint64
	for _, u := range append(slices.Clone(users), never) {
		if slices.Contains(inbox(t, st, u), 42) {
			reached = append(reached, u)
		}
	}
	if !slices.Equal(reached, active) {
		t.Errorf("reached %v, want the active %v", reached, active)
	}
	d, err := st.GetDelivery(t.Context(), author, 42)
	must(t, err)
	if !reflect.DeepEqual(d, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePushActive, Recipients: 13, Delivered: 13}) {
		t.Errorf("delivery = %+v", d)
	}
}

// TestRunTaskBatchSkipsUnfollowed checks that the push skips users who no
// longer follow.
func TestRunTaskBatchSkipsUnfollowed(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	users := append(idsOn(st, 0, 100, 3), idsOn(st, 1, 100, 3)...)
	for _, u := range users {
		follow(t, st, u, author)
	}
	// Two unfollow; their events have not run, so the followers rows
	// (the candidates) remain.
	gone := []uint64{users[1], users[4]}
	for _, u := range gone {
		must(t, st.Unfollow(t.Context(), u, author, t0))
	}
	publish(t, st, author, 42, t0)
	deliver(t, st, author, t0)
	for _, u := range users {
		has := slices.Contains(inbox(t, st, u), 42)
		if want := !slices.Contains(gone, u); has != want {
			t.Errorf("user %d has the post: %v, want %v", u, has, want)
		}
	}
}

// TestRunTaskBatchUnfollowUnderWay checks that an unfollow under way holds
// the push until its purge commits.
//
// The push locks the edges it reads (FOR UPDATE), which an
// unfollow's edge delete must lock too: an unfollow under way (here by
// hand, in the store's order: the edge, then the purge) holds the push
// until it commits, and the push then finds the edge gone.
func TestRunTaskBatchUnfollowUnderWay(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	author, gone, stays := uint64(1), uint64(100), uint64(101)
	planPost42(t, st, author, []uint64{gone, stays}, 1000)
	tx, err := sh.DB.BeginTxx(t.Context(), nil)
	must(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(t.Context(), "DELETE FROM following WHERE user_id = ? AND author_id = ?", gone, author)
	must(t, err)
	done := make(chan error, 1)
	go func() {
		_, _, err := st.RunNextTask(context.Background(), sh, t0, 7, store.BatchOptions{Size: 1000, LeaseUntil: t0 + lease})
		done <- err
	}()
	waitBlocked(t, sh, "INSERT IGNORE INTO inbox", 1)
	_, err = tx.ExecContext(t.Context(), "DELETE FROM inbox WHERE user_id = ? AND author_id = ?", gone, author)
	must(t, err)
	must(t, tx.Commit())
	must(t, <-done)
	if slices.Contains(inbox(t, st, gone), 42) {
		t.Error("the post landed after the unfollow's purge")
	}
	if !slices.Contains(inbox(t, st, stays), 42) {
		t.Error("the remaining follower did not get the post")
	}
}

// TestRunTaskBatchPendingFollower checks that a follower not listed yet
// gets the push and loses the retraction.
//
// A follow whose event has not run has its edge but no followers row
// yet. A batch reads the edges over the range it covers, so such a
// follower gets the post (between listed followers, and past the last
// one when the batch finishes its task) and a retraction, which sweeps
// the same ranges on every shard, takes it back.
func TestRunTaskBatchPendingFollower(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 1, 1)
	listed := followersOnBothShards(t, st, author, 3)
	pending := []uint64{listed[2] + 1, listed[len(listed)-1] + 1}
	for _, u := range pending {
		followPending(t, st, u, author)
	}
	publish(t, st, author, 42, t0)
	plan(t, st, author, t0, store.PlanOptions{TaskSize: 1000})
	runAllTasks(t, st, t0, store.BatchOptions{Size: 2})
	for _, u := range append(slices.Clone(listed), pending...) {
		if !slices.Contains(inbox(t, st, u), 42) {
			t.Errorf("user %d did not get the post", u)
		}
	}
	must(t, st.DeletePost(t.Context(), author, 42))
	plan(t, st, author, t0+1, store.PlanOptions{TaskSize: 1000})
	runAllTasks(t, st, t0+1, store.BatchOptions{Size: 2})
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42"); n != 0 {
		t.Errorf("%d inboxes still hold the deleted post", n)
	}
}

// TestRunTaskBatchRetractionSweepsUnlisted checks that a retraction sweeps
// shards its followers list no longer names.
//
// A retraction sweeps every shard over the whole user range, even when
// the followers list names nobody (on that shard, or at all): a push may
// have reached a follower not listed yet while someone listed there.
func TestRunTaskBatchRetractionSweepsUnlisted(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	listed, pending := idsOn(st, 1, 100, 1)[0], idsOn(st, 1, 5000, 1)[0]
	follow(t, st, listed, author)
	followPending(t, st, pending, author)
	publish(t, st, author, 42, t0)
	deliver(t, st, author, t0)
	if !slices.Contains(inbox(t, st, pending), 42) {
		t.Fatal("the pending follower did not get the post")
	}
	must(t, st.Unfollow(t.Context(), listed, author, t0))
	must(t, st.RemoveFollower(t.Context(), author, listed))
	must(t, st.DeletePost(t.Context(), author, 42))
	deliver(t, st, author, t0+1)
	if slices.Contains(inbox(t, st, pending), 42) {
		t.Error("the deleted post is still in the pending follower's inbox")
	}
}

// TestRunTaskBatchRetraction checks that a retraction removes the post from
// every inbox.
func TestRunTaskBatchRetraction(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 1, 1)
	var users []uint64
	for i := range uint64(700) {
		users = append(users, 100+i)
	}
	followMany(t, st, author, users)
	publish(t, st, author, 42, t0)
	publish(t, st, author, 43, t0+1)
	deliver(t, st, author, t0)
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id IN (42, 43)"); n != 2*701 {
		t.Fatalf("%d inbox rows, want %d", n, 2*701)
	}
	must(t, st.DeletePost(t.Context(), author, 42))
	plan(t, st, author, t0+1, store.PlanOptions{TaskSize: 250})
	if n := count(t, st.ShardOf(author), "SELECT COUNT(*) FROM fanout_tasks WHERE retract = 1"); n != 3*len(st.Shards()) {
		t.Errorf("%d retraction tasks, want 3 ranges on each database", n)
	}
	runAllTasks(t, st, t0+1, store.BatchOptions{Size: 100})
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 42"); n != 0 {
		t.Errorf("%d inboxes still hold the deleted post", n)
	}
	if n := countAll(t, st, "SELECT COUNT(*) FROM inbox WHERE content_id = 43"); n != 701 {
		t.Errorf("%d inboxes hold the other post, want 701", n)
	}
	d, err := st.GetDelivery(t.Context(), author, 42)
	must(t, err)
	if d.State != feed.DeliveryDone || d.Delivered != 700 {
		t.Errorf("retraction = %+v, want done over 700", d)
	}
}

// followersOnBothShards makes n users of each of st's two shards follow
// author and returns them in user_id order.
func followersOnBothShards(t *testing.T, st *store.Store, author uint64, n int) []uint64 {
	t.Helper()
	users := append(idsOn(st, 0, 100, n), idsOn(st, 1, 100, n)...)
	slices.Sort(users)
	followMany(t, st, author, users)
	return users
}

// planPost42 makes users follow author, who publishes post 42 at t0, and
// plans its delivery in tasks of taskSize followers.
func planPost42(t *testing.T, st *store.Store, author uint64, users []uint64, taskSize int) {
	t.Helper()
	followMany(t, st, author, users)
	publish(t, st, author, 42, t0)
	plan(t, st, author, t0, store.PlanOptions{TaskSize: taskSize})
}

// waitNoTransactions waits until no other session on sh's database has a
// transaction open.
func waitNoTransactions(t *testing.T, sh *store.Shard) {
	t.Helper()
	q := `SELECT COUNT(*) FROM information_schema.innodb_trx x
JOIN information_schema.processlist p ON p.id = x.trx_mysql_thread_id
WHERE p.db = DATABASE() AND p.id <> CONNECTION_ID()`
	if storetest.TiDB(t) {
		q = `SELECT COUNT(*) FROM information_schema.tidb_trx WHERE db = DATABASE() AND session_id <> CONNECTION_ID()`
	}
	wait.For(t, "no other session with a transaction open", func() error {
		if n := count(t, sh, q); n != 0 {
			return fmt.Errorf("%d other sessions with a transaction open", n)
		}
		return nil
	})
}

// waitBlocked waits until n sessions on sh's database are running a
// statement that starts with stmt: with the lock it needs held elsewhere,
// they are blocked on it.
func waitBlocked(t *testing.T, sh *store.Shard, stmt string, n int) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d sessions running %q", n, stmt), func() error {
		got := count(t, sh, `SELECT COUNT(*) FROM information_schema.processlist
WHERE db = DATABASE() AND id <> CONNECTION_ID() AND command = 'Query' AND info LIKE CONCAT(?, '%')`, stmt)
		if got < n {
			return fmt.Errorf("%d sessions running it", got)
		}
		return nil
	})
}

// TestFanoutPerTarget checks that a delivery's share of one database waits
// without holding back the others': skipped targets and targets the gate
// refuses are left ready, and run exactly once later.
func TestFanoutPerTarget(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	author := idOn(st, 0, 1)
	home, other := st.Shards()[0], st.Shards()[1]
	onHome, onOther := idsOn(st, 0, 100, 30), idsOn(st, 1, 100, 30)
	planPost42(t, st, author, append(slices.Clone(onHome), onOther...), 20)

	// The gate refuses the other database: its tasks are not claimed.
	refuse := store.BatchOptions{Size: 7, Enter: func(*store.Shard) (func(), bool) { return nil, false }}
	runAllTasks(t, st, t0, refuse)
	// Skipping it outright leaves its tasks alone too.
	runAllTasks(t, st, t0, store.BatchOptions{Size: 7, Skip: []string{other.Name}})
	for _, u := range onHome {
		if got := inbox(t, st, u); !slices.Equal(got, []uint64{42}) {
			t.Fatalf("user %d on the author's database: inbox %v, want the post", u, got)
		}
	}
	for _, u := range onOther {
		if got := inbox(t, st, u); len(got) != 0 {
			t.Fatalf("user %d on the skipped database: inbox %v, want nothing yet", u, got)
		}
	}
	d, err := st.GetDelivery(t.Context(), author, 42)
	must(t, err)
	if d.State != feed.DeliveryRunning || d.Delivered != int64(len(onHome)) {
		t.Errorf("delivery %+v, want running with the author's database's %d delivered", d, len(onHome))
	}
	if n := count(t, home, "SELECT COUNT(*) FROM fanout_tasks WHERE done = 0 AND target = ?", other.Name); n == 0 {
		t.Fatal("no task waits for the other database")
	}

	// Once admitted, the rest goes out exactly once.
	runAllTasks(t, st, t0, store.BatchOptions{Size: 7})
	for _, u := range append(slices.Clone(onHome), onOther...) {
		if got := inbox(t, st, u); !slices.Equal(got, []uint64{42}) {
			t.Fatalf("user %d: inbox %v, want the post once", u, got)
		}
	}
	d, err = st.GetDelivery(t.Context(), author, 42)
	must(t, err)
	if !reflect.DeepEqual(d, feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: 60, Delivered: 60}) {
		t.Errorf("delivery %+v, want done 60/60", d)
	}
}

package store_test

import (
	"context"
	"database/sql"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// TestPushDeliveries delivers a claim of small and other deliveries on two
// databases: the small ones land in their followers' inboxes on both, once,
// and are done with their counts; big audiences, pull authors, retractions
// and posts with followers on a skipped database are left to plan into
// tasks; what exceeds the batch's rows waits for the next call; a claim
// taken over is dropped.
func TestPushDeliveries(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	home := st.Shards()[0]
	authors := idsOn(st, 0, 1, 5)
	near, away := idsOn(st, 0, 1000, 4), idsOn(st, 1, 1000, 4)
	const size = 6
	small, both, big, puller, deleted := authors[0], authors[1], authors[2], authors[3], authors[4]
	followMany(t, st, small, near[:2])
	followMany(t, st, both, []uint64{near[0], away[0], away[1]})
	followMany(t, st, big, slices.Concat(near, away[:3])) // size + 1
	followMany(t, st, puller, near[:1])
	mustExec(t, home.DB, `UPDATE authors SET mode = ? WHERE author_id = ?`, store.AuthorPull, puller)
	followMany(t, st, deleted, near[:1])
	for i, a := range []uint64{small, both, both, big, puller, deleted} {
		publish(t, st, a, uint64(100+i), t0+int64(i))
	}
	must(t, st.DeletePost(t.Context(), deleted, 105))
	// A follow whose event has not listed it yet gets the post too: the
	// push reads the follow edges on the followers' databases.
	followPending(t, st, away[2], both)

	jobs, err := st.ClaimDeliveries(t.Context(), home, t0, t0+lease, 100, newToken())
	must(t, err)
	if len(jobs) != 6 {
		t.Fatalf("claimed %d deliveries, want 6", len(jobs))
	}
	// Another worker's claim on post 100 ended and was taken over.
	lost := slices.IndexFunc(jobs, func(j store.DeliveryJob) bool { return j.ContentID == 100 })
	jobs[lost].Token++

	res, err := st.PushDeliveries(t.Context(), home, jobs, store.BatchOptions{Size: size})
	must(t, err)
	ids := func(js []store.DeliveryJob) []uint64 {
		var out []uint64
		for _, j := range js {
			out = append(out, j.ContentID)
		}
		slices.Sort(out)
		return out
	}
	if got := ids(res.Pushed); !slices.Equal(got, []uint64{101, 102}) {
		t.Errorf("pushed %v, want [101 102]", got)
	}
	if got := ids(res.Plan); !slices.Equal(got, []uint64{103, 104, 105}) {
		t.Errorf("to plan %v, want [103 104 105] (big, pull author, retraction)", got)
	}
	if len(res.Later) != 0 {
		t.Errorf("later %v, want none", ids(res.Later))
	}
	// Listed followers: three per post of both; the pending follow is
	// written but not listed.
	if res.Written != 8 || len(res.Users) != 6 {
		t.Errorf("written %d rows for %d users, want 8 rows for 6", res.Written, len(res.Users))
	}
	for _, u := range []uint64{near[0], away[0], away[1], away[2]} {
		if got := inbox(t, st, u); !slices.Equal(got, []uint64{102, 101}) {
			t.Errorf("inbox of %d: %v, want [102 101]", u, got)
		}
	}
	for _, id := range []uint64{101, 102} {
		d, err := st.GetDelivery(t.Context(), both, id)
		must(t, err)
		if want := (feed.Delivery{State: feed.DeliveryDone, Mode: feed.ModePush, Recipients: 3, Delivered: 3}); !reflect.DeepEqual(d, want) {
			t.Errorf("delivery %d: %+v, want %+v", id, d, want)
		}
	}

	// The ones left to plan kept their claim; the dropped one kept its
	// other claimant's.
	for _, j := range res.Plan {
		if _, err := st.PlanDelivery(t.Context(), j, store.PlanOptions{TaskSize: 1000}); err != nil {
			t.Errorf("plan %d after the push: %v", j.ContentID, err)
		}
	}

	// A database whose push waits past the timeout (here on the follow
	// edges it reads, locked) costs only the posts with followers there.
	t.Run("database that does not answer", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 2)
		home, far := st.Shards()[0], st.Shards()[1]
		authors := idsOn(st, 0, 1, 2)
		near, away := idOn(st, 0, 1000), idOn(st, 1, 1000)
		followMany(t, st, authors[0], []uint64{near})
		followMany(t, st, authors[1], []uint64{near, away})
		publish(t, st, authors[0], 300, t0)
		publish(t, st, authors[1], 301, t0+1)
		tx, err := far.DB.BeginTxx(t.Context(), nil)
		must(t, err)
		defer tx.Rollback()
		mustExec(t, tx, `SELECT COUNT(*) FROM following FORCE INDEX (PRIMARY) WHERE author_id = ? FOR UPDATE`, authors[1])
		jobs, err := st.ClaimDeliveries(t.Context(), home, t0, t0+lease, 100, newToken())
		must(t, err)
		res, err := st.PushDeliveries(t.Context(), home, jobs, store.BatchOptions{Size: 10, TargetTimeout: 200 * time.Millisecond})
		must(t, err)
		if got := ids(res.Pushed); !slices.Equal(got, []uint64{300}) {
			t.Errorf("pushed %v, want [300]", got)
		}
		if got := ids(res.Plan); !slices.Equal(got, []uint64{301}) {
			t.Errorf("to plan %v, want [301]", got)
		}
		if got := inbox(t, st, near); !slices.Equal(got, []uint64{300}) {
			t.Errorf("inbox of %d: %v, want [300]: 301 is left to its tasks", near, got)
		}
	})

	t.Run("skipped database, rows per batch", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, 2)
		home, far := st.Shards()[0], st.Shards()[1]
		authors := idsOn(st, 0, 1, 3)
		near, away := idsOn(st, 0, 1000, 3), idsOn(st, 1, 1000, 1)
		followMany(t, st, authors[0], near)
		followMany(t, st, authors[1], near)
		followMany(t, st, authors[2], away)
		for i, a := range authors {
			publish(t, st, a, uint64(200+i), t0+int64(i))
		}
		jobs, err := st.ClaimDeliveries(t.Context(), home, t0, t0+lease, 100, newToken())
		must(t, err)
		res, err := st.PushDeliveries(t.Context(), home, jobs, store.BatchOptions{Size: 4, Skip: []string{far.Name}})
		must(t, err)
		if got := ids(res.Pushed); !slices.Equal(got, []uint64{200}) {
			t.Errorf("pushed %v, want [200]", got)
		}
		if got := ids(res.Later); !slices.Equal(got, []uint64{201}) {
			t.Errorf("later %v, want [201]: 3 + 3 rows exceed a batch of 4", got)
		}
		if got := ids(res.Plan); !slices.Equal(got, []uint64{202}) {
			t.Errorf("to plan %v, want [202]: its follower's database is skipped", got)
		}
		res, err = st.PushDeliveries(t.Context(), home, res.Later, store.BatchOptions{Size: 4})
		must(t, err)
		if got := ids(res.Pushed); !slices.Equal(got, []uint64{201}) {
			t.Errorf("second call pushed %v, want [201]", got)
		}
		for _, u := range near {
			if got := inbox(t, st, u); !slices.Equal(got, []uint64{201, 200}) {
				t.Errorf("inbox of %d: %v, want [201 200]", u, got)
			}
		}
	})
}

// TestTargetRowsShowBeforeEdges checks what an unfollow's purge relies on:
// once a fan-out write on another database than the author's lets go of the
// follow edge it locked, its inbox rows are visible. The writer adds row i
// and then sets the edge's followed_at to i, as many times as it can; a
// reader that takes the edge FOR UPDATE and reads i there must find row i.
// With the inbox in RocksDB, a transaction that touched the inbox first
// would let readers here see the edge's new value before the row.
func TestTargetRowsShowBeforeEdges(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	sh := st.Shards()[0]
	const user, author, n = 7, 8, 1000
	followPending(t, st, user, author)
	mustExec(t, sh.DB, "UPDATE following SET followed_at = 0 WHERE user_id = ? AND author_id = ?", user, author)
	ctx := t.Context()
	var (
		wg       sync.WaitGroup
		writeErr error
		written  = make(chan struct{})
	)
	wg.Go(func() {
		defer close(written)
		for i := 1; i <= n && writeErr == nil; i++ {
			_, writeErr = st.OnTarget(ctx, sh, func(ctx context.Context, tx *sqlx.Tx) (int64, error) {
				if _, err := tx.ExecContext(ctx, "INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind) VALUES (?, ?, ?, ?, 'post')", user, i, i, author); err != nil {
					return 0, err
				}
				_, err := tx.ExecContext(ctx, "UPDATE following SET followed_at = ? WHERE user_id = ? AND author_id = ?", i, user, author)
				return 0, err
			})
		}
	})
	stopped := func() bool {
		select {
		case <-written:
			return true
		default:
			return false
		}
	}
	// Readers side by side: each wakes when the writer lets the edge go.
	for range 4 {
		wg.Go(func() {
			for at := 0; at < n && !stopped(); {
				var rows int
				err := func() error {
					tx, err := sh.DB.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
					if err != nil {
						return err
					}
					defer tx.Rollback()
					// One statement: the inbox is read the moment the edge is locked.
					r := tx.QueryRowxContext(ctx, `SELECT f.followed_at, (SELECT COUNT(*) FROM inbox i
 WHERE i.user_id = f.user_id AND i.publish_time = f.followed_at AND i.content_id = f.followed_at)
 FROM following f WHERE f.user_id = ? AND f.author_id = ? FOR UPDATE`, user, author)
					if err := r.Scan(&at, &rows); err != nil {
						return err
					}
					return tx.Commit()
				}()
				if store.Retryable(err) {
					continue // waited past the lock wait bound behind the others: read again
				}
				if err != nil {
					t.Error(err)
					return
				}
				if at > 0 && rows == 0 {
					t.Errorf("the edge says row %d was written, the inbox does not have it", at)
					return
				}
			}
		})
	}
	wg.Wait()
	must(t, writeErr)
}

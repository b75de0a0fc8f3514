package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
)

// StuckAttempts is how many workers StuckDelivery lets die on its task.
const StuckAttempts = 3

// StuckDelivery publishes post to the author's followers, who must number
// more than StuckAttempts, and leaves its delivery with one fan-out task
// that StuckAttempts workers claimed in turn, each dying after its first
// batch of one follower: the last one's lease runs for an hour. Run it
// while no worker runs on the databases, or one may take the delivery first.
func StuckDelivery(ctx context.Context, st *store.Store, post feed.Post) error {
	now := time.Now().UnixMilli()
	if _, _, err := st.PublishPost(ctx, post, now); err != nil {
		return fmt.Errorf("storetest: stuck delivery: %w", err)
	}
	sh := st.ShardOf(post.AuthorID)
	jobs, err := st.ClaimDeliveries(ctx, sh, now, now+time.Minute.Milliseconds(), 1, rand.Uint64())
	if err != nil || len(jobs) != 1 || jobs[0].ContentID != post.ContentID {
		return fmt.Errorf("storetest: stuck delivery: claimed %v: %w", jobs, err)
	}
	if _, err := st.PlanDelivery(ctx, jobs[0], store.PlanOptions{TaskSize: 1_000_000}); err != nil {
		return fmt.Errorf("storetest: stuck delivery: %w", err)
	}
	// Each worker claims the task once the last one's lease has passed.
	for i := range int64(StuckAttempts) {
		until := now + 2*i + 1
		if i == StuckAttempts-1 {
			until = now + time.Hour.Milliseconds()
		}
		t, res, err := st.RunNextTask(ctx, sh, now+2*i, rand.Uint64(), store.BatchOptions{Size: 1, LeaseUntil: until})
		if err != nil || t == nil || res.TaskDone {
			return fmt.Errorf("storetest: stuck delivery: batch %d: task %v, done %v: %w", i, t, res.TaskDone, err)
		}
	}
	return nil
}

// WaitIdle waits until no work is queued on any database of st, calling
// each check between polls (one that knows the work cannot end fails the
// test at once). The deadline only bounds a failing test: `make test` runs
// packages side by side on two cores, where a few hundred deliveries can
// take many seconds.
func WaitIdle(t testing.TB, st *store.Store, checks ...func()) {
	t.Helper()
	wait.For(t, "no work queued", func() error {
		b, err := st.Backlog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if b.Idle() {
			return nil
		}
		for _, check := range checks {
			check()
		}
		return fmt.Errorf("work still queued: %+v", b)
	})
}

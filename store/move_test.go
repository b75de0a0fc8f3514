package store_test

import (
	"errors"
	"testing"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// TestRepoint moves a follower's edge to the old id and both marks about
// it (the follower's mute, the old id's hide) to the new id in one
// transaction on the follower's database; a repeat changes nothing.
func TestRepoint(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	ctx := t.Context()
	const user, from, to = 501, 601, 602
	if _, err := st.Follow(ctx, user, from, 10, t0); err != nil {
		t.Fatal(err)
	}
	for _, f := range []store.Filter{store.Mute, store.Hide} {
		if _, err := st.SetFilter(ctx, f, user, from, true, 10, t0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.Repoint(ctx, user, from, to, t0+1)
	if err != nil || got != (store.Repointed{Followed: true, Hidden: true}) {
		t.Fatalf("repoint: %+v, %v", got, err)
	}
	if _, err := st.GetFollowing(ctx, user, from); feed.ErrorCode(err) != feed.ENOTFOUND {
		t.Errorf("edge to the old id: %v", err)
	}
	if f, err := st.GetFollowing(ctx, user, to); err != nil || f.FollowedAt != t0+1 {
		t.Errorf("edge to the new id: %+v, %v", f, err)
	}
	if muted, err := st.ListMuted(ctx, user, 0, 10); err != nil || len(muted) != 1 || muted[0].AuthorID != to || muted[0].At != t0 {
		t.Errorf("mutes %+v, %v; want the new id's, as of the old one's", muted, err)
	}
	if authors, _, _, err := st.FollowedAuthors(ctx, user, 0); err != nil || len(authors) != 0 {
		t.Errorf("authors read %v, %v; want none: the new edge is muted", authors, err)
	}
	if again, err := st.Repoint(ctx, user, from, to, t0+2); err != nil || again != (store.Repointed{}) {
		t.Fatalf("repeat: %+v, %v", again, err)
	}
}

// TestMoveJob runs a move's phases by hand: the request, its repeat and a
// conflicting one, the claim, the old id's follows leaving with the mark,
// a lost claim, and the last phase leaving the move done.
func TestMoveJob(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2)
	ctx := t.Context()
	const from, to = 700, 701
	for _, a := range []uint64{11, 12} {
		if _, err := st.Follow(ctx, from, a, 10, t0); err != nil {
			t.Fatal(err)
		}
	}
	m, started, err := st.StartMove(ctx, from, to, t0)
	if err != nil || !started || m.State != feed.MovePending || m.Follows != (feed.MoveCount{Total: 2}) {
		t.Fatalf("start: %+v, %v, %v", m, started, err)
	}
	if again, started, err := st.StartMove(ctx, from, to, t0+1); err != nil || started || again != m {
		t.Fatalf("repeat: %+v, %v, %v; want %+v", again, started, err, m)
	}
	if _, _, err := st.StartMove(ctx, from, 702, t0+1); feed.ErrorCode(err) != feed.ECONFLICT {
		t.Fatalf("another id: %v, want %s", err, feed.ECONFLICT)
	}
	token := newToken()
	jobs, err := st.ClaimMoves(ctx, st.ShardOf(from), t0+2, t0+1000, 4, token)
	if err != nil || len(jobs) != 1 || jobs[0].From != from || jobs[0].To != to || jobs[0].Phase != store.MovePhaseMutes {
		t.Fatalf("claim: %+v, %v", jobs, err)
	}
	job := &jobs[0]
	step := store.MoveStep{Next: true, LeaseUntil: t0 + 1000, Now: t0 + 3}
	if err := st.FinishMoveItems(ctx, job, nil, step); err != nil || job.Phase != store.MovePhaseFollows {
		t.Fatalf("mutes phase: %+v, %v", job, err)
	}
	items, err := st.MoveItems(ctx, job, 10)
	if err != nil || len(items) != 2 || items[1] != (store.MoveItem{AuthorID: 12, Followed: true}) {
		t.Fatalf("follows: %+v, %v", items, err)
	}
	stale := *job
	stale.Token++
	if err := st.AdvanceMove(ctx, &stale, step); !errors.Is(err, store.ErrLostClaim) {
		t.Fatalf("advance under another token: %v, want ErrLostClaim", err)
	}
	step.After, step.Moved = 12, 2
	if err := st.FinishMoveItems(ctx, job, []uint64{11, 12}, step); err != nil {
		t.Fatal(err)
	}
	if left, err := st.ListFollowing(ctx, from, 0, 10); err != nil || len(left) != 0 {
		t.Fatalf("old id still follows %+v, %v", left, err)
	}
	step.After, step.Moved = 0, 0
	if err := st.FinishMoveMarker(ctx, job, step); err != nil {
		t.Fatal(err)
	}
	for job.Phase <= store.MovePhaseFollowers {
		if err := st.AdvanceMove(ctx, job, step); err != nil {
			t.Fatal(err)
		}
	}
	m, err = st.GetMove(ctx, from)
	if err != nil || m.State != feed.MoveDone || m.Follows != (feed.MoveCount{Moved: 2, Total: 2}) || !job.Done() {
		t.Fatalf("done: %+v, %v (job %+v)", m, err, job)
	}
	if jobs, err := st.ClaimMoves(ctx, st.ShardOf(from), t0+5000, t0+6000, 4, newToken()); err != nil || len(jobs) != 0 {
		t.Fatalf("a done move claimed: %+v, %v", jobs, err)
	}
	if _, err := st.GetMove(ctx, to); feed.ErrorCode(err) != feed.ENOTFOUND {
		t.Fatalf("move of an id never moved: %v", err)
	}
}

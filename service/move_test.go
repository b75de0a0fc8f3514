package service_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/service"
)

// moveFixture is a user with every kind of row a move carries: follows,
// mutes (of a followed author and of one not followed), a hide of it by an
// author it follows, hides it gave (to a follower and to a reader who does
// not follow it), a read marker, and followers (one muting it).
type moveFixture struct {
	old, to    uint64
	follows    []uint64 // authors old follows
	muted      []uint64 // authors old mutes
	hider      uint64   // an author old follows who hides from old
	hiddenFrom []uint64 // readers old hides from
	followers  []uint64
	muter      uint64 // a follower who mutes old
}

func newMoveFixture(t *testing.T, h *harness) moveFixture {
	t.Helper()
	ctx := context.Background()
	f := moveFixture{
		old: 1001, to: 2002,
		follows: []uint64{11, 12, 13, 15}, muted: []uint64{12, 14}, hider: 15,
		hiddenFrom: []uint64{33, 41}, followers: []uint64{31, 32, 33, 34, 35}, muter: 32,
	}
	base := h.now().Add(-time.Hour).UnixMilli()
	id := uint64(5000)
	for i, a := range []uint64{11, 12, 13, 14, 15} {
		for j := range 3 {
			id++
			h.publish(t, a, id, base+int64(i*10+j))
		}
	}
	for _, a := range f.follows {
		h.follow(t, f.old, a)
	}
	for _, u := range f.followers {
		h.follow(t, u, f.old)
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range f.muted {
		check(h.svc.Mute(ctx, f.old, a, true))
	}
	check(h.svc.Hide(ctx, f.hider, f.old, true))
	for _, u := range f.hiddenFrom {
		check(h.svc.Hide(ctx, f.old, u, true))
	}
	check(h.svc.Mute(ctx, f.muter, f.old, true))
	h.waitIdle(t)
	p, err := h.svc.Feed(ctx, f.old, feed.Page{Limit: 2})
	check(err)
	_, err = h.svc.SetMarker(ctx, f.old, p.Next)
	check(err)
	return f
}

// userState is what a move carries of one id, as the API lists it.
type userState struct {
	Feed       []feed.Post
	Marker     string
	Following  []uint64
	Muted      []uint64
	HiddenFrom []uint64
	Followers  []uint64
}

func (h *harness) userState(t *testing.T, id uint64) userState {
	t.Helper()
	ctx := context.Background()
	page := feed.Page{Limit: 100}
	var s userState
	s.Feed = h.feedAll(t, id, 7)
	m, err := h.svc.Marker(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	s.Marker = m.Cursor
	fl, _, err := h.svc.ListFollowing(ctx, id, page)
	s.Following = idsOf(t, fl, err, func(f feed.Follow) uint64 { return f.AuthorID })
	mu, _, err := h.svc.ListMuted(ctx, id, page)
	s.Muted = idsOf(t, mu, err, func(m feed.Mute) uint64 { return m.AuthorID })
	hf, _, err := h.svc.ListHiddenFrom(ctx, id, page)
	s.HiddenFrom = idsOf(t, hf, err, func(m feed.Mute) uint64 { return m.UserID })
	fr, _, err := h.svc.ListFollowers(ctx, id, page)
	s.Followers = idsOf(t, fr, err, func(f feed.Follow) uint64 { return f.UserID })
	return s
}

// idsOf returns the ids of a page of a list; err, the list's, fails the
// test.
func idsOf[T any](t *testing.T, items []T, err error, id func(T) uint64) []uint64 {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, it := range items {
		out = append(out, id(it))
	}
	return out
}

// waitMoveDone waits until the move of from is done and every follow event
// it queued has been applied, and returns its progress.
func (h *harness) waitMoveDone(t *testing.T, from uint64) feed.Move {
	t.Helper()
	var m feed.Move
	wait.For(t, "the move done", func() error {
		var err error
		if m, err = h.svc.MoveStatus(context.Background(), from); err != nil {
			return err
		}
		h.failIfRefused(t)
		if m.State != feed.MoveDone {
			return fmt.Errorf("move %+v", m)
		}
		return nil
	})
	h.waitIdle(t)
	return m
}

func TestMoveCarriesEverything(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2})
	ctx := context.Background()
	f := newMoveFixture(t, h)
	before := h.userState(t, f.old)
	if len(before.Feed) == 0 || before.Marker == "" || len(before.Followers) != len(f.followers) || len(before.HiddenFrom) != 2 {
		t.Fatalf("fixture incomplete: %+v", before)
	}

	m, err := h.svc.Move(ctx, f.old, f.to)
	if err != nil {
		t.Fatal(err)
	}
	if m.From != f.old || m.To != f.to || m.State == feed.MoveDone {
		t.Fatalf("accepted move %+v", m)
	}
	m = h.waitMoveDone(t, f.old)
	want := feed.Move{From: f.old, To: f.to, State: feed.MoveDone,
		Follows: feed.MoveCount{Moved: 4, Total: 4}, Mutes: feed.MoveCount{Moved: 3, Total: 3},
		Hides: feed.MoveCount{Moved: 2, Total: 2}, Marker: feed.MoveCount{Moved: 1, Total: 1},
		Followers: feed.MoveCount{Moved: 5, Total: 5}, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
	if m != want {
		t.Errorf("progress %+v, want %+v", m, want)
	}

	after := h.userState(t, f.to)
	if !slices.Equal(after.Feed, before.Feed) {
		t.Errorf("new id's feed %v, the old one's was %v", after.Feed, before.Feed)
	}
	if after.Marker != before.Marker || !slices.Equal(after.Following, before.Following) ||
		!slices.Equal(after.Muted, before.Muted) || !slices.Equal(after.HiddenFrom, before.HiddenFrom) ||
		!slices.Equal(after.Followers, before.Followers) {
		t.Errorf("new id %+v, the old one was %+v", after, before)
	}
	if gone := h.userState(t, f.old); len(gone.Feed)+len(gone.Following)+len(gone.Muted)+len(gone.HiddenFrom)+len(gone.Followers) > 0 || gone.Marker != "" {
		t.Errorf("old id keeps %+v", gone)
	}
	hider := h.userState(t, f.hider)
	if !slices.Equal(hider.HiddenFrom, []uint64{f.to}) {
		t.Errorf("author %d hides from %v, want the new id", f.hider, hider.HiddenFrom)
	}
	for _, u := range f.followers {
		s := h.userState(t, u)
		if !slices.Equal(s.Following, []uint64{f.to}) {
			t.Errorf("follower %d follows %v, want the new id", u, s.Following)
		}
		if want := []uint64(nil); u == f.muter {
			if !slices.Equal(s.Muted, []uint64{f.to}) {
				t.Errorf("follower %d mutes %v, want the new id", u, s.Muted)
			}
		} else if !slices.Equal(s.Muted, want) {
			t.Errorf("follower %d mutes %v", u, s.Muted)
		}
	}
	// The new id's posts reach its followers, except those it hides from
	// and the one muting it.
	post := h.publish(t, f.to, 9001, h.now().UnixMilli())
	h.waitIdle(t)
	for _, u := range f.followers {
		got := slices.Contains(h.feedAll(t, u, 20), post)
		if want := u != f.muter && !slices.Contains(f.hiddenFrom, u); got != want {
			t.Errorf("follower %d sees the new id's post: %v, want %v", u, got, want)
		}
	}
}

func TestMoveRepeatIsIdempotent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := context.Background()
	h.follow(t, 1001, 11)
	first, err := h.svc.Move(ctx, 1001, 2002)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.svc.Move(ctx, 1001, 2002)
	if err != nil || again.CreatedAt != first.CreatedAt || again.To != 2002 {
		t.Fatalf("repeat: %+v, %v; first %+v", again, err, first)
	}
	done := h.waitMoveDone(t, 1001)
	repeat, err := h.svc.Move(ctx, 1001, 2002)
	if err != nil || repeat != done {
		t.Fatalf("repeat of a done move: %+v, %v; want %+v", repeat, err, done)
	}
	if s := h.userState(t, 2002); !slices.Equal(s.Following, []uint64{11}) {
		t.Errorf("new id follows %v", s.Following)
	}
}

func TestMoveConflicts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{noWorkers: true})
	ctx := context.Background()
	if _, err := h.svc.Move(ctx, 1001, 2002); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Move(ctx, 1001, 3003); feed.ErrorCode(err) != feed.ECONFLICT {
		t.Fatalf("move to another id while one is unfinished: %v, want %s", err, feed.ECONFLICT)
	}
	if m, err := h.svc.MoveStatus(ctx, 1001); err != nil || m.To != 2002 || m.State != feed.MovePending {
		t.Fatalf("status after the conflict: %+v, %v", m, err)
	}
}

func TestMoveRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{noWorkers: true})
	ctx := context.Background()
	h.follow(t, 1001, 11)
	if _, err := h.svc.Move(ctx, 1001, 1001); feed.ErrorCode(err) != feed.EINVALID {
		t.Fatalf("move to itself: %v, want %s", err, feed.EINVALID)
	}
	if _, err := h.svc.MoveStatus(ctx, 1001); feed.ErrorCode(err) != feed.ENOTFOUND {
		t.Fatalf("status without a move: %v, want %s", err, feed.ENOTFOUND)
	}
	if s := h.userState(t, 1001); !slices.Equal(s.Following, []uint64{11}) {
		t.Errorf("refused move changed the user: %+v", s)
	}
}

func TestMoveLeavesWhatTheNewIDCannotTake(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{configured: func(c *service.Config) { c.MaxFollowing, c.MaxMuted = 4, 1 }})
	ctx := context.Background()
	const old, to = 1001, 2002
	for _, a := range []uint64{11, 12, 16} {
		h.follow(t, to, a)
	}
	if err := h.svc.Mute(ctx, to, 19, true); err != nil {
		t.Fatal(err)
	}
	for _, a := range []uint64{11, 13, 14, 15} {
		h.follow(t, old, a)
	}
	if err := h.svc.Mute(ctx, old, 15, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Move(ctx, old, to); err != nil {
		t.Fatal(err)
	}
	m := h.waitMoveDone(t, old)
	// The mute of 15 does not fit (to mutes one author already), so 15
	// stays with old, follow and mute; 11 is followed already; 13 fits;
	// 14 does not (to follows 4 then): the items go in author order.
	if want := (feed.MoveCount{Moved: 2, Skipped: 2, Total: 4}); m.Follows != want {
		t.Errorf("follows %+v, want %+v", m.Follows, want)
	}
	if want := (feed.MoveCount{Moved: 0, Skipped: 1, Total: 1}); m.Mutes != want {
		t.Errorf("mutes %+v, want %+v", m.Mutes, want)
	}
	if s := h.userState(t, to); !slices.Equal(s.Following, []uint64{11, 12, 13, 16}) || !slices.Equal(s.Muted, []uint64{19}) {
		t.Errorf("new id follows %v and mutes %v", s.Following, s.Muted)
	}
	if s := h.userState(t, old); !slices.Equal(s.Following, []uint64{14, 15}) || !slices.Equal(s.Muted, []uint64{15}) {
		t.Errorf("old id keeps follows %v and mutes %v", s.Following, s.Muted)
	}
}

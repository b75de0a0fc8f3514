package service_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// liveKit drives the stream routes' service calls and reads live pages.
type liveKit struct {
	t *testing.T
	h *harness
}

func (k liveKit) create(host, id uint64, scheduled int64) {
	k.t.Helper()
	if _, _, err := k.h.svc.CreateStream(context.Background(), service.StreamInput{HostID: host, StreamID: id, ScheduledStart: &scheduled}); err != nil {
		k.t.Fatalf("create stream %d: %v", id, err)
	}
}

func (k liveKit) start(host, id uint64, at int64) {
	k.t.Helper()
	if _, err := k.h.svc.StartStream(context.Background(), host, id, &at); err != nil {
		k.t.Fatalf("start stream %d: %v", id, err)
	}
}

func (k liveKit) end(host, id uint64, at int64) {
	k.t.Helper()
	if _, err := k.h.svc.EndStream(context.Background(), host, id, &at); err != nil {
		k.t.Fatalf("end stream %d: %v", id, err)
	}
}

func (k liveKit) follow(viewer uint64, hosts ...uint64) {
	k.t.Helper()
	for _, h := range hosts {
		if err := k.h.svc.Follow(context.Background(), viewer, h); err != nil {
			k.t.Fatal(err)
		}
	}
}

func (k liveKit) page(viewer uint64, limit int, session, cursor string) feed.LivePage {
	k.t.Helper()
	p, err := k.h.svc.LivePage(context.Background(), viewer, feed.Page{Limit: limit, Cursor: cursor}, session)
	if err != nil {
		k.t.Fatalf("live page of %d (session %q, cursor %q): %v", viewer, session, cursor, err)
	}
	if len(p.Items) > limit || (p.Next != "" && len(p.Items) != limit) {
		k.t.Fatalf("page of %d items, limit %d, next %q", len(p.Items), limit, p.Next)
	}
	return p
}

// walk reads the viewer's whole live feed in one session.
func (k liveKit) walk(viewer uint64, limit int) []feed.Stream {
	k.t.Helper()
	p := k.page(viewer, limit, "", "")
	all := p.Items
	for next := p.Next; next != ""; {
		q := k.page(viewer, limit, p.Session, next)
		all, next = append(all, q.Items...), q.Next
	}
	return all
}

// show renders streams as "id:state" for comparisons.
func show(streams []feed.Stream) string {
	parts := make([]string, len(streams))
	for i, st := range streams {
		parts[i] = fmt.Sprintf("%d:%s", st.StreamID, st.State)
	}
	return strings.Join(parts, " ")
}

// TestLiveSeedScenario runs the seed's example: five streams of four hosts,
// the feed at T1 and, after a start, an end and a delete, at T2; a session
// opened at T1 keeps T1's order on its later pages, and a stream of its
// snapshot that has ended since does not come back as a replay.
func TestLiveSeedScenario(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	k := liveKit{t, h}
	const viewer, a, b, c, d = 1, 101, 102, 103, 104
	k.follow(viewer, a, b, c, d)
	k.create(a, 11, 1000)
	k.create(b, 21, 2000)
	k.create(c, 31, 1500)
	k.create(d, 41, 500)
	k.create(a, 12, 3000)
	k.start(a, 11, 1100)
	k.start(d, 41, 600)
	k.end(d, 41, 900)
	h.waitIdle(t)

	// T1: a1 live; previews by scheduled start c1, b1, a2; replay d1.
	const t1 = "11:live 31:preview 21:preview 12:preview 41:replay"
	if got := show(k.walk(viewer, 20)); got != t1 {
		t.Fatalf("T1 feed\n got %s\nwant %s", got, t1)
	}
	first := k.page(viewer, 2, "", "")
	if got := show(first.Items); got != "11:live 31:preview" {
		t.Fatalf("T1 first page of 2: %s", got)
	}

	// Between T1 and T2: c1 goes live, a1 ends, a2 is deleted.
	k.start(c, 31, 1600)
	k.end(a, 11, 1700)
	if err := h.svc.DeleteStream(context.Background(), a, 12); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)

	// The T1 session reads its snapshot as it was, less the deleted a2,
	// then the replays without a1, which its snapshot showed live.
	second := k.page(viewer, 2, first.Session, first.Next)
	if got := show(second.Items); got != "21:preview 41:replay" || second.Next != "" {
		t.Fatalf("T1 session's second page: %s (next %q)", got, second.Next)
	}

	// T2: c1 live; b1 preview; replays a1 (1700), d1 (900).
	const t2 = "31:live 21:preview 11:replay 41:replay"
	for _, limit := range []int{1, 2, 3, 20} {
		if got := show(k.walk(viewer, limit)); got != t2 {
			t.Fatalf("T2 feed by pages of %d\n got %s\nwant %s", limit, got, t2)
		}
	}
}

// TestLiveTransitions checks the state machine: each transition from the
// wrong state is a conflict, and creation is idempotent only for the same
// fields.
func TestLiveTransitions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := context.Background()
	k := liveKit{t, h}
	const host = 7
	k.create(host, 70, 5000)
	code := func(err error) string { return feed.ErrorCode(err) }
	at := int64(6000)
	if _, err := h.svc.EndStream(ctx, host, 70, &at); code(err) != feed.ECONFLICT {
		t.Fatalf("end a preview: %v, want conflict", err)
	}
	k.start(host, 70, 6000)
	if _, err := h.svc.StartStream(ctx, host, 70, &at); code(err) != feed.ECONFLICT {
		t.Fatalf("start a live stream: %v, want conflict", err)
	}
	before := int64(5999)
	if _, err := h.svc.EndStream(ctx, host, 70, &before); code(err) != feed.EINVALID {
		t.Fatalf("end before the start: %v, want invalid", err)
	}
	k.end(host, 70, 7000)
	for name, fn := range map[string]func() error{
		"start a replay": func() error { _, err := h.svc.StartStream(ctx, host, 70, &at); return err },
		"end a replay":   func() error { _, err := h.svc.EndStream(ctx, host, 70, &at); return err },
	} {
		if err := fn(); code(err) != feed.ECONFLICT {
			t.Errorf("%s: %v, want conflict", name, err)
		}
	}
	sched := int64(5000)
	st, created, err := h.svc.CreateStream(ctx, service.StreamInput{HostID: host, StreamID: 70, ScheduledStart: &sched})
	if err != nil || created || st.State != feed.StreamReplay {
		t.Fatalf("create again: %+v created=%v err=%v, want the stored replay", st, created, err)
	}
	other := int64(5001)
	if _, _, err := h.svc.CreateStream(ctx, service.StreamInput{HostID: host, StreamID: 70, ScheduledStart: &other}); code(err) != feed.ECONFLICT {
		t.Fatalf("create with other fields: %v, want conflict", err)
	}
	if _, _, err := h.svc.CreateStream(ctx, service.StreamInput{HostID: host + 1, StreamID: 70, ScheduledStart: &sched}); code(err) != feed.ECONFLICT {
		t.Fatalf("another host's stream id: %v, want conflict", err)
	}
	if _, _, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: host, ContentID: 70}); code(err) != feed.ECONFLICT {
		t.Fatalf("a post with a stream's id: %v, want conflict", err)
	}
	if _, _, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: host, ContentID: 80}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.CreateStream(ctx, service.StreamInput{HostID: host, StreamID: 80, ScheduledStart: &sched}); code(err) != feed.ECONFLICT {
		t.Fatalf("a stream with a post's id: %v, want conflict", err)
	}
	if err := h.svc.DeleteStream(ctx, host, 70); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.DeleteStream(ctx, host, 70); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := h.svc.GetStream(ctx, host, 70); code(err) != feed.ENOTFOUND {
		t.Fatalf("get a deleted stream: %v, want not found", err)
	}
	if _, err := h.svc.StartStream(ctx, host, 99, &at); code(err) != feed.ENOTFOUND {
		t.Fatalf("start an unknown stream: %v, want not found", err)
	}
	if err := h.svc.DeleteStream(ctx, host, 99); code(err) != feed.ENOTFOUND {
		t.Fatalf("delete an unknown stream: %v, want not found", err)
	}
	if _, _, err := h.svc.CreateStream(ctx, service.StreamInput{HostID: host, StreamID: 70, ScheduledStart: &sched}); code(err) != feed.ECONFLICT {
		t.Fatalf("create a deleted stream again: %v, want conflict", err)
	}
	auto, created, err := h.svc.CreateStream(ctx, service.StreamInput{HostID: host, ScheduledStart: &sched})
	if err != nil || !created || auto.StreamID == 0 || auto.State != feed.StreamPreview {
		t.Fatalf("server-assigned id: %+v created=%v err=%v", auto, created, err)
	}
}

// TestLiveBadInput checks the 400s of the service's live calls.
func TestLiveBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{noWorkers: true})
	ctx := context.Background()
	k := liveKit{t, h}
	k.create(5, 50, 1000)
	zero, future := int64(0), time.Now().Add(time.Hour).UnixMilli()
	first := k.page(1, 5, "", "")
	for name, err := range map[string]error{
		"no scheduled_start": second(h.svc.CreateStream(ctx, service.StreamInput{HostID: 5, StreamID: 51})),
		"zero scheduled":     second(h.svc.CreateStream(ctx, service.StreamInput{HostID: 5, StreamID: 51, ScheduledStart: &zero})),
		"zero started_at":    only(h.svc.StartStream(ctx, 5, 50, &zero)),
		"future started_at":  only(h.svc.StartStream(ctx, 5, 50, &future)),
		"limit 0":            only(h.svc.LivePage(ctx, 1, feed.Page{Limit: 0}, "")),
		"cursor, no session": only(h.svc.LivePage(ctx, 1, feed.Page{Limit: 5, Cursor: "AXMAAAAAAAAAAQAAAAAAAAAB"}, "")),
		"session, no cursor": only(h.svc.LivePage(ctx, 1, feed.Page{Limit: 5}, first.Session)),
		"malformed session":  only(h.svc.LivePage(ctx, 1, feed.Page{Limit: 5, Cursor: "AXMAAAAAAAAAAQAAAAAAAAAB"}, "x1")),
		"malformed cursor":   only(h.svc.LivePage(ctx, 1, feed.Page{Limit: 5, Cursor: "nope"}, first.Session)),
		"a feed cursor":      only(h.svc.LivePage(ctx, 1, feed.Page{Limit: 5, Cursor: "AWYAAAAAAAAAAQAAAAAAAAAA"}, first.Session)),
	} {
		if feed.ErrorCode(err) != feed.EINVALID {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if _, err := h.svc.LivePage(ctx, 1, feed.Page{Limit: 5, Cursor: "AXMAAAAAAAAAAQAAAAAAAAAB"}, "12345"); feed.ErrorCode(err) != feed.ESESSION {
		t.Errorf("unknown session: %v, want session_expired", err)
	}
	// An offset into a snapshot, the cursor of a session stored in an
	// earlier format: start again.
	if _, err := h.svc.LivePage(ctx, 1, feed.Page{Limit: 5, Cursor: "AXMAAAAAAAAAAQAAAAAAAAAA"}, first.Session); feed.ErrorCode(err) != feed.ESESSION {
		t.Errorf("a cursor of an earlier format: %v, want session_expired", err)
	}
}

func second[A, B any](_ A, _ B, err error) error { return err }

func only[A any](_ A, err error) error { return err }

// TestLiveSessionExpiry checks that a session ends after the TTL (410) and
// that expired sessions are deleted as new ones are created: the table
// stays near the sessions of one TTL, and the metric counts the clean-up.
func TestLiveSessionExpiry(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	h := newHarness(t, harnessOpts{noWorkers: true, now: func() time.Time { return time.UnixMilli(clock.Load()) },
		configured: func(c *service.Config) { c.LiveSessionTTL = time.Minute }})
	k := liveKit{t, h}
	k.create(9, 90, 1000)
	k.create(9, 91, 2000)
	k.follow(1, 9)
	first := k.page(1, 1, "", "")
	clock.Add((59 * time.Second).Milliseconds())
	if got := k.page(1, 1, first.Session, first.Next); show(got.Items) != "91:preview" {
		t.Fatalf("page within the TTL: %s", show(got.Items))
	}
	clock.Add((2 * time.Second).Milliseconds())
	if _, err := h.svc.LivePage(context.Background(), 1, feed.Page{Limit: 1, Cursor: first.Next}, first.Session); feed.ErrorCode(err) != feed.ESESSION {
		t.Fatalf("page after the TTL: %v, want session_expired", err)
	}
	// Sessions created over ten TTLs, 50 per TTL: at most one TTL's worth
	// stays, plus what the last clean-ups had not reached.
	for i := range 500 {
		k.page(uint64(1+i%7), 1, "", "")
		clock.Add((1200 * time.Millisecond).Milliseconds())
	}
	rows := countRows(t, h, "live_sessions")
	if rows > 60 {
		t.Fatalf("%d sessions kept, want about the 50 of one TTL", rows)
	}
	if n := counterSum(t, h.reg, "feed_live_sessions_cleaned_total"); n < 440 {
		t.Fatalf("feed_live_sessions_cleaned_total = %v, want the expired sessions", n)
	}
	// Two first pages are two sessions.
	if a, b := k.page(1, 1, "", ""), k.page(1, 1, "", ""); a.Session == b.Session {
		t.Fatal("two first pages share a session")
	}
}

// TestLiveSessionsPerViewer: a viewer keeps its newest store.MaxLiveSessions
// sessions; a first page past them drops the oldest, whose next page is
// 410, while the others page on and another viewer's sessions stay.
func TestLiveSessionsPerViewer(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	h := newHarness(t, harnessOpts{noWorkers: true, now: func() time.Time { return time.UnixMilli(clock.Load()) }})
	k := liveKit{t, h}
	k.create(9, 90, 1000)
	k.create(9, 91, 2000)
	k.follow(1, 9)
	k.follow(2, 9)
	other := k.page(2, 1, "", "")
	var firsts []feed.LivePage
	for range store.MaxLiveSessions + 2 {
		clock.Add(1) // sessions of one viewer are ordered by their times
		firsts = append(firsts, k.page(1, 1, "", ""))
	}
	for i, first := range firsts {
		_, err := h.svc.LivePage(context.Background(), 1, feed.Page{Limit: 1, Cursor: first.Next}, first.Session)
		if dropped := i < 2; dropped != (feed.ErrorCode(err) == feed.ESESSION) || (!dropped && err != nil) {
			t.Errorf("next page of first page %d: %v (dropped: %v)", i, err, dropped)
		}
	}
	if got := k.page(2, 1, other.Session, other.Next); show(got.Items) != "91:preview" {
		t.Errorf("another viewer's session: %s", show(got.Items))
	}
	if rows := countRows(t, h, "live_sessions"); rows != store.MaxLiveSessions+1 {
		t.Errorf("%d sessions kept, want %d of the viewer and 1 of the other", rows, store.MaxLiveSessions)
	}
	if n := counterSum(t, h.reg, "feed_live_sessions_dropped_total"); n != 2 {
		t.Errorf("feed_live_sessions_dropped_total = %v, want 2", n)
	}
}

// TestLiveReplayModel checks random histories against a brute-force
// implementation of the ordering rules: hosts schedule, start, end and
// delete streams, viewers follow, unfollow and mute hosts, and each viewer's
// feed, walked in one session with a random page size, must equal the
// full sort of the streams of the hosts it follows. The replays list keeps
// 4 entries and one host has more followers than the push threshold, so
// pages come from the lists, the hosts' own lists below the floors and the
// pull policy.
func TestLiveReplayModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{configured: func(c *service.Config) {
		c.InboxLimit, c.InboxSlack, c.PushThreshold = 4, 25, 3
	}})
	k := liveKit{t, h}
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	hosts := []uint64{201, 202, 203, 204, 205}
	viewers := []uint64{1, 2, 3, 4, 5, 6}
	type model struct {
		feed.Stream
		deleted bool
	}
	streams := map[uint64]*model{}
	follows := map[[2]uint64]bool{}
	muted := map[[2]uint64]bool{}
	// Host 201 is followed by every viewer: past the threshold, it pulls.
	for _, v := range viewers {
		k.follow(v, 201)
		follows[[2]uint64{v, 201}] = true
	}
	nextID, clock := uint64(1000), int64(1_000_000)
	for round := range 12 {
		for range 15 {
			clock += int64(rng.IntN(50) + 1)
			host := hosts[rng.IntN(len(hosts))]
			var open []*model
			for _, m := range streams {
				if m.HostID == host && !m.deleted && m.State != feed.StreamReplay {
					open = append(open, m)
				}
			}
			slices.SortFunc(open, func(a, b *model) int { return cmp.Compare(a.StreamID, b.StreamID) })
			switch r := rng.IntN(10); {
			case r < 3 || len(open) == 0:
				nextID++
				sched := clock + int64(rng.IntN(1000)) - 300
				k.create(host, nextID, sched)
				streams[nextID] = &model{Stream: feed.Stream{StreamID: nextID, HostID: host, State: feed.StreamPreview, ScheduledStart: sched}}
			case r < 8:
				m := open[rng.IntN(len(open))]
				at := clock
				if m.State == feed.StreamPreview {
					k.start(host, m.StreamID, at)
					m.State, m.StartedAt = feed.StreamLive, &at
				} else {
					k.end(host, m.StreamID, at)
					m.State, m.EndedAt = feed.StreamReplay, &at
				}
			default:
				var all []*model
				for _, m := range streams {
					if m.HostID == host && !m.deleted {
						all = append(all, m)
					}
				}
				slices.SortFunc(all, func(a, b *model) int { return cmp.Compare(a.StreamID, b.StreamID) })
				if len(all) > 0 {
					m := all[rng.IntN(len(all))]
					if err := h.svc.DeleteStream(ctx, host, m.StreamID); err != nil {
						t.Fatal(err)
					}
					m.deleted = true
				}
			}
		}
		for range 3 {
			v, host := viewers[rng.IntN(len(viewers))], hosts[1+rng.IntN(len(hosts)-1)]
			pair := [2]uint64{v, host}
			switch rng.IntN(3) {
			case 0:
				k.follow(v, host)
				follows[pair] = true
			case 1:
				if err := h.svc.Unfollow(ctx, v, host); err != nil {
					t.Fatal(err)
				}
				delete(follows, pair)
			default:
				if err := h.svc.Mute(ctx, v, host, !muted[pair]); err != nil {
					t.Fatal(err)
				}
				muted[pair] = !muted[pair]
			}
		}
		// Half the viewers read their home feed, which makes them active:
		// the pull host's replays are pushed to them from then on.
		for _, v := range viewers[:3] {
			if _, err := h.svc.Feed(ctx, v, feed.Page{Limit: 1}); err != nil {
				t.Fatal(err)
			}
		}
		h.waitIdle(t)
		for _, v := range viewers {
			var want []feed.Stream
			for _, m := range streams {
				if pair := [2]uint64{v, m.HostID}; !m.deleted && follows[pair] && !muted[pair] {
					want = append(want, m.Stream)
				}
			}
			slices.SortFunc(want, bruteOrder)
			limit := 1 + rng.IntN(6)
			if got := k.walk(v, limit); show(got) != show(want) {
				t.Fatalf("round %d, viewer %d, pages of %d:\n got %s\nwant %s", round, v, limit, show(got), show(want))
			}
		}
	}
}

// bruteOrder is the contract's order, spelled out: live by started_at
// newest first, then previews by scheduled_start earliest first, then
// replays by ended_at newest first, ties by stream id descending.
func bruteOrder(a, b feed.Stream) int {
	rank := map[string]int{feed.StreamLive: 0, feed.StreamPreview: 1, feed.StreamReplay: 2}
	if rank[a.State] != rank[b.State] {
		return cmp.Compare(rank[a.State], rank[b.State])
	}
	var c int
	switch a.State {
	case feed.StreamLive:
		c = cmp.Compare(*b.StartedAt, *a.StartedAt)
	case feed.StreamPreview:
		c = cmp.Compare(a.ScheduledStart, b.ScheduledStart)
	default:
		c = cmp.Compare(*b.EndedAt, *a.EndedAt)
	}
	return cmp.Or(c, cmp.Compare(b.StreamID, a.StreamID))
}

// TestLiveSnapshotConsistency walks sessions while streams change between
// their pages: every session shows each stream at most once, and the
// streams of its snapshot (less those deleted) in the snapshot's order and
// states, then replays that its snapshot did not hold.
func TestLiveSnapshotConsistency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	k := liveKit{t, h}
	const viewer = 1
	hosts := []uint64{301, 302, 303}
	k.follow(viewer, hosts...)
	id := uint64(500)
	for i := range 12 {
		id++
		k.create(hosts[i%3], id, int64(1000+i*10))
		if i%2 == 0 {
			k.start(hosts[i%3], id, int64(2000+i))
		}
	}
	h.waitIdle(t)
	snapshot := k.walk(viewer, 100)
	first := k.page(viewer, 3, "", "")
	seen := map[uint64]bool{}
	var got []feed.Stream
	p := first
	for step := 0; ; step++ {
		for _, st := range p.Items {
			if seen[st.StreamID] {
				t.Fatalf("stream %d twice in one session", st.StreamID)
			}
			seen[st.StreamID] = true
		}
		got = append(got, p.Items...)
		if p.Next == "" {
			break
		}
		// Change the streams between pages: end the first live one,
		// start a preview, delete one.
		if st := snapshot[step]; step < 2 {
			k.end(st.HostID, st.StreamID, int64(3000+step))
		}
		if step == 1 {
			k.start(hosts[1], 502, 2500)
			if err := h.svc.DeleteStream(context.Background(), hosts[2], 512); err != nil {
				t.Fatal(err)
			}
		}
		h.waitIdle(t)
		p = k.page(viewer, 3, first.Session, p.Next)
	}
	var want []feed.Stream
	for _, st := range snapshot {
		if st.StreamID != 512 {
			want = append(want, st)
		}
	}
	if show(got) != show(want) {
		t.Fatalf("session\n got %s\nwant %s", show(got), show(want))
	}
}

// countRows counts a table's rows on every database of h.
func countRows(t testing.TB, h *harness, table string) int {
	t.Helper()
	total := 0
	for _, sh := range h.store.Shards() {
		var n int
		if err := sh.DB.Get(&n, "SELECT COUNT(*) FROM "+table); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// TestLiveSessionStoresTime checks what a session keeps: the snapshot's
// time, and only the streams whose transitions fall between that time and
// the first page's read, as that read saw them. Streams changed long
// before a first page cost its session nothing, however many; streams
// started, ended and created just before it are stored, and later pages
// (with more transitions between them) still show the first page's order.
func TestLiveSessionStoresTime(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	h := newHarness(t, harnessOpts{noWorkers: true, now: func() time.Time { return time.UnixMilli(clock.Load()) }})
	k := liveKit{t, h}
	const viewer = 1
	hosts := []uint64{401, 402, 403, 404}
	k.follow(viewer, hosts...)
	id := uint64(1000)
	for i := range 3 * store.MaxQueuedStreams {
		id++
		k.create(hosts[i%len(hosts)], id, int64(10_000+i))
		if i%3 == 0 {
			k.start(hosts[i%len(hosts)], id, int64(20_000+i))
		}
	}
	sessionBytes := func() int {
		t.Helper()
		total := 0
		for _, sh := range h.store.Shards() {
			var n int
			if err := sh.DB.Get(&n, "SELECT COALESCE(SUM(LENGTH(snapshot)), 0) FROM live_sessions"); err != nil {
				t.Fatal(err)
			}
			total += n
		}
		return total
	}
	clock.Add(time.Minute.Milliseconds())
	for range 20 {
		k.page(viewer, 5, "", "")
	}
	if n := sessionBytes(); n != 0 {
		t.Fatalf("first pages over %d streams changed a minute before stored %d bytes, want 0", id-1000, n)
	}

	// Within the lag before a first page: a start, an end, a creation.
	k.start(hosts[1], 1002, 30_000)
	k.end(hosts[0], 1001, 40_000)
	k.create(hosts[2], 2000, 50_000)
	clock.Add(1)
	want := k.walk(viewer, 100)
	first := k.page(viewer, 7, "", "")
	var rows []struct {
		Snapshot []byte `db:"snapshot"`
	}
	if err := h.store.ShardOf(viewer).DB.Select(&rows, "SELECT snapshot FROM live_sessions WHERE user_id = ? AND session_id = ?", viewer, first.Session); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || len(rows[0].Snapshot) != 3*9 {
		t.Fatalf("session of a first page after 3 recent transitions: %v, want one of 27 bytes", rows)
	}

	var previews []uint64 // of hosts[2]
	for i := 2; len(previews) < 8; i += len(hosts) {
		if i%3 != 0 {
			previews = append(previews, uint64(1001+i))
		}
	}
	got, p := first.Items, first
	for step := 0; p.Next != ""; step++ {
		// Between pages: start a preview, end a live stream, create one.
		if step < 8 {
			k.start(hosts[2], previews[step], int64(60_000+step))
			k.end(hosts[3], uint64(1004+12*step), int64(70_000+step))
			k.create(hosts[3], uint64(3000+step), int64(80_000+step))
		}
		clock.Add(time.Second.Milliseconds())
		p = k.page(viewer, 7, first.Session, p.Next)
		got = append(got, p.Items...)
		if step == 0 {
			clock.Add(time.Minute.Milliseconds())
		}
	}
	if show(got) != show(want) {
		t.Fatalf("session\n got %s\nwant %s", show(got), show(want))
	}
}

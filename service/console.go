package service

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// What the operator's console shows: each database's state, the deliveries
// under way and any user's feed with where its items came from. The reads
// are the API's own where one exists, and otherwise reads of the server's
// statistics and of the queues' indexes; a database that does not answer
// within the probe timeout is shown as such, never waited for.

// PoolStatus is one class's connection pool of a database in this process.
type PoolStatus struct {
	Class       string
	InUse, Idle int
	Max         int
	Waits       int64         // statements that waited for a connection, since start
	WaitTime    time.Duration // their total wait
}

// DatabaseStatus is one database of the shard map as the console shows it.
type DatabaseStatus struct {
	Name string
	// State is the last probe's: up, down, outdated or unknown; Since is
	// when it entered it. Reachable says the probe's read answered.
	State     string
	Since     time.Time
	Reachable bool
	Ranges    []string // virtual shards it owns, "first-last"
	Pools     []PoolStatus
	// Inbox is the inbox table's size; Backlog the work queued here.
	Inbox   store.TableSize
	Backlog store.Backlog
	Reshard store.ReshardState
	// Unread says the sizes and backlog could not be read in time.
	Unread bool
}

// BytesPerEntry is the inbox's bytes per row, 0 when it is empty.
func (d DatabaseStatus) BytesPerEntry() int64 {
	if d.Inbox.Rows == 0 {
		return 0
	}
	return d.Inbox.Bytes / d.Inbox.Rows
}

// Overview is the console's first page.
type Overview struct {
	Readiness Readiness
	Epoch     int64
	Databases []DatabaseStatus
	Activity  []Sample
}

// Overview reads every database's state, each within the probe timeout.
func (s *Service) Overview(ctx context.Context) Overview {
	ctx = store.WithClass(ctx, store.Reads)
	o := Overview{Readiness: s.Readiness(), Epoch: s.store.Epoch(), Activity: s.Activity()}
	o.Databases = eachShard(s, ctx, func(ctx context.Context, sh *store.Shard) DatabaseStatus {
		h := sh.Health()
		d := DatabaseStatus{Name: sh.Name, State: h.State, Since: h.Since, Reachable: !h.Unreadable && h.State != store.StateUnknown,
			Ranges: s.store.Ranges(sh), Reshard: sh.Reshard()}
		for _, c := range store.Classes() {
			st := sh.Pool(c).Stats()
			d.Pools = append(d.Pools, PoolStatus{Class: c.String(), InUse: st.InUse, Idle: st.Idle,
				Max: st.MaxOpenConnections, Waits: st.WaitCount, WaitTime: st.WaitDuration})
		}
		sizes, err := sh.TableSizes(ctx)
		if err == nil {
			d.Inbox = sizes["inbox"]
			d.Backlog, err = sh.Backlog(ctx)
		}
		if err != nil {
			d.Unread = true
			s.log.Debug("console: read database state", "database", sh.Name, "error", err)
		}
		return d
	})
	return o
}

// eachShard calls fn for every database the probes do not find unreadable,
// side by side, each within the probe timeout, and returns the results in
// the shards' order; an unreadable database gets fn's result with a context
// already ended, so it answers at once.
func eachShard[T any](s *Service, ctx context.Context, fn func(ctx context.Context, sh *store.Shard) T) []T {
	shards := s.store.Shards()
	out := make([]T, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
			defer cancel()
			if sh.Health().Unreadable {
				cancel()
			}
			out[i] = fn(sctx, sh)
		})
	}
	wg.Wait()
	return out
}

// StuckAttempts is how many claims make a task not done stuck: its lease
// ran out (or its worker gave it back) at least twice.
const StuckAttempts = 3

// consoleListLimit bounds each database's rows in a console list.
const consoleListLimit = 50

// DeliveryStatus is a delivery with the database that holds it.
type DeliveryStatus struct {
	store.DeliveryRow
	Database string
}

// StuckTask is a stuck fan-out task with the database that holds it.
type StuckTask struct {
	store.StuckTask
	Database string
}

// Deliveries is the console's deliveries page.
type Deliveries struct {
	Deliveries []DeliveryStatus // not done first, oldest first; then the newest
	Stuck      []StuckTask
	// Unread names the databases that could not be read in time.
	Unread []string
}

// Deliveries lists, on every database, the deliveries not done and the
// newest ones, and the stuck fan-out tasks.
func (s *Service) Deliveries(ctx context.Context) Deliveries {
	ctx = store.WithClass(ctx, store.Reads)
	type part struct {
		d     []store.DeliveryRow
		stuck []store.StuckTask
		err   error
	}
	parts := eachShard(s, ctx, func(ctx context.Context, sh *store.Shard) part {
		d, err := s.store.Deliveries(ctx, sh, consoleListLimit)
		if err != nil {
			return part{err: err}
		}
		stuck, err := s.store.StuckTasks(ctx, sh, StuckAttempts, consoleListLimit)
		return part{d: d, stuck: stuck, err: err}
	})
	var out Deliveries
	for i, sh := range s.store.Shards() {
		p := parts[i]
		if p.err != nil {
			out.Unread = append(out.Unread, sh.Name)
			s.log.Debug("console: read deliveries", "database", sh.Name, "error", p.err)
			continue
		}
		for _, d := range p.d {
			out.Deliveries = append(out.Deliveries, DeliveryStatus{d, sh.Name})
		}
		for _, t := range p.stuck {
			out.Stuck = append(out.Stuck, StuckTask{t, sh.Name})
		}
	}
	open := func(d DeliveryStatus) bool { return d.State != feed.DeliveryDone }
	slices.SortStableFunc(out.Deliveries, func(a, b DeliveryStatus) int {
		if open(a) != open(b) {
			if open(a) {
				return -1
			}
			return 1
		}
		if open(a) {
			return cmp.Compare(a.CreatedAt, b.CreatedAt)
		}
		return cmp.Compare(b.CreatedAt, a.CreatedAt)
	})
	return out
}

// RetryTask ends a fan-out task's lease so that a worker takes it up at
// once, resuming at its progress mark. The worker that held it, if alive,
// loses its claim and stops at its next batch.
//
// Returns ENOTFOUND if no such task is unfinished.
func (s *Service) RetryTask(ctx context.Context, authorID, contentID uint64, seq int) error {
	ctx = store.WithClass(ctx, store.Writes)
	if err := s.store.RetryTask(ctx, authorID, contentID, seq); err != nil {
		return err
	}
	s.log.Info("console: task retried", "author_id", authorID, "content_id", contentID, "seq", seq)
	s.wake.notify(fanoutQueue)
	return nil
}

// FeedItem is an item of a feed page and where it came from: Pushed items
// are in the reader's inbox, the others were merged from their author's
// outbox when the page was read.
type FeedItem struct {
	feed.Post
	Pushed bool
}

// FollowedAuthor is an author a user follows, with the author's fan-out
// mode (push, switching or pull) and follower count.
type FollowedAuthor struct {
	feed.Follow
	Mode      string
	Followers int64
}

// UserView is the console's page of a user.
type UserView struct {
	UserID   uint64
	Database string
	Items    []FeedItem
	// Next is the API's cursor of the next feed page ("" at the end);
	// MissingAuthors as in the API.
	Next           string
	MissingAuthors []uint64
	Following      []FollowedAuthor
	FollowingNext  string
	Muted, Hidden  []feed.Mute
}

// consoleFeedLimit is the items of a feed page in the console.
const consoleFeedLimit = 20

// InspectUser reads a page of the user's feed as the API serves it (without
// marking the user active: an operator's look changes no fan-out), marks
// each item pushed or pulled, and lists a page of the authors the user
// follows, the authors they mute and the users they hide from.
//
// Returns EINVALID for a malformed cursor.
func (s *Service) InspectUser(ctx context.Context, userID uint64, cursor, followingCursor string) (UserView, error) {
	v := UserView{UserID: userID, Database: s.store.ShardOf(userID).Name}
	page, err := s.Feed(context.WithValue(ctx, inspectKey{}, true), userID, feed.Page{Limit: consoleFeedLimit, Cursor: cursor})
	if err != nil {
		return v, err
	}
	v.Next, v.MissingAuthors = page.Next, page.MissingAuthors
	keys := make([]feed.Key, len(page.Items))
	for i, p := range page.Items {
		keys[i] = p.Key()
	}
	ctx = store.WithClass(ctx, store.Reads)
	pushed, err := s.store.InboxHolds(ctx, userID, keys)
	if err != nil {
		return v, err
	}
	for _, p := range page.Items {
		v.Items = append(v.Items, FeedItem{Post: p, Pushed: pushed[p.Key()]})
	}
	follows, next, err := s.ListFollowing(ctx, userID, feed.Page{Limit: feed.MaxPageLimit, Cursor: followingCursor})
	if err != nil {
		return v, err
	}
	v.FollowingNext = next
	ids := make([]uint64, len(follows))
	for i, f := range follows {
		ids[i] = f.AuthorID
	}
	infos, err := s.store.AuthorInfos(ctx, ids)
	if err != nil {
		return v, err
	}
	modes := map[int]string{store.AuthorPush: "push", store.AuthorSwitching: "switching to pull", store.AuthorPull: "pull"}
	for _, f := range follows {
		info := infos[f.AuthorID]
		v.Following = append(v.Following, FollowedAuthor{Follow: f, Mode: modes[info.Mode], Followers: info.Followers})
	}
	if v.Muted, _, err = s.ListMuted(ctx, userID, feed.Page{Limit: feed.MaxPageLimit}); err != nil {
		return v, err
	}
	v.Hidden, _, err = s.ListHiddenFrom(ctx, userID, feed.Page{Limit: feed.MaxPageLimit})
	return v, err
}

// inspectKey marks a feed read made by the console: it does not mark the
// reader active (markRead).
type inspectKey struct{}

func inspecting(ctx context.Context) bool { return ctx.Value(inspectKey{}) != nil }

package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
)

// Id layout. All ids live on one shard; user ids are spread so that the
// users of one fan-out batch are far apart in the inbox's clustered key and
// every row is a random insert into a full inbox, as in production.
const (
	userBase  = 1_000_000 // loaded user i is userBase + i*userStep
	userStep  = 16
	extraBase = userBase + userStep/2 // phase B's big audiences: extraBase + k*userStep
	roomBase  = userBase + userStep/4 // phase A's inboxes with room: roomBase + k*userStep

	fanoutAuthorBase  = 10      // phase A authors
	roomAuthorBase    = 55      // phase A authors of the inboxes with room
	pullAuthorBase    = 100     // phase C pull authors
	latencyAuthorBase = 500     // phase B authors
	mutedAuthorBase   = 100_000 // phase C's muted authors
	inboxAuthorBase   = 200_000 // authors of the synthetic loaded rows

	// Content ids of synthetic rows, far above the server's ids (41 bits of
	// milliseconds shifted by 23 stay below 2^60 until the 2060s).
	loadedContentBase    = 1 << 62
	overshootContentBase = 1<<62 + 1<<60 // phase A's steady-state overshoot
	ceilingContentBase   = 1<<62 + 1<<61

	// inboxAuthors is how many synthetic authors the loaded rows come from.
	inboxAuthors = 100
	// loadSpan is the time the loaded rows (and the pull authors' posts)
	// spread over, ending an hour before the run.
	loadSpan = 30 * 24 * time.Hour
)

// dataset is what load built.
type dataset struct {
	users  []uint64 // loaded users, ascending
	t0, t1 int64    // loaded rows' publish_time range (ms)
}

func loadedUser(i int) uint64 { return userBase + uint64(i)*userStep }

func extraUser(k int) uint64 { return extraBase + uint64(k)*userStep }

func roomUser(k int) uint64 { return roomBase + uint64(k)*userStep }

// newDataset lays out opt.Users users and the loaded rows' time span,
// which ends an hour before now.
func newDataset(users int, now time.Time) dataset {
	d := dataset{users: make([]uint64, users)}
	for i := range users {
		d.users[i] = loadedUser(i)
	}
	d.t1 = now.Add(-time.Hour).UnixMilli()
	d.t0 = d.t1 - loadSpan.Milliseconds()
	return d
}

// load fills the dataset's inboxes with opt.InboxRows rows each (see
// loadInboxes) and records how fast.
func (b *bench) load(ctx context.Context) error {
	start := time.Now()
	loaded, err := b.loadInboxes(ctx, b.st, b.data.users, b.opt.InboxRows)
	if err != nil {
		return err
	}
	el := time.Since(start)
	b.rep.Load = loadResult{Rows: loaded, Elapsed: el}
	b.log.Info("feedbench: loaded inboxes", "rows", loaded, "seconds", el.Seconds(), "rows_per_second", int(float64(loaded)/el.Seconds()))
	return nil
}

// loadInboxes fills the users' inboxes with perUser rows each over the
// loaded time span, in publish-time order (slot by slot over all users), the
// order fan-out writes them in: the table gets the fill factor of a live
// inbox, not of a sorted bulk load. st has one database. Returns the rows
// inserted.
func (b *bench) loadInboxes(ctx context.Context, st *store.Store, users []uint64, perUser int) (int64, error) {
	d := b.data
	db := st.Shards()[0].DB
	// Every user has a header row, as a live user has from the first follow
	// on, with a floor as trimming leaves one (here: below every loaded
	// row, none of which is missing); its rows arrive below it.
	if err := storeload.Activity(ctx, st, users, d.t0, d.t0, &feed.Key{PublishTime: d.t0}); err != nil {
		return 0, err
	}
	n := len(users)
	b.log.Info("feedbench: loading inboxes", "users", n, "rows_per_user", perUser, "rows", n*perUser)

	batches := make(chan []store.InboxRow, 4)
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var g group
	g.Go(func() error {
		defer close(batches)
		for r := range perUser {
			for lo := 0; lo < n; lo += 1000 {
				rows := make([]store.InboxRow, 0, 1000)
				for i := lo; i < min(lo+1000, n); i++ {
					// Slot r holds inboxAuthors posts; user i gets one of them.
					a := (i + 7*r) % inboxAuthors
					rows = append(rows, store.InboxRow{UserID: users[i], Post: d.loadedPost(r, a, perUser)})
				}
				select {
				case batches <- rows:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			if step := max(1, perUser/5); (r+1)%step == 0 {
				b.log.Info("feedbench: loading inboxes", "slots_done", r+1, "of", perUser)
			}
		}
		return nil
	})
	var mu sync.Mutex
	var loaded int64
	// Two loaders: one per core of the reference machine.
	for range 2 {
		g.Go(func() error {
			for rows := range batches {
				k, err := insertInboxRows(gctx, db, rows)
				if err != nil {
					cancel()
					return err
				}
				mu.Lock()
				loaded += k
				mu.Unlock()
			}
			return nil
		})
	}
	return loaded, g.Wait()
}

// loadedPost is the post of author a (of inboxAuthors) in slot r of
// perUser over the loaded time span: what loaded inbox rows point to.
func (d dataset) loadedPost(r, a, perUser int) feed.Post {
	slot := (d.t1 - d.t0) / int64(perUser)
	return feed.Post{
		ContentID:   loadedContentBase + uint64(r)*inboxAuthors + uint64(a),
		AuthorID:    inboxAuthorBase + uint64(a),
		PublishTime: d.t0 + int64(r)*slot + int64(a)*slot/inboxAuthors,
		Kind:        loadedKind(r, a),
	}
}

// loadedKind is the kind of the post of author a in slot r: one slot in ten
// is photos, and one post in rareKindEvery a video (author 50's in every
// fifth slot), the kinds phase C's filtered rows read.
func loadedKind(r, a int) string {
	switch {
	case r%10 == 9:
		return "photo"
	case (r*inboxAuthors+a)%rareKindEvery == rareKindEvery/2:
		return "video"
	}
	return feed.KindPost
}

// rareKindEvery: one loaded post in this many is a video.
const rareKindEvery = 500

// footprintAsLoaded is phase D's first footprint, taken before any other
// phase writes to the inbox.
func (b *bench) footprintAsLoaded(ctx context.Context) error {
	f, err := b.footprint(ctx, "as loaded", false)
	if err != nil {
		return err
	}
	b.rep.Footprints = append(b.rep.Footprints, f)
	return nil
}

// diskPhase is the rest of phase D: the inbox's footprint after the other
// phases' writes (and after OPTIMIZE TABLE, with -optimize), then the
// steady state of fan-out and retention on a database of its own.
func (b *bench) diskPhase(ctx context.Context) error {
	f, err := b.footprint(ctx, "at the end of the run", false)
	if err != nil {
		return err
	}
	b.rep.Footprints = append(b.rep.Footprints, f)
	switch {
	case b.opt.Optimize && b.rep.Server.TiDB:
		b.rep.Footprints = append(b.rep.Footprints, footprintResult{When: afterOptimize, Unavailable: "TiDB does not support OPTIMIZE TABLE"})
	case b.opt.Optimize:
		f, err := b.footprint(ctx, afterOptimize, true)
		if err != nil {
			return err
		}
		b.rep.Footprints = append(b.rep.Footprints, f)
	}
	return b.steadyState(ctx)
}

// afterOptimize is when phase D's footprint of the rebuilt inbox is taken.
const afterOptimize = "after OPTIMIZE TABLE"

// footprint measures phase D: disk bytes per inbox row.
func (b *bench) footprint(ctx context.Context, when string, optimize bool) (footprintResult, error) {
	start := time.Now()
	f, err := inboxFootprint(ctx, b.db, optimize)
	if err != nil {
		return footprintResult{}, err
	}
	b.log.Info("feedbench: D inbox footprint", "when", when, "rows", f.Rows, "data_bytes", f.DataBytes,
		"index_bytes", f.IndexBytes, "bytes_per_row", f.BytesPerRow(), "seconds", time.Since(start).Seconds())
	return footprintResult{When: when, tableFootprint: f}, nil
}

// sample returns k distinct items of from, ascending.
func (b *bench) sample(from []uint64, k int) []uint64 {
	out := make([]uint64, 0, k)
	for _, i := range b.rng.Perm(len(from))[:k] {
		out = append(out, from[i])
	}
	slices.Sort(out)
	return out
}

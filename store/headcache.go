package store

import (
	"cmp"
	"context"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// A deep page's heads are what it costs: one index seek per followee, each
// page again, where the pages of one scroll differ only around their
// cursor. What a read learned of an outbox's older posts stays true as long
// as no post is added there, and a post lands below its publish time's
// "now" only when it is published backdated. So every backdated post bumps
// a sequence of its database in its own transaction, and PullNewest keeps
// what it learned of each outbox for ranges older than the backdate margin
// (less the clock skew between processes), valid while that sequence has
// not moved: reading it is one statement per database, against a seek per
// followee. Deletes only shrink outboxes, which heads may overstate
// (PullNewest reads on when a head's post is gone); follows, unfollows and
// mutes change the sources, not what is known of each. A read of some
// kinds learns of those kinds' posts only, and keeps that apart: what is
// known is by outbox view, an author's posts of every kind or of one set of
// kinds.

// backdateMargin is how much older than its publish's now a publish_time
// must be for the post to count as backdated. Posts of clients that stamp
// their own times a little late stay below it and leave the caches alone.
const backdateMargin = 10 * time.Minute

// bumpBackdatesSQL moves the database's sequence; the row exists from the
// migration on, and is created if it does not.
const bumpBackdatesSQL = `INSERT INTO backdates (id, seq) VALUES (0, 1) ON DUPLICATE KEY UPDATE seq = seq + 1`

// backdatesSQL reads it.
const backdatesSQL = `SELECT seq FROM backdates WHERE id = 0`

// bumpBackdates moves the database's sequence in tx when p is backdated
// at now (Unix ms).
func bumpBackdates(ctx context.Context, tx *sqlx.Tx, p feed.Post, now int64) error {
	if p.PublishTime >= now-backdateMargin.Milliseconds() {
		return nil
	}
	_, err := tx.ExecContext(ctx, bumpBackdatesSQL)
	return err
}

// CacheHeads lets PullNewest keep what it reads of outboxes' older posts
// (see backdateMargin). skew is the clock difference tolerated between the
// processes of a deployment, and now the clock publishes stamp their posts
// with: a range is cached only if it lies a margin and twice the skew below
// now, where no post can arrive without being backdated.
func (s *Store) CacheHeads(skew time.Duration, now func() time.Time) {
	c := &headCache{below: backdateMargin + 2*skew, now: now, seed: maphash.MakeSeed(), scrolls: map[uint64]*scrollKnown{}}
	for i := range c.stripes {
		c.stripes[i].m = map[outboxView]outboxKnown{}
	}
	s.heads.Store(c)
}

// headCacheViews bounds the outbox views a process keeps knowledge of.
const headCacheViews = 200_000

// headCache is what this process knows of outboxes, by view.
type headCache struct {
	below   time.Duration // ranges above now less this are not kept
	now     func() time.Time
	stripes [16]struct {
		mu sync.Mutex
		m  map[outboxView]outboxKnown
	}
	seed     maphash.Seed
	scrollMu sync.Mutex
	scrolls  map[uint64]*scrollKnown // by scrollKey
}

// outboxView is what a read sees of an author's outbox: its posts of every
// kind (kinds empty), or of the kinds of a filtered read, joined by spaces.
type outboxView struct {
	author uint64
	kinds  string
}

// viewKinds is the kinds part of the views of a read of the kinds (sorted;
// nil for every kind). A kind has no space (feed.KindPattern).
func viewKinds(kinds []string) string { return strings.Join(kinds, " ") }

// outboxKnown is what one read learned of an outbox view: every post of it
// in the publish times lo..hi (inclusive) was at one of times (newest
// first) when the database's backdate sequence read seq, under the layout
// epoch. A post deleted since may still be listed: heads may overstate. An
// outbox that a reshard moved away and back may have taken backdated posts
// meanwhile, which that sequence does not count: a new epoch voids all.
type outboxKnown struct {
	sh     *Shard
	epoch  int64
	seq    uint64
	lo, hi int64
	times  []int64
}

// head answers a heads read of the times lo..hi: the newest listed time in
// it (found), that there is none (!found), or that it does not know (!ok).
func (k outboxKnown) head(lo, hi int64) (t int64, found, ok bool) {
	if hi > k.hi {
		return 0, false, false
	}
	i, _ := slices.BinarySearchFunc(k.times, hi, func(t, hi int64) int {
		if t > hi {
			return -1
		}
		return 1
	})
	if i < len(k.times) {
		return k.times[i], k.times[i] >= lo, true
	}
	return 0, false, k.lo <= lo
}

func (c *headCache) stripe(author uint64) *struct {
	mu sync.Mutex
	m  map[outboxView]outboxKnown
} {
	return &c.stripes[(author*0x9E3779B97F4A7C15)>>60]
}

// knowledge is one PullNewest call's hold on the cache: the time it
// started, the sequence of each database it read, and the kinds it reads
// (viewKinds); a database whose sequence it could not read has no entry,
// and nothing of it is used or kept.
type knowledge struct {
	c     *headCache
	store *Store
	top   int64 // the newest publish time whose range may be kept
	epoch int64
	seqs  map[*Shard]uint64
	kinds string
}

// seqRead is a database's backdate sequence, as read, or the failure.
type seqRead struct {
	seq uint64
	err error
}

// seqsRead is one read of the backdate sequences of a set of databases,
// begun at a time from which on a post that is not backdated lies above
// top.
type seqsRead struct {
	top, epoch int64
	done       chan struct{}
	seqs       map[*Shard]seqRead
}

// readSeqs reads the backdate sequence of each database, in parallel and
// each within timeout when above zero; a database whose probe could not
// read it is not asked.
func (s *Store) readSeqs(ctx context.Context, c *headCache, shards []*Shard, timeout time.Duration) *seqsRead {
	// The time is taken before anything is read.
	r := &seqsRead{top: c.now().Add(-c.below).UnixMilli(), epoch: s.Epoch(), done: make(chan struct{}), seqs: map[*Shard]seqRead{}}
	var mu sync.Mutex
	go func() {
		defer close(r.done)
		eachShard(ctx, shards, timeout, func(ctx context.Context, i int, skip error) {
			got := seqRead{err: skip}
			if skip == nil {
				got.err = wrap("backdates", sqlx.GetContext(ctx, shards[i].pool(ctx), &got.seq, backdatesSQL))
			}
			mu.Lock()
			r.seqs[shards[i]] = got
			mu.Unlock()
		})
	}()
	return r
}

type aheadKey struct{}

// LearnAhead starts reading, in the background, what a deep page's
// PullNewest reads first when outbox heads are cached (the backdate
// sequence of each of the databases, each within timeout), and returns a
// ctx that hands the read to it: the caller reads the inbox or the
// followed authors meanwhile. With the cache off, or a read under way in
// ctx, it returns ctx.
func (s *Store) LearnAhead(ctx context.Context, shards []*Shard, timeout time.Duration) context.Context {
	c := s.heads.Load()
	if c == nil {
		return ctx
	}
	if r, ok := ctx.Value(aheadKey{}).(*seqsRead); ok && r.epoch == s.Epoch() {
		return ctx
	}
	return context.WithValue(ctx, aheadKey{}, s.readSeqs(ctx, c, shards, timeout))
}

// learn returns the cache's knowledge for a read of sources, and what reading
// the backdate sequence of each of their databases cost and missed (here
// or ahead, see LearnAhead): a database that fails it is not asked again
// by the read (Missing names its authors). The knowledge is nil when the
// cache is off; the error is for ctx ending.
func (s *Store) learn(ctx context.Context, sources []PullSource, timeout time.Duration) (*knowledge, Pulled, error) {
	c := s.heads.Load()
	if c == nil {
		return nil, Pulled{}, nil
	}
	asked := map[*Shard]bool{}
	var last *Shard
	for _, src := range sources {
		if sh := s.ShardOf(src.AuthorID); sh != last { // thousands of sources, few databases
			asked[sh], last = true, sh
		}
	}
	r, ok := ctx.Value(aheadKey{}).(*seqsRead)
	if !ok || r.epoch != s.Epoch() {
		r = s.readSeqs(ctx, c, slices.Collect(maps.Keys(asked)), timeout)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, Pulled{}, wrap("pull posts", ctx.Err())
	}
	k := &knowledge{c: c, store: s, top: r.top, epoch: r.epoch, seqs: map[*Shard]uint64{}, kinds: viewKinds(sources[0].Kinds)}
	var out Pulled
	for _, sh := range s.shards { // by name: Err names the same database every time
		got, read := r.seqs[sh]
		if read && got.err == nil {
			k.seqs[sh] = got.seq
			out.Queries++
			out.Rows++
		}
		if !read || got.err == nil || !asked[sh] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, Pulled{}, wrap("pull posts", err)
		}
		out.Err = cmp.Or(out.Err, got.err)
		for _, src := range sources {
			if s.ShardOf(src.AuthorID) == sh {
				out.Missing = append(out.Missing, src.AuthorID)
			}
		}
	}
	slices.Sort(out.Missing)
	out.Missing = slices.Compact(out.Missing)
	return k, out, nil
}

// cached returns the head of src from what is known, or ok=false.
func (k *knowledge) cached(src PullSource) (t int64, found, ok bool) {
	if k == nil {
		return 0, false, false
	}
	st := k.c.stripe(src.AuthorID)
	st.mu.Lock()
	e, in := st.m[outboxView{src.AuthorID, k.kinds}]
	st.mu.Unlock()
	// Under one epoch an author stays on one database: e.sh is its own.
	if !in || e.epoch != k.epoch {
		return 0, false, false
	}
	if seq, read := k.seqs[e.sh]; !read || e.seq != seq {
		return 0, false, false
	}
	return e.head(src.timeRange())
}

// keep records what a read learned of an author's outbox, in the read's
// view: its posts in lo..hi are at times, cut to the range that may be kept.
func (k *knowledge) keep(author uint64, lo, hi int64, times []int64) {
	if k == nil {
		return
	}
	sh := k.store.ShardOf(author)
	seq, read := k.seqs[sh]
	hi = min(hi, k.top)
	if !read || lo > hi {
		return
	}
	i := 0
	for i < len(times) && times[i] > hi {
		i++
	}
	e := outboxKnown{sh: sh, epoch: k.epoch, seq: seq, lo: lo, hi: hi, times: slices.Clone(times[i:])}
	st := k.c.stripe(author)
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.m) >= headCacheViews/len(k.c.stripes) {
		for a := range st.m { // evict an arbitrary entry
			delete(st.m, a)
			break
		}
	}
	st.m[outboxView{author, k.kinds}] = e
}

// keepHeads records what a heads statement over the authors' posts in
// the times lo..hi found: no post above each head, none at all in range
// for the authors without one.
func (k *knowledge) keepHeads(authors []uint64, lo, hi int64, heads map[uint64]int64) {
	if k == nil {
		return
	}
	for _, a := range authors {
		if t, ok := heads[a]; ok {
			k.keep(a, t, hi, []int64{t})
		} else {
			k.keep(a, lo, hi, nil)
		}
	}
}

// keepPosts records what a read of the sources' newest posts (up to limit
// each) found: every live post of a source's range, or, for a source that
// filled its limit, those above its oldest post read. Sources of databases
// that failed are left out.
func (k *knowledge) keepPosts(srcs []PullSource, got Pulled, limit int) {
	if k == nil {
		return
	}
	byAuthor := map[uint64][]int64{}
	for _, p := range got.Posts {
		byAuthor[p.AuthorID] = append(byAuthor[p.AuthorID], p.PublishTime)
	}
	for _, src := range srcs {
		if _, gone := slices.BinarySearch(got.Missing, src.AuthorID); gone {
			continue
		}
		times := byAuthor[src.AuthorID]
		slices.SortFunc(times, func(a, b int64) int { return cmp.Compare(b, a) })
		lo := src.From.PublishTime
		if src.From.ContentID > 0 {
			lo++ // posts at From's millisecond below it were not read
		}
		hi := src.Before.PublishTime - 1 // posts at Before's millisecond were read only below it
		if len(times) >= limit {
			lo = times[len(times)-1] + 1
		}
		k.keep(src.AuthorID, lo, hi, slices.Compact(times))
	}
}

// keepWindows records what a window statement over srcs (one range, from
// the bound up) found: every live post of each source's window, and, when
// the heads below the bound were read from low, each source's head there
// (none: no post in low..bound).
func (k *knowledge) keepWindows(srcs []PullSource, posts []feed.Post, below map[uint64]int64, low int64) {
	if k == nil {
		return
	}
	byAuthor := map[uint64][]int64{}
	for _, p := range posts {
		byAuthor[p.AuthorID] = append(byAuthor[p.AuthorID], p.PublishTime)
	}
	for _, src := range srcs {
		times := byAuthor[src.AuthorID]
		slices.SortFunc(times, func(a, b int64) int { return cmp.Compare(b, a) })
		times = slices.Compact(times)
		lo := src.From.PublishTime
		if src.From.ContentID > 0 {
			lo++ // posts at From's millisecond below it were not kept
		}
		switch h, ok := below[src.AuthorID]; {
		case low < 0:
		case ok:
			lo, times = h, append(times, h)
		default:
			lo = low
		}
		k.keep(src.AuthorID, lo, src.Before.PublishTime-1, times)
	}
}

// The pages of one deep scroll ask for the same thousands of sources, each
// page below the last one's last item, and a lookup per source a page cost
// more than the page's statements. So PullNewest also keeps, per list of
// sources that share their upper bound, the heads it derived for them,
// newest first: for a lower bound the heads at or below it still hold
// (a head may stand above its source's posts), and those above it are of
// the few sources the page before read, which are derived again. The list
// is valid as long as what it was derived from (the same sequences, the
// same epoch), and only for a bound that lies where posts are kept.

// headCacheScrolls bounds the lists of sources a process keeps heads of.
const headCacheScrolls = 256

// scrollKnown is what a read derived of the heads of a list of sources
// below before, under the layout epoch and the backdate sequences seqs:
// heads, newest first, of every source of the list with a post in range
// (each at or above its source's newest post there: some were derived for
// a higher bound).
type scrollKnown struct {
	sources []scrollSource
	kinds   string
	epoch   int64
	seqs    map[*Shard]uint64
	before  feed.Key
	heads   []sourceHead
}

// scrollSource is what a source of a list is besides the shared bound.
type scrollSource struct {
	author uint64
	from   feed.Key
}

// scrollKey returns the key of a read's list of sources, and whether the
// list can be kept: the sources share their upper bound, which lies where
// k keeps what it learns, and k read the backdate sequence of each of
// their databases.
func (k *knowledge) scrollKey(sources []PullSource) (uint64, bool) {
	if k == nil || len(sources) == 0 {
		return 0, false
	}
	before := sources[0].Before
	if _, hi := sources[0].timeRange(); hi > k.top {
		return 0, false
	}
	h := maphash.String(k.c.seed, k.kinds)
	var last *Shard
	for _, src := range sources {
		if src.Before != before {
			return 0, false
		}
		if sh := k.store.ShardOf(src.AuthorID); sh != last {
			if _, read := k.seqs[sh]; !read {
				return 0, false
			}
			last = sh
		}
		for _, w := range [...]uint64{src.AuthorID, uint64(src.From.PublishTime), src.From.ContentID} {
			h = (h ^ w) * 0x100000001b3
		}
	}
	return h, true
}

// scroll returns the heads kept of the sources (their key), or nil when
// none are kept at their bound or above under what k read.
func (k *knowledge) scroll(key uint64, sources []PullSource) *scrollKnown {
	k.c.scrollMu.Lock()
	e := k.c.scrolls[key]
	k.c.scrollMu.Unlock()
	if e == nil || e.kinds != k.kinds || e.epoch != k.epoch || !maps.Equal(e.seqs, k.seqs) ||
		e.before.Less(sources[0].Before) || len(e.sources) != len(sources) {
		return nil
	}
	for i, src := range sources {
		if e.sources[i] != (scrollSource{src.AuthorID, src.From}) {
			return nil
		}
	}
	return e
}

// keepScroll records the heads, newest first, derived of the sources
// (their key); from is the kept list they were derived from, whose
// sources they share, or nil.
func (k *knowledge) keepScroll(key uint64, sources []PullSource, heads []sourceHead, from *scrollKnown) {
	e := &scrollKnown{kinds: k.kinds, epoch: k.epoch, seqs: k.seqs, before: sources[0].Before, heads: heads}
	if from != nil {
		e.sources = from.sources // the same list: kept lists are not changed
	} else {
		e.sources = make([]scrollSource, len(sources))
		for i, src := range sources {
			e.sources[i] = scrollSource{src.AuthorID, src.From}
		}
	}
	k.c.scrollMu.Lock()
	defer k.c.scrollMu.Unlock()
	if _, in := k.c.scrolls[key]; !in && len(k.c.scrolls) >= headCacheScrolls {
		for key := range k.c.scrolls { // evict an arbitrary list
			delete(k.c.scrolls, key)
			break
		}
	}
	k.c.scrolls[key] = e
}

// scrollHeads returns the heads of the sources, newest first: pullHeads'
// of every source, or, when k keeps the list's heads at its bound or
// above, those, with the ones above the bound derived again. A list read
// whole (no database missing) is kept for its next page.
func (s *Store) scrollHeads(ctx context.Context, sources []PullSource, timeout time.Duration, k *knowledge) ([]sourceHead, Pulled, error) {
	key, keep := k.scrollKey(sources)
	var (
		ask  []int32
		kept []sourceHead
	)
	var e *scrollKnown
	if keep {
		e = k.scroll(key, sources)
	}
	if e != nil {
		_, hi := sources[0].timeRange()
		n := 0
		for n < len(e.heads) && e.heads[n].t > hi {
			ask = append(ask, e.heads[n].i)
			n++
		}
		kept = e.heads[n:]
	} else {
		ask = make([]int32, len(sources))
		for i := range ask {
			ask[i] = int32(i)
		}
	}
	got, out, err := s.pullHeads(ctx, sources, ask, timeout, k)
	if err != nil {
		return nil, Pulled{}, err
	}
	heads := mergeHeads(newestFirst(got), kept)
	if keep && len(out.Missing) == 0 {
		k.keepScroll(key, sources, heads, e)
	}
	return heads, out, nil
}

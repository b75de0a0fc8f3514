package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// PullSource asks for one author's live posts older than Before.
type PullSource struct {
	AuthorID uint64
	Before   feed.Key
	// From, when set, bounds the read below: posts at or above it only.
	From feed.Key
	// Kinds, when set (sorted, each once), keeps the posts of those kinds
	// only, read through idx_posts_kind. The sources of one read share it.
	Kinds []string
}

// pullChunk bounds the authors read by one pull statement.
const pullChunk = 64

// pullPartSQL is one author's part of a pull statement: its newest posts
// below a bound, a backward range scan of the posts primary key.
const pullPartSQL = `(SELECT ` + postsInOrder + ` content_id, author_id, publish_time, kind FROM posts
WHERE author_id = ? AND deleted = 0 AND ` + keysetOlder + ` AND ` + keysetFrom + `
ORDER BY publish_time DESC, content_id DESC LIMIT ?)`

// pullPartKindSQL is pullPartSQL for the posts of one kind: a backward
// range scan of idx_posts_kind, which holds each author's posts of a kind
// in the primary key's order. A source of several kinds has a part per
// kind.
const pullPartKindSQL = `(SELECT ` + postsKindInOrder + ` content_id, author_id, publish_time, kind FROM posts FORCE INDEX (idx_posts_kind)
WHERE author_id = ? AND kind = ? AND deleted = 0 AND ` + keysetOlder + ` AND ` + keysetFrom + `
ORDER BY publish_time DESC, content_id DESC LIMIT ?)`

// keysetFrom is the inclusive lower bound of a pull read; the zero key
// bounds nothing.
const keysetFrom = `(publish_time > ? OR (publish_time = ? AND content_id >= ?))`

// Pulled is what PullPosts or PullNewest read.
type Pulled struct {
	Posts   []feed.Post // in no particular order
	Queries int         // statements run
	// Rows counts the rows those statements returned: the posts, and the
	// heads PullNewest reads first (one per source with posts in range).
	Rows int
	// Missing holds the authors, sorted, whose database failed or is known
	// unreadable: none of their posts are in Posts.
	Missing []uint64
	// Err is the failure of the first such database, by name.
	Err error
}

// add takes in another read of the same page.
func (p *Pulled) add(o Pulled) {
	p.Posts = append(p.Posts, o.Posts...)
	p.Queries += o.Queries
	p.Rows += o.Rows
	if len(o.Missing) > 0 {
		p.Missing = slices.Compact(slices.Sorted(slices.Values(append(p.Missing, o.Missing...))))
		p.Err = cmp.Or(p.Err, o.Err)
	}
}

// PullPosts reads up to limit live posts of each source (of each of its
// kinds, when it has some), newest first per source and kind, for
// read-time merging. Sources on the same shard are read together
// with one UNION ALL statement per 64 authors, so a page costs one query per
// shard for the usual handful of pull authors; the shards are read in
// parallel.
//
// A shard that fails costs only its own authors, which Pulled reports as
// missing; whether a page may do without them is the caller's decision. A
// shard whose last probe could not read it is not asked at all, and with
// shardTimeout above zero each shard's statements get that long at most, so
// a hung database the probe has not flagged yet costs no more. The error is
// for ctx itself ending, which fails the whole read.
func (s *Store) PullPosts(ctx context.Context, sources []PullSource, limit int, shardTimeout time.Duration) (Pulled, error) {
	posts, out, err := readShards(ctx, s, sources, shardTimeout, func(ctx context.Context, sh *Shard, srcs []PullSource) ([]feed.Post, int, error) {
		return runChunks(ctx, chunked(srcs, pullChunkSize(srcs)), func(ctx context.Context, chunk []PullSource) ([]feed.Post, int, error) {
			return pullPostsOf(ctx, sh, chunk, limit)
		})
	})
	out.Posts, out.Rows = posts, len(posts)
	return out, err
}

// PullNewest returns what PullPosts would for a caller that keeps only the
// newest limit posts of all the sources together, reading about a page
// whatever the number of sources: a head per source, then the posts of the
// few sources the page can come from.
//
// With more than limit+1 sources it first reads each source's head, the
// publish time of its newest post or a later one (pullHeadsSQL), hundreds
// of sources a statement. Let B be the (limit+1)-th newest head. A post at
// or above B lies in a source whose head is at or above B, so reading only
// those sources, down to B (pullWindows), yields every post at or above B;
// when that is limit posts or more, the newest limit of all the sources are
// among them. A head above its source's posts (a deleted post, or one at
// the bound's millisecond that the cursor already passed) can leave fewer:
// taking the (limit+1)-th head rather than the limit-th absorbs the one
// every page meets, the previous page's last item. Otherwise the posts read
// are the newest ones and all of them at or above B, and the read goes on
// below B for the rest, with new heads for the sources it read.
func (s *Store) PullNewest(ctx context.Context, sources []PullSource, limit int, shardTimeout time.Duration) (Pulled, error) {
	if len(sources) <= limit+1 {
		return s.PullPosts(ctx, sources, limit, shardTimeout)
	}
	k, learnt, err := s.learn(ctx, sources, shardTimeout)
	if err != nil {
		return Pulled{}, err
	}
	if len(learnt.Missing) > 0 {
		sources = slices.DeleteFunc(slices.Clone(sources), func(src PullSource) bool {
			_, gone := slices.BinarySearch(learnt.Missing, src.AuthorID)
			return gone
		})
		if len(sources) == 0 {
			return learnt, nil // every source's database failed
		}
	}
	heads, out, err := s.scrollHeads(ctx, sources, shardTimeout, k)
	if err != nil {
		return Pulled{}, err
	}
	out.add(learnt)
	// The heads name sources by their place in srcs, which the sources read
	// again below a bound join; capped, so that the first of them moves srcs
	// to an array of its own and the caller's list stays as it is.
	srcs := slices.Clip(sources)
	need := limit
	for len(heads) > 0 {
		read, bounded := heads, len(heads) > need+1
		var bound feed.Key // the key (B, 0): posts at or above it are at B or later
		if bounded {
			bound.PublishTime = heads[need].t
			// The heads are newest first: the sources at or above the
			// bound lead.
			i := need + 1
			for i < len(heads) && heads[i].t >= bound.PublishTime {
				i++
			}
			read, heads = heads[:i], heads[i:]
		} else {
			heads = nil
		}
		ask := make([]PullSource, len(read))
		for i, h := range read {
			ask[i] = srcs[h.i]
		}
		var got Pulled
		if bounded {
			got, err = s.pullWindows(ctx, ask, bound, need, shardTimeout, k)
		} else if got, err = s.PullPosts(ctx, ask, need, shardTimeout); err == nil {
			k.keepPosts(ask, got, need)
		}
		if err != nil {
			return Pulled{}, err
		}
		out.add(got)
		if !bounded || len(got.Posts) >= need {
			break
		}
		need -= len(got.Posts)
		below := make([]int32, 0, len(ask))
		for _, src := range ask {
			if _, gone := slices.BinarySearch(got.Missing, src.AuthorID); gone {
				continue
			}
			src.Before = olderKey(src.Before, bound)
			below = append(below, int32(len(srcs)))
			srcs = append(srcs, src)
		}
		more, stats, err := s.pullHeads(ctx, srcs, below, shardTimeout, k)
		if err != nil {
			return Pulled{}, err
		}
		out.add(stats)
		heads = mergeHeads(newestFirst(more), heads)
	}
	return out, nil
}

// windowRows bounds, in pages, the rows one window statement may return.
const windowRows = 8

// pullWindowSQL reads every live post of a list of authors in one keyset
// window, in index order and no further than a row count: one statement,
// one range per author, where a UNION ALL of a part per author costs the
// server a parse and a plan per part. The lower bound is a whole
// millisecond (the caller drops what lies below a key within it): each
// OR of a long-hand keyset doubles the ranges the server plans. Rows have
// w = 1.
const pullWindowSQL = `SELECT 1 AS w, content_id, author_id, publish_time, kind FROM posts
WHERE author_id IN (?) AND deleted = 0 AND ` + keysetOlder + ` AND publish_time >= ? LIMIT ?`

// pullKindWindowSQL is pullWindowSQL for the posts of some kinds (a list
// for sqlx.In after the authors): a range of idx_posts_kind per author and
// kind.
const pullKindWindowSQL = `SELECT 1 AS w, content_id, author_id, publish_time, kind FROM posts FORCE INDEX (idx_posts_kind)
WHERE author_id IN (?) AND kind IN (?) AND deleted = 0 AND ` + keysetOlder + ` AND publish_time >= ? LIMIT ?`

// pullWindowHeadsSQL is pullWindowSQL with, in the same statement and so
// at no extra round trip, the heads of the same authors below the window
// (pullHeadsSQL's, in rows with w = 0): what the next page of a scroll
// starts from, kept for it when heads are cached. The empty kind is ascii
// for the reason feedPagePullSQL's is.
const pullWindowHeadsSQL = `(` + pullWindowSQL + `)
UNION ALL (SELECT 0, 0, author_id, MAX(publish_time), _ascii'' FROM posts
WHERE author_id IN (?) AND publish_time >= ? AND publish_time <= ? GROUP BY author_id)`

// pullKindWindowHeadsSQL is pullWindowHeadsSQL for the posts of some
// kinds: pullKindWindowSQL with pullKindHeadsSQL's heads, one per author
// and kind.
const pullKindWindowHeadsSQL = `(` + pullKindWindowSQL + `)
UNION ALL (SELECT 0, 0, author_id, MAX(publish_time), _ascii'' FROM posts FORCE INDEX (idx_posts_kind)
WHERE author_id IN (?) AND kind IN (?) AND publish_time >= ? AND publish_time <= ? GROUP BY author_id, kind)`

// pullWindows returns what PullPosts would for the sources read, each read
// from the bound up (or from its own From, when higher), as PullNewest
// reads them once it has a bound: their posts in range, up to limit each.
// It reads each set of sources that share their range with one window
// statement per headChunk sources, which returns every post in range when
// they are at most windowRows pages; more means that some source posts far
// more often than the others (its head stands high, and its posts fill the
// window), and those sources are read with PullPosts' statements instead,
// limit posts each. With k it keeps what it read, and reads the sources'
// heads below the bound along with each window.
func (s *Store) pullWindows(ctx context.Context, read []PullSource, bound feed.Key, limit int, shardTimeout time.Duration, k *knowledge) (Pulled, error) {
	maxRows := windowRows * max(limit, 1)
	srcs := slices.Clone(read)
	lows := make(map[uint64]int64, len(read)) // where each source's range starts
	for i, src := range read {
		if src.From.Less(bound) {
			srcs[i].From = bound
			lows[src.AuthorID] = src.From.PublishTime
		}
	}
	var rows atomic.Int64
	posts, out, err := readShards(ctx, s, srcs, shardTimeout, func(ctx context.Context, sh *Shard, srcs []PullSource) ([]feed.Post, int, error) {
		type window struct {
			before, from feed.Key
			low          int64 // heads are read from here to the bound; -1: not read
		}
		chunks := groupedChunks(srcs, headChunk, func(src PullSource) (window, bool) {
			w := window{src.Before, src.From, -1}
			if low, ok := lows[src.AuthorID]; ok && k != nil {
				w.low = low
			}
			return w, true
		})
		return runChunks(ctx, chunks, func(ctx context.Context, chunk []PullSource) ([]feed.Post, int, error) {
			low := int64(-1)
			if l, ok := lows[chunk[0].AuthorID]; ok && k != nil {
				low = l
			}
			posts, below, n, err := windowChunkOf(ctx, sh, chunk, maxRows, low, bound.PublishTime-1)
			if err != nil {
				return nil, 0, err
			}
			rows.Add(int64(n + len(below)))
			if n <= maxRows {
				k.keepWindows(chunk, posts, below, low)
				return posts, 1, nil
			}
			got, m, err := runChunks(ctx, chunked(chunk, pullChunkSize(chunk)), func(ctx context.Context, part []PullSource) ([]feed.Post, int, error) {
				return pullPostsOf(ctx, sh, part, limit)
			})
			rows.Add(int64(len(got)))
			if err == nil {
				k.keepPosts(chunk, Pulled{Posts: got}, limit)
			}
			return got, 1 + m, err
		})
	})
	out.Posts, out.Rows = posts, int(rows.Load())
	return out, err
}

// windowChunkOf runs one window statement over sources that share their
// range, for up to maxRows+1 rows, and, when low is not negative, reads
// their heads in low..hi along with it. It returns the posts in range, the
// heads, and the rows the window returned.
func windowChunkOf(ctx context.Context, sh *Shard, chunk []PullSource, maxRows int, low, hi int64) ([]feed.Post, map[uint64]int64, int, error) {
	ids := make([]uint64, len(chunk))
	for i, src := range chunk {
		ids[i] = src.AuthorID
	}
	b, f := chunk[0].Before, chunk[0].From
	q, args := pullWindowSQL, []any{ids, b.PublishTime, b.PublishTime, b.ContentID, f.PublishTime, maxRows + 1}
	kinds := chunk[0].Kinds
	if kinds != nil {
		q, args = pullKindWindowSQL, append([]any{ids, kinds}, args[1:]...)
	}
	switch heads := low >= 0 && low <= hi; {
	case heads && kinds != nil:
		q, args = pullKindWindowHeadsSQL, append(args, ids, kinds, low, hi)
	case heads:
		q, args = pullWindowHeadsSQL, append(args, ids, low, hi)
	}
	q, args, err := sqlx.In(q, args...)
	if err != nil {
		return nil, nil, 0, err
	}
	var got []struct {
		W int `db:"w"`
		feed.Post
	}
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &got, q, args...); err != nil {
		return nil, nil, 0, wrap("pull window", err)
	}
	posts := make([]feed.Post, 0, len(got))
	heads := map[uint64]int64{}
	n := 0
	for _, r := range got {
		switch {
		case r.W == 0: // a head per kind, when read by kind: the newest is the author's
			heads[r.AuthorID] = max(heads[r.AuthorID], r.PublishTime)
		case !r.Key().Less(f):
			posts = append(posts, r.Post)
			n++
		default:
			n++ // below a key within From's millisecond
		}
	}
	return posts, heads, n, nil
}

// newestFirst sorts heads newest first, and returns them.
func newestFirst(heads []sourceHead) []sourceHead {
	slices.SortFunc(heads, func(a, b sourceHead) int { return cmp.Compare(b.t, a.t) })
	return heads
}

// mergeHeads merges two lists of heads, each newest first, into a new one.
func mergeHeads(a, b []sourceHead) []sourceHead {
	out := make([]sourceHead, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].t >= b[0].t {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// olderKey returns the older of two keys: the tighter of two "older than"
// bounds.
func olderKey(a, b feed.Key) feed.Key {
	if a.Less(b) {
		return a
	}
	return b
}

// sourceHead is the head of a source of a read: the publish time of its
// newest post in range, or a later one (pullHeadsSQL). Thousands of them a
// deep page: the source is named by its place in the read's list.
type sourceHead struct {
	i int32
	t int64
}

// askedSource is a source whose head a read asks for, with its place in
// the read's list.
type askedSource struct {
	PullSource
	i int32
}

// headChunk bounds the authors of one heads statement: MariaDB turns an IN
// list of 1000 values or more into a join with a derived table, which loses
// the loose index scan.
const headChunk = 500

// pullHeadsSQL reads, for each author of a list, the publish time of its
// newest post, live or deleted, within a range of times: a loose index scan
// of the posts primary key ("Using index for group-by"), a seek per author,
// hundreds of authors in one statement where a UNION ALL of a part per
// author costs the server a parse and a plan per part. The deleted flag and
// the content id part of a keyset bound are left out so that the server can
// skip from author to author; a head is therefore at or above the newest
// live post of the source's keyset range, never below it, which is all
// PullNewest needs.
const pullHeadsSQL = `SELECT author_id, MAX(publish_time) AS t FROM posts
WHERE author_id IN (?) AND publish_time >= ? AND publish_time <= ? GROUP BY author_id`

// pullKindHeadsSQL is pullHeadsSQL for the posts of some kinds (a list for
// sqlx.In after the authors): a loose index scan of idx_posts_kind, a head
// per author and kind, the newest of which is the author's.
const pullKindHeadsSQL = `SELECT author_id, MAX(publish_time) AS t FROM posts FORCE INDEX (idx_posts_kind)
WHERE author_id IN (?) AND kind IN (?) AND publish_time >= ? AND publish_time <= ? GROUP BY author_id, kind`

// timeRange returns the publish times, inclusive, that the source's keyset
// range lies within.
func (src PullSource) timeRange() (lo, hi int64) {
	hi = src.Before.PublishTime
	if src.Before.ContentID == 0 {
		hi-- // Before is exclusive: nothing at its millisecond is older
	}
	return src.From.PublishTime, hi
}

// pullHeads reads the heads of the sources srcs[i] for each i of ask,
// from what k knows where it can and otherwise with one statement per
// headChunk sources that share their time range; sources without a post in
// it are left out.
func (s *Store) pullHeads(ctx context.Context, srcs []PullSource, ask []int32, timeout time.Duration, k *knowledge) ([]sourceHead, Pulled, error) {
	known := make([]sourceHead, 0, len(ask))
	var unknown []askedSource
	for _, i := range ask {
		switch t, found, ok := k.cached(srcs[i]); {
		case !ok:
			unknown = append(unknown, askedSource{srcs[i], i})
		case found:
			known = append(known, sourceHead{i, t})
		}
	}
	heads, out, err := readShards(ctx, s, unknown, timeout, func(ctx context.Context, sh *Shard, part []askedSource) ([]sourceHead, int, error) {
		chunks := groupedChunks(part, headChunk, func(src askedSource) ([2]int64, bool) {
			lo, hi := src.timeRange()
			return [2]int64{lo, hi}, lo <= hi
		})
		return runChunks(ctx, chunks, func(ctx context.Context, chunk []askedSource) ([]sourceHead, int, error) {
			return headsChunkOf(ctx, sh, chunk, k)
		})
	})
	out.Rows = len(heads)
	return append(known, heads...), out, err
}

// headsChunkOf runs one heads statement over sources that share their time
// range.
func headsChunkOf(ctx context.Context, sh *Shard, chunk []askedSource, k *knowledge) ([]sourceHead, int, error) {
	lo, hi := chunk[0].timeRange()
	ids := make([]uint64, len(chunk))
	for i, src := range chunk {
		ids[i] = src.AuthorID
	}
	q, args := pullHeadsSQL, []any{ids, lo, hi}
	if kinds := chunk[0].Kinds; kinds != nil {
		q, args = pullKindHeadsSQL, []any{ids, kinds, lo, hi}
	}
	q, args, err := sqlx.In(q, args...)
	if err != nil {
		return nil, 0, err
	}
	var rows []struct {
		AuthorID uint64 `db:"author_id"`
		T        int64  `db:"t"`
	}
	if err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, q, args...); err != nil {
		return nil, 0, wrap("pull heads", err)
	}
	byAuthor := make(map[uint64]int64, len(rows))
	for _, r := range rows {
		if t, ok := byAuthor[r.AuthorID]; !ok || r.T > t {
			byAuthor[r.AuthorID] = r.T
		}
	}
	k.keepHeads(ids, lo, hi, byAuthor)
	out := make([]sourceHead, 0, len(rows))
	for _, src := range chunk {
		if t, ok := byAuthor[src.AuthorID]; ok {
			out = append(out, sourceHead{src.i, t})
		}
	}
	return out, 1, nil
}

// authored is a source of a read, which lives on its author's database.
type authored interface{ author() uint64 }

func (src PullSource) author() uint64 { return src.AuthorID }

// readShards runs read over each database's share of the sources, the
// databases in parallel, each within timeout when it is above zero, and
// returns what they read with the statements they ran. A database that
// fails, or whose last probe could not read it, costs only its own sources:
// their authors come back in Missing. The error is for ctx itself ending,
// which fails the whole read.
func readShards[S authored, T any](ctx context.Context, s *Store, sources []S, timeout time.Duration,
	read func(ctx context.Context, sh *Shard, srcs []S) ([]T, int, error)) ([]T, Pulled, error) {
	byShard := map[*Shard][]S{}
	for _, src := range sources {
		sh := s.ShardOf(src.author())
		byShard[sh] = append(byShard[sh], src)
	}
	type part struct {
		sh      *Shard
		srcs    []S
		got     []T
		queries int
		err     error
	}
	parts := make([]part, 0, len(byShard))
	for _, sh := range s.shards { // by name: Err names the same shard every time
		if srcs, ok := byShard[sh]; ok {
			parts = append(parts, part{sh: sh, srcs: srcs})
		}
	}
	shards := make([]*Shard, len(parts))
	for i, p := range parts {
		shards[i] = p.sh
	}
	eachShard(ctx, shards, timeout, func(ctx context.Context, i int, skip error) {
		p := &parts[i]
		if p.err = skip; skip == nil {
			p.got, p.queries, p.err = read(ctx, p.sh, p.srcs)
		}
	})
	var (
		got []T
		out Pulled
	)
	for _, p := range parts {
		out.Queries += p.queries
		if p.err == nil {
			got = append(got, p.got...)
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, Pulled{}, wrap("pull posts", err)
		}
		out.Err = cmp.Or(out.Err, p.err)
		for _, src := range p.srcs {
			out.Missing = append(out.Missing, src.author())
		}
	}
	slices.Sort(out.Missing)
	out.Missing = slices.Compact(out.Missing)
	return got, out, nil
}

// eachShard runs read for each of the databases at once, each within
// timeout when it is above zero, and waits for them all. A database whose
// last probe could not read it is not asked: read gets the failure instead.
func eachShard(ctx context.Context, shards []*Shard, timeout time.Duration, read func(ctx context.Context, i int, skip error)) {
	var wg sync.WaitGroup
	for i, sh := range shards {
		if h := sh.Health(); h.Unreadable {
			read(ctx, i, unreadable(sh, h))
			continue
		}
		wg.Go(func() {
			ctx := ctx
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			read(ctx, i, nil)
		})
	}
	wg.Wait()
}

// unreadable is the failure of a read that skips a database whose last
// probe could not read it.
func unreadable(sh *Shard, h Health) error {
	return errors.Join(feed.Errorf(feed.EUNAVAILABLE, "database unavailable"),
		fmt.Errorf("store: pull posts: database %s is down", sh.Name), h.Err)
}

// groupedChunks splits srcs into runs of at most n sources that share
// their key, in the order the keys first appear; sources without one
// (ok=false) are left out.
func groupedChunks[S any, K comparable](srcs []S, n int, key func(S) (k K, ok bool)) [][]S {
	var keys []K
	byKey := map[K][]S{}
	for _, src := range srcs {
		k, ok := key(src)
		if !ok {
			continue
		}
		if _, seen := byKey[k]; !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], src)
	}
	var out [][]S
	for _, k := range keys {
		out = append(out, chunked(byKey[k], n)...)
	}
	return out
}

// chunked splits srcs into runs of at most n.
func chunked[S any](srcs []S, n int) [][]S {
	var out [][]S
	for start := 0; start < len(srcs); start += n {
		out = append(out, srcs[start:min(start+n, len(srcs))])
	}
	return out
}

// pullParallel is how many of a page's pull statements run at once on one
// database: a page of many followees is many statements, each a few index
// seeks, and the Reads pool has the connections.
const pullParallel = 4

// runChunks runs read over each chunk, up to pullParallel at once, and
// returns what they read and the statements that completed (read says how
// many it ran); the first failure fails them all.
func runChunks[S, T any](ctx context.Context, chunks [][]S, read func(ctx context.Context, chunk []S) ([]T, int, error)) ([]T, int, error) {
	var (
		mu      sync.Mutex
		out     []T
		queries int
		first   error
		wg      sync.WaitGroup
		slots   = make(chan struct{}, pullParallel)
	)
	for _, chunk := range chunks {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			got, n, err := read(ctx, chunk)
			mu.Lock()
			defer mu.Unlock()
			queries += n
			if err != nil {
				first = cmp.Or(first, err)
				return
			}
			out = append(out, got...)
		})
	}
	wg.Wait()
	if first != nil {
		return nil, queries, first
	}
	return out, queries, nil
}

// pullChunkSize returns how many of the sources one pull statement reads:
// pullChunk parts, a part per source and kind.
func pullChunkSize(srcs []PullSource) int {
	if len(srcs) == 0 {
		return pullChunk
	}
	return max(1, pullChunk/max(1, len(srcs[0].Kinds)))
}

// pullPostsOf runs one pull statement over a chunk of sources.
func pullPostsOf(ctx context.Context, sh *Shard, chunk []PullSource, limit int) ([]feed.Post, int, error) {
	var parts []string
	args := make([]any, 0, 9*len(chunk))
	for _, src := range chunk {
		b, f := src.Before, src.From
		if src.Kinds == nil {
			parts = append(parts, pullPartSQL)
			args = append(args, src.AuthorID, b.PublishTime, b.PublishTime, b.ContentID, f.PublishTime, f.PublishTime, f.ContentID, limit)
		}
		for _, kind := range src.Kinds {
			parts = append(parts, pullPartKindSQL)
			args = append(args, src.AuthorID, kind, b.PublishTime, b.PublishTime, b.ContentID, f.PublishTime, f.PublishTime, f.ContentID, limit)
		}
	}
	posts, err := selectPosts(ctx, sh.pool(ctx), strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		return nil, 0, wrap("pull posts", err)
	}
	return posts, 1, nil
}

package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storeload"
)

// Phase P: deep and hybrid pages. One reader per class of followee count,
// fan-out finished (an inbox of the newest inbox-limit items, the floor at
// its oldest), walks its feed over HTTP in pages of 20 from the first page
// to opt.DeepDepth items deep; the pages below the inbox merge every
// followee's outbox. Hybrid pages (pull authors merged into an inbox page)
// are phase C's 10- and 50-pull readers, which this section quotes.

// targetDeep: a deep page at the follow cap against an inbox page, p50/p50.
const targetDeep = 5.0

// Id layout of phase P, apart from every other phase's.
const (
	deepReaderBase  = 4_000_000 // reader of class i: deepReaderBase + i
	deepAuthorBase  = 5_000_000 // author j of class i: deepAuthorBase + i*deepClassIDs + j
	deepClassIDs    = 100_000
	deepContentBase = 1<<62 + 1<<59
	// deepMinPosts is the fewest posts a followee has: more than a page,
	// so reading every followee's newest page would cost limit+1 rows each.
	deepMinPosts = 25
	// naivePages bounds the deep pages the naive merge is timed on: at
	// 2,000 followees each costs tens of milliseconds.
	naivePages = 20
)

// deepOptions are phase P's settings.
type deepOptions struct {
	DeepFollowees string // classes, comma-separated followee counts
	DeepDepth     int    // items each walk reads
	DeepWalks     int    // measured walks per class
}

func (o *deepOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.DeepFollowees, "deep-followees", "50,200,1000,2000", "P: followee counts, one reader each")
	fs.IntVar(&o.DeepDepth, "deep-depth", 4000, "P: items each walk reads, from the first page down")
	fs.IntVar(&o.DeepWalks, "deep-walks", 3, "P: measured walks per reader")
}

// classes parses DeepFollowees.
func (o deepOptions) classes() ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(o.DeepFollowees, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n >= deepClassIDs {
			return nil, fmt.Errorf("-deep-followees takes counts in 1..%d, got %q", deepClassIDs-1, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func (o deepOptions) validate() error {
	if _, err := o.classes(); err != nil {
		return err
	}
	if o.DeepDepth < 1 || o.DeepWalks < 1 {
		return fmt.Errorf("-deep-depth and -deep-walks must be >= 1")
	}
	return nil
}

// deepClass is what phase P measured for one reader.
type deepClass struct {
	Followees int
	PerAuthor int // posts per followee
	// Service pages over HTTP, by where they come from.
	Inbox, Deep []time.Duration
	// Rows and statements per page from feed_read_rows and
	// feed_read_queries, summed over the pages of each kind.
	InboxRows, DeepRows, DeepQueries float64
	// Raw SQL: the inbox page statement and the threshold merge, on the
	// same pages; the naive merge on the first naivePages deep pages.
	RawInbox, RawDeep, Naive []time.Duration
}

type deepResult struct {
	InboxLimit int
	Classes    []deepClass
}

// deepPhase runs phase P.
func (b *bench) deepPhase(ctx context.Context) error {
	classes, err := b.opt.classes()
	if err != nil {
		return err
	}
	limit := b.stack.svc.Config().InboxLimit
	res := &deepResult{InboxLimit: limit}
	load := newHTTPLoad(b.stack.addr)
	defer load.close()
	raw, err := prepareInboxPage(ctx, b.db, false)
	if err != nil {
		return err
	}
	defer raw.close()
	for i, f := range classes {
		reader, floor, per, err := b.loadDeepReader(ctx, i, f, limit)
		if err != nil {
			return fmt.Errorf("P load %d followees: %w", f, err)
		}
		c := deepClass{Followees: f, PerAuthor: per}
		// One unmeasured walk warms the pools, the prepared statements
		// and the buffer pool's pages of this reader.
		if err := b.walkDeep(ctx, load.pager(""), reader, limit, nil); err != nil {
			return fmt.Errorf("P warm-up, %d followees: %w", f, err)
		}
		for range b.opt.DeepWalks {
			// Each walk starts with the process knowing nothing of the
			// outboxes: its pages learn as one scroll does.
			b.st.CacheHeads(b.stack.svc.Config().ClockSkew, time.Now)
			if err := b.walkDeep(ctx, load.pager(""), reader, limit, &c); err != nil {
				return fmt.Errorf("P walk, %d followees: %w", f, err)
			}
			if err := b.walkRaw(ctx, raw, reader, floor, limit, &c); err != nil {
				return fmt.Errorf("P raw walk, %d followees: %w", f, err)
			}

		}
		for _, l := range [][]time.Duration{c.Inbox, c.Deep, c.RawInbox, c.RawDeep, c.Naive} {
			slices.Sort(l)
		}
		res.Classes = append(res.Classes, c)
		b.log.Info("feedbench: P deep pages", "followees", f, "inbox_p50_ms", ms(percentile(c.Inbox, 0.5)),
			"deep_p50_ms", ms(percentile(c.Deep, 0.5)), "raw_deep_p50_ms", ms(percentile(c.RawDeep, 0.5)),
			"naive_p50_ms", ms(percentile(c.Naive, 0.5)), "deep_rows_per_page", c.DeepRows/float64(max(1, len(c.Deep))))
	}
	b.rep.Deep = res
	return nil
}

// loadDeepReader gives class i's reader f followees with enough posts for a
// walk of opt.DeepDepth items (at least deepMinPosts each), published and
// fanned out before the run: the reader's inbox holds the feed's newest
// inboxLimit items and its floor is the oldest of them. The reader is
// active, so no page writes its header row. It returns the reader, the
// floor and the posts per followee.
func (b *bench) loadDeepReader(ctx context.Context, i, f, inboxLimit int) (uint64, feed.Key, int, error) {
	start := time.Now()
	reader := uint64(deepReaderBase + i)
	per := max(deepMinPosts, (6*(b.opt.DeepDepth+inboxLimit)/5+f-1)/f)
	authors := make([]uint64, f)
	now := time.Now()
	t1 := now.Add(-time.Hour).UnixMilli()
	span := loadSpan.Milliseconds()
	posts := make([]feed.Post, 0, f*per)
	for j := range authors {
		authors[j] = uint64(deepAuthorBase + i*deepClassIDs + j)
		for range per {
			posts = append(posts, feed.Post{
				ContentID:   deepContentBase + uint64(len(posts)) + uint64(i)*deepClassIDs*deepClassIDs,
				AuthorID:    authors[j],
				PublishTime: t1 - b.rng.Int64N(span),
				Kind:        feed.KindPost,
			})
		}
	}
	if err := storeload.Posts(ctx, b.st, posts, now.Add(-loadSpan).UnixMilli()); err != nil {
		return 0, feed.Key{}, 0, err
	}
	if err := storeload.Following(ctx, b.st, reader, authors, now.Add(-2*loadSpan).UnixMilli()); err != nil {
		return 0, feed.Key{}, 0, err
	}
	slices.SortFunc(posts, func(a, b feed.Post) int { return byKeyDesc(a.Key(), b.Key()) })
	kept := posts[:min(inboxLimit, len(posts))]
	floor := kept[len(kept)-1].Key()
	if err := storeload.Inbox(ctx, b.st, reader, kept); err != nil {
		return 0, feed.Key{}, 0, err
	}
	if err := storeload.Activity(ctx, b.st, []uint64{reader}, now.UnixMilli(), now.Add(-24*time.Hour).UnixMilli(), &floor); err != nil {
		return 0, feed.Key{}, 0, err
	}
	b.log.Info("feedbench: P reader loaded", "followees", f, "posts", len(posts), "seconds", time.Since(start).Seconds())
	return reader, floor, per, nil
}

func byKeyDesc(a, b feed.Key) int {
	if c := cmp.Compare(b.PublishTime, a.PublishTime); c != 0 {
		return c
	}
	return cmp.Compare(b.ContentID, a.ContentID)
}

// walkDeep reads the reader's feed over HTTP from the first page down to
// opt.DeepDepth items; with c, it records each page's latency, rows and
// statements by where the page came from: wholly from the inbox (its items
// and the one after them, which tells whether a next page exists, at or
// above the floor) or wholly below it. A page across the floor is neither.
func (b *bench) walkDeep(ctx context.Context, read pager, reader uint64, inboxLimit int, c *deepClass) error {
	s := &session{user: reader}
	for page := 0; page*pageLimit < b.opt.DeepDepth; page++ {
		rows0, _ := b.stack.histogram("feed_read_rows")
		q0, _ := b.stack.histogram("feed_read_queries")
		start := time.Now()
		more, err := read(ctx, s)
		el := time.Since(start)
		if err != nil {
			return fmt.Errorf("page %d: %w", page+1, err)
		}
		rows1, _ := b.stack.histogram("feed_read_rows")
		q1, _ := b.stack.histogram("feed_read_queries")
		switch {
		case c == nil:
		case (page+1)*pageLimit < inboxLimit:
			c.Inbox = append(c.Inbox, el)
			c.InboxRows += rows1 - rows0
		case page*pageLimit >= inboxLimit:
			c.Deep = append(c.Deep, el)
			c.DeepRows += rows1 - rows0
			c.DeepQueries += q1 - q0
		}
		if !more {
			return fmt.Errorf("the feed ended after %d pages", page+1)
		}
	}
	return nil
}

// walkRaw times the ceilings on the walk's pages: the inbox pages with the
// raw keyset statement of phase C, the deep pages with rawDeepPage from the
// floor down, and the first naivePages deep pages with naiveDeepPage.
func (b *bench) walkRaw(ctx context.Context, raw *inboxPageStmt, reader uint64, floor feed.Key, inboxLimit int, c *deepClass) error {
	key := store.Top
	for page := 0; (page+1)*pageLimit <= inboxLimit; page++ {
		start := time.Now()
		posts, err := raw.page(ctx, reader, key, pageLimit+1)
		c.RawInbox = append(c.RawInbox, time.Since(start))
		if err != nil || len(posts) < pageLimit {
			return fmt.Errorf("raw inbox page %d: %d posts, %v", page+1, len(posts), err)
		}
		key = posts[pageLimit-1].Key()
	}
	for _, naive := range []bool{false, true} {
		key := floor
		first := (inboxLimit + pageLimit - 1) / pageLimit
		for page := first; page*pageLimit < b.opt.DeepDepth; page++ {
			if naive && page-first >= naivePages {
				break
			}
			start := time.Now()
			posts, err := rawDeepPage(ctx, b.db, reader, key, pageLimit+1, naive)
			el := time.Since(start)
			if err != nil || len(posts) <= pageLimit {
				return fmt.Errorf("raw deep page %d (naive %v): %d posts, %v", page+1, naive, len(posts), err)
			}
			if naive {
				c.Naive = append(c.Naive, el)
			} else {
				c.RawDeep = append(c.RawDeep, el)
			}
			key = posts[pageLimit-1].Key()
		}
	}
	return nil
}

// The raw merges' statements: the ceilings of a deep page, written here and
// not taken from the store so that they time the database alone.
const (
	rawFolloweesSQL = `SELECT author_id FROM following WHERE user_id = ?`
	rawHeadsSQL     = `SELECT author_id, MAX(publish_time) AS t FROM posts
WHERE author_id IN (?) AND publish_time <= ? GROUP BY author_id`
	rawNewestSQL = `(SELECT content_id, author_id, publish_time, kind FROM posts
WHERE author_id = ? AND deleted = 0 AND ` + keysetOlder + ` AND publish_time >= ?
ORDER BY publish_time DESC, content_id DESC LIMIT ?)`
)

// rawDeepPage returns the newest n posts older than before of the reader's
// followees, with plain SQL on the one database: the followee list, then
// either the threshold merge (each followee's head by a loose index scan,
// 500 a statement; then the followees whose head is at or above the
// (n+1)-th newest, down to it) or, with naive, every followee's newest n
// posts, 64 followees a UNION ALL statement. Statements of a step run 4 at
// once, as the store's do. The threshold merge leaves out the store's
// rounds below the bound when deleted posts leave a page short (the
// benchmark deletes none), its routing, timeouts and row counts.
func rawDeepPage(ctx context.Context, db *sqlx.DB, reader uint64, before feed.Key, n int, naive bool) ([]feed.Post, error) {
	var authors []uint64
	if err := db.SelectContext(ctx, &authors, rawFolloweesSQL, reader); err != nil {
		return nil, err
	}
	floorTime := int64(0)
	if !naive {
		hi := before.PublishTime
		if before.ContentID == 0 {
			hi--
		}
		var queries []rawQuery
		for chunk := range slices.Chunk(authors, 500) {
			q, args, err := sqlx.In(rawHeadsSQL, chunk, hi)
			if err != nil {
				return nil, err
			}
			queries = append(queries, rawQuery{q, args})
		}
		heads, err := rawSelect[rawHead](ctx, db, queries)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(heads, func(x, y rawHead) int { return cmp.Compare(y.T, x.T) })
		if len(heads) > n+1 {
			floorTime = heads[n].T
		}
		authors = authors[:0]
		for _, h := range heads {
			if h.T < floorTime {
				break
			}
			authors = append(authors, h.A)
		}
	}
	var queries []rawQuery
	for chunk := range slices.Chunk(authors, 64) {
		parts := make([]string, len(chunk))
		var args []any
		for i, a := range chunk {
			parts[i] = rawNewestSQL
			args = append(args, a, before.PublishTime, before.PublishTime, before.ContentID, floorTime, n)
		}
		queries = append(queries, rawQuery{strings.Join(parts, " UNION ALL "), args})
	}
	posts, err := rawSelect[feed.Post](ctx, db, queries)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(posts, func(a, b feed.Post) int { return byKeyDesc(a.Key(), b.Key()) })
	return posts[:min(n, len(posts))], nil
}

type rawHead struct {
	A uint64 `db:"author_id"`
	T int64  `db:"t"`
}

type rawQuery struct {
	q    string
	args []any
}

// rawSelect runs the queries 4 at once and returns all their rows.
func rawSelect[T any](ctx context.Context, db *sqlx.DB, queries []rawQuery) ([]T, error) {
	var (
		mu  sync.Mutex
		out []T
		g   group
	)
	slots := make(chan struct{}, 4)
	for _, q := range queries {
		slots <- struct{}{}
		g.Go(func() error {
			defer func() { <-slots }()
			var rows []T
			if err := db.SelectContext(ctx, &rows, q.q, q.args...); err != nil {
				return err
			}
			mu.Lock()
			out = append(out, rows...)
			mu.Unlock()
			return nil
		})
	}
	return out, g.Wait()
}

// renderDeep writes phase P's section.
func (r *report) renderDeep(p func(string, ...any)) {
	d := r.Deep
	if !r.section(p, 'P', d != nil) {
		return
	}
	o := r.Opt
	p("One reader per row follows that many authors, each with the posts shown, published at random")
	p("times over the %.0f days before the run and fanned out: the reader's inbox holds the feed's newest",
		loadSpan.Hours()/24)
	p("%d items and its floor is the oldest of them, as retention leaves it, so every page below them", d.InboxLimit)
	p("merges the outboxes of every followee (docs/DESIGN.md, The merged read). The reader walks its feed")
	p("over HTTP with the phase C load generator, pages of %d from the first page down to %s items deep,",
		pageLimit, count(o.DeepDepth))
	p("%d times after an unmeasured walk, one request at a time. Each measured walk starts with the", o.DeepWalks)
	p("service knowing nothing of the outboxes (what pages learn of them emptied): its first deep page")
	p("reads every followee's head, later ones only what the pages before them did not learn. Inbox pages")
	p("are the walk's first %d, read from the inbox alone (the next one also needs the item below the", (d.InboxLimit-1)/pageLimit)
	p("inbox, to know whether a page follows); deep pages lie wholly below the floor. Rows and statements")
	p("per page are the service's `feed_read_rows` and `feed_read_queries` over those pages (rows: every")
	p("row the page's statements returned: the inbox page, the followee list, the backdate sequence, the")
	p("heads read, the posts read).")
	p("")
	p("| followees | posts each | inbox pages | p50 | p99 | rows/page | deep pages | p50 | p99 | rows/page | statements/page | deep p50 / inbox p50 |")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range d.Classes {
		p("| %s | %d | %d | %s | %s | %.0f | %d | %s | %s | %.0f | %.1f | %.1f |", count(c.Followees), c.PerAuthor,
			len(c.Inbox), msStr(percentile(c.Inbox, 0.5)), msStr(percentile(c.Inbox, 0.99)), perPage(c.InboxRows, len(c.Inbox)),
			len(c.Deep), msStr(percentile(c.Deep, 0.5)), msStr(percentile(c.Deep, 0.99)), perPage(c.DeepRows, len(c.Deep)),
			perPage(c.DeepQueries, len(c.Deep)), ratioOf(c.Deep, c.Inbox))
	}
	p("")
	p("The same pages with raw SQL from the benchmark, on the same database: the inbox pages with phase")
	p("C's ceiling statement; the deep pages with the **threshold merge** done by hand (the followee")
	p("list; each followee's head with a loose index scan, 500 a statement, 4 at once; then one UNION ALL")
	p("of the followees whose head is at or above the 22nd newest, each read down to it, as the store")
	p("bounds a read of %d posts), stateless: it reads every followee's head on every page, where the", pageLimit+1)
	p("service reads those its earlier pages did not learn; it leaves out the store's routing, timeouts and")
	p("row counts, and its further rounds when deleted posts leave a page short (none here); and, as a")
	p("diagnostic, the **naive merge**: every followee's newest 21 posts below the cursor, 64 followees a")
	p("UNION ALL statement, 4 at once, on the first %d deep pages of each walk.", naivePages)
	p("")
	p("| followees | raw inbox page p50 | raw threshold merge p50 | p99 | service deep p50 / raw merge p50 | naive merge p50 (diagnostic) |")
	p("|---:|---:|---:|---:|---:|---:|")
	for _, c := range d.Classes {
		p("| %s | %s | %s | %s | %.2f | %s |", count(c.Followees), msStr(percentile(c.RawInbox, 0.5)),
			msStr(percentile(c.RawDeep, 0.5)), msStr(percentile(c.RawDeep, 0.99)), ratioOf(c.Deep, c.RawDeep),
			msStr(percentile(c.Naive, 0.5)))
	}
	p("")
	p("| ratio | value | target | verdict |")
	p("|---|---:|---:|---|")
	top := slices.MaxFunc(d.Classes, func(a, b deepClass) int { return cmp.Compare(a.Followees, b.Followees) })
	name := fmt.Sprintf("%s followees", count(top.Followees))
	if top.Followees == service.MaxFollowingDefault {
		name += " (the follow cap)"
	}
	v := ratioOf(top.Deep, top.Inbox)
	p("| deep / inbox page p50 at %s | %.1f | ≤ %.0f | %s |", name, v, targetDeep, verdictAtMost(v, targetDeep))
	for _, c := range d.Classes {
		if c.Followees != top.Followees {
			p("| deep / inbox page p50 at %s followees | %.1f | — | (reported) |", count(c.Followees), ratioOf(c.Deep, c.Inbox))
		}
	}
	for _, c := range d.Classes {
		p("| service deep page / raw threshold merge, p50, %s followees | %.2f | — | (reported) |", count(c.Followees), ratioOf(c.Deep, c.RawDeep))
	}
	p("")
	r.renderHybrid(p)
}

// renderHybrid quotes phase C's hybrid readers against its inbox-only ones.
func (r *report) renderHybrid(p func(string, ...any)) {
	by := map[string]readResult{}
	for _, rr := range r.Reads {
		by[rr.Key] = rr
	}
	inbox, ok := by[readInbox]
	if !ok {
		p("Hybrid pages are measured by phase C, which did not run (`-phases` excluded C).")
		p("")
		return
	}
	p("Hybrid pages are phase C's readers of %d and %d pull authors, every page merging every pull", pullFew, pullMany)
	p("author's outbox into the inbox page (8 clients, pages of 20, HTTP), against its inbox-only readers:")
	p("")
	p("| reader | pages/s | p50 | p99 | rows/page | pages/s against inbox-only | target |")
	p("|---|---:|---:|---:|---:|---:|---|")
	for _, k := range []string{readInbox, readFew, readMany} {
		rr, ok := by[k]
		if !ok {
			continue
		}
		v := rr.Rate() / inbox.Rate()
		target := "—"
		if k == readMany {
			target = fmt.Sprintf("≥ %.1f: %s", targetPullRead, verdict(v, targetPullRead))
		}
		p("| %s | %s | %s | %s | %.0f | %.2f | %s |", rr.Name, count(int(rr.Rate())), msStr(percentile(rr.Latency, 0.5)),
			msStr(percentile(rr.Latency, 0.99)), rr.RowsPerPage, v, target)
	}
	p("")
}

// perPage is sum / pages, 0 without pages.
func perPage(sum float64, pages int) float64 {
	if pages == 0 {
		return 0
	}
	return sum / float64(pages)
}

// ratioOf is the ratio of two samples' medians.
func ratioOf(a, b []time.Duration) float64 {
	if m := percentile(b, 0.5); m > 0 {
		return float64(percentile(a, 0.5)) / float64(m)
	}
	return 0
}

// verdictAtMost is verdict for an upper bound; a figure of 0 is one the
// run did not measure, not one that meets it.
func verdictAtMost(v, target float64) string {
	if v <= target && v > 0 {
		return "met"
	}
	return fmt.Sprintf("**MISSED** (%.1f > %.0f)", v, target)
}

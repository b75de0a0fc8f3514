package store_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/storetest"
)

// planRow is one row of EXPLAIN, by lower-cased column name: MySQL 8 and
// MariaDB return slightly different column sets.
type planRow map[string]string

func (r planRow) String() string {
	return fmt.Sprintf("table=%s type=%s key=%s rows=%s extra=%q", r["table"], r["type"], r["key"], r["rows"], r["extra"])
}

func explain(t *testing.T, sh *store.Shard, q string, args ...any) []planRow {
	t.Helper()
	plan := explainRows(t, sh, q, args...)
	if storetest.TiDB(t) {
		plan = tidbPlan(plan)
	}
	return plan
}

var (
	tidbOp     = regexp.MustCompile(`^([A-Za-z_]+?)_\d+`)
	tidbTable  = regexp.MustCompile(`table:(\w+)`)
	tidbIndex  = regexp.MustCompile(`index:(\w+)\(`)
	tidbRanges = map[string]string{"TableRangeScan": "range", "IndexRangeScan": "range", "Point_Get": "range", "Batch_Point_Get": "range",
		"TableFullScan": "ALL", "IndexFullScan": "index"}
)

// tidbPlan gives TiDB's plan (id, estrows, task, access object, operator
// info) the columns the checks read: a row per table read (its key, and
// "range" for a range scan or a point read of a key, "ALL" or "index" for
// a full scan), and a filesort row per sort. The rows an index range finds
// are fetched by key (TableRowIDScan), as MySQL's one row for such a read.
func tidbPlan(plan []planRow) []planRow {
	var out []planRow
	for _, r := range plan {
		m := tidbOp.FindStringSubmatch(strings.TrimLeft(r["id"], "└─│├ "))
		if m == nil {
			continue
		}
		switch op := m[1]; {
		case op == "Sort" || op == "TopN":
			out = append(out, planRow{"extra": "Using filesort (" + op + ")"})
		case tidbRanges[op] != "":
			row := planRow{"type": tidbRanges[op], "key": "PRIMARY", "extra": r["operator info"]}
			if strings.HasPrefix(r["operator info"], "range: decided by [eq(") {
				row["type"] = "eq_ref" // the inner side of an index join: a lookup per outer row
			}
			if t := tidbTable.FindStringSubmatch(r["access object"]); t != nil {
				row["table"] = t[1]
			}
			if i := tidbIndex.FindStringSubmatch(r["access object"]); i != nil {
				row["key"] = i[1]
			}
			out = append(out, row)
		}
	}
	return out
}

func explainRows(t *testing.T, sh *store.Shard, q string, args ...any) []planRow {
	t.Helper()
	rows, err := sh.DB.QueryxContext(t.Context(), "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, q)
	}
	defer rows.Close()
	var out []planRow
	for rows.Next() {
		m := map[string]any{}
		if err := rows.MapScan(m); err != nil {
			t.Fatal(err)
		}
		r := planRow{}
		for k, v := range m {
			switch v := v.(type) {
			case nil:
				r[strings.ToLower(k)] = ""
			case []byte:
				r[strings.ToLower(k)] = string(v)
			default:
				r[strings.ToLower(k)] = fmt.Sprint(v)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// rangeScan asserts that every plan row of table is a range scan of
// the primary key without a filesort.
func rangeScan(t *testing.T, plan []planRow, table string, types ...string) {
	t.Helper()
	indexScan(t, plan, table, "PRIMARY", types...)
}

// indexScan asserts that every plan row of table is a range scan of the
// key without a filesort.
func indexScan(t *testing.T, plan []planRow, table, key string, types ...string) {
	t.Helper()
	if len(types) == 0 {
		types = []string{"range"}
	}
	seen := 0
	for _, r := range plan {
		if r["table"] != table {
			continue
		}
		seen++
		if r["key"] != key || !slices.Contains(types, r["type"]) || strings.Contains(strings.ToLower(r["extra"]), "filesort") {
			t.Errorf("plan of %s: %v; want key %s, type %v, no filesort", table, r, key, types)
		}
	}
	if seen == 0 {
		t.Errorf("no plan row for table %s in %v", table, plan)
	}
	for _, r := range plan {
		if strings.Contains(strings.ToLower(r["extra"]), "filesort") {
			t.Errorf("filesort in plan: %v", r)
		}
	}
}

// looseScans counts the plan's loose index scans ("using index for
// group-by").
func looseScans(plan []planRow) int {
	n := 0
	for _, r := range plan {
		if strings.Contains(strings.ToLower(r["extra"]), "using index for group-by") {
			n++
		}
	}
	return n
}

// explainUsers users (and as many authors) have explainPer rows each in
// explainShard's inbox and posts.
const explainUsers, explainPer = 40, 150

// explainShard is one database filled as for TestExplainRangeScans: the
// optimizer chooses plans by table statistics, so the tables hold
// realistic rows, analysed.
func explainShard(t *testing.T) *store.Shard {
	t.Helper()
	st := newStore(t, 1)
	sh := st.Shards()[0]

	// Realistic tables: 40 users × 150 inbox rows, 40 authors × 150 posts
	// with many equal publish times, 3 authors × 1000 followers.
	var inboxRows, postRows, followerRows, followingRows [][]any
	for u := uint64(1); u <= explainUsers; u++ {
		for i := range uint64(explainPer) {
			tm := t0 - int64(i/3)*1000
			id := u*10_000 + i
			inboxRows = append(inboxRows, []any{u, tm, id, u + 1000, "post"})
			kind := "post"
			if i%7 == 0 {
				kind = "photo"
			}
			postRows = append(postRows, []any{u, tm, id, kind, 0, t0})
			if i%10 == 0 {
				postRows[len(postRows)-1][4] = 1 // some deleted
			}
		}
		for a := uint64(1); a <= 30; a++ {
			followingRows = append(followingRows, []any{u, u*100 + a, t0, a % 3})
		}
	}
	for a := uint64(1); a <= 3; a++ {
		for u := uint64(1); u <= 1000; u++ {
			followerRows = append(followerRows, []any{a, u, t0})
		}
	}
	insertRows(t, sh.DB, "INSERT INTO inbox (user_id, publish_time, content_id, author_id, kind)", inboxRows)
	insertRows(t, sh.DB, "INSERT INTO posts (author_id, publish_time, content_id, kind, deleted, created_at)", postRows)
	insertRows(t, sh.DB, "INSERT INTO followers (author_id, user_id, followed_at)", followerRows)
	insertRows(t, sh.DB, "INSERT INTO following (user_id, author_id, followed_at, pull)", followingRows)
	for u := uint64(1); u <= explainUsers; u++ {
		must(t, st.MarkRead(t.Context(), u, t0, t0, t0-1))
	}
	// Queue tables as they usually are: a few ready rows among many done or
	// leased ones, where the claim index looks cheapest to the optimizer.
	var deliveryRows, taskRows, eventRows, authorRows [][]any
	for i := range uint64(300) {
		ready := i%30 == 0
		state, done, until, mode := 2, 1, t0+lease, 0
		if ready {
			state, done, until, mode = 0, 0, 0, 1
		}
		deliveryRows = append(deliveryRows, []any{1000 + i, 1 + i%40, t0, "post", state, t0})
		taskRows = append(taskRows, []any{1000 + i/4, i % 4, 1, sh.Name, t0, "post", 0, 0, 0, 0, done})
		eventRows = append(eventRows, []any{1 + i%40, 1000 + i, t0, until})
		authorRows = append(authorRows, []any{1000 + i, mode})
	}
	insertRows(t, sh.DB, "INSERT INTO deliveries (content_id, author_id, publish_time, kind, state, created_at)", deliveryRows)
	insertRows(t, sh.DB, "INSERT INTO fanout_tasks (content_id, seq, author_id, target, publish_time, kind, mode, lo, hi, last_user, done)", taskRows)
	insertRows(t, sh.DB, "INSERT INTO follow_events (user_id, author_id, created_at, claimed_until)", eventRows)
	insertRows(t, sh.DB, "INSERT INTO authors (author_id, mode)", authorRows)
	for _, tbl := range []string{"inbox", "posts", "followers", "following", "deliveries", "fanout_tasks", "follow_events", "authors"} {
		mustExec(t, sh.DB, "ANALYZE TABLE "+tbl)
	}
	return sh
}

// The hot reads must be backward range scans of a clustered primary key with
// no sort: the page costs O(limit) however long the inbox or outbox is. The
// keyset condition is written long-hand for this (see keysetOlder).
func TestExplainRangeScans(t *testing.T) {
	t.Parallel()
	sh := explainShard(t)

	top := store.Top
	mid := struct {
		t  int64
		id uint64
	}{t0 - 20_000, 7*10_000 + 61}

	t.Run("feed page", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			t  int64
			id uint64
		}{{top.PublishTime, top.ContentID}, {mid.t, mid.id}} {
			for _, from := range [][2]any{{0, 0}, {mid.t, mid.id}} {
				rangeScan(t, explain(t, sh, store.FeedPageSQL, 7, c.t, c.t, c.id, from[0], from[0], from[1], 22), "inbox")
				rangeScan(t, explain(t, sh, store.FeedPagePullSQL, 7, 7, c.t, c.t, c.id, from[0], from[0], from[1], 22), "inbox")
			}
		}
		// A first page scans the user's range from the header down, with or
		// without a lower bound; a later page without one, from the cursor.
		rangeScan(t, explain(t, sh, store.FeedFirstPageSQL, 7, 22), "inbox", "ref", "range")
		rangeScan(t, explain(t, sh, store.FeedFirstPullSQL, 7, 7, 22), "inbox", "ref", "range")
		rangeScan(t, explain(t, sh, store.FeedNextPageSQL, 7, mid.t, mid.t, mid.id, 22), "inbox")
		rangeScan(t, explain(t, sh, store.FeedNextPullSQL, 7, 7, mid.t, mid.t, mid.id, 22), "inbox")
		rangeScan(t, explain(t, sh, store.FeedSincePageSQL, 7, mid.t, mid.t, mid.id, 22), "inbox")
		rangeScan(t, explain(t, sh, store.FeedSincePullSQL, 7, 7, mid.t, mid.t, mid.id, 22), "inbox")
	})

	// A page of some kinds scans the same range, the server dropping the
	// other kinds' entries.
	t.Run("feed page of kinds", func(t *testing.T) {
		t.Parallel()
		for _, kinds := range [][]string{{"photo"}, {"photo", "video"}} {
			for _, c := range []struct {
				q    string
				args []any
			}{
				{store.FeedPageKinds, []any{7, mid.t, mid.t, mid.id, kinds, 0, 0, 0, 22}},
				{store.FeedPagePullKind, []any{7, 7, top.PublishTime, top.PublishTime, top.ContentID, kinds, 0, 0, 0, 22}},
			} {
				q, args, err := sqlx.In(c.q, c.args...)
				must(t, err)
				rangeScan(t, explain(t, sh, q, args...), "inbox")
			}
		}
	})

	t.Run("list posts", func(t *testing.T) {
		t.Parallel()
		rangeScan(t, explain(t, sh, store.ListPostsSQL, 7, top.PublishTime, top.PublishTime, top.ContentID, 21), "posts")
		rangeScan(t, explain(t, sh, store.ListPostsSQL, 7, mid.t, mid.t, mid.id, 21), "posts")
	})

	t.Run("pull one author", func(t *testing.T) {
		t.Parallel()
		rangeScan(t, explain(t, sh, store.PullPartSQL, 7, mid.t, mid.t, mid.id, 0, 0, 0, 21), "posts")
		rangeScan(t, explain(t, sh, store.PullPartSQL, 7, mid.t, mid.t, mid.id, mid.t-100, mid.t-100, 0, 21), "posts")
	})

	t.Run("pull one author's kind", func(t *testing.T) {
		t.Parallel()
		indexScan(t, explain(t, sh, store.PullPartKindSQL, 7, "photo", mid.t, mid.t, mid.id, 0, 0, 0, 21), "posts", "idx_posts_kind")
		indexScan(t, explain(t, sh, store.PullPartKindSQL, 7, "photo", top.PublishTime, top.PublishTime, top.ContentID, mid.t-100, mid.t-100, 0, 21), "posts", "idx_posts_kind")
	})

	t.Run("pull union of authors", func(t *testing.T) {
		t.Parallel()
		var parts []string
		var args []any
		for a := uint64(3); a <= 12; a++ {
			parts = append(parts, store.PullPartSQL)
			args = append(args, a, mid.t, mid.t, a*10_000+61, 0, 0, 0, 21)
		}
		plan := explain(t, sh, strings.Join(parts, " UNION ALL "), args...)
		rangeScan(t, plan, "posts")
		n := 0
		for _, r := range plan {
			if r["table"] == "posts" {
				n++
			}
		}
		if n != 10 {
			t.Errorf("%d posts rows in the plan, want 10: %v", n, plan)
		}
	})

	// TiDB has neither a loose index scan nor an index-only read in a
	// DELETE's join: there the plans below read ranges of the same keys,
	// but more rows of them (docs/SHARDING.md).
	tidb := storetest.TiDB(t)

	// A deep page reads the head of every followed author: one statement
	// for hundreds of them, which must skip from author to author through
	// the index (a loose index scan), not read each author's posts.
	t.Run("pull heads", func(t *testing.T) {
		t.Parallel()
		var ids []uint64
		for a := uint64(1); a <= explainUsers; a++ {
			ids = append(ids, a)
		}
		for _, hi := range []int64{top.PublishTime, mid.t} {
			q, args, err := sqlx.In(store.PullHeadsSQL, ids, 0, hi)
			must(t, err)
			plan := explain(t, sh, q, args...)
			rangeScan(t, plan, "posts")
			for _, r := range plan {
				if !tidb && !strings.Contains(strings.ToLower(r["extra"]), "using index for group-by") {
					t.Errorf("plan of the heads: %v; want a loose index scan (using index for group-by)", r)
				}
			}
		}
	})

	// A deep page of some kinds: a loose index scan of idx_posts_kind, a
	// seek per author and kind.
	t.Run("pull heads of kinds", func(t *testing.T) {
		t.Parallel()
		var ids []uint64
		for a := uint64(1); a <= explainUsers; a++ {
			ids = append(ids, a)
		}
		for _, kinds := range [][]string{{"photo"}, {"photo", "video"}} {
			q, args, err := sqlx.In(store.PullKindHeads, ids, kinds, 0, mid.t)
			must(t, err)
			plan := explain(t, sh, q, args...)
			indexScan(t, plan, "posts", "idx_posts_kind")
			for _, r := range plan {
				if !tidb && !strings.Contains(strings.ToLower(r["extra"]), "using index for group-by") {
					t.Errorf("plan of the heads of kinds: %v; want a loose index scan (using index for group-by)", r)
				}
			}
		}
	})

	t.Run("pull window of kinds", func(t *testing.T) {
		t.Parallel()
		ids, kinds := []uint64{3, 5, 7, 9}, []string{"photo", "video"}
		q, args, err := sqlx.In(store.PullKindWindow, ids, kinds, mid.t, mid.t, mid.id, mid.t-5000, 169)
		must(t, err)
		indexScan(t, explain(t, sh, q, args...), "posts", "idx_posts_kind")
		// With the heads of those kinds below the window: a loose index
		// scan of the same index besides (chosen, as for "pull heads of
		// kinds", where there are more authors than there are rows a seek
		// saves reading).
		ids = nil
		for a := uint64(1); a <= explainUsers; a++ {
			ids = append(ids, a)
		}
		q, args, err = sqlx.In(store.PullKindWindowHeads, ids, kinds, mid.t, mid.t, mid.id, mid.t-5000, 169, ids, kinds, 0, mid.t-5001)
		must(t, err)
		plan := explain(t, sh, q, args...)
		indexScan(t, plan, "posts", "idx_posts_kind")
		if looseScans(plan) != 1 && !tidb {
			t.Errorf("plan of the window of kinds with heads: %v; want one loose index scan", plan)
		}
	})

	// The posts of the followees a deep page can come from: one range of
	// the primary key per author, in one statement.
	t.Run("pull window", func(t *testing.T) {
		t.Parallel()
		ids := []uint64{3, 5, 7, 9}
		q, args, err := sqlx.In(store.PullWindowSQL, ids, mid.t, mid.t, mid.id, mid.t-5000, 169)
		must(t, err)
		rangeScan(t, explain(t, sh, q, args...), "posts")
		// With the heads below the window: a loose index scan besides.
		q, args, err = sqlx.In(store.PullWindowHeads, ids, mid.t, mid.t, mid.id, mid.t-5000, 169, ids, 0, mid.t-5001)
		must(t, err)
		plan := explain(t, sh, q, args...)
		rangeScan(t, plan, "posts")
		if looseScans(plan) != 1 && !tidb {
			t.Errorf("plan of the window with heads: %v; want one loose index scan", plan)
		}
	})

	t.Run("fan-out followers page", func(t *testing.T) {
		t.Parallel()
		rangeScan(t, explain(t, sh, store.FollowersPageSQL, 2, 300, uint64(1<<64-1), 300), "followers")
	})

	// A batch reads its users' follow edges as one range of the author's
	// run of following's primary key (author_id, user_id): the rows it
	// locks lie on a few pages however the users spread over the shard.
	t.Run("fan-out push and retraction", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			q    string
			args []any
		}{
			{store.PushSQL, []any{t0, 99, 705, "post", 705, 2, 40, t0, t0, 99}},
			{store.PushActiveSQL, []any{t0, 99, 705, "post", 705, 2, 40, t0 - 1, t0, t0, 99}},
			{store.RetractSQL, []any{t0, 99, 705, 2, 40}},
			{store.RetractKeptSQL, []any{t0, 99, 705, 2, 40}},
		} {
			plan := explain(t, sh, c.q, c.args...)
			seen := false
			for _, r := range plan {
				switch r["table"] {
				case "f", "k": // following, or kept_history for a retraction
					seen = true
					if r["key"] != "PRIMARY" || r["type"] != "range" {
						t.Errorf("plan of the pairs: %v; want a range of PRIMARY", r)
					}
				case "u", "i":
					if r["key"] != "PRIMARY" || r["type"] != "eq_ref" {
						t.Errorf("plan of the inbox join: %v; want eq_ref of PRIMARY", r)
					}
				}
			}
			if !seen {
				t.Errorf("no plan row for following in %v", plan)
			}
		}
	})

	// following is clustered by author for fan-out; the user's side reads
	// one of its user-first indexes alone, never the clustered rows, which
	// lie one per author.
	t.Run("user side of following", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			q    string
			args []any
		}{
			{store.ListFollowingSQL, []any{7, 705, 20}},
			{store.FollowedAuthors, []any{7}},
			{store.FollowedHosts, []any{7}},
		} {
			plan := explain(t, sh, c.q, c.args...)
			if !slices.ContainsFunc(plan, func(r planRow) bool { return r["table"] == "following" }) {
				t.Errorf("no plan row for following in %v", plan)
			}
			for _, r := range plan {
				if r["table"] == "following" && (!strings.HasPrefix(r["key"], "idx_following_") || !slices.Contains([]string{"range", "ref"}, r["type"]) ||
					(!tidb && !strings.Contains(strings.ToLower(r["extra"]), "using index")) || strings.Contains(strings.ToLower(r["extra"]), "filesort")) {
					t.Errorf("plan of %q: %v; want a range of a user-first index, from the index alone", c.q, r)
				}
			}
		}
	})

	// A claim takes its candidates by primary key and locks nothing else:
	// scanning the claim index (every ready row) or the whole table would
	// lock rows other workers hold.
	t.Run("claim update", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			table string
			key   func(i uint64) []any
		}{
			{"deliveries", func(i uint64) []any { return []any{1000 + i*30} }},
			{"fanout_tasks", func(i uint64) []any { return []any{1000 + i*30/4, i * 30 % 4} }},
			{"follow_events", func(i uint64) []any { return []any{1 + (i*30)%40, 1000 + i*30} }},
			{"authors", func(i uint64) []any { return []any{1000 + i*30} }},
		} {
			for _, n := range []int{1, 3} {
				args := []any{uint64(1), t0 + lease, t0 + 1}
				for i := range uint64(n) {
					args = append(args, c.key(i)...)
				}
				rangeScan(t, explain(t, sh, store.ClaimUpdateSQL(c.table, n), args...), c.table)
			}
		}
	})

	// A worker looking for its next task locks what it reads until its
	// first batch commits: it must read only ready rows, from the claim
	// index, in claimed_until order.
	t.Run("next task", func(t *testing.T) {
		t.Parallel()
		for _, r := range explain(t, sh, store.NextTaskSQL, t0+1) {
			if r["key"] != "idx_fanout_tasks_claim" || r["type"] != "range" || strings.Contains(strings.ToLower(r["extra"]), "filesort") {
				t.Errorf("plan of next task: %v; want a range of idx_fanout_tasks_claim, no filesort", r)
			}
		}
	})

	t.Run("trim rank lookup", func(t *testing.T) {
		t.Parallel()
		// No keyset bound: a ref (or range) read of the key prefix, in order.
		rangeScan(t, explain(t, sh, store.TrimBoundarySQL, 7, 100), "inbox", "ref", "range")
	})
	// A stream watcher's poll reads each watched user's newest entry: one
	// seek at the end of the user's range, however long the inbox.
	t.Run("stream watcher inbox tops", func(t *testing.T) {
		t.Parallel()
		q := store.InboxTopSQL + " UNION ALL " + store.InboxTopSQL
		rangeScan(t, explain(t, sh, q, 7, 8), "inbox", "ref", "range")
	})
	t.Run("trim delete of several users", func(t *testing.T) {
		t.Parallel()
		// An OR of per-user keyset ranges stays a range read of the primary key.
		q := "SELECT user_id FROM inbox WHERE " + store.TrimPartSQL + " OR " + store.TrimPartSQL
		rangeScan(t, explain(t, sh, q, 7, 100, 100, 5, 8, 100, 100, 5), "inbox", "range")
	})
}

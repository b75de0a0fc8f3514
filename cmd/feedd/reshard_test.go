package main

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/reshard"
	"github.com/feedhq/feed/store/storetest"
)

// TestReshard moves data one database → two → three → back to two with
// feedd reshard, a kill of apply along the way, and checks after each move
// that every feed, list and post reads as before, that new writes land
// right, and that cleanup leaves each database only its own rows.
func TestReshard(t *testing.T) {
	t.Parallel()
	dsn := map[string]string{"a": storetest.DatabaseDSN(t), "b": storetest.DatabaseDSN(t), "c": storetest.DatabaseDSN(t)}
	dir := t.TempDir()
	writeMap := func(name string, ranges map[string]string, empty ...string) string {
		var b strings.Builder
		b.WriteString("virtual_shards: 1024\ndatabases:\n")
		for _, db := range slices.Sorted(maps.Keys(dsn)) {
			if _, ok := ranges[db]; ok || slices.Contains(empty, db) {
				fmt.Fprintf(&b, "  %s: {dsn: %q}\n", db, dsn[db])
			}
		}
		b.WriteString("ranges:\n")
		for _, db := range slices.Sorted(maps.Keys(ranges)) {
			fmt.Fprintf(&b, "  - {vshards: %s, database: %s}\n", ranges[db], db)
		}
		path := filepath.Join(dir, name)
		must(t, os.WriteFile(path, []byte(b.String()), 0o600))
		return path
	}
	one := writeMap("one.yaml", map[string]string{"a": "0-1023"})
	two := writeMap("two.yaml", map[string]string{"a": "0-511", "b": "512-1023"})
	three := writeMap("three.yaml", map[string]string{"a": "0-511", "b": "512-767", "c": "768-1023"})
	merge := writeMap("merge.yaml", map[string]string{"a": "0-511", "b": "512-1023"}, "c")

	users, authors := make([]uint64, 40), make([]uint64, 8)
	for i := range users {
		users[i] = uint64(1000 + 37*i)
	}
	for i := range authors {
		authors[i] = uint64(5000 + 101*i)
	}
	ctx := t.Context()
	serve := func(path string) (*Main, *client.Client) {
		t.Helper()
		m, _ := startMain(t, "serve", "--sharding", path, "--http-addr", "127.0.0.1:0", "--poll-interval", "20ms",
			"--lease", "2s", "--probe-interval", "50ms")
		return m, client.New("http://"+m.Addr(), "", &http.Client{Timeout: 20 * time.Second})
	}
	stop := func(m *Main) {
		t.Helper()
		must(t, m.Close())
		time.Sleep(300 * time.Millisecond) // the last probe is older than reshard's idle check
	}
	reshardCmd := func(step, path string) error {
		m := NewMain()
		m.Stderr = &syncBuffer{}
		must(t, m.ParseFlags([]string{"reshard", step, "--sharding", path, "--progress=false", "--batch-size", "50", "--idle-for", "200ms"}))
		err := m.Run(ctx)
		if err != nil {
			t.Logf("reshard %s: %v\n%s", step, err, m.Stderr.(*syncBuffer).String())
		}
		return err
	}
	var next int64
	publish := func(c *client.Client, author uint64) {
		next++
		if _, _, err := c.Publish(ctx, author, client.PublishRequest{PublishTime: 1_700_000_000_000 + next}); err != nil {
			t.Fatal(err)
		}
	}

	// The data: follows, posts, a deleted post, all delivered.
	m, c := serve(one)
	for i, u := range users {
		for k := range 3 {
			must(t, c.Follow(ctx, u, authors[(i+k)%len(authors)]))
		}
	}
	for range 4 {
		for _, a := range authors {
			publish(c, a)
		}
	}
	page, err := c.Posts(ctx, authors[0], 1, "")
	must(t, err)
	must(t, c.DeletePost(ctx, authors[0], parseID(t, page.Items[0].ContentID)))
	settle(t, dsn)
	want := snapshot(t, c, users, authors)
	stop(m)

	check := func(path string) {
		t.Helper()
		m, c := serve(path)
		if got := snapshot(t, c, users, authors); !maps.EqualFunc(got, want, slices.Equal) {
			for k, v := range want {
				if !slices.Equal(got[k], v) {
					t.Errorf("%s: %v, want %v", k, got[k], v)
				}
			}
			t.Fatalf("after the move to %s the API reads differently", filepath.Base(path))
		}
		// New writes land where the new layout says, and read back.
		publish(c, authors[1])
		must(t, c.Follow(ctx, users[0], authors[7]))
		settle(t, dsn)
		want = snapshot(t, c, users, authors)
		stop(m)
	}

	// One → two, with apply killed part-way and run again.
	if err := reshardCmd("plan", two); err != nil {
		t.Fatal(err)
	}
	bin := feeddBinary(t)
	p := startFeedd(t, bin, "reshard apply", "reshard", "apply", "--sharding", two, "--batch-size", "5", "--throttle", "2ms", "--idle-for", "200ms")
	waitFor(t, "apply copying", func() bool { return regexp.MustCompile(`copy +inbox`).MatchString(p.out.String()) })
	p.kill()
	if _, err := startMainErr(t, "serve", "--sharding", two); err == nil || !strings.Contains(err.Error(), "under way") {
		t.Fatalf("serve during a reshard: %v, want a refusal", err)
	}
	must(t, reshardCmd("apply", two))
	if _, err := startMainErr(t, "serve", "--sharding", one); err == nil {
		t.Fatal("serve with the old map after the cut-over started")
	}
	check(two)
	must(t, reshardCmd("cleanup", two))
	wantOnly(t, dsn, two)
	check(two)

	// Two → three.
	must(t, reshardCmd("apply", three))
	check(three)
	must(t, reshardCmd("cleanup", three))
	wantOnly(t, dsn, three)

	// Three → two: c is emptied into b.
	must(t, reshardCmd("apply", merge))
	check(two)
	must(t, reshardCmd("cleanup", merge))
	wantOnly(t, dsn, two)
}

// TestReshardAbort copies part of a move and aborts it: the new database
// is empty again and the old map serves.
func TestReshardAbort(t *testing.T) {
	t.Parallel()
	dsnA, dsnB := storetest.DatabaseDSN(t), storetest.DatabaseDSN(t)
	dir := t.TempDir()
	one := filepath.Join(dir, "one.yaml")
	two := filepath.Join(dir, "two.yaml")
	must(t, os.WriteFile(one, fmt.Appendf(nil, "virtual_shards: 1024\ndatabases: {a: {dsn: %q}}\nranges: [{vshards: 0-1023, database: a}]\n", dsnA), 0o600))
	must(t, os.WriteFile(two, fmt.Appendf(nil, "virtual_shards: 1024\ndatabases: {a: {dsn: %q}, b: {dsn: %q}}\nranges: [{vshards: 0-511, database: a}, {vshards: 512-1023, database: b}]\n", dsnA, dsnB), 0o600))
	m, _ := startMain(t, "serve", "--sharding", one, "--http-addr", "127.0.0.1:0", "--probe-interval", "50ms")
	c := newClient(t, m, "")
	for u := uint64(1); u <= 30; u++ {
		must(t, c.Follow(t.Context(), u, 999))
	}
	must(t, m.Close())
	time.Sleep(300 * time.Millisecond)

	bin := feeddBinary(t)
	p := startFeedd(t, bin, "reshard apply", "reshard", "apply", "--sharding", two, "--batch-size", "2", "--throttle", "5ms", "--idle-for", "200ms")
	waitFor(t, "apply copying", func() bool { return regexp.MustCompile(`copy +following`).MatchString(p.out.String()) })
	p.kill()
	runFeedd(t, bin, "reshard", "abort", "--sharding", two, "--progress=false")
	db, err := sql.Open("mysql", dsnB)
	must(t, err)
	defer db.Close()
	for _, tbl := range []string{"following", "follow_events", "inbox", "followers", "authors", "reshard"} {
		var n int
		must(t, db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+tbl).Scan(&n))
		if n != 0 {
			t.Errorf("b holds %d rows of %s after the abort", n, tbl)
		}
	}
	startMain(t, "serve", "--sharding", one, "--http-addr", "127.0.0.1:0", "--workers=false")
}

// startMainErr runs feedd and returns Run's error instead of failing.
func startMainErr(t *testing.T, args ...string) (*Main, error) {
	t.Helper()
	m := NewMain()
	m.Stderr = &syncBuffer{}
	must(t, m.ParseFlags(append(args, "--http-addr", "127.0.0.1:0", "--drain-delay=0s")))
	err := m.Run(context.Background())
	m.Close()
	return m, err
}

// snapshot reads, through the API, every user's feed and following list
// and every author's posts and followers.
func snapshot(t *testing.T, c *client.Client, users, authors []uint64) map[string][]string {
	t.Helper()
	ctx := t.Context()
	out := map[string][]string{}
	collect := func(key string, fetch func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error)) {
		waitFor(t, "a complete "+key, func() bool {
			var ids []string
			for p, err := range client.All(ctx, 7, fetch) {
				if err != nil {
					return false
				}
				ids = append(ids, p.ContentID)
			}
			out[key] = ids
			return true
		})
	}
	for _, u := range users {
		collect(fmt.Sprintf("feed %d", u), func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error) {
			return c.Feed(ctx, u, limit, cursor)
		})
		var following []string
		for f, err := range client.All(ctx, 100, func(ctx context.Context, limit int, cursor string) (client.Page[client.Following], error) {
			return c.Following(ctx, u, limit, cursor)
		}) {
			must(t, err)
			following = append(following, f.AuthorID)
		}
		out[fmt.Sprintf("following %d", u)] = following
	}
	for _, a := range authors {
		collect(fmt.Sprintf("posts %d", a), func(ctx context.Context, limit int, cursor string) (client.Page[client.Post], error) {
			return c.Posts(ctx, a, limit, cursor)
		})
		// Followers lists trail follows by the follow worker: wait for
		// them to settle before recording.
		var followers []string
		waitFor(t, "followers settled", func() bool {
			var got []string
			for f, err := range client.All(ctx, 100, func(ctx context.Context, limit int, cursor string) (client.Page[client.Follower], error) {
				return c.Followers(ctx, a, limit, cursor)
			}) {
				must(t, err)
				got = append(got, f.UserID)
			}
			done := slices.Equal(got, followers)
			followers = got
			return done
		})
		out[fmt.Sprintf("followers %d", a)] = followers
	}
	return out
}

// settle waits until the workers are idle on every database: deliveries
// and retractions done, follow events applied.
func settle(t *testing.T, dsn map[string]string) {
	t.Helper()
	waitFor(t, "idle workers", func() bool {
		for _, d := range dsn {
			db, err := sql.Open("mysql", d)
			must(t, err)
			var n int
			err = db.QueryRowContext(t.Context(), `SELECT (SELECT COUNT(*) FROM deliveries WHERE state <> 2) + (SELECT COUNT(*) FROM follow_events)`).Scan(&n)
			db.Close()
			if err == nil && n > 0 {
				return false
			}
		}
		return true
	})
}

// wantOnly checks that each database holds only rows of the virtual
// shards the map at path gives it.
func wantOnly(t *testing.T, dsn map[string]string, path string) {
	t.Helper()
	m, err := store.LoadShardMap(path)
	must(t, err)
	owner := map[int]string{}
	for _, r := range m.Ranges {
		var first, last int
		fmt.Sscanf(r.VShards, "%d-%d", &first, &last)
		for v := first; v <= last; v++ {
			owner[v] = r.Database
		}
	}
	for name, d := range dsn {
		db, err := sql.Open("mysql", d)
		must(t, err)
		for _, k := range reshard.Keyed {
			tbl := k.Name
			rows, err := db.QueryContext(t.Context(), "SELECT DISTINCT "+k.Key+" FROM "+tbl)
			if err != nil && strings.Contains(err.Error(), "1146") {
				break // a database the maps have not used yet
			}
			must(t, err)
			for rows.Next() {
				var id uint64
				must(t, rows.Scan(&id))
				if o := owner[store.VirtualShard(id, 1024)]; o != name {
					t.Errorf("database %s holds %s rows of id %d, which %s owns", name, tbl, id, o)
				}
			}
			rows.Close()
		}
		db.Close()
	}
}

package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storetest"
)

// importFile writes a deployment of users 1..users as an import file:
// each follows perUser others, publishes up to 40 posts, mutes one in ten
// and marks a position. It returns the file's path.
func importFile(t *testing.T, seed uint64, users, perUser int) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 46))
	base := time.Now().Add(-72 * time.Hour).UnixMilli()
	var b []byte
	id := uint64(1)
	for u := 1; u <= users; u++ {
		for range r.IntN(40) {
			b = feed.Record{Type: feed.RecordPost, AuthorID: uint64(u), ContentID: id, PublishTime: base + r.Int64N(1e8), Kind: feed.KindPost}.AppendJSON(b)
			b = append(b, '\n')
			id++
		}
		for _, a := range r.Perm(users)[:perUser] {
			if a+1 == u {
				continue
			}
			typ := feed.RecordFollow
			if r.IntN(10) == 0 {
				typ = feed.RecordMute
			}
			b = append(feed.Record{Type: typ, UserID: uint64(u), AuthorID: uint64(a + 1), FollowedAt: base}.AppendJSON(b), '\n')
		}
		b = append(feed.Record{Type: feed.RecordMarker, UserID: uint64(u), ContentID: id, PublishTime: base + 5e7}.AppendJSON(b), '\n')
	}
	path := filepath.Join(t.TempDir(), "import.jsonl")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// importState is what an import leaves, in columns that do not depend on
// when it ran.
func importState(t *testing.T, db *sql.DB) string {
	t.Helper()
	var out strings.Builder
	for _, q := range []string{
		`SELECT user_id, author_id, pull, muted FROM following ORDER BY user_id, author_id`,
		`SELECT author_id, user_id FROM followers ORDER BY author_id, user_id`,
		`SELECT author_id, follower_count, mode FROM authors ORDER BY author_id`,
		`SELECT author_id, publish_time, content_id, kind, deleted FROM posts ORDER BY author_id, publish_time, content_id`,
		`SELECT content_id, state FROM deliveries ORDER BY content_id`,
		`SELECT user_id, author_id, muted_at IS NULL, hidden_at IS NULL FROM mutes ORDER BY user_id, author_id`,
		`SELECT user_id, publish_time, content_id FROM markers ORDER BY user_id`,
		`SELECT user_id, publish_time, content_id, author_id, floor_time, floor_id, pulls FROM inbox ORDER BY user_id, publish_time, content_id`,
		`SELECT COUNT(*) FROM import_marks`,
		`SELECT phase FROM imports`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				out.Write(v)
				out.WriteByte(' ')
			}
			out.WriteByte('\n')
			n++
		}
		rows.Close()
		fmt.Fprintf(&out, "-- %d rows of %s\n", n, q)
	}
	return out.String()
}

// TestImportKilled SIGKILLs feedd import at random instants and runs it
// again until it finishes: the databases end exactly as one uninterrupted
// import of the file leaves them.
func TestImportKilled(t *testing.T) {
	skipShort(t)
	t.Parallel()
	path := importFile(t, crashSeed(t), 400, 30)
	// A push threshold the popular authors pass, and an inbox limit most
	// inboxes reach.
	flags := []string{"--push-threshold", "20", "--inbox-limit", "50"}
	bin, refDSN, _, ref := crashDatabase(t)
	runFeedd(t, bin, append(append([]string{"import", "--mysql-dsn", refDSN}, flags...), path)...)
	want := importState(t, ref)

	rng := rand.New(rand.NewPCG(crashSeed(t), 7))
	var (
		db   *sql.DB
		args []string
	)
	// fresh starts over on a database of its own.
	fresh := func() {
		var dsn string
		_, dsn, _, db = crashDatabase(t)
		args = append(append([]string{"import", "--mysql-dsn", dsn}, flags...), path)
	}
	fresh()
	// progress is how far the import stands, comparable: its phase, then
	// the lines its load phase loaded (0 before it starts).
	progress := func() (phase, done int64) {
		var p sql.NullInt64
		_ = db.QueryRow(`SELECT phase, lines_done FROM imports`).Scan(&p, &done)
		return p.Int64, done
	}
	midway := 0
	for k := 0; midway < 3 && k < 12; k++ {
		phase0, done0 := progress()
		p := startFeedd(t, bin, fmt.Sprintf("feedd import #%d", k), args...)
		// The kill lands at a random instant after the process's first
		// step (a check pass of the whole file comes before it, which a
		// loaded machine can stretch past any fixed delay).
		wait.For(t, p.name+" moving the import on", func() error {
			if phase, done := progress(); phase != phase0 || done != done0 || p.exited() {
				return nil
			}
			return fmt.Errorf("phase %d, %d lines loaded", phase0, done0)
		})
		delay := time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
		select {
		case <-p.done:
		case <-time.After(delay):
		}
		p.kill()
		phase, done := progress()
		t.Logf("kill %d %s after its first step: phase %d, %d lines loaded", k, delay, phase, done)
		switch {
		case phase == 3:
			// Finished before the kill: start over on a database of its own.
			fresh()
			midway = 0
		case phase > 0 || done > 0:
			midway++
		}
	}
	if midway < 3 {
		t.Fatalf("%d kills landed in the middle of the import, want 3", midway)
	}
	runFeedd(t, bin, args...)
	if got := importState(t, db); got != want {
		t.Fatalf("the killed import ends unlike an uninterrupted one: %s", firstDiff(got, want))
	}
}

// firstDiff names the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("got %d lines, want %d", len(g), len(w))
}

// TestImportCommand runs feedd import in-process: a file with an invalid
// line is refused, naming it, with nothing written; --skip-invalid writes
// the rest; standard input is read with -.
func TestImportCommand(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "app.jsonl")
	file := `{"type":"follow","user_id":"1","author_id":"2"}
{"type":"post","author_id":"2","content_id":"10","publish_time":1700000000000}
{"type":"mute","user_id":"1","author_id":"1"}
`
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return importMain(t, append(withEngine(t, []string{"--mysql-dsn", dsn}), args...)...)
	}
	out, err := run(path)
	if err == nil || !strings.Contains(err.Error(), "line 3: user_id and author_id must differ") {
		t.Fatalf("import of a file with an invalid line: %v, want it refused naming line 3\n%s", err, out)
	}
	st := openStore(t, shardmap.Single(dsn))
	if posts, err := st.ListPosts(context.Background(), 2, store.Top, 10); err != nil || len(posts) != 0 {
		t.Fatalf("posts after a refused import: %v, %v", posts, err)
	}
	if out, err := run("--skip-invalid", path); err != nil {
		t.Fatalf("import --skip-invalid: %v\n%s", err, out)
	}
	if posts, err := st.ListPosts(context.Background(), 2, store.Top, 10); err != nil || len(posts) != 1 {
		t.Fatalf("posts after import --skip-invalid: %v, %v; want post 10", posts, err)
	}
	if _, err := run(); err == nil {
		t.Fatal("feedd import without a file: no error")
	}
}

// importMain runs feedd import in-process with args and returns what it
// wrote to stderr.
func importMain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	m := NewMain()
	out := &syncBuffer{}
	m.Stderr = out
	if err := m.ParseFlags(append([]string{"import"}, args...)); err != nil {
		return out.String(), err
	}
	defer m.Close()
	return out.String(), m.Run(context.Background())
}

// TestImportExportRoundTrip imports a file onto two databases and exports
// it: the same records come out; imported onto one database and exported
// again, still the same. So a deployment moves between layouts (or
// servers, or engines) by export and import.
func TestImportExportRoundTrip(t *testing.T) {
	t.Parallel()
	file := importFile(t, 7, 60, 8)
	b, err := os.ReadFile(file)
	must(t, err)
	b = append(b, `{"type":"hide","user_id":"1","author_id":"2"}
{"type":"hide","user_id":"3","author_id":"50"}
{"type":"hide","user_id":"59","author_id":"4"}
`...)
	must(t, os.WriteFile(file, b, 0o600))
	want := slices.Sorted(slices.Values(strings.Split(strings.TrimSpace(string(b)), "\n")))

	path := twoDatabases(t, storetest.DatabaseDSN(t), storetest.DatabaseDSN(t))
	if out, err := importMain(t, "--sharding", path, file); err != nil {
		t.Fatalf("import onto two databases: %v\n%s", err, out)
	}
	got, _ := runExport(t, "--sharding", path)
	if !slices.Equal(got, want) {
		t.Fatalf("export of the import: %d lines, want %d", len(got), len(want))
	}
	exported := filepath.Join(t.TempDir(), "e.jsonl")
	must(t, os.WriteFile(exported, []byte(strings.Join(got, "\n")+"\n"), 0o600))
	dsn := storetest.DatabaseDSN(t)
	if out, err := importMain(t, "--mysql-dsn", dsn, exported); err != nil {
		t.Fatalf("import onto one database: %v\n%s", err, out)
	}
	if again, _ := runExport(t, "--mysql-dsn", dsn); !slices.Equal(again, want) {
		t.Fatalf("export of the re-import: %d lines, want %d", len(again), len(want))
	}
}

package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
)

// Phase I imports a generated deployment with the service's import, what
// `feedd import` runs, into an empty database of its own, then loads the
// rows the import wrote to following, followers, posts and inbox into
// tables made LIKE those, in a second database, with LOAD DATA: the
// ceiling of writing those rows.

// importResult is what phase I measured.
type importResult struct {
	Users, Follows, PostsPer int
	Records                  int64 // valid records of the file
	Bytes                    int64 // of the file
	Check                    time.Duration
	Import                   time.Duration // the write and settle passes
	Stages                   []stageTime   // Import's stages, in order
	Copied                   int64         // inbox entries the import wrote
	Tables                   []ceilingTable
	FollowRates              []followRate
}

// stageTime is how long a stage of the import took: from its first
// progress report (the load's: from the import's start) to the next
// stage's first.
type stageTime struct {
	Stage service.ImportStage
	Time  time.Duration
}

// stageClock records when each stage of an import first reported.
type stageClock struct {
	mu     sync.Mutex
	starts []time.Time
	stages []service.ImportStage
}

func (c *stageClock) report(p service.ImportProgress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.stages); n == 0 || c.stages[n-1] != p.Stage {
		c.stages, c.starts = append(c.stages, p.Stage), append(c.starts, time.Now())
	}
}

// times returns each stage's duration, the first from start, the last to
// end.
func (c *stageClock) times(start, end time.Time) []stageTime {
	out := make([]stageTime, len(c.stages))
	for i, st := range c.stages {
		from, to := start, end
		if i > 0 {
			from = c.starts[i]
		}
		if i+1 < len(c.starts) {
			to = c.starts[i+1]
		}
		out[i] = stageTime{Stage: st, Time: to.Sub(from)}
	}
	return out
}

// ceilingTable is one table's LOAD DATA.
type ceilingTable struct {
	Name string
	Rows int64
	Time time.Duration
}

func (x *importResult) ceiling() (rows int64, d time.Duration) {
	for _, t := range x.Tables {
		rows += t.Rows
		d += t.Time
	}
	return rows, d
}

// ceilingTables are the tables the ceiling loads, each with its columns.
var ceilingTables = []struct{ name, cols string }{
	{"following", "user_id, author_id, followed_at, pull, muted"},
	{"followers", "author_id, user_id, followed_at"},
	{"posts", "author_id, publish_time, content_id, kind, deleted, created_at"},
	{"inbox", "user_id, publish_time, content_id, author_id, kind, last_read_at, active_since, floor_time, floor_id, pulls, follows"},
}

// importing runs phase I and drops its databases.
func (b *bench) importing(ctx context.Context) (err error) {
	o := b.opt
	impName, ceilName := b.server.DBName+"_imp", b.server.DBName+"_iceil"
	defer func() {
		for _, name := range []string{impName, ceilName} {
			if o.Keep {
				b.log.Info("feedbench: keeping database", "database", name)
				continue
			}
			if _, derr := b.db.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS `"+name+"`"); derr != nil && err == nil {
				err = fmt.Errorf("drop database %s: %w", name, derr)
			}
		}
	}()
	dir, err := os.MkdirTemp("", "feedbench-import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res := &importResult{Users: o.ImportUsers, Follows: o.ImportFollows, PostsPer: o.ImportPosts}
	path := filepath.Join(dir, "import.jsonl")
	if res.Bytes, err = writeImportFile(path, res.Users, res.Follows, res.PostsPer); err != nil {
		return err
	}
	st, err := store.Open(shardmap.Single(b.dsnOf(impName)))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx, b.log); err != nil {
		return err
	}
	cfg := service.DefaultConfig()
	reg := prometheus.NewRegistry()
	svc, err := service.New(st, cfg, slog.New(slog.DiscardHandler), service.NewMetrics(reg), time.Now)
	if err != nil {
		return err
	}
	open := func() (io.ReadCloser, error) { return os.Open(path) }
	start := time.Now()
	f, err := open()
	if err != nil {
		return err
	}
	check, err := svc.CheckImport(f)
	f.Close()
	if err != nil {
		return err
	}
	res.Check, res.Records = time.Since(start), check.Valid()
	b.log.Info("feedbench: I file checked", "records", res.Records, "seconds", res.Check.Seconds())
	start = time.Now()
	clock := &stageClock{}
	rep, err := svc.Import(ctx, check, open, service.ImportOptions{Progress: clock.report})
	if err != nil {
		return err
	}
	res.Import, res.Copied, res.Stages = time.Since(start), rep.Copied, clock.times(start, time.Now())
	b.log.Info("feedbench: I imported", "records", res.Records, "inbox_rows", res.Copied, "seconds", res.Import.Seconds(), "stages", fmt.Sprint(res.Stages))
	if res.Tables, err = b.loadDataCeiling(ctx, dir, impName, ceilName); err != nil {
		return err
	}
	if res.FollowRates, err = b.followRates(ctx, st, svc, reg, res.Users); err != nil {
		return err
	}
	b.rep.Import = res
	return nil
}

// writeImportFile writes users users, each publishing postsPer posts and
// following follows others (author popularity skewed, as in real graphs),
// records shuffled by user. It returns the file's size.
func writeImportFile(path string, users, follows, postsPer int) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.New(rand.NewPCG(46, 1))
	base := time.Now().Add(-365 * 24 * time.Hour).UnixMilli()
	var line []byte
	id := uint64(1)
	for u := 1; u <= users; u++ {
		for range postsPer {
			line = feed.Record{Type: feed.RecordPost, AuthorID: uint64(u), ContentID: id, PublishTime: base + r.Int64N(300*24*3600*1000), Kind: feed.KindPost}.AppendJSON(line[:0])
			id++
			if _, err := w.Write(append(line, '\n')); err != nil {
				return 0, err
			}
		}
		seen := map[int]bool{u: true}
		for len(seen) <= follows {
			// Squaring a uniform draw favors low ids: a few popular authors.
			a := 1 + int(float64(users)*r.Float64()*r.Float64())
			if seen[a] {
				continue
			}
			seen[a] = true
			line = feed.Record{Type: feed.RecordFollow, UserID: uint64(u), AuthorID: uint64(a), FollowedAt: base}.AppendJSON(line[:0])
			if _, err := w.Write(append(line, '\n')); err != nil {
				return 0, err
			}
		}
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// loadDataCeiling writes each ceiling table's rows, as the import left
// them, to a tab-separated file (untimed), and loads it with LOAD DATA
// LOCAL INFILE into a table made LIKE it in ceilName (timed).
func (b *bench) loadDataCeiling(ctx context.Context, dir, impName, ceilName string) ([]ceilingTable, error) {
	if _, err := b.db.ExecContext(ctx, "CREATE DATABASE `"+ceilName+"`"); err != nil {
		return nil, err
	}
	src, err := sql.Open("mysql", b.dsnOf(impName))
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := sql.Open("mysql", b.dsnOf(ceilName))
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	dst.SetMaxOpenConns(1)
	var out []ceilingTable
	for _, t := range ceilingTables {
		if _, err := dst.ExecContext(ctx, fmt.Sprintf("CREATE TABLE `%s` LIKE `%s`.`%s`", t.name, impName, t.name)); err != nil {
			return nil, err
		}
		file := filepath.Join(dir, t.name+".tsv")
		rows, err := dumpTSV(ctx, src, t.name, t.cols, file)
		if err != nil {
			return nil, err
		}
		mysql.RegisterLocalFile(file)
		start := time.Now()
		_, err = dst.ExecContext(ctx, fmt.Sprintf("LOAD DATA LOCAL INFILE '%s' INTO TABLE `%s` (%s)", file, t.name, t.cols))
		mysql.DeregisterLocalFile(file)
		if err != nil {
			return nil, fmt.Errorf("load data into %s: %w", t.name, err)
		}
		ct := ceilingTable{Name: t.name, Rows: rows, Time: time.Since(start)}
		b.log.Info("feedbench: I ceiling", "table", t.name, "rows", rows, "seconds", ct.Time.Seconds())
		out = append(out, ct)
	}
	return out, nil
}

// dumpTSV writes the table's columns to file as LOAD DATA reads them by
// default: tab-separated, \N for NULL.
func dumpTSV(ctx context.Context, db *sql.DB, table, cols, file string) (int64, error) {
	f, err := os.Create(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM `%s`", cols, table))
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := len(strings.Split(cols, ","))
	vals := make([]sql.RawBytes, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var count int64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		for i, v := range vals {
			if i > 0 {
				w.WriteByte('\t')
			}
			if v == nil {
				w.WriteString(`\N`)
			} else {
				w.Write(v)
			}
		}
		w.WriteByte('\n')
		count++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return count, w.Flush()
}

// renderImport writes phase I's section.
func (r *report) renderImport(p func(string, ...any)) {
	x := r.Import
	if !r.section(p, 'I', x != nil) {
		return
	}
	ceilRows, ceil := x.ceiling()
	p("A generated deployment: %s users, each publishing %d posts and following %d others (popularity",
		count(x.Users), x.PostsPer, x.Follows)
	p("skewed toward low ids), as a %s-record JSON Lines file of %.0f MB, imported with `service.Import`",
		count(int(x.Records)), float64(x.Bytes)/1e6)
	p("(what `feedd import` runs, with the default inbox limit of %d and push threshold) into an empty",
		service.InboxLimitDefault)
	p("database on the benchmark's server. The ceiling then loads the rows the import wrote to `following`,")
	p("`followers`, `posts` and `inbox` (%s rows, headers included), dumped to tab-separated files", count(int(ceilRows)))
	p("beforehand, with `LOAD DATA LOCAL INFILE` into empty tables made `LIKE` them in another database.")
	p("The import writes more than the ceiling loads (finished `deliveries` rows, the authors' counts,")
	p("its marks and progress) and reads the outboxes back to fill the inboxes.")
	p("")
	p("| step | rows | seconds | rows/s | records/s |")
	p("|---|---:|---:|---:|---:|")
	p("| check pass: every line parsed and checked, the file hashed | — | %.2f | — | %s |", x.Check.Seconds(), count(int(rate(x.Records, x.Check))))
	p("| **import**: load, settle authors, settle users (%s inbox entries) | %s | %.2f | %s | **%s** |",
		count(int(x.Copied)), count(int(ceilRows)), x.Import.Seconds(), count(int(rate(ceilRows, x.Import))), count(int(rate(x.Records, x.Import))))
	for _, st := range x.Stages {
		p("| import stage %s | — | %.2f | — | — |", st.Stage, st.Time.Seconds())
	}
	for _, t := range x.Tables {
		p("| ceiling: `LOAD DATA` into `%s` | %s | %.2f | %s | — |", t.Name, count(int(t.Rows)), t.Time.Seconds(), count(int(rate(t.Rows, t.Time))))
	}
	p("| **ceiling in all** | %s | %.2f | **%s** | — |", count(int(ceilRows)), ceil.Seconds(), count(int(rate(ceilRows, ceil))))
	p("")
	ratio := ceil.Seconds() / x.Import.Seconds()
	p("| ratio | value | target | verdict |")
	p("|---|---:|---:|---|")
	p("| import / ceiling (the same rows' rate) | %.2f | ≥ %.1f | %s |", ratio, targetImport, verdict(ratio, targetImport))
	p("| import with its check pass / ceiling | %.2f | — | (reported) |", ceil.Seconds()/(x.Import+x.Check).Seconds())
	p("")
	if len(x.FollowRates) == 0 {
		return
	}
	p("Then %s new users each follow %d of the imported authors (drawn as the file draws them), in",
		count(followUsers), followsPerUser)
	p("process through the service with its workers running, each way its own set of users: a file of")
	p("their follow records imported (`service.Import`, what `feedd import` runs: the same work, the")
	p("rate batch follows are held to), batches of %s pairs, and one follow a call. Accepted is until", count(followBatch))
	p("every call returned; applied, until every follow event was applied (the author's `followers` row")
	p("and count, the backfill of the author's newest posts into the inbox).")
	p("")
	p("| way | clients | edges | accepted s | applied s | edges/s applied |")
	p("|---|---:|---:|---:|---:|---:|")
	for _, f := range x.FollowRates {
		p("| %s | %d | %s | %.2f | %.2f | **%s** |", f.Way, f.Clients, count(f.Edges), f.Accepted.Seconds(), f.Applied.Seconds(), count(int(f.perSecond())))
	}
	p("")
	imported, batch, single := x.FollowRates[0].perSecond(), x.FollowRates[1].perSecond(), x.FollowRates[2].perSecond()
	p("| ratio | value | target | verdict |")
	p("|---|---:|---:|---|")
	p("| batch follows / import of the same edges (edges/s applied) | %.2f | ≥ %.1f | %s |", batch/imported, targetBatchFollows, verdict(batch/imported, targetBatchFollows))
	p("| batch follows / single follows (edges/s applied) | %.2f | — | (reported) |", batch/single)
	p("")
}

// targetBatchFollows is issue 46's bar: batch follows as fast per edge as
// the import.
const targetBatchFollows = 1.0

// targetImport is issue 46's bar: import at half the raw ceiling's rate.
const targetImport = 0.5

package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/reshard"
	"github.com/feedhq/feed/store/shardmap"
)

const reshardUsage = `usage: feedd reshard <plan|apply|status|abort|cleanup> --sharding FILE [flags]

  plan     what would move: ranges, rows per table, an estimate of the time
  apply    move the data while feedd serves, verify it, cut over
  status   the layout in force, its epoch, and a reshard under way
  abort    undo a reshard that has not cut over
  cleanup  delete moved rows from the databases they left

FILE is the edited sharding.yaml: the layout to move to. A database being
emptied stays listed in it, with no ranges, until cleanup has run.`

// reshardConfig is the reshard command's settings.
type reshardConfig struct {
	Step     string
	Sharding string
	Batch    int
	Throttle time.Duration
	Progress bool
	Engine   string
}

func (c *reshardConfig) parse(args []string, stderr io.Writer) error {
	steps := []string{"plan", "apply", "status", "abort", "cleanup"}
	if len(args) == 0 || !slices.Contains(steps, args[0]) {
		fmt.Fprintln(stderr, reshardUsage)
		return flag.ErrHelp
	}
	c.Step = args[0]
	fs := flag.NewFlagSet("feedd reshard "+c.Step, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Sharding, "sharding", "", "the sharding.yaml to move the data to (required)")
	fs.IntVar(&c.Batch, "batch-size", 1000, "rows per statement")
	fs.DurationVar(&c.Throttle, "throttle", 0, "pause after each batch, to spare a busy server")
	fs.BoolVar(&c.Progress, "progress", true, "draw a progress bar on stderr")
	fs.StringVar(&c.Engine, "inbox-engine", cmp.Or(os.Getenv("FEED_INBOX_ENGINE"), string(store.InnoDB)), "the deployment's inbox engine (FEED_INBOX_ENGINE): new databases get their inbox in it")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.Sharding == "" {
		return fmt.Errorf("reshard %s: --sharding FILE is required", c.Step)
	}
	if _, err := store.ParseEngine(c.Engine); err != nil {
		return err
	}
	if c.Batch < 1 {
		return fmt.Errorf("--batch-size must be >= 1")
	}
	return nil
}

// runReshard runs one reshard step, reporting to w.
func runReshard(ctx context.Context, c reshardConfig, w io.Writer) error {
	m, err := loadReshardMap(c.Sharding)
	if err != nil {
		return err
	}
	m.InboxEngine = c.Engine
	bar := newRowBar(w, c.Progress)
	opt := reshard.Options{BatchSize: c.Batch, Throttle: c.Throttle, Progress: bar.report, Log: newLogger(w, "text", "info")}
	r, err := reshard.Open(ctx, m, opt)
	if err != nil {
		return err
	}
	defer r.Close()
	switch c.Step {
	case "status":
		st, err := r.Status(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "layout in force (epoch %d): %s\n", st.Epoch, st.InForce)
		for _, db := range slices.Sorted(maps.Keys(st.UnderWay)) {
			u := st.UnderWay[db]
			fmt.Fprintf(w, "reshard under way (marked on %s): to %s", db, u.Layout)
			if u.Phase != "" {
				fmt.Fprintf(w, "; %s gives virtual shards up, phase %s, %d rows copied, %d captured writes to apply", db, u.Phase, u.Copied, u.Backlog)
			}
			fmt.Fprintln(w)
		}
		printMoves(w, "to move to the file's layout", st.Moves)
		return nil
	case "plan":
		fmt.Fprintf(w, "layout in force (epoch %d): %s\nthe file's layout:          %s\n", r.Epoch(), r.LayoutInForce(), r.Target())
		printMoves(w, "moves", r.Moves)
		if len(r.Moves) == 0 {
			return nil
		}
		p, err := r.Plan(ctx)
		bar.finish()
		if err != nil {
			return err
		}
		var total int64
		for _, t := range slices.Sorted(maps.Keys(p.Rows)) {
			fmt.Fprintf(w, "  %-14s %12d rows\n", t, p.Rows[t])
			total += p.Rows[t]
		}
		rate := float64(p.Scanned) / max(p.Elapsed.Seconds(), 1e-3)
		// apply reads the sources twice (copy, verify), the targets once,
		// and writes the moving rows: about three reads of the sources.
		est := time.Duration(3 * float64(p.Scanned) / max(rate, 1) * float64(time.Second))
		fmt.Fprintf(w, "  %-14s %12d rows to copy; %d rows read in %s (%.0f rows/s); apply: about %s\n",
			"total", total, p.Scanned, p.Elapsed.Round(time.Millisecond), rate, est.Round(time.Second))
		return nil
	case "apply":
		printMoves(w, "moves", r.Moves)
		start := time.Now()
		err := r.Apply(ctx, func(rep reshard.Report) {
			bar.finish()
			fmt.Fprintf(w, "cut over %s: epoch %d, writes on %s paused %s, %d rows caught up in the pause\n",
				rep.Source, rep.Epoch, rep.Source, rep.Pause.Round(time.Millisecond), rep.Caught)
		})
		bar.finish()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "done in %s: layout in force (epoch %d): %s\nrun `feedd reshard cleanup --sharding %s` to delete the moved rows from the databases they left\n",
			time.Since(start).Round(time.Millisecond), r.Epoch(), r.LayoutInForce(), c.Sharding)
		return nil
	case "abort":
		err := r.Abort(ctx)
		bar.finish()
		if err == nil {
			fmt.Fprintf(w, "aborted: the layout in force stays epoch %d: %s\n", r.Epoch(), r.LayoutInForce())
		}
		return err
	default: // cleanup
		err := r.Cleanup(ctx)
		bar.finish()
		if err == nil {
			fmt.Fprintln(w, "cleaned up: every database holds only the virtual shards the layout in force gives it")
		}
		return err
	}
}

func loadReshardMap(path string) (*shardmap.Map, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	return shardmap.Parse(b)
}

func printMoves(w io.Writer, title string, moves []reshard.Move) {
	if len(moves) == 0 {
		fmt.Fprintf(w, "%s: none, the file's layout is the one in force\n", title)
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, m := range moves {
		fmt.Fprintf(w, "  %s\n", m)
	}
}

// rowBar draws one progress bar per step and table: rows read against the
// server's estimate of the table's rows (hence an ETA), the moving rows
// among them, the rate.
type rowBar struct {
	w    io.Writer
	on   bool
	bar  *progressbar.ProgressBar
	name string
}

func newRowBar(w io.Writer, on bool) *rowBar { return &rowBar{w: w, on: on} }

func (b *rowBar) report(p reshard.Progress) {
	if !b.on {
		return
	}
	name := fmt.Sprintf("%-6s %-14s", p.Step, p.Table)
	if name != b.name {
		b.finish()
		b.name = name
		b.bar = progressbar.NewOptions64(max(p.Estimate, p.Rows, 1),
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(fmt.Sprintf("%s %7d moving", name, p.Moved)),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond))
	}
	if p.Rows > b.bar.GetMax64() {
		b.bar.ChangeMax64(p.Rows)
	}
	b.bar.Describe(fmt.Sprintf("%s %7d moving", name, p.Moved))
	_ = b.bar.Set64(p.Rows)
}

// convert draws an inbox engine conversion: every row it copies moves.
func (b *rowBar) convert(p store.ConvertProgress) {
	b.report(reshard.Progress{Step: "to " + string(p.To), Table: p.Database + ".inbox", Rows: p.Rows, Moved: p.Rows, Estimate: p.Estimate})
}

func (b *rowBar) finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
		fmt.Fprintln(b.w)
		b.bar = nil
	}
}

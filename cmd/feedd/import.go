package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
)

// importConfig is what feedd import takes besides the settings of serve.
type importConfig struct {
	File        string // the file's path, - for standard input
	SkipInvalid bool
}

func (c *importConfig) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.SkipInvalid, "skip-invalid", false, "import: write the valid lines of a file with invalid ones, and list those skipped")
}

// runImport checks the file named by the argument ("-": standard input,
// spooled to a temporary file, since the file is read twice), then writes
// it. A file with an invalid line is refused before anything is written,
// unless --skip-invalid.
func (m *Main) runImport(ctx context.Context) error {
	path := m.Import.File
	if path == "-" {
		tmp, err := spool(os.Stdin)
		if err != nil {
			return err
		}
		defer os.Remove(tmp)
		path = tmp
	}
	open := func() (io.ReadCloser, error) { return os.Open(path) }
	f, err := open()
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	check, err := m.svc.CheckImport(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	for _, l := range check.Invalid {
		fmt.Fprintln(m.Stderr, l)
	}
	if more := check.Bad - int64(len(check.Invalid)); more > 0 {
		fmt.Fprintf(m.Stderr, "... and %d more invalid lines\n", more)
	}
	bar := newImportBar(m.Stderr)
	rep, err := m.svc.Import(ctx, check, open, service.ImportOptions{SkipInvalid: m.Import.SkipInvalid, Progress: bar.report})
	bar.finish()
	if feed.ErrorCode(err) == feed.EINVALID {
		return fmt.Errorf("import: %s (--skip-invalid writes the others)", feed.ErrorMessage(err))
	} else if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	for _, c := range rep.Conflicts {
		fmt.Fprintf(m.Stderr, "line %d: content_id %d names another post: skipped\n", c.Line, c.ContentID)
	}
	if more := rep.Refused - int64(len(rep.Conflicts)); more > 0 {
		fmt.Fprintf(m.Stderr, "... and %d more posts skipped\n", more)
	}
	fmt.Fprintf(m.Stderr, "import: %s; %d skipped (invalid), %d skipped (content id taken); %d inbox entries; %.1fs, %.0f records/s%s\n",
		recordCounts(check.Records), check.Bad, rep.Refused, rep.Copied, rep.Elapsed.Seconds(),
		float64(check.Valid())/max(rep.Elapsed.Seconds(), 1e-3), map[bool]string{true: " (resumed)"}[rep.Resumed])
	return nil
}

func recordCounts(n map[string]int64) string {
	types := make([]string, 0, len(n))
	for t := range n {
		types = append(types, t)
	}
	sort.Strings(types)
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%d %s", n[t], t)
	}
	if len(parts) == 0 {
		return "no records"
	}
	return strings.Join(parts, ", ")
}

// spool copies r to a temporary file and returns its path.
func spool(r io.Reader) (string, error) {
	f, err := os.CreateTemp("", "feedd-import-*.jsonl")
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), f.Close()
}

// importBar draws an import's progress on a terminal, one bar a stage;
// elsewhere it draws nothing (the summary line says what was done).
type importBar struct {
	mu    sync.Mutex
	w     io.Writer
	on    bool
	stage service.ImportStage
	bar   *progressbar.ProgressBar
}

func newImportBar(w io.Writer) *importBar {
	f, ok := w.(*os.File)
	return &importBar{w: w, on: ok && term.IsTerminal(int(f.Fd()))}
}

var stageNames = map[service.ImportStage]string{
	service.StageLoad:          "loading records",
	service.StageSettleAuthors: "settling authors",
	service.StageSettleUsers:   "settling feeds",
}

var stageUnits = map[service.ImportStage]string{
	service.StageLoad:          "records",
	service.StageSettleAuthors: "authors",
	service.StageSettleUsers:   "users",
}

func (b *importBar) report(p service.ImportProgress) {
	if !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Stage != b.stage {
		b.finishLocked()
		b.stage = p.Stage
		b.bar = progressbar.NewOptions64(max(p.Total, 1),
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(fmt.Sprintf("%-16s", stageNames[p.Stage])),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(stageUnits[p.Stage]),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond))
	}
	if p.Done > b.bar.GetMax64() {
		b.bar.ChangeMax64(p.Done)
	}
	_ = b.bar.Set64(p.Done)
}

func (b *importBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finishLocked()
}

func (b *importBar) finishLocked() {
	if b.bar != nil {
		_ = b.bar.Finish()
		fmt.Fprintln(b.w)
		b.bar = nil
	}
}

package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/schollz/progressbar/v3"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
)

// exportConfig is the export command's own settings; the database ones
// are serve's (Config).
type exportConfig struct {
	Lo, Hi uint64 // the range of user ids, inclusive
	Out    string // "" or "-": standard output
}

func (c *exportConfig) register(fs *flag.FlagSet) {
	c.Lo, c.Hi = 1, math.MaxUint64
	fs.Func("users", "export the users (and authors) with ids in the inclusive range A-B (default: every user)", func(s string) error {
		a, b, ok := strings.Cut(s, "-")
		lo, errA := strconv.ParseUint(a, 10, 64)
		hi, errB := strconv.ParseUint(b, 10, 64)
		if !ok || errA != nil || errB != nil || lo == 0 || lo > hi {
			return errors.New("want A-B, decimal ids with 1 <= A <= B")
		}
		c.Lo, c.Hi = lo, hi
		return nil
	})
	fs.StringVar(&c.Out, "out", "", "write to this file (default: standard output); it appears once the export is whole")
}

// export writes the records as JSON Lines to --out (through a temporary
// file beside it, renamed when whole) or standard output, with a progress
// bar on stderr when it is a terminal, and a summary line.
func (m *Main) export(ctx context.Context) error {
	if err := m.store.CheckLayout(ctx); err != nil {
		return err
	}
	svc, err := service.New(m.store, m.Config.Service, m.Log, service.NewMetrics(prometheus.NewRegistry()), time.Now)
	if err != nil {
		return err
	}
	out := m.Stdout
	var tmp *os.File
	if m.Export.Out != "" && m.Export.Out != "-" {
		if tmp, err = os.CreateTemp(filepath.Dir(m.Export.Out), filepath.Base(m.Export.Out)+".*.tmp"); err != nil {
			return err
		}
		defer os.Remove(tmp.Name()) // after the rename, there is none
		defer tmp.Close()
		out = tmp
	}
	w := bufio.NewWriterSize(out, 256<<10)
	bar := m.exportBar(ctx, svc)
	counts := map[string]int64{}
	var line []byte
	var read int64 // rows read, of every database
	start := time.Now()
	err = svc.Export(ctx, m.Export.Lo, m.Export.Hi, func(recs []feed.Record, rows int) error {
		for _, r := range recs {
			counts[r.Type]++
			line = append(r.AppendJSON(line[:0]), '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		if read += int64(rows); bar != nil {
			if m := bar.GetMax64(); m > 0 && read > m {
				bar.ChangeMax64(read)
			}
			_ = bar.Set64(read)
		}
		return nil
	})
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(m.Stderr)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil && tmp != nil {
		if err = tmp.Close(); err == nil {
			err = os.Rename(tmp.Name(), m.Export.Out)
		}
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var total int64
	parts := make([]string, 0, len(service.ExportTypes))
	for _, typ := range service.ExportTypes {
		total += counts[typ]
		parts = append(parts, fmt.Sprintf("%s %d", typ, counts[typ]))
	}
	fmt.Fprintf(m.Stderr, "exported %d records in %.1fs: %s\n", total, time.Since(start).Seconds(), strings.Join(parts, ", "))
	return nil
}

// exportBar returns a progress bar of the rows read when stderr is a
// terminal (nil otherwise): against the servers' estimate of every row for
// a whole export, open-ended for a range of users.
func (m *Main) exportBar(ctx context.Context, svc *service.Service) *progressbar.ProgressBar {
	f, ok := m.Stderr.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	total := int64(-1)
	if m.Export.Lo == 1 && m.Export.Hi == math.MaxUint64 {
		if n, err := svc.ExportEstimate(ctx); err == nil {
			total = max(n, 1)
		}
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(m.Stderr),
		progressbar.OptionSetDescription("export"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rows"),
		progressbar.OptionSetPredictTime(total > 0),
		progressbar.OptionThrottle(100*time.Millisecond))
}

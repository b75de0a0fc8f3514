package service

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// An import file is JSON Lines of feed.Record (docs/OPERATIONS.md, "Loading
// an existing app"). Import reads it twice: once to check every line and
// name the file (the SHA-256 of its bytes), once to write it, and then
// settles what the records imply (store/import.go).

// MaxImportLine bounds the length of one line of an import file.
const MaxImportLine = 1 << 20

// maxInvalidListed bounds the invalid lines an ImportCheck lists; the
// count goes on past it.
const maxInvalidListed = 1000

// InvalidLine is a line of an import file that is not a valid record.
type InvalidLine struct {
	Line int64
	Err  error
}

func (l InvalidLine) String() string {
	return fmt.Sprintf("line %d: %s", l.Line, feed.ErrorMessage(l.Err))
}

// ImportCheck is what the checking pass found of a file.
type ImportCheck struct {
	ID      uint64           // names the file: the first 8 bytes of its SHA-256
	Lines   int64            // lines, blank ones included
	Records map[string]int64 // valid records by type
	Invalid []InvalidLine    // the first maxInvalidListed invalid lines
	Bad     int64            // invalid lines in all
}

// Valid reports the valid records.
func (c ImportCheck) Valid() int64 {
	var n int64
	for _, v := range c.Records {
		n += v
	}
	return n
}

// CheckImport reads an import file and checks every line by the API's
// rules, writing nothing. Blank lines are allowed and ignored.
func (s *Service) CheckImport(r io.Reader) (ImportCheck, error) {
	c := ImportCheck{Records: map[string]int64{}}
	h := sha256.New()
	maxTime := s.now().Add(s.cfg.ClockSkew).UnixMilli()
	err := scanLines(io.TeeReader(r, h), func(n int64, line []byte) {
		c.Lines = n
		if len(line) == 0 {
			return
		}
		rec, err := feed.ParseRecord(line, maxTime)
		if err != nil {
			c.Bad++
			if len(c.Invalid) < maxInvalidListed {
				c.Invalid = append(c.Invalid, InvalidLine{Line: n, Err: err})
			}
			return
		}
		c.Records[rec.Type]++
	})
	c.ID = binary.BigEndian.Uint64(h.Sum(nil))
	return c, err
}

// scanLines calls fn with each line of r (without its end) and its number,
// from 1.
func scanLines(r io.Reader, fn func(n int64, line []byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxImportLine)
	var n int64
	for sc.Scan() {
		n++
		fn(n, trimCR(sc.Bytes()))
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return feed.Errorf(feed.EINVALID, "line %d: longer than %d bytes", n+1, MaxImportLine)
	}
	return sc.Err()
}

func trimCR(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}

// ImportStage names what an import is doing, for progress reports.
type ImportStage string

const (
	StageLoad          ImportStage = "load"
	StageSettleAuthors ImportStage = "authors"
	StageSettleUsers   ImportStage = "users"
)

// ImportProgress is reported as an import goes: Done of Total lines while
// loading, marks while settling.
type ImportProgress struct {
	Stage       ImportStage
	Done, Total int64
}

// ImportReport is what an import did.
type ImportReport struct {
	Resumed bool // an earlier run of the file had made progress
	// Conflicts lists the first maxInvalidListed post records refused
	// because the content id names another post; Refused counts them all.
	Conflicts []store.ImportConflict
	Refused   int64
	Copied    int64 // inbox entries written
	Elapsed   time.Duration
}

// importBatch bounds the lines one load step writes.
const importBatch = 5000

// settleBatch bounds the users one settling transaction takes, and
// settleWorkers the transactions at once.
const (
	settleBatch   = 64
	settleWorkers = 4
)

// importSourceBound bounds the posts the settling phase holds in memory.
const importSourceBound = 2_000_000

// ImportOptions tunes Import.
type ImportOptions struct {
	// SkipInvalid writes the valid lines of a file with invalid ones;
	// otherwise such a file is refused before anything is written.
	SkipInvalid bool
	// Progress, if not nil, is called as the import goes, from several
	// goroutines at once.
	Progress func(ImportProgress)
}

// Import writes an import file checked by CheckImport (with check its
// result): the records of its valid lines, resuming after the lines an
// earlier run wrote, then settles authors and users. The file must be the
// one checked: its records are read again from open.
//
// Returns EINVALID, with nothing written, for a file with invalid lines
// unless opt.SkipInvalid.
func (s *Service) Import(ctx context.Context, check ImportCheck, open func() (io.ReadCloser, error), opt ImportOptions) (ImportReport, error) {
	var rep ImportReport
	if check.Bad > 0 && !opt.SkipInvalid {
		return rep, feed.Errorf(feed.EINVALID, "%d invalid lines, the first %s; nothing written", check.Bad, check.Invalid[0])
	}
	ctx = store.WithClass(ctx, store.Workers)
	start := s.now()
	progress := opt.Progress
	if progress == nil {
		progress = func(ImportProgress) {}
	}
	p, err := s.store.StartImport(ctx, check.ID, check.Lines, start.UnixMilli())
	if err != nil {
		return rep, err
	}
	rep.Resumed = p.Phase > store.ImportLoading || p.LinesDone > 0
	if p.Phase == store.ImportLoading {
		if err := s.loadImport(ctx, &p, open, progress, &rep); err != nil {
			return rep, err
		}
		if err := s.advanceImport(ctx, &p, store.ImportSettlingAuthors); err != nil {
			return rep, err
		}
	}
	if p.Phase == store.ImportSettlingAuthors {
		if err := s.settleImportAuthors(ctx, p.ID, progress); err != nil {
			return rep, err
		}
		if err := s.advanceImport(ctx, &p, store.ImportSettlingUsers); err != nil {
			return rep, err
		}
	}
	if rep.Copied, err = s.settleImportUsers(ctx, p.ID, progress); err != nil {
		return rep, err
	}
	if err := s.advanceImport(ctx, &p, store.ImportDone); err != nil {
		return rep, err
	}
	rep.Elapsed = s.now().Sub(start)
	return rep, nil
}

func (s *Service) advanceImport(ctx context.Context, p *store.ImportProgress, phase int) error {
	p.Phase = phase
	return s.store.AdvanceImport(ctx, *p, s.now().UnixMilli())
}

// loadImport writes the records of the lines after p.LinesDone, a batch
// at a time, recording each batch's end once it is written. The next
// batch is read while one is written.
func (s *Service) loadImport(ctx context.Context, p *store.ImportProgress, open func() (io.ReadCloser, error), progress func(ImportProgress), rep *ImportReport) error {
	f, err := open()
	if err != nil {
		return err
	}
	defer f.Close()
	type batch struct {
		recs []store.ImportRecord
		end  int64
	}
	batches := make(chan batch, 1)
	g, gctx := errgroup.WithContext(ctx)
	maxTime := s.now().Add(s.cfg.ClockSkew).UnixMilli()
	g.Go(func() error {
		defer close(batches)
		var cur batch
		send := func() bool {
			select {
			case batches <- cur:
				cur = batch{}
				return true
			case <-gctx.Done():
				return false
			}
		}
		stopped := false
		err := scanLines(f, func(n int64, line []byte) {
			if stopped || n <= p.LinesDone {
				return
			}
			cur.end = n
			if len(line) > 0 {
				// Invalid lines were reported by the check: skipped here.
				if rec, err := feed.ParseRecord(line, maxTime); err == nil {
					cur.recs = append(cur.recs, store.ImportRecord{Line: n, Record: rec})
				}
			}
			if n%importBatch == 0 {
				stopped = !send()
			}
		})
		if err != nil || stopped {
			return err
		}
		if cur.end > 0 {
			send()
		}
		return nil
	})
	g.Go(func() error {
		for b := range batches {
			c, err := s.store.LoadImport(gctx, p.ID, b.recs, s.now().UnixMilli())
			if err != nil {
				return err
			}
			rep.Refused += int64(len(c))
			rep.Conflicts = append(rep.Conflicts, c[:min(len(c), maxInvalidListed-len(rep.Conflicts))]...)
			p.LinesDone = b.end
			if err := s.store.AdvanceImport(gctx, *p, s.now().UnixMilli()); err != nil {
				return err
			}
			progress(ImportProgress{Stage: StageLoad, Done: b.end, Total: p.Lines})
		}
		return nil
	})
	return g.Wait()
}

// settleImportAuthors runs the second phase on every database at once.
func (s *Service) settleImportAuthors(ctx context.Context, id uint64, progress func(ImportProgress)) error {
	total, err := s.pendingMarks(ctx, id)
	if err != nil {
		return err
	}
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for _, sh := range s.store.Shards() {
		g.Go(func() error {
			for {
				n, err := s.store.SettleImportAuthors(gctx, sh, id, s.cfg.PushThreshold)
				if err != nil || n == 0 {
					return err
				}
				progress(ImportProgress{Stage: StageSettleAuthors, Done: done.Add(int64(n)), Total: total})
			}
		})
	}
	return g.Wait()
}

// settleImportUsers runs the third phase: each database's marked users in
// batches, settleWorkers batches at once.
func (s *Service) settleImportUsers(ctx context.Context, id uint64, progress func(ImportProgress)) (int64, error) {
	total, err := s.pendingMarks(ctx, id)
	if err != nil {
		return 0, err
	}
	src := store.NewCopySource(s.cfg.InboxLimit, importSourceBound)
	var done, copied atomic.Int64
	batches := make(chan []uint64)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(batches)
		for _, sh := range s.store.Shards() {
			for after := uint64(0); ; {
				users, err := s.store.NextImportUsers(gctx, sh, id, after, settleBatch)
				if err != nil || len(users) == 0 {
					if err != nil {
						return err
					}
					break
				}
				select {
				case batches <- users:
				case <-gctx.Done():
					return gctx.Err()
				}
				after = users[len(users)-1]
			}
		}
		return nil
	})
	for range settleWorkers {
		g.Go(func() error {
			for users := range batches {
				n, err := s.store.SettleImportUsers(gctx, id, users, s.cfg.InboxLimit, src)
				if err != nil {
					return err
				}
				copied.Add(n)
				progress(ImportProgress{Stage: StageSettleUsers, Done: done.Add(int64(len(users))), Total: total})
			}
			return nil
		})
	}
	err = g.Wait()
	return copied.Load(), err
}

// pendingMarks counts the import's marks left on every database.
func (s *Service) pendingMarks(ctx context.Context, id uint64) (int64, error) {
	var total int64
	for _, sh := range s.store.Shards() {
		n, err := s.store.PendingMarks(ctx, sh, id)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

package service

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/reshard"
)

// The console's view of a reshard is feedd reshard status's: the package
// reshard opened on the process's databases with the layout the reshard
// under way moves to, which each database's mark names. Rates come from
// the activity samples of the rows each step has copied.

// abortTimeout bounds an abort started from the console: it deletes the
// copies a reshard made, batch by batch.
const abortTimeout = time.Hour

// reshards caches the reshard opened for the layout a reshard under way
// moves to, while the layout in force stays the same, and the outcome of
// the last abort.
type reshards struct {
	mu     sync.Mutex
	open   *reshard.Reshard
	target string
	epoch  int64
	abort  AbortState
}

// AbortState is an abort started from the console.
type AbortState struct {
	Running bool
	Err     error // of the last abort that ended
	Ended   time.Time
}

// ReshardStep is the state of one database giving virtual shards up.
type ReshardStep struct {
	Database string
	Phase    string // copy, catch-up, verify, cut-over
	Copied   int64  // rows copied so far by the step
	Backlog  int64  // captured writes not applied yet
	// Estimate is the rows to copy, from the server's table statistics
	// scaled by the share of the database's virtual shards that move; 0
	// when unknown. Progress is Copied over it, up to 1.
	Estimate int64
	Progress float64
	// Rate is rows copied per second over the last minute; ETA the time
	// the copy's rest takes at that rate (0: unknown).
	Rate float64
	ETA  time.Duration
}

// ReshardPhases are a step's phases in order.
var ReshardPhases = []string{"copy", "catch-up", "verify", "cut-over"}

// Verified says the step's copies were verified: its phase is past verify.
func (st ReshardStep) Verified() bool { return st.Phase == "cut-over" }

// DatabaseRanges are the virtual shards a database owns.
type DatabaseRanges struct {
	Name   string
	Ranges []string
}

// ReshardView is the console's reshard page.
type ReshardView struct {
	Epoch    int64
	InForce  string
	Owners   []DatabaseRanges
	UnderWay bool
	Target   string
	Started  time.Time
	Moves    []reshard.Move // still to move, from the layout in force
	Steps    []ReshardStep
	Abort    AbortState
	// Err is why the reshard under way could not be read.
	Err error
	// Refused is why feedd reshard refuses to move virtual shards of a
	// database (reshard.ErrTiDB), nil where it can.
	Refused error
}

// Reshard reads the layout in force and a reshard under way.
func (s *Service) Reshard(ctx context.Context) ReshardView {
	ctx = store.WithClass(ctx, store.Reads)
	v := ReshardView{Epoch: s.store.Epoch(), InForce: s.store.Layout()}
	for _, sh := range s.store.Shards() {
		v.Owners = append(v.Owners, DatabaseRanges{sh.Name, s.store.Ranges(sh)})
	}
	type mark struct {
		m       store.ReshardMark
		ok      bool
		err     error
		refused error
	}
	// The abort's state before the marks: an abort that ends between the
	// two reads shows as running, not as done beside its marks.
	s.reshards.mu.Lock()
	v.Abort = s.reshards.abort
	s.reshards.mu.Unlock()
	marks := eachShard(s, ctx, func(ctx context.Context, sh *store.Shard) mark {
		m, ok, err := sh.ReshardMark(ctx)
		if err != nil {
			return mark{err: err}
		}
		refused := reshard.CheckServer(ctx, sh.Name, sh.Pool(store.Reads))
		if refused != nil && !errors.Is(refused, reshard.ErrTiDB) {
			return mark{err: refused}
		}
		return mark{m, ok, nil, refused}
	})
	for _, m := range marks {
		if m.err != nil {
			v.Err = m.err
		}
		if m.refused != nil {
			v.Refused = m.refused
		}
		if m.ok {
			v.UnderWay, v.Target = true, m.m.Layout
			if st := time.UnixMilli(m.m.StartedAt); v.Started.IsZero() || st.Before(v.Started) {
				v.Started = st
			}
		}
	}
	if !v.UnderWay {
		s.closeReshard()
		return v
	}
	r, err := s.openReshard(ctx, v.Target)
	if err != nil {
		v.Err = err
		return v
	}
	st, err := r.Status(ctx)
	if err != nil {
		v.Err = err
		return v
	}
	v.Moves = st.Moves
	for _, sh := range s.store.Shards() {
		m, ok := st.UnderWay[sh.Name]
		if !ok || m.Phase == "" {
			continue
		}
		step := ReshardStep{Database: sh.Name, Phase: m.Phase, Copied: m.Copied, Backlog: m.Backlog}
		step.Estimate = s.copyEstimate(ctx, sh, st.Moves)
		if step.Estimate > 0 {
			step.Progress = min(float64(step.Copied)/float64(step.Estimate), 1)
		}
		if m.Phase != "copy" {
			step.Progress = 1
		}
		step.Rate = copyRate(s.Activity(), sh.Name)
		if step.Rate > 0 && m.Phase == "copy" && step.Estimate > step.Copied {
			step.ETA = time.Duration(float64(step.Estimate-step.Copied) / step.Rate * float64(time.Second))
		}
		v.Steps = append(v.Steps, step)
	}
	return v
}

// copyEstimate scales the rows of sh's moving tables by the share of its
// virtual shards that moves.
func (s *Service) copyEstimate(ctx context.Context, sh *store.Shard, moves []reshard.Move) int64 {
	owned := 0
	for _, name := range s.store.Owners() {
		if name == sh.Name {
			owned++
		}
	}
	moving := 0
	for _, m := range moves {
		if m.From == sh.Name {
			moving += m.Last - m.First + 1
		}
	}
	if owned == 0 || moving == 0 {
		return 0
	}
	sizes, err := sh.TableSizes(ctx)
	if err != nil {
		s.log.Warn("reshard: no copy estimate", "database", sh.Name, "err", err)
		return 0
	}
	var rows int64
	for _, t := range reshard.Keyed {
		rows += sizes[t.Name].Rows
	}
	return rows * int64(moving) / int64(owned)
}

// copyRate is the rows per second the database's step copied over the last
// minute of samples, since the step's count last started over.
func copyRate(samples []Sample, db string) float64 {
	if len(samples) < 2 {
		return 0
	}
	last := samples[len(samples)-1]
	first := last
	for _, smp := range slices.Backward(samples[:len(samples)-1]) {
		c, ok := smp.Copied[db]
		if !ok || c > first.Copied[db] || last.At.Sub(smp.At) > time.Minute {
			break
		}
		first = smp
	}
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(last.Copied[db]-first.Copied[db]) / dt
}

// openReshard returns the reshard to target opened on the process's
// databases, opened again once the layout in force changed.
func (s *Service) openReshard(ctx context.Context, target string) (*reshard.Reshard, error) {
	rs := s.reshards
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.open != nil && rs.target == target && rs.epoch == s.store.Epoch() {
		return rs.open, nil
	}
	if rs.open != nil {
		rs.open.Close()
		rs.open = nil
	}
	m, err := s.store.MapFor(target)
	if err != nil {
		return nil, err
	}
	r, err := reshard.Open(ctx, m, reshard.Options{Log: s.log})
	if err != nil {
		return nil, err
	}
	rs.open, rs.target, rs.epoch = r, target, s.store.Epoch()
	return r, nil
}

// closeReshard closes the cached reshard once none is under way.
func (s *Service) closeReshard() {
	rs := s.reshards
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.open != nil && !rs.abort.Running {
		rs.open.Close()
		rs.open = nil
	}
}

// AbortReshard starts undoing the reshard under way, as feedd reshard abort
// does, in the background: it deletes the copies made so far, which takes
// as long as they are big. Its outcome shows in Reshard's Abort. feedd
// reshard apply must not be running.
//
// Returns EINVALID when no reshard is under way or an abort runs already.
func (s *Service) AbortReshard(ctx context.Context) error {
	v := s.Reshard(ctx)
	if v.Err != nil {
		return v.Err
	}
	if !v.UnderWay {
		return feed.Errorf(feed.EINVALID, "no reshard is under way")
	}
	r, err := s.openReshard(ctx, v.Target)
	if err != nil {
		return err
	}
	rs := s.reshards
	rs.mu.Lock()
	if rs.abort.Running {
		rs.mu.Unlock()
		return feed.Errorf(feed.EINVALID, "an abort is running already")
	}
	rs.abort = AbortState{Running: true}
	rs.mu.Unlock()
	s.log.Warn("console: reshard abort started", "target", v.Target)
	go func() {
		actx, cancel := context.WithTimeout(context.Background(), abortTimeout)
		defer cancel()
		err := r.Abort(actx)
		if err != nil {
			s.log.Error("console: reshard abort failed", "error", err)
		} else {
			s.log.Info("console: reshard aborted", "epoch", r.Epoch())
		}
		rs.mu.Lock()
		rs.abort = AbortState{Err: err, Ended: time.Now()}
		rs.mu.Unlock()
	}()
	return nil
}

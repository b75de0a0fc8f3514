package service

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestStepSize: a step cut off by its deadline halves the size, down to
// one; a quick step doubles it back, up to its max; a step neither cut off
// nor quick leaves it.
func TestStepSize(t *testing.T) {
	const lease = time.Second
	z := newStepSize(16)
	for _, want := range []int{8, 4, 2, 1, 1} {
		z.ran(true, lease, lease)
		if z.n != want {
			t.Fatalf("after a cut-off step: %d, want %d", z.n, want)
		}
	}
	z.ran(false, lease/2, lease)
	if z.n != 1 {
		t.Fatalf("after a step of half the lease: %d, want 1", z.n)
	}
	for _, want := range []int{2, 4, 8, 16, 16} {
		z.ran(false, lease/10, lease)
		if z.n != want {
			t.Fatalf("after a quick step: %d, want %d", z.n, want)
		}
	}
}

// TestEachBefore: once due has passed no item starts but the first, so the
// items started are a prefix of them; a zero due starts them all; the first
// error of a call is returned.
func TestEachBefore(t *testing.T) {
	items := []int{1, 2, 3, 4, 5, 6, 7, 8}
	var ran atomic.Int64
	count := func(int) error { ran.Add(1); return nil }
	if n, err := eachBefore(items, 3, time.Now().Add(-time.Second), count); n != 1 || err != nil || ran.Load() != 1 {
		t.Fatalf("past due: started %d (ran %d, %v), want 1", n, ran.Load(), err)
	}
	ran.Store(0)
	if n, err := eachBefore(items, 3, time.Time{}, count); n != len(items) || err != nil || ran.Load() != int64(len(items)) {
		t.Fatalf("no due: started %d (ran %d, %v), want %d", n, ran.Load(), err, len(items))
	}
	boom := errors.New("boom")
	if err := each(items, 3, func(i int) error {
		if i == 5 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("each: %v, want %v", err, boom)
	}
}

package service

import (
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

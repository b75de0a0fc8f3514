package service

import (
	"testing"
	"time"
)

// TestPollWait: a stream watcher polls every streamPoll up to the
// statements its budget allows in that time, then waits in proportion.
func TestPollWait(t *testing.T) {
	for _, c := range []struct {
		statements int
		want       time.Duration
	}{{0, streamPoll}, {50, streamPoll}, {100, 500 * time.Millisecond}, {400, 2 * time.Second}} {
		if got := pollWait(c.statements); got != c.want {
			t.Errorf("pollWait(%d) = %s, want %s", c.statements, got, c.want)
		}
	}
}

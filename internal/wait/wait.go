// Package wait lets a test wait for a condition instead of sleeping: it
// polls the condition until it holds, and fails the test with what the
// condition last saw if it never does. It is for tests only.
package wait

import (
	"testing"
	"time"
)

// Deadline bounds a wait. It guards against a hang and asserts no timing:
// `make test` runs packages side by side on two cores, where work the
// condition waits for can take many seconds.
const Deadline = time.Minute

// interval is the pause between two polls.
const interval = 10 * time.Millisecond

// For calls cond on the test's goroutine until it returns nil. If it has
// not within Deadline, For fails t with what it waited for and cond's last
// error, which says what was seen instead. cond may itself fail t, for an
// outcome that rules out ever holding.
func For(t testing.TB, what string, cond func() error) {
	t.Helper()
	Within(t, Deadline, what, cond)
}

// Within is For with a bound of its own, for the rare wait whose work takes
// longer than Deadline on a loaded machine; the bound is still only a guard
// against a hang.
func Within(t testing.TB, bound time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last seen: %v", bound, what, err)
		}
		time.Sleep(interval)
	}
}

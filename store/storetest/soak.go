package storetest

import (
	"os"
	"strconv"
	"testing"
)

// SoakRounds is how many rounds a soak test runs: FEED_SOAK_ROUNDS (make
// soak sets many), or def.
func SoakRounds(t testing.TB, def int) int {
	t.Helper()
	v := os.Getenv("FEED_SOAK_ROUNDS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("FEED_SOAK_ROUNDS=%q: want a count of rounds >= 2", v)
	}
	return n
}

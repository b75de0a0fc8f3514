package main

import "testing"

// TestChildProcs checks that -server-procs reaches a server process as its
// GOMAXPROCS, and that 0 leaves the benchmark's own setting alone.
func TestChildProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	for _, tc := range []struct {
		procs int
		want  string
	}{{procs: 1, want: "[1]"}, {procs: 3, want: "[3]"}, {procs: 0, want: "[]"}} {
		c, line, err := startChild("env", "/bin/sh", []string{"-c", `echo "[$GOMAXPROCS]"`}, tc.procs, true)
		if err != nil {
			t.Fatal(err)
		}
		<-c.done
		if line != tc.want {
			t.Errorf("procs %d: the child saw GOMAXPROCS %s, want %s", tc.procs, line, tc.want)
		}
	}
}

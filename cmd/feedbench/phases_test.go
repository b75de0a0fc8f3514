package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPhaseTargets checks the phase table's make targets against the
// Makefile: make bench runs every phase (no -phases), bench-disk and
// bench-tidb the phases of their -phases, and the table names each target
// on exactly those phases.
func TestPhaseTargets(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	recipe := regexp.MustCompile(`(?m)^bench:.*\n((?:\t.*\n)*)`).FindSubmatch(mk)
	if recipe == nil || !strings.Contains(string(recipe[1]), "./cmd/feedbench") || strings.Contains(string(recipe[1]), "-phases") {
		t.Fatalf("Makefile: the bench recipe should run ./cmd/feedbench without -phases, got %q", recipe)
	}
	want := map[string]string{"bench": phaseLetters()}
	for target, variable := range map[string]string{"bench-disk": "DISK_BENCH", "bench-tidb": "TIDB_BENCH", "soak-mix": "SOAK_MIX_BENCH"} {
		m := regexp.MustCompile(`(?m)^` + variable + ` = .*-phases ([A-Z]+)`).FindSubmatch(mk)
		if m == nil {
			t.Fatalf("Makefile: no -phases in %s", variable)
		}
		letters := []byte(string(m[1]))
		slices.Sort(letters)
		want[target] = string(letters)
	}
	got := map[string]string{}
	for _, ph := range phases {
		for _, target := range ph.targets {
			got[target] += string(ph.letter)
		}
	}
	for target, letters := range got {
		b := []byte(letters)
		slices.Sort(b)
		got[target] = string(b)
	}
	for target := range want {
		if got[target] != want[target] {
			t.Errorf("make %s runs phases %s; the table names it on %s", target, want[target], got[target])
		}
	}
	for target := range got {
		if _, ok := want[target]; !ok {
			t.Errorf("the table names make %s, which the test does not know", target)
		}
	}
}

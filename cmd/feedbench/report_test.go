package main

import "testing"

// TestVerdict: a figure below its target never prints as the target.
func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		v, target float64
		want      string
	}{
		{0.96, 0.95, "met"},
		{0.95, 0.95, "met"},
		{0.83, 1, "**MISSED** (0.83 < 1)"},
		{0.949, 0.95, "**MISSED** (0.949 < 0.95)"},
		{0.94996, 0.95, "**MISSED** (0.94996 < 0.95)"},
	} {
		if got := verdict(c.v, c.target); got != c.want {
			t.Errorf("verdict(%g, %g) = %q, want %q", c.v, c.target, got, c.want)
		}
	}
}

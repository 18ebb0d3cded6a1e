package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/stats"
)

// The plot's title says CI only when some point has an interval: 2 or 3
// trials give none.
func TestPlotTitleInterval(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		trials []float64
		want   string
	}{
		{[]float64{100, 101}, "(median across trials; too few trials for an interval)"},
		{[]float64{100, 101, 99, 102, 98, 100}, "(median across trials, CI)"},
	} {
		s := stats.Summarize(tc.trials)
		out := filepath.Join(dir, "p.svg")
		if err := PlotConcurrency(out, "title", "tok/s", []Curve{{Arm: "a", Points: []LevelPoint{{Concurrency: 1, Center: s.Center, Lo: s.Lo, Hi: s.Hi}, {Concurrency: 4, Center: s.Center, Lo: s.Lo, Hi: s.Hi}}}}); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("%d trials: title lacks %q", len(tc.trials), tc.want)
		}
	}
}

// One level makes a bar per arm, not a line through one point each: the
// arms are named under their bars, the level is in the title, and an
// INVALID arm gets no bar, only its legend line.
func TestPlotOneLevel(t *testing.T) {
	curves := []Curve{
		{Arm: "baseline", Points: []LevelPoint{{Concurrency: 4, Center: 900, Lo: 880, Hi: 920}}},
		{Arm: "pcie", Points: []LevelPoint{{Concurrency: 4, Center: 1300, Lo: 1250, Hi: 1340}}},
		{Arm: "broken", NoResult: "INVALID", Points: []LevelPoint{{Concurrency: 4, Center: 5000, Lo: 4900, Hi: 5100}}},
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "one.svg")
	if err := PlotConcurrency(out, "arpatch run 3: tok_s against concurrency", "tok_s (tok/s)", curves); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	svg := string(b)
	for _, want := range []string{"arpatch run 3: tok_s at concurrency 4 (one level: a bar per arm) (median across trials, CI)", ">baseline<", ">pcie<", "broken: INVALID, not drawn"} {
		if !strings.Contains(svg, want) {
			t.Errorf("one-level plot lacks %q", want)
		}
	}
	if strings.Contains(svg, ">broken<") || strings.Contains(svg, "concurrency (requests in flight)") {
		t.Error("the INVALID arm has a bar, or the plot still has a concurrency axis")
	}
	if err := PlotConcurrency(filepath.Join(dir, "one.png"), "arpatch run 3: tok_s against concurrency", "tok_s (tok/s)", curves); err != nil {
		t.Fatal(err)
	}
}

package nightly

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
)

// read returns the file at p, relative to the world's directory.
func (w *world) read(p string) []byte {
	w.t.Helper()
	if !filepath.IsAbs(p) {
		p = filepath.Join(w.dir, p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		w.t.Fatal(err)
	}
	return b
}

func TestNightlyTPOTp99(t *testing.T) { synctest.Test(t, testNightlyTPOTp99) }

// testNightlyTPOTp99 judges TPOT p99 (a metric of stats.Table, named in
// regression.metrics) end to end: its values are bench_serving's, a
// slower B raises it into a regression, and the history, the CI files
// and the summary carry it. In the bubble each request of 48 tokens at
// rate r has TPOT = (E2E - TTFT) / 47 = 1/r exactly (sglangtest paces
// token k at TTFT + k/r), r within 1% of the arm's rate.
func testNightlyTPOTp99(t *testing.T) {
	w := newWorld(t)
	w.cfg.Regression.Metrics = map[string]float64{"tok_s": 3, "tpot_ms_p99": 3}
	w.serve("a", 1000)
	w.serve("b", 1600)
	var rep *Report
	for night := 1; night <= 2; night++ {
		rep = w.run(context.Background(), true)
		if rep.ExitCode != ExitOK {
			t.Fatalf("night %d: exit %d %s %v", night, rep.ExitCode, rep.Verdict, rep.Errors)
		}
	}
	r := findReg(rep, "patched", "tpot_ms_p99", "history")
	if r.Verdict != VerdictNoChange || r.RefRuns != 1 || r.RefSamples != 5 {
		t.Errorf("night 2: %+v", r)
	}
	// Tonight's value is the median across trials of each trial's p99 by
	// bench_serving's rule, recomputed here from the samples.
	var p99s []float64
	for i, tr := range rep.Bench.Arm("patched").Trials {
		var tpots []float64
		for _, s := range tr.Samples {
			if s.Err == "" && s.CompletionTokens > 1 {
				tpots = append(tpots, (s.E2E-s.TTFT)/float64(s.CompletionTokens-1)*1000)
			}
		}
		slices.Sort(tpots)
		if len(tpots) != 3 {
			t.Fatalf("trial %d: %d TPOTs", i, len(tpots))
		}
		// np.percentile of 3 values at 99: k = 1.98.
		p99 := tpots[1] + 0.98*(tpots[2]-tpots[1])
		if got := rep.Bench.Arm("patched").Metrics[i].TPOTp99ms; math.Abs(got-p99) > 1e-9 {
			t.Errorf("trial %d: TPOT p99 %v ms, bench_serving %v ms", i, got, p99)
		}
		if p99 < 1000/(1600*1.01) || p99 > 1000/(1600*0.99) {
			t.Errorf("trial %d: TPOT p99 %v ms, not 1/rate within 1%% (0.625 ms)", i, p99)
		}
		p99s = append(p99s, p99)
	}
	slices.Sort(p99s)
	if math.Abs(r.Tonight-p99s[2]) > 1e-9 {
		t.Errorf("tonight's median %v ms, median of the trials' p99 %v", r.Tonight, p99s)
	}

	// B decodes 10% slower: TPOT p99 up about 11%, a regression.
	w.serve("b", 1440)
	rep = w.run(context.Background(), true)
	r = findReg(rep, "patched", "tpot_ms_p99", "history")
	if rep.ExitCode != ExitRegression || r.Verdict != VerdictRegression || r.Pct < 9 || r.Pct > 13 || r.P >= 0.05 || r.RefRuns != 2 {
		t.Fatalf("slow night: exit %d %+v", rep.ExitCode, r)
	}
	if r.Tonight < 1000/(1440*1.01) || r.Tonight > 1000/(1440*0.99) {
		t.Errorf("slow night: TPOT p99 %v ms, want 1/1440 s within 1%%", r.Tonight)
	}
	if c := w.check(rep, "patched tpot_ms_p99 vs history"); c.Status != history.CheckFail {
		t.Errorf("check %+v", c)
	}
	if base := findReg(rep, "base", "tpot_ms_p99", "history"); base.Verdict != VerdictNoChange {
		t.Errorf("arm A: %+v", base)
	}

	// The CI files, the summary and the history carry it.
	if err := WriteOutputs(rep, w.cfg, nil); err != nil {
		t.Fatal(err)
	}
	read := w.read
	center := rep.Bench.Arm("patched").Levels[0].Summaries["tpot_ms_p99"].Center
	if center != r.Tonight {
		t.Errorf("summary center %v, check's tonight %v", center, r.Tonight)
	}
	var small []GHBenchEntry
	if err := json.Unmarshal(read("out/ghbench-smaller.json"), &small); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(small, func(e GHBenchEntry) bool { return e.Name == "patched/tpot_ms_p99" })
	if i < 0 || small[i].Unit != "ms" || small[i].Value != center {
		t.Errorf("github-benchmark smaller: %+v", small)
	}
	var bmf map[string]map[string]BMFMetric
	if err := json.Unmarshal(read("out/bencher.json"), &bmf); err != nil {
		t.Fatal(err)
	}
	if m := bmf["eagle3/patched"]["tpot-ms-p99"]; m.Value != center {
		t.Errorf("bencher tpot-ms-p99 %+v, want %v", m, center)
	}
	if j := string(read("out/junit.xml")); !strings.Contains(j, `name="patched tpot_ms_p99 vs history"`) {
		t.Errorf("junit lacks the TPOT p99 check:\n%s", j)
	}
	if s := string(read(filepath.Join(w.cfg.Outputs.Dir, "summary.md"))); !strings.Contains(s, "| patched | tpot_ms_p99 | history |") {
		t.Errorf("summary lacks the TPOT p99 check:\n%s", s)
	}
	store, err := history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	}()
	d, err := store.Show(rep.RunID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range d.Arms {
		if a.Name != "patched" {
			continue
		}
		for k, tr := range a.Trials {
			if want := rep.Bench.Arm("patched").Metrics[k].TPOTp99ms; tr.Values["tpot_ms_p99"] != want || want == 0 {
				t.Errorf("history trial %d: tpot_ms_p99 %v, measured %v", k, tr.Values["tpot_ms_p99"], want)
			}
		}
	}
	var csv bytes.Buffer
	rows, err := store.Export()
	if err != nil {
		t.Fatal(err)
	}
	if err := history.WriteCSV(&csv, rows); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(csv.String(), "\n"); !strings.HasSuffix(head, ",wall_s,"+strings.Join(stats.Names(), ",")+",errors,samples") {
		t.Errorf("export header %q", head)
	}
	// The table gives the direction the check used: lower is better.
	if d, _ := stats.Lookup("tpot_ms_p99"); d.HigherIsBetter {
		t.Error("tpot_ms_p99 higher is better")
	}
}

// TestDocListsEveryMetric checks that docs/nightly.md's Metrics table
// lists stats.Table, in its order, with each metric's unit and direction.
func TestDocListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile("../docs/nightly.md")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, " | "); strings.HasPrefix(l, "| `") && len(f) == 4 {
			got = append(got, strings.Join(f[:3], " | "))
		}
	}
	var want []string
	for _, m := range stats.Table {
		want = append(want, "| `"+m.Name+"` | "+m.Unit+" | "+m.Better())
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/nightly.md's metrics:\n%s\nstats.Table:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

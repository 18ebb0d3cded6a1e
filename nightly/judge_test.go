package nightly

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
)

// A nightly that sweeps concurrency judges each level against the same
// level of earlier nights: at 3 requests in flight tok/s is about three
// times tok/s at 1, and a window that mixed them would call an unchanged
// night a regression at one level and an improvement at the other.
func TestNightlySweepPerLevel(t *testing.T) { synctest.Test(t, testNightlySweepPerLevel) }

func testNightlySweepPerLevel(t *testing.T) {
	w := newWorld(t)
	w.cfg.Bench.Concurrency = []int{1, 3}
	w.serve("a", 1000)
	w.serve("b", 1600)
	for i := 0; i < 2; i++ {
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("seeding night: exit %d %v %v", rep.ExitCode, rep.Errors, rep.Verdict)
		}
	}
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitOK || !strings.Contains(rep.Workload, "concurrency=1,3") {
		t.Fatalf("unchanged night: exit %d %q %s", rep.ExitCode, rep.Verdict, rep.Workload)
	}
	// Each level is judged against the same level of the two earlier
	// nights (5 trials each), and B against A level by level.
	for _, m := range []string{"tok_s@concurrency=1", "tok_s@concurrency=3"} {
		r := findReg(rep, "patched", m, "history")
		if r.Verdict != "no significant change" || r.RefRuns != 2 || r.RefSamples != 10 {
			t.Errorf("%s against history: %+v", m, r)
		}
		if r := findReg(rep, "patched", m, "base"); r.Verdict != "improvement" || r.Pct < 30 || r.RefSamples != 5 {
			t.Errorf("%s B against A: %+v", m, r)
		}
	}
	one, three := findReg(rep, "patched", "tok_s@concurrency=1", "history"), findReg(rep, "patched", "tok_s@concurrency=3", "history")
	if three.Tonight < 2*one.Tonight || three.Reference < 2*one.Reference {
		t.Errorf("tok/s at 3 in flight %.0f (reference %.0f), at 1 %.0f (reference %.0f): the levels are not apart", three.Tonight, three.Reference, one.Tonight, one.Reference)
	}
	big, _ := GitHubBenchmark(rep.Bench, rep.RunID)
	names := map[string]bool{}
	for _, e := range big {
		names[e.Name] = true
	}
	if !names["patched/concurrency=3/tok_s"] || !names["base/concurrency=1/tok_s"] {
		t.Errorf("github-benchmark names: %v", names)
	}
	if b := Bencher(rep.Bench); b["eagle3/patched/concurrency=3"]["tok-s"].Value == 0 {
		t.Errorf("bencher: %v", b)
	}
}

// An arm A with no output is INVALID and fails the night; arm B, checked
// against nothing, is not a "pass": its check is skipped with the reason.
// The arms' servers are attached (bench.url_a, url_b): the night needs no
// build (--skip-build) to bench and judge them.
func TestNightlyInvalidBaseline(t *testing.T) {
	w := newWorld(t)
	w.serve("b", 1600)
	u, stop := w.net.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 1000, TTFT: time.Millisecond, Empty: true}))
	t.Cleanup(stop)
	w.cfg.Bench.URLA = u
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitRegression {
		t.Errorf("exit %d, want %d", rep.ExitCode, ExitRegression)
	}
	if c := w.check(rep, "output of base"); c.Status != "fail" {
		t.Errorf("base: %+v", c)
	}
	if c := w.check(rep, "output of patched"); c.Status != "skip" || !strings.Contains(c.Detail, "no verdict: the baseline is INVALID") {
		t.Errorf("patched: %+v", c)
	}
}

// TestInvalidArmPublishesNoFigure: after three good nights, arm B turns
// 2.5x faster and computes garbage. Its output check fails the night
// (exit 1), and no output that a machine or a person reads shows it as
// faster: every regression check of it (against history and against A)
// is "not compared", naming why, with no change, p or tonight's median;
// github-action-benchmark and Bencher have no entry of it; JUnit skips
// those checks; the summary and the terminal table carry no "+" change
// nor "improvement"; the history marks the arm invalid, and later nights
// do not take it as a reference. An INVALID A leaves B with no verdict:
// then neither arm's figures are published.
func TestInvalidArmPublishesNoFigure(t *testing.T) { synctest.Test(t, testInvalidArmPublishesNoFigure) }

func testInvalidArmPublishesNoFigure(t *testing.T) {
	w := newWorld(t)
	w.serve("a", 1000)
	w.serve("b", 1000)
	for range 3 {
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("good night: exit %d %s", rep.ExitCode, rep.Verdict)
		}
	}
	u, stop := w.net.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 2500, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.01, Variant: "nan"}))
	t.Cleanup(stop)
	w.cfg.Bench.URLB = u
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitRegression || w.check(rep, "output of patched").Status != "fail" {
		t.Fatalf("corrupting night: exit %d, %+v", rep.ExitCode, w.check(rep, "output of patched"))
	}
	if tok := rep.Bench.Arm("patched").Levels[0].Summaries[stats.TokS].Center; tok < 2000 {
		t.Fatalf("fixture: patched at %.0f tok/s, want about 2500", tok)
	}
	for _, r := range rep.Regressions {
		if r.Arm != "patched" {
			continue
		}
		if r.Verdict != VerdictNotCompared || !strings.Contains(r.Note, "patched: INVALID (only 0 of 15 outputs") || r.tonightText() != "-" {
			t.Errorf("check %s vs %s: %+v", r.Metric, r.Against, r)
		}
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), `"tonight_median"`) || strings.Contains(string(b), `"pct"`) {
			t.Errorf("nightly.json's check carries a figure of the INVALID arm: %s", b)
		}
	}
	if r := findReg(rep, "patched", "tok_s", "base"); r.Verdict != VerdictNotCompared {
		t.Errorf("B vs A: %+v", r)
	}
	if c := w.check(rep, "patched tok_s vs history"); c.Status != history.CheckSkip || !strings.Contains(c.Detail, "not compared: - (p=-") {
		t.Errorf("check line: %+v", c)
	}
	if err := WriteOutputs(rep, w.cfg, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"out/ghbench-bigger.json", "out/ghbench-smaller.json"} {
		var entries []GHBenchEntry
		must(t, json.Unmarshal(w.read(f), &entries))
		if len(entries) == 0 {
			t.Errorf("%s: the valid arm's entries are gone too", f)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name, "patched/") {
				t.Errorf("%s has an entry of the INVALID arm: %+v", f, e)
			}
		}
	}
	var bmf map[string]map[string]BMFMetric
	must(t, json.Unmarshal(w.read("out/bencher.json"), &bmf))
	if _, ok := bmf["eagle3/patched"]; ok || len(bmf["eagle3/base"]) != len(stats.Table) {
		t.Errorf("bencher: %v", slices.Collect(maps.Keys(bmf)))
	}
	junit := string(w.read("out/junit.xml"))
	if !strings.Contains(junit, `<testcase classname="arpatch.regression" name="patched tok_s vs history">`) || strings.Contains(junit, "improvement") {
		t.Errorf("junit:\n%s", junit)
	}
	var table bytes.Buffer
	WriteTable(&table, rep)
	for name, text := range map[string]string{"summary.md": string(w.read(filepath.Join(w.cfg.Outputs.Dir, "summary.md"))), "table": table.String(), "junit": junit} {
		for _, bad := range []string{"improvement", "faster", "+1", "+2", "+3", "+4", "+5", "+6", "+7", "+8", "+9"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s reads %q:\n%s", name, bad, text)
			}
		}
	}
	if sum := string(w.read(filepath.Join(w.cfg.Outputs.Dir, "summary.md"))); !strings.Contains(sum, "| patched | tok_s | history | - |") || !strings.Contains(sum, "not compared (patched: INVALID") {
		t.Errorf("summary's regression row of the INVALID arm:\n%s", sum)
	}
	must(t, plot(w.cfg, rep)) // as Execute draws outputs.plot
	if svg := string(w.read("out/tok_s.svg")); !strings.Contains(svg, fmt.Sprintf("INVALID, not drawn: patched run %d", rep.RunID)) {
		t.Errorf("the nightly's plot does not leave the INVALID night out")
	}
	store, err := history.OpenRead(filepath.Join(w.dir, "history.db"))
	must(t, err)
	d, err := store.Show(rep.RunID)
	must(t, store.Close())
	if err != nil || len(d.Arms) != 2 || !d.Arms[1].Invalid || d.Arms[0].Invalid {
		t.Errorf("history of the night: %+v %v", d.Arms, err)
	}

	// B good again: compared with the three good nights only.
	w.serve("b", 1000)
	rep = w.run(context.Background(), true)
	if r := findReg(rep, "patched", "tok_s", "history"); rep.ExitCode != ExitOK || r.Verdict != "no significant change" || r.RefRuns != 3 {
		t.Errorf("night after: exit %d %+v", rep.ExitCode, r)
	}

	// An INVALID A: B has no verdict, and neither arm is published.
	ue, stopE := w.net.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 1000, TTFT: time.Millisecond, Empty: true}))
	t.Cleanup(stopE)
	w.cfg.Bench.URLA = ue
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitRegression {
		t.Fatalf("INVALID A: exit %d", rep.ExitCode)
	}
	big, small := GitHubBenchmark(rep.Bench, rep.RunID)
	if len(big)+len(small) != 0 || len(Bencher(rep.Bench)) != 0 {
		t.Errorf("INVALID baseline: published %v %v %v", big, small, Bencher(rep.Bench))
	}
	for _, r := range rep.Regressions {
		if r.Verdict != VerdictNotCompared || r.measured {
			t.Errorf("INVALID baseline: %s %s vs %s: %+v", r.Arm, r.Metric, r.Against, r)
		}
	}
	store, err = history.OpenRead(filepath.Join(w.dir, "history.db"))
	must(t, err)
	d, err = store.Show(rep.RunID)
	must(t, store.Close())
	if err != nil || len(d.Arms) != 2 || !d.Arms[0].Invalid || !d.Arms[1].Invalid {
		t.Errorf("history of the INVALID-baseline night: both arms invalid (no result): %+v %v", d.Arms, err)
	}
}

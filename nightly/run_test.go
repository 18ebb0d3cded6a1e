package nightly

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/testbin"
)

func TestKilledRunIsIncompleteAndIgnored(t *testing.T) {
	synctest.Test(t, testKilledRunIsIncompleteAndIgnored)
}

func testKilledRunIsIncompleteAndIgnored(t *testing.T) {
	w := newWorld(t)
	w.serve("a", 1000)
	w.serve("b", 1600)
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitOK {
		t.Fatal(rep.Verdict)
	}
	// Cancel midway (as Ctrl-C would), during the bench.
	ctx, cancel := context.WithCancel(context.Background())
	w.serve("b", 50) // slow enough to be cancelled
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	rep = w.run(ctx, true)
	if rep.Status != history.Incomplete || rep.ExitCode != ExitInfra || rep.Verdict != "interrupted" {
		t.Fatalf("cancelled run: status %s exit %d verdict %q", rep.Status, rep.ExitCode, rep.Verdict)
	}
	var sum bytes.Buffer
	must(t, Summary(&sum, rep))
	if !strings.Contains(sum.String(), "## arpatch nightly: INTERRUPTED") {
		t.Errorf("summary of an interrupted run:\n%s", sum.String())
	}
	// A run killed outright stays "running"; the next nightly marks it.
	store, err := history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	killed, _ := store.BeginRun(history.Run{HardwareKey: "test-gpu", PID: 999999999})
	must(t, store.Close())
	w.serve("b", 1600)
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitOK {
		t.Fatal(rep.Verdict)
	}
	store, _ = history.Open(filepath.Join(w.dir, "history.db"))
	defer func() { _ = store.Close() }()
	runs, _ := store.Runs(0)
	status := map[int64]history.RunStatus{}
	for _, r := range runs {
		status[r.ID] = r.Status
	}
	if status[killed] != history.Incomplete || status[2] != history.Incomplete {
		t.Errorf("statuses %v", status)
	}
	// Only complete runs are references: run 1 and none of the others.
	if r := findReg(rep, "patched", "tok_s", "history"); r.RefRuns != 1 {
		t.Errorf("reference runs %d, want 1 (incomplete ones excluded): %+v", r.RefRuns, r)
	}
}

func TestSecondNightlyIsRefused(t *testing.T) {
	w := newWorld(t)
	unlock, err := history.Lock(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, err = Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err == nil || !strings.Contains(err.Error(), "another nightly is running") {
		t.Errorf("err = %v", err)
	}
}

func TestDriftOnlyRun(t *testing.T) {
	w := newWorld(t)
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err != nil || rep.ExitCode != ExitOK || len(rep.Drift) != 1 || rep.Drift[0].Verdict != "exact" || rep.HardwareKey != "test-gpu" {
		t.Fatalf("drift-only: %v %+v", err, rep)
	}
	if c := w.check(rep, "bench"); c.Status != "skip" {
		t.Errorf("bench check %+v", c)
	}
}

// A drift-only night (--skip-build --skip-bench) starts no toolchain
// probe: its Python is never run. Discover with the toolchain runs it.
func TestDriftOnlyRunsNoToolchainProbe(t *testing.T) {
	w := newWorld(t)
	marker := filepath.Join(t.TempDir(), "python-ran")
	fake := filepath.Join(t.TempDir(), "python")
	if err := testbin.Write(fake, []byte("#!/bin/sh\necho \"$@\" >> "+marker+"\nexit 1\n")); err != nil {
		t.Fatal(err)
	}
	w.cfg.Build.Python = fake
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true})
	if err != nil || rep.ExitCode != ExitOK {
		t.Fatalf("drift-only: %v %+v", err, rep)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("the drift-only night ran the toolchain probe's python: %s", b)
	}
	Discover(context.Background(), fake, true)
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("Discover with the toolchain did not run python (is the fake wired?): %v", err)
	}
}

// A history that fails twice in a run (a read while judging, then the
// write) is one failed "history" test case, not two: the first failure
// leads, the follow-on is in its text.
func TestHistoryFailsTwiceOneCase(t *testing.T) {
	n := &night{rep: &Report{}}
	n.historyFailed(errors.New("history h.db: recording run 1: database or disk is full"))
	n.historyFailed(errors.New("history h.db: reading the reference window of pcie tok_s: bad value"))
	var b bytes.Buffer
	if err := JUnit(&b, n.rep); err != nil {
		t.Fatal(err)
	}
	x := b.String()
	if got := strings.Count(x, `<testcase classname="arpatch.infra" name="history">`); got != 1 {
		t.Errorf("%d history test cases, want 1:\n%s", got, x)
	}
	if !strings.Contains(x, `<failure message="history h.db: recording run 1: database or disk is full">`) || !strings.Contains(x, "reading the reference window of pcie tok_s") ||
		!strings.Contains(x, `tests="1" failures="1"`) {
		t.Errorf("junit:\n%s", x)
	}
}

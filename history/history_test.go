package history

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/arpatch/arpatch/internal/errwriter/errwritertest"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/chart"
)

func seed(t *testing.T, s *Store, n int, tokS float64) []int64 {
	t.Helper()
	var ids []int64
	for i := 0; i < n; i++ {
		id, err := s.BeginRun(Run{HardwareKey: "8x GPU", SGLangCommit: "c0ffee", StartedAt: time.Date(2026, 11, 1+len(ids), 3, 0, 0, 0, time.UTC), Env: map[string]string{"gpu_model": "GPU"}})
		if err != nil {
			t.Fatal(err)
		}
		var trials []TrialRecord
		for k := 0; k < 5; k++ {
			trials = append(trials, TrialRecord{Index: k + 1, Values: map[string]float64{"tok_s": tokS + float64(k)/10, "ttft_ms_p50": 20}, Samples: []SampleRecord{{Prompt: 0, TTFT: 0.02, E2E: 1, CompletionTokens: 90, SpecVerifyCt: 30}}})
		}
		if err := s.AddArm(id, "pcie", "pcie", "key", false, 1, trials); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(id, Complete, 0, "no regression"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestWindowSkipsIncompleteAndOtherHardware(t *testing.T) {
	eachStore(t, testWindowSkipsIncompleteAndOtherHardware)
}

func testWindowSkipsIncompleteAndOtherHardware(t *testing.T, target string) {
	s, err := Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ids := seed(t, s, 3, 90)
	// An incomplete run (its nightly died: its store closed without
	// ending it) and a run on other hardware never count.
	dead, err := Open(target)
	must(t, err)
	bad, _ := dead.BeginRun(Run{HardwareKey: "8x GPU"})
	must(t, dead.AddArm(bad, "pcie", "pcie", "", false, 1, []TrialRecord{{Index: 1, Values: tokOnly(1)}}))
	must(t, dead.Close())
	other, _ := s.BeginRun(Run{HardwareKey: "2x Other"})
	must(t, s.AddArm(other, "pcie", "pcie", "", false, 1, []TrialRecord{{Index: 1, Values: tokOnly(2)}}))
	must(t, s.FinishRun(other, Complete, 0, ""))
	if stale, err := s.MarkStale(); err != nil || len(stale) != 1 || stale[0] != bad {
		t.Fatalf("MarkStale = %v, %v", stale, err)
	}
	if d, err := s.Show(bad); err != nil || d.Run.Status != Incomplete || d.Run.Verdict != "killed midway" || d.Run.FinishedAt == nil {
		t.Errorf("the stale run: %v %+v", err, d)
	}
	vals, runs, err := s.Window("8x GPU", "", "pcie", "tok_s", 1, 2, 0)
	if err != nil || len(runs) != 2 || runs[0] != ids[2] || len(vals) != 10 {
		t.Fatalf("window: %v %v %v", vals, runs, err)
	}
	for _, v := range vals {
		if v < 90 || v > 91 {
			t.Errorf("value %v from a run that should not count", v)
		}
	}
	if _, _, err := s.Window("8x GPU", "", "pcie", "speed", 1, 2, 0); err == nil || !strings.Contains(err.Error(), `unknown metric "speed"`) {
		t.Errorf("unknown metric: %v", err)
	}
}

// A regressed night (exit 1) is no reference; another workload never
// counts; an accepted run starts a new reference.
func TestWindowRegressionsWorkloadsAndAccept(t *testing.T) {
	eachStore(t, testWindowRegressionsWorkloadsAndAccept)
}

func testWindowRegressionsWorkloadsAndAccept(t *testing.T, target string) {
	s, err := Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ids := seed(t, s, 3, 90)
	night := func(tokS float64, exit int, workload string) int64 {
		id, _ := s.BeginRun(Run{HardwareKey: "8x GPU", Workload: workload})
		must(t, s.AddArm(id, "pcie", "pcie", "", false, 1, []TrialRecord{{Index: 1, Values: tokOnly(tokS)}}))
		must(t, s.FinishRun(id, Complete, exit, ""))
		return id
	}
	slow := night(70, 1, "")
	night(10, 0, "max_new_tokens=8")
	// A night with drift (exit 3) that also regressed is no reference.
	drifted := night(69, 3, "")
	must(t, s.AddCheck(drifted, Check{Name: "pcie tok_s vs history", Kind: "regression", Status: "fail"}))
	if _, runs, _ := s.Window("8x GPU", "", "pcie", "tok_s", 1, 7, 0); !reflect.DeepEqual(runs, []int64{ids[2], ids[1], ids[0]}) {
		t.Errorf("window %v: a regressed night or another workload counted", runs)
	}
	if _, runs, _ := s.Window("8x GPU", "max_new_tokens=8", "pcie", "tok_s", 1, 7, 0); len(runs) != 1 {
		t.Errorf("other workload's window %v", runs)
	}
	// Accepting the slow night: it and what follows are the reference.
	if err := s.Accept(slow); err != nil {
		t.Fatal(err)
	}
	after := night(71, 0, "")
	vals, runs, _ := s.Window("8x GPU", "", "pcie", "tok_s", 1, 7, 0)
	if !reflect.DeepEqual(runs, []int64{after, slow}) || len(vals) != 2 {
		t.Errorf("window after accept: %v %v", runs, vals)
	}
	bad, _ := s.BeginRun(Run{HardwareKey: "8x GPU"})
	if err := s.Accept(bad); err == nil || !strings.Contains(err.Error(), "only a complete run") {
		t.Errorf("accepting a running run: %v", err)
	}
	if err := s.Accept(999); err == nil || !strings.Contains(err.Error(), "no run 999") {
		t.Errorf("accepting no run: %v", err)
	}
	if _, _, err := s.Window("8x GPU", "", "pcie", "tok_s", 1, 0, 0); err == nil {
		t.Error("a window of 0 runs was accepted")
	}
}

// A path with the characters a file: URI gives meaning to.
func TestOpenOddPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "h#1?x.db")
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Close())
	if _, err := os.Stat(p); err != nil {
		t.Errorf("database not at %s: %v", p, err)
	}
}

// TestMigrationFromV1 opens a database made at schema version 1, with data,
// and checks that the current arpatch migrates it and keeps the data.
func TestMigrationFromV1(t *testing.T) { eachStore(t, testMigrationFromV1) }

func testMigrationFromV1(t *testing.T, p string) {
	old, err := OpenAt(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := old.Version(); v != 1 {
		t.Fatalf("version %d", v)
	}
	if _, err := old.db.Exec(`INSERT INTO runs (started_at, status, pid, hardware_key) VALUES ('2026-10-01T00:00:00Z', 'complete', 1, 'hw')`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.db.Exec(`INSERT INTO arms (run_id, name) VALUES (1, 'pcie')`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.db.Exec(`INSERT INTO trials (arm_id, idx, tok_s) VALUES (1, 1, 42.5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.db.Exec(`INSERT INTO checks (run_id, name, kind, status) VALUES (1, 'x', 'y', 'z')`); err == nil {
		t.Fatal("version 1 already has the checks table")
	}
	must(t, old.Close())
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if v, _ := s.Version(); v != SchemaVersion {
		t.Fatalf("migrated to %d", v)
	}
	if err := s.AddCheck(1, Check{Name: "drift", Kind: "drift", Status: "pass"}); err != nil {
		t.Fatalf("checks after migration: %v", err)
	}
	// A trial stored before levels existed ran at concurrency 1.
	if vals, _, err := s.Window("hw", "", "pcie", "tok_s", 1, 7, 0); err != nil || !reflect.DeepEqual(vals, []float64{42.5}) {
		t.Errorf("old trial at level 1: %v %v", vals, err)
	}
	d, err := s.Show(1)
	if err != nil || len(d.Arms) != 1 || d.Arms[0].Trials[0].Values["tok_s"] != 42.5 || d.Arms[0].Agreement != nil || len(d.Checks) != 1 || d.Run.Workload != "" || d.Run.Accepted {
		t.Errorf("data after migration: %+v %v", d, err)
	}
	// A database from a newer arpatch is refused.
	if _, err := s.db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'x')`); err != nil {
		t.Fatal(err)
	}
	must(t, s.Close())
	if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Errorf("newer schema: %v", err)
	}
}

// TestOpenReadWritesNothing: a read command's open (OpenRead) refuses an
// empty file, another SQLite database, an older and a newer schema, each
// naming the file, and leaves every one of them byte for byte as it was,
// with no file added beside it (but for the WAL index, path-shm, which
// every SQLite reader writes its read marks into); it reads a current
// history and refuses to write through it.
func TestOpenReadWritesNothing(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	must(t, os.WriteFile(empty, nil, 0o644))
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", other)
	must(t, err)
	_, err = db.Exec(`CREATE TABLE notes (x TEXT)`)
	must(t, err)
	must(t, db.Close())
	older := filepath.Join(dir, "older.db")
	s, err := OpenAt(older, 1)
	must(t, err)
	must(t, s.Close())
	newer := filepath.Join(dir, "newer.db")
	s, err = Open(newer)
	must(t, err)
	_, err = s.db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'x')`)
	must(t, err)
	must(t, s.Close())
	current := filepath.Join(dir, "current.db")
	s, err = Open(current)
	must(t, err)
	seed(t, s, 2, 90)
	must(t, s.Close())

	snapshot := func() map[string]string {
		m := map[string]string{}
		ents, err := os.ReadDir(dir)
		must(t, err)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), "-shm") {
				continue // WAL's shared-memory index: every reader sets its read marks there
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			must(t, err)
			m[e.Name()] = string(b)
		}
		return m
	}
	before := snapshot()
	for _, c := range []struct{ path, want string }{
		{empty, "history " + empty + " is an empty file (0 bytes), not a history: a nightly writes one there on its first run"},
		{other, "history " + other + " is a SQLite database without arpatch's schema (no schema_migrations table)"},
		{older, fmt.Sprintf("history %s has schema version 1, older than this arpatch's %d: the next `arpatch nightly` on it migrates it (so does `arpatch history accept RUN`, which also makes RUN the reference); history list, show, export and plot only read it", older, SchemaVersion)},
		{newer, "history " + newer + " has schema version 99; this arpatch knows up to"},
		{filepath.Join(dir, "none.db"), "history stat " + filepath.Join(dir, "none.db") + ": no such file or directory"},
	} {
		if s, err := OpenRead(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			if s != nil {
				_ = s.Close()
			}
			t.Errorf("OpenRead(%s) = %v, want %q", filepath.Base(c.path), err, c.want)
		}
	}
	s, err = OpenRead(current)
	must(t, err)
	runs, err := s.Runs(0)
	if err != nil || len(runs) != 2 {
		t.Errorf("Runs of a current history, read-only: %d, %v", len(runs), err)
	}
	if _, err := s.Export(); err != nil {
		t.Errorf("Export, read-only: %v", err)
	}
	if err := s.Accept(runs[0].ID); err == nil {
		t.Errorf("Accept through a read-only open succeeded")
	}
	must(t, s.Close())
	if after := snapshot(); !reflect.DeepEqual(after, before) {
		for k := range after {
			if after[k] != before[k] {
				t.Errorf("%s changed or appeared (%d bytes, was %d)", k, len(after[k]), len(before[k]))
			}
		}
	}
}

// TestPlotsLeaveInvalidOut: an arm-night whose figures are no result
// (arms.invalid) is a Point marked Invalid, gets no point or line on the
// time plot (its value, 3x the others, is nowhere on the axis) and is
// named in the legend; on the plot against concurrency its curve is not
// drawn; a series with nothing else is refused, naming it.
func TestPlotsLeaveInvalidOut(t *testing.T) { eachStore(t, testPlotsLeaveInvalidOut) }

func testPlotsLeaveInvalidOut(t *testing.T, target string) {
	dir := t.TempDir()
	s, err := Open(target)
	must(t, err)
	defer func() { _ = s.Close() }()
	ids := seed(t, s, 3, 90)
	bad, err := s.BeginRun(Run{HardwareKey: "8x GPU", SGLangCommit: "c0ffee", StartedAt: time.Date(2026, 11, 9, 3, 0, 0, 0, time.UTC)})
	must(t, err)
	must(t, s.AddArm(bad, "pcie", "pcie", "key", true, 0, []TrialRecord{{Index: 1, Values: tokOnly(270)}, {Index: 2, Values: tokOnly(271)}}))
	must(t, s.AddArm(bad, "base", "base", "key", false, 1, []TrialRecord{{Index: 1, Values: tokOnly(90)}, {Index: 2, Values: tokOnly(91)}}))
	must(t, s.FinishRun(bad, Complete, 1, "INVALID"))
	pts, _, err := s.Points("tok_s", Series{})
	if err != nil || len(pts["pcie"]) != 4 || !pts["pcie"][3].Invalid || pts["pcie"][0].Invalid || pts["base"][0].Invalid {
		t.Fatalf("points %+v %v", pts, err)
	}
	out := filepath.Join(dir, "p.svg")
	must(t, s.Plot("tok_s", out, Series{}))
	svg, _ := os.ReadFile(out)
	if !strings.Contains(string(svg), fmt.Sprintf("INVALID, not drawn: pcie run %d", bad)) || strings.Contains(string(svg), ">270<") || strings.Contains(string(svg), ">250<") {
		t.Errorf("time plot draws the INVALID arm-night or does not say so:\n%s", svg)
	}
	curves, run, err := s.LevelCurves("tok_s", Series{}, 0)
	if err != nil || run != bad || len(curves) != 2 || curves[0].NoResult != "INVALID" || curves[1].NoResult != "" {
		t.Errorf("level curves %+v run %d %v (ids %v)", curves, run, err, ids)
	}
	// Only INVALID nights on another hardware: nothing to draw.
	other, _ := s.BeginRun(Run{HardwareKey: "1x other"})
	must(t, s.AddArm(other, "pcie", "pcie", "", true, 0, []TrialRecord{{Index: 1, Values: tokOnly(5)}}))
	must(t, s.FinishRun(other, Complete, 1, ""))
	if err := s.Plot("tok_s", out, Series{HardwareKey: "1x other"}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("every arm's figures there are INVALID or without a verdict (pcie run %d)", other)) {
		t.Errorf("plot of INVALID nights only: %v", err)
	}
}

func TestExportAndPlot(t *testing.T) { eachStore(t, testExportAndPlot) }

func testExportAndPlot(t *testing.T, target string) {
	dir := t.TempDir()
	s, err := Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ids := seed(t, s, 4, 90)
	must(t, s.AddCheck(ids[3], Check{Name: "pcie tok_s vs history", Kind: "regression", Status: "fail"}))
	must(t, s.AddCheck(ids[2], Check{Name: "pcie-2026-07 at master", Kind: "drift", Status: "fail"}))
	rows, err := s.Export()
	if err != nil || len(rows) != 20 || rows[0].RunID != ids[0] || rows[0].Arm != "pcie" || rows[0].Samples != 1 {
		t.Fatalf("export: %d rows %+v %v", len(rows), rows[0], err)
	}
	var b bytes.Buffer
	must(t, WriteCSV(&b, rows))
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return WriteCSV(w, rows) })
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return WriteJSON(w, rows) })
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 21 || !strings.HasPrefix(lines[0], "run_id,started_at,status") || !strings.Contains(lines[1], ",pcie,false,1,") {
		t.Errorf("csv: %q", lines[:2])
	}
	b.Reset()
	must(t, WriteJSON(&b, rows))
	var back []ExportRow
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back) != 20 {
		t.Errorf("json: %v", err)
	}
	pts, sel, err := s.Points("tok_s", Series{})
	if err != nil || len(pts["pcie"]) != 4 || pts["pcie"][3].Mark != "regression" || pts["pcie"][0].Lo > pts["pcie"][0].Center {
		t.Fatalf("points %+v %v", pts, err)
	}
	if pts["pcie"][2].Mark != "drift" || pts["pcie"][1].Mark != "" {
		t.Errorf("marks: %+v", pts["pcie"])
	}
	// The tok_s regression is not marked on another metric's plot; the
	// run's drift is.
	if tt, _, err := s.Points("ttft_ms_p50", Series{}); err != nil || len(tt["pcie"]) != 4 || tt["pcie"][3].Mark != "" || tt["pcie"][2].Mark != "drift" {
		t.Errorf("ttft_ms_p50 marks: %+v %v", tt["pcie"], err)
	}
	// A regression marks only the arm its check names.
	if err := s.AddArm(ids[3], "baseline", "baseline", "key0", true, 1, []TrialRecord{{Index: 1, Values: tokOnly(60)}}); err != nil {
		t.Fatal(err)
	}
	if sel.HardwareKey != "8x GPU" {
		t.Errorf("series %+v", sel)
	}
	// Runs of other hardware stay off the plot.
	other, _ := s.BeginRun(Run{HardwareKey: "1x other"})
	must(t, s.AddArm(other, "pcie", "pcie", "", false, 1, []TrialRecord{{Index: 1, Values: tokOnly(5)}}))
	must(t, s.FinishRun(other, Complete, 0, ""))
	if pts, _, _ := s.Points("tok_s", Series{HardwareKey: "8x GPU"}); len(pts["pcie"]) != 4 {
		t.Errorf("other hardware on the plot: %d points", len(pts["pcie"]))
	}
	if pts, sel, _ := s.Points("tok_s", Series{}); len(pts["pcie"]) != 1 || sel.HardwareKey != "1x other" {
		t.Errorf("default series is the newest run's: %+v %d", sel, len(pts["pcie"]))
	}
	if pts, _, _ = s.Points("tok_s", Series{HardwareKey: "8x GPU"}); len(pts["baseline"]) != 1 || pts["baseline"][0].Mark != "" || pts["pcie"][3].Mark != "regression" {
		t.Errorf("per-arm marks: %+v", pts)
	}
	for _, f := range []string{"p.svg", "p.png"} {
		out := filepath.Join(dir, f)
		if err := s.Plot("tok_s", out, Series{HardwareKey: "8x GPU"}); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(out); err != nil || fi.Size() < 1000 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// A filter that matches nothing is named in the refusal, with the way
	// back to the newest run's series: leaving out the flags given.
	for sel, want := range map[Series]string{
		{HardwareKey: "8x GPU", Workload: "nope"}: `to plot on hardware "8x GPU", workload "nope" at concurrency 1 (`,
		{HardwareKey: "8x GPU", Level: 4}:         `at concurrency 4 (`,
	} {
		err := s.Plot("tok_s", filepath.Join(dir, "none.svg"), sel)
		flags := map[bool]string{true: "--hardware, --workload", false: "--hardware, --concurrency"}[sel.Workload != ""]
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "; leave out "+flags+" to plot the newest run's)") {
			t.Errorf("%+v: %v, want %q", sel, err, want)
		}
	}
	if err := s.Plot("tok_s", filepath.Join(dir, "p.txt"), Series{}); err == nil {
		t.Error("plot to .txt accepted")
	}
}

// A run that sweeps concurrency stores each trial's level; the window
// compares a level only with the same level of earlier runs.
func TestWindowPerLevel(t *testing.T) { eachStore(t, testWindowPerLevel) }

func testWindowPerLevel(t *testing.T, target string) {
	s, err := Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var ids []int64
	for i := 0; i < 2; i++ {
		id, _ := s.BeginRun(Run{HardwareKey: "8x GPU", Workload: "sweep"})
		var trials []TrialRecord
		for k := 1; k <= 3; k++ {
			trials = append(trials, TrialRecord{Index: k, Concurrency: 1, Values: tokOnly(90)}, TrialRecord{Index: k, Concurrency: 16, Values: tokOnly(600)})
		}
		if err := s.AddArm(id, "pcie", "pcie", "", false, 1, trials); err != nil {
			t.Fatal(err)
		}
		must(t, s.FinishRun(id, Complete, 0, ""))
		ids = append(ids, id)
	}
	for level, want := range map[int]float64{1: 90, 16: 600} {
		vals, runs, err := s.Window("8x GPU", "sweep", "pcie", "tok_s", level, 7, 0)
		if err != nil || len(vals) != 6 || !reflect.DeepEqual(runs, []int64{ids[1], ids[0]}) {
			t.Fatalf("level %d: %v %v %v", level, vals, runs, err)
		}
		for _, v := range vals {
			if v != want {
				t.Errorf("level %d: value %v", level, v)
			}
		}
	}
	if vals, runs, _ := s.Window("8x GPU", "sweep", "pcie", "tok_s", 4, 7, 0); len(vals) != 0 || len(runs) != 0 {
		t.Errorf("level 4 never ran: %v %v", vals, runs)
	}
	// Over time, a plot shows one level: the lowest by default.
	pts, sel, err := s.Points("tok_s", Series{})
	if err != nil || sel.Level != 1 || len(pts["pcie"]) != 2 || pts["pcie"][0].Center != 90 {
		t.Errorf("points at the lowest level: %+v %+v %v", pts, sel, err)
	}
	if pts, _, _ = s.Points("tok_s", Series{Level: 16}); len(pts["pcie"]) != 2 || pts["pcie"][1].Center != 600 {
		t.Errorf("points at 16: %+v", pts)
	}
	// Against concurrency: the newest run's levels.
	curves, run, err := s.LevelCurves("tok_s", Series{}, 0)
	if err != nil || run != ids[1] || len(curves) != 1 || curves[0].Arm != "pcie" || len(curves[0].Points) != 2 ||
		curves[0].Points[0].Concurrency != 1 || curves[0].Points[0].Center != 90 || curves[0].Points[1].Concurrency != 16 || curves[0].Points[1].Center != 600 {
		t.Fatalf("level curves: %+v run %d %v", curves, run, err)
	}
	if _, _, err := s.LevelCurves("tok_s", Series{}, 999); err == nil || !strings.Contains(err.Error(), "run 999 has no bench results") {
		t.Errorf("unknown run: %v", err)
	}
	dir := t.TempDir()
	for _, f := range []string{"c.svg", "c.png"} {
		out := filepath.Join(dir, f)
		if err := chart.PlotConcurrency(out, "t", "tok/s", curves); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		if !bytes.Contains(b[:min(len(b), 200)], []byte("<svg")) && !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: %.40q", f, b)
		}
	}
}

// Which nights count as references follows the typed vocabulary: for
// every check kind and status, a night with that one check is a reference
// unless the check failed and is a regression or validity check; a night
// that exited ExitFailedChecks is none whatever its checks; an accepted
// night always is.
func TestWindowVocabulary(t *testing.T) { eachStore(t, testWindowVocabulary) }

func testWindowVocabulary(t *testing.T, target string) {
	s, err := Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	night := func(exit int, checks ...Check) int64 {
		t.Helper()
		id, err := s.BeginRun(Run{HardwareKey: "hw"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AddArm(id, "pcie", "pcie", "", false, 1, []TrialRecord{{Index: 1, Values: tokOnly(90)}}); err != nil {
			t.Fatal(err)
		}
		for _, c := range checks {
			if err := s.AddCheck(id, c); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.FinishRun(id, Complete, exit, ""); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var want []int64
	for _, k := range CheckKinds {
		for _, st := range CheckStatuses {
			id := night(0, Check{Name: string(k) + " " + string(st), Kind: k, Status: st})
			if !(st == CheckFail && (k == KindRegression || k == KindValidity)) {
				want = append(want, id)
			}
		}
	}
	night(ExitFailedChecks, Check{Name: "output of pcie", Kind: KindValidity, Status: CheckSkip})
	accepted := night(0, Check{Name: "pcie tok_s vs history", Kind: KindRegression, Status: CheckFail})
	_, runs, err := s.Window("hw", "", "pcie", "tok_s", 1, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(want)
	if !reflect.DeepEqual(runs, want) {
		t.Errorf("reference runs %v, want %v", runs, want)
	}
	if err := s.Accept(accepted); err != nil {
		t.Fatal(err)
	}
	if _, runs, err = s.Window("hw", "", "pcie", "tok_s", 1, 100, 0); err != nil || !reflect.DeepEqual(runs, []int64{accepted}) {
		t.Errorf("after accepting run %d: reference runs %v, %v", accepted, runs, err)
	}
	// The stored text is the constant's value: what history show, the
	// JUnit class names and older databases read.
	d, err := s.Show(want[0])
	if err != nil || len(d.Checks) != 1 || d.Checks[0].Kind != KindInfra || d.Checks[0].Status != CheckSkip {
		t.Errorf("stored check %v %+v", err, d)
	}
}

// A value a read cannot scan (text where a metric belongs) is an error
// naming the database file and the run, not a silently shorter window or
// a zero in history show.
func TestScanErrorsAreReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ids := seed(t, s, 2, 90)
	if _, err := s.db.Exec(`UPDATE trials SET tok_s = 'fast' WHERE arm_id = (SELECT id FROM arms WHERE run_id = ?)`, ids[0]); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("history %s: reading the reference window of pcie tok_s: run %d: ", path, ids[0])
	if vals, _, err := s.Window("8x GPU", "", "pcie", "tok_s", 1, 7, 0); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("window over an unreadable value: %v, %v; want an error starting %q", vals, err, want)
	}
	if _, err := s.Show(ids[0]); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "arm pcie") {
		t.Errorf("show of an unreadable trial: %v", err)
	}
	if _, err := s.db.Exec(`UPDATE runs SET started_at = 'yesterday' WHERE id = ?`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Runs(0); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("run %d: started_at", ids[1])) || !strings.Contains(err.Error(), path) {
		t.Errorf("runs with an unreadable start time: %v", err)
	}
}

// Every write to a history that refuses it (closed here) is an error
// naming the database file.
func TestWriteErrorsNameTheFile(t *testing.T) { eachStore(t, testWriteErrorsNameTheFile) }

func testWriteErrorsNameTheFile(t *testing.T, path string) {
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	id := seed(t, s, 1, 90)[0]
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"BeginRun":  func() error { _, err := s.BeginRun(Run{HardwareKey: "hw"}); return err }(),
		"Record":    s.Record(id, Outcome{Status: Complete, Checks: []Check{{Name: "x", Kind: KindBuild, Status: CheckPass}}}),
		"FinishRun": s.FinishRun(id, Failed, 4, "x"),
		"AddCheck":  s.AddCheck(id, Check{Name: "x", Kind: KindBuild, Status: CheckPass}),
		"AddArm":    s.AddArm(id, "pcie", "pcie", "", false, 1, nil),
		"Accept":    s.Accept(id),
		"MarkStale": func() error { _, err := s.MarkStale(); return err }(),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "history "+path+": ") {
			t.Errorf("%s on a closed history: %v", name, err)
		}
	}
}

// Record stores all of a run's outcome or nothing: a write that fails
// midway (a check the database refuses) leaves no drift, arm or check of
// the run, and the run still "running" (the next nightly marks it
// incomplete).
func TestRecordIsOneTransaction(t *testing.T) { eachStore(t, testRecordIsOneTransaction) }

func testRecordIsOneTransaction(t *testing.T, path string) {
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	id, err := s.BeginRun(Run{HardwareKey: "hw"})
	if err != nil {
		t.Fatal(err)
	}
	undo := failInserts(t, s, "checks", "database or disk is full")
	o := Outcome{UpstreamHead: strings.Repeat("b", 40), Env: map[string]string{"sglang_version@pcie": "0.5.5"},
		Drift:  []DriftRecord{{Series: "pcie", Commit: strings.Repeat("a", 40), Rev: "pinned", Patch: "0001.patch", Fit: "exact"}},
		Arms:   []ArmRecord{{Name: "pcie", Recipe: "pcie", Agreement: 1, Trials: []TrialRecord{{Index: 1, Values: tokOnly(90)}}}},
		Checks: []Check{{Name: "pcie at pinned", Kind: KindDrift, Status: CheckPass}},
		Status: Complete, Verdict: "no regression"}
	err = s.Record(id, o)
	if want := fmt.Sprintf("history %s: recording run %d: ", path, id); err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "database or disk is full") {
		t.Fatalf("Record = %v, want an error starting %q", err, want)
	}
	d, err := s.Show(id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Run.Status != Running || d.Run.UpstreamHead != "" || len(d.Drift)+len(d.Arms)+len(d.Checks) != 0 || len(d.Run.Env) != 0 {
		t.Errorf("after a failed Record: %+v", d)
	}
	undo()
	if err := s.Record(id, o); err != nil {
		t.Fatal(err)
	}
	if d, err = s.Show(id); err != nil || d.Run.Status != Complete || d.Run.UpstreamHead != o.UpstreamHead || d.Run.SGLangCommit != "" ||
		len(d.Drift) != 1 || len(d.Arms) != 1 || len(d.Arms[0].Trials) != 1 || len(d.Checks) != 1 || d.Run.Env["sglang_version@pcie"] != "0.5.5" {
		t.Errorf("after Record: %v %+v", err, d)
	}
}

// must stops the test on a setup error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runOf describes a Show result's run for a failure message: a failed
// Show has none, and a message must not panic on it.
func runOf(d *Detail) string {
	if d == nil {
		return "no run"
	}
	return fmt.Sprintf("%+v", d.Run)
}

// tokOnly is a trial's metrics with only tok/s.
func tokOnly(v float64) map[string]float64 { return map[string]float64{"tok_s": v} }

// The WAL's files stay beside the database from one Open to the next
// (the same two files, no new ones), the -wal empty after each close:
// the database file alone holds every run (a copy of it without them
// opens whole), and a -wal left beside a database the user deleted
// replays nothing into the new one.
func TestWALFilesStayEmptyBetweenOpens(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "h.db")
	walFiles := func() (wal, shm os.FileInfo) {
		t.Helper()
		wal, err := os.Stat(p + "-wal")
		if err != nil {
			t.Fatalf("after Close: %v", err)
		}
		if wal.Size() != 0 {
			t.Errorf("after Close %s-wal holds %d bytes, want 0", p, wal.Size())
		}
		if shm, err = os.Stat(p + "-shm"); err != nil {
			t.Fatalf("after Close: %v", err)
		}
		return wal, shm
	}
	runs := func(path string) int {
		t.Helper()
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { must(t, s.Close()) }()
		rs, err := s.Runs(100)
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, s, 1, 1000)
	must(t, s.Close())
	wal, shm := walFiles()

	b, err := os.ReadFile(p)
	must(t, err)
	alone := filepath.Join(dir, "copy", "h.db")
	must(t, os.MkdirAll(filepath.Dir(alone), 0o755))
	must(t, os.WriteFile(alone, b, 0o644))
	if n := runs(alone); n != 1 {
		t.Errorf("the database file alone holds %d runs, want 1", n)
	}

	s, err = Open(p)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, s, 1, 1000)
	must(t, s.Close())
	wal2, shm2 := walFiles()
	if !os.SameFile(wal, wal2) || !os.SameFile(shm, shm2) {
		t.Error("a second Open made new -wal or -shm files")
	}

	must(t, os.Remove(p))
	if n := runs(p); n != 0 {
		t.Errorf("a new database beside the old -wal and -shm holds %d runs, want 0", n)
	}
}

// Keeping the WAL files is an optimisation: when it fails, Open still
// opens the history, which records and reads runs as before.
func TestOpenWithoutKeptWAL(t *testing.T) {
	defer func(k func(*sql.DB) error) { keepWAL = k }(keepWAL)
	keepWAL = func(*sql.DB) error { return errors.New("no file control") }
	s, err := Open(filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatalf("Open when the WAL files cannot be kept: %v", err)
	}
	defer func() { must(t, s.Close()) }()
	seed(t, s, 1, 1000)
	if rs, err := s.Runs(100); err != nil || len(rs) != 1 {
		t.Errorf("runs %d, %v; want 1", len(rs), err)
	}
}

// Several processes (here goroutines, each with a connection of its own)
// opening one brand-new history at once all open it, migrated once: each
// step re-reads the version inside its transaction, which holds the write
// lock from its start, and skips what another opener applied meanwhile.
func TestConcurrentOpenOfNewDatabase(t *testing.T) { eachStore(t, testConcurrentOpenOfNewDatabase) }

func testConcurrentOpenOfNewDatabase(t *testing.T, p string) {
	const n = 6
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		go func() {
			<-start
			s, err := Open(p)
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	close(start)
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, s.Close()) }()
	var rows, maxV int
	if err := s.db.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&rows, &maxV); err != nil {
		t.Fatal(err)
	}
	if rows != SchemaVersion || maxV != SchemaVersion {
		t.Errorf("schema_migrations holds %d rows up to version %d, want %d, each once", rows, maxV, SchemaVersion)
	}
}

// regressedOn: a failed regression check marks its arm and metric, at
// its level when it names one.
func TestRegressedOn(t *testing.T) {
	for _, c := range []struct {
		name, arm, metric string
		level             int
		want              bool
	}{
		{"pcie tok_s vs history", "pcie", "tok_s", 1, true},
		{"pcie tok_s vs history", "pcie", "tpot_ms", 1, false},
		{"pcie tpot_ms_p99 vs history", "pcie", "tpot_ms", 1, false},
		{"pcie tok_s vs history", "pcie2", "tok_s", 1, false},
		{"pcie2 tok_s vs history", "pcie", "tok_s", 1, false},
		{"pcie tok_s@concurrency=4 vs history", "pcie", "tok_s", 4, true},
		{"pcie tok_s@concurrency=4 vs history", "pcie", "tok_s", 1, false},
		{"pcie tok_s@concurrency=16 vs baseline", "pcie", "tok_s", 1, false},
	} {
		if got := regressedOn(c.name, c.arm, c.metric, c.level); got != c.want {
			t.Errorf("regressedOn(%q, %s, %s, %d) = %v", c.name, c.arm, c.metric, c.level, got)
		}
	}
}

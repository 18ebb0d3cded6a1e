package nightly

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/arpatch/arpatch/history"
)

func (w *world) execute(out *bytes.Buffer) (int, error) {
	return Execute(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true, Out: out,
		Reports: map[string]string{"junit": filepath.Join(w.dir, "cli-junit.xml")},
		Probe:   func(context.Context) Environment { return Environment{} }})
}

// Execute prints the table, writes the reports (the command line's paths
// over the config's) and returns the run's exit code.
func TestExecuteReportsTheRun(t *testing.T) {
	w := newWorld(t)
	var out bytes.Buffer
	code, err := w.execute(&out)
	if err != nil || code != ExitOK {
		t.Fatalf("exit %d, %v", code, err)
	}
	if !strings.Contains(out.String(), "nightly run 1 on test-gpu: exit 0, no regression") {
		t.Errorf("table:\n%s", out.String())
	}
	dir := w.cfg.Path(w.cfg.Outputs.Dir)
	for _, f := range []string{filepath.Join(w.dir, "cli-junit.xml"), filepath.Join(dir, "nightly.json"), filepath.Join(dir, "summary.md")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("report %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(w.dir, "out/junit.xml")); err == nil {
		t.Error("the config's junit path was written although --junit overrides it")
	}
}

// A report that cannot be written is an infrastructure failure: exit 4,
// the error names the file, and the history's run agrees with the exit.
func TestExecuteUnwritableReport(t *testing.T) {
	w := newWorld(t)
	if err := os.WriteFile(filepath.Join(w.dir, "blocker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.cfg.Outputs.Dir = filepath.Join(w.dir, "blocker", "out")
	code, err := w.execute(&bytes.Buffer{})
	if code != ExitInfra || err == nil || !strings.Contains(err.Error(), filepath.Join(w.dir, "blocker", "out", "nightly.json")) {
		t.Fatalf("exit %d, %v", code, err)
	}
	w.historySaysInfra("infrastructure failure: writing report")
}

// historySaysInfra fails unless the history holds one run, failed with
// exit 4 and a verdict starting with verdict.
func (w *world) historySaysInfra(verdict string) {
	w.t.Helper()
	store, err := history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		w.t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	runs, err := store.Runs(0)
	if err != nil || len(runs) != 1 || runs[0].Status != history.Failed || runs[0].ExitCode == nil || *runs[0].ExitCode != ExitInfra ||
		!strings.HasPrefix(runs[0].Verdict, verdict) {
		w.t.Fatalf("history: %v %+v, want one failed run with exit 4 and a verdict starting %q", err, runs, verdict)
	}
}

// A report that passes the checks before the run but fails when it is
// written (here --junit's path became a directory during the run) turns
// the run into exit 4 everywhere: the error, the printed line, the
// history, and the reports that can still be written (nightly.json,
// summary.md) say exit 4 and name the file, with a failed "reports" check.
func TestExecuteReportFailsAtWriteTime(t *testing.T) {
	w := newWorld(t)
	junit := filepath.Join(w.dir, "cli-junit.xml")
	var out bytes.Buffer
	code, err := Execute(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true, Out: &out,
		Reports: map[string]string{"junit": junit},
		Probe: func(context.Context) Environment {
			if err := os.Mkdir(junit, 0o755); err != nil { // after every check of the paths
				t.Error(err)
			}
			return Environment{}
		}})
	want := "writing report " + junit + ": "
	if code != ExitInfra || err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("exit %d, %v; want 4 and an error starting %q", code, err, want)
	}
	if !strings.Contains(out.String(), "nightly run 1 on test-gpu: exit 4, infrastructure failure: "+want) {
		t.Errorf("printed:\n%s", out.String())
	}
	dir := w.cfg.Path(w.cfg.Outputs.Dir)
	b, err := os.ReadFile(filepath.Join(dir, "nightly.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != ExitInfra || rep.Status != history.Failed || !strings.HasPrefix(rep.Verdict, "infrastructure failure: "+want) {
		t.Errorf("nightly.json: exit %d, status %s, verdict %q", rep.ExitCode, rep.Status, rep.Verdict)
	}
	if c := findCheck(rep.Checks, "reports"); c.Kind != history.KindInfra || c.Status != history.CheckFail || !strings.HasPrefix(c.Detail, want) {
		t.Errorf("nightly.json's reports check: %+v", c)
	}
	sum, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil || !strings.Contains(string(sum), "## arpatch nightly: INFRA FAILURE") || !strings.Contains(string(sum), "exit code 4: infrastructure failure: "+want) {
		t.Errorf("summary.md: %v\n%s", err, sum)
	}
	w.historySaysInfra("infrastructure failure: " + want)
}

// findCheck returns the check named name, or the zero Check.
func findCheck(cs []history.Check, name string) history.Check {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return history.Check{}
}

// A nightly that cannot start (the lock is held) exits 4 and still writes
// its reports: CI's JUnit shows one failed "run" case.
func TestExecuteCannotStart(t *testing.T) {
	w := newWorld(t)
	unlock, err := history.Lock(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	var out bytes.Buffer
	code, err := w.execute(&out)
	if code != ExitInfra || err == nil || !strings.Contains(err.Error(), "another nightly is running") {
		t.Fatalf("exit %d, %v", code, err)
	}
	if out.Len() != 0 {
		t.Errorf("a run that did not start printed a table:\n%s", out.String())
	}
	b, err := os.ReadFile(filepath.Join(w.dir, "cli-junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	var j junitSuites
	if err := xml.Unmarshal(b, &j); err != nil || j.Fails != 1 || len(j.Suites) != 1 || j.Suites[0].Cases[0].Name != "run" {
		t.Errorf("junit of a run that could not start: %v %+v", err, j)
	}
}

// A nightly.toml that cannot run is a *ConfigError, for a usage exit.
func TestExecuteConfigError(t *testing.T) {
	w := newWorld(t)
	w.cfg.Arms.BFile = "nosuch.toml"
	_, err := w.execute(&bytes.Buffer{})
	if _, ok := err.(*ConfigError); !ok {
		t.Fatalf("err = %T %v, want a *ConfigError", err, err)
	}
}

// sqlExec runs statements on the world's history database behind the
// store's back: to plant a failure.
func (w *world) sqlExec(stmts ...string) {
	w.t.Helper()
	s, err := history.Open(filepath.Join(w.dir, "history.db")) // creates and migrates it
	if err != nil {
		w.t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		w.t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(w.dir, "history.db"))
	if err != nil {
		w.t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			w.t.Fatal(err)
		}
	}
}

// A history that refuses the night's write is an infrastructure failure:
// exit 4, the error names the database file, nothing of the night is
// stored, and the run's row says it failed.
func TestHistoryWriteFails(t *testing.T) {
	w := newWorld(t)
	w.sqlExec(`CREATE TRIGGER full BEFORE INSERT ON checks BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`)
	db := filepath.Join(w.dir, "history.db")
	var out bytes.Buffer
	code, err := w.execute(&out)
	want := "history " + db + ": recording run 1: "
	if code != ExitInfra || err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "database or disk is full") {
		t.Fatalf("exit %d, %v; want 4 and an error starting %q", code, err, want)
	}
	if !strings.Contains(out.String(), "nightly run 1 on test-gpu: exit 4, infrastructure failure: "+want) {
		t.Errorf("table:\n%s", out.String())
	}
	store, err := history.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	d, err := store.Show(1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Run.Status != history.Failed || d.Run.ExitCode == nil || *d.Run.ExitCode != ExitInfra || !strings.HasPrefix(d.Run.Verdict, "infrastructure failure: "+want) ||
		len(d.Drift) != 0 || len(d.Checks) != 0 || d.Run.UpstreamHead != "" {
		t.Errorf("stored after the failed write: %+v", d)
	}
	// The JUnit file shows it as a failed "history" case.
	b, err := os.ReadFile(filepath.Join(w.dir, "cli-junit.xml"))
	if err != nil || !strings.Contains(string(b), `<testcase classname="arpatch.infra" name="history">`) || !strings.Contains(string(b), "database or disk is full") {
		t.Errorf("junit: %v\n%s", err, b)
	}
}

// A history that cannot be read while judging (a reference value it
// cannot scan) is an infrastructure failure too, not "not enough data".
func TestHistoryReadFails(t *testing.T) { synctest.Test(t, testHistoryReadFails) }

func testHistoryReadFails(t *testing.T) {
	w := newWorld(t)
	w.serve("a", 1000)
	w.serve("b", 1600)
	if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
		t.Fatalf("night 1: exit %d %v", rep.ExitCode, rep.Errors)
	}
	w.sqlExec(`UPDATE trials SET tok_s = 'fast'`)
	db := filepath.Join(w.dir, "history.db")
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, Launcher: []string{"/bin/true"}, Version: "test",
		Probe: func(context.Context) Environment { return Environment{GPUModel: "Test GPU", GPUCount: 8} }, HTTP: w.net.HTTP()})
	want := "history " + db + ": reading the reference window of "
	if err == nil || !strings.HasPrefix(err.Error(), want) || rep == nil || rep.ExitCode != ExitInfra || rep.Status != history.Failed {
		t.Fatalf("Run = %v; want an error starting %q and exit 4 (report %+v)", err, want, rep)
	}
	if c := w.check(rep, "history"); c.Kind != history.KindInfra || c.Status != history.CheckFail || !strings.HasPrefix(c.Detail, want) {
		t.Errorf("history check %+v", c)
	}
	// What was found before the failure is stored, with the failure.
	store, err := history.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	runs, err := store.Runs(1)
	if err != nil || len(runs) != 1 || runs[0].ID != 2 || runs[0].Status != history.Failed || !strings.Contains(runs[0].Verdict, want) {
		t.Errorf("stored run: %v %+v", err, runs)
	}
}

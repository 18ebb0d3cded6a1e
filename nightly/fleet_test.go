package nightly

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/pgtest"
)

// pointAt rewrites w's nightly.toml to keep its history at target (a
// postgres:// URL) with the hardware key host, and loads it again.
func (w *world) pointAt(target, host string) {
	w.t.Helper()
	p := filepath.Join(w.dir, "nightly.toml")
	b, err := os.ReadFile(p)
	must(w.t, err)
	s := regexp.MustCompile(`(?m)^path = ".*"$`).ReplaceAllLiteralString(string(b), `path = "`+target+`"`)
	s = regexp.MustCompile(`(?m)^hardware_key = ".*"$`).ReplaceAllLiteralString(s, `hardware_key = "`+host+`"`)
	must(w.t, os.WriteFile(p, []byte(s), 0o644))
	if w.cfg, err = LoadConfig(p); err != nil {
		w.t.Fatal(err)
	}
}

// TestFleetSharesOneHistory: two hosts' nightlies write one PostgreSQL
// history, each under its own hardware key, and each run's report names
// it.
func TestFleetSharesOneHistory(t *testing.T) {
	target := pgtest.Schema(t)
	for _, host := range []string{"box-a", "box-b"} {
		w := newWorld(t)
		w.pointAt(target, host)
		rep := w.runSkipBench(true)
		if rep.ExitCode != ExitOK || rep.History != target || rep.HardwareKey != host {
			t.Fatalf("%s: exit %d, history %q, hardware %q: %v", host, rep.ExitCode, rep.History, rep.HardwareKey, rep.Errors)
		}
	}
	s, err := history.OpenRead(target)
	must(t, err)
	defer func() { _ = s.Close() }()
	runs, err := s.Runs(0)
	if err != nil || len(runs) != 2 || runs[0].HardwareKey != "box-b" || runs[1].HardwareKey != "box-a" || runs[0].Status != history.Complete {
		t.Errorf("shared history: %+v, %v", runs, err)
	}
}

// TestUnreachableHistoryKeepsTheRun: a nightly whose PostgreSQL history
// cannot be reached still runs, keeps its run in history.keep (default
// STATE/nightly/KEY/kept.db) and exits 4 saying where it is; the next
// nightly that reaches the server sends the kept run there first.
func TestUnreachableHistoryKeepsTheRun(t *testing.T) {
	w := newWorld(t)
	down := "postgres://arpatch@127.0.0.1:1/arpatch?connect_timeout=2"
	w.pointAt(down, "box-a")
	keep := w.cfg.History.Keep
	if !strings.HasPrefix(keep, filepath.Join(w.dir, "state", "nightly")) || filepath.Base(keep) != "kept.db" {
		t.Fatalf("history.keep defaults to %q", keep)
	}
	rep := w.runSkipBench(true)
	c := w.check(rep, "history")
	if rep.ExitCode != ExitInfra || rep.History != keep || c.Status != history.CheckFail ||
		!strings.Contains(c.Detail, "history "+down+": cannot reach the server") || !strings.Contains(c.Detail, "tonight's run is kept in "+keep+" (history.keep) and sent to "+down) {
		t.Fatalf("exit %d, history %q, check %+v", rep.ExitCode, rep.History, c)
	}
	local, err := history.OpenRead(keep)
	must(t, err)
	kept, err := local.Show(rep.RunID)
	must(t, local.Close())
	if err != nil || kept.Run.Status != history.Failed || len(kept.Drift) == 0 {
		t.Fatalf("the kept run: %+v, %v", kept, err)
	}

	target := pgtest.Schema(t)
	w.pointAt(target, "box-a")
	w.cfg.History.Keep = keep
	rep = w.runSkipBench(true)
	if rep.ExitCode != ExitOK || rep.History != target {
		t.Fatalf("with the server up: exit %d, %q, %v", rep.ExitCode, rep.History, rep.Errors)
	}
	s, err := history.OpenRead(target)
	must(t, err)
	defer func() { _ = s.Close() }()
	runs, err := s.Runs(0)
	if err != nil || len(runs) != 2 || !runs[1].StartedAt.Equal(kept.Run.StartedAt) || runs[1].Status != history.Failed || runs[0].ID != rep.RunID {
		t.Fatalf("shared history after the send: %+v, %v", runs, err)
	}
	if d, err := s.Show(runs[1].ID); err != nil || len(d.Drift) != len(kept.Drift) || len(d.Checks) != len(kept.Checks) {
		t.Errorf("the sent run: %+v, %v", d, err)
	}
	local, err = history.OpenRead(keep)
	must(t, err)
	defer func() { _ = local.Close() }()
	if left, err := local.Runs(0); err != nil || len(left) != 0 {
		t.Errorf("still kept after the send: %+v, %v", left, err)
	}
}

// TestHistoryFailingAtRecordKeepsTheRun: when the shared history opens
// but refuses the night's record (here a trigger fails every check
// inserted, as a full disk would), the whole run is kept in history.keep
// and the report names it there, with exit 4.
func TestHistoryFailingAtRecordKeepsTheRun(t *testing.T) {
	target := pgtest.Schema(t)
	w := newWorld(t)
	w.pointAt(target, "box-a")
	w.runSkipBench(true) // makes the schema
	must(t, func() error {
		db, err := sql.Open("pgx", target)
		if err == nil {
			_, err = db.Exec(`CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$;
				CREATE TRIGGER disk_full BEFORE INSERT ON checks FOR EACH ROW EXECUTE FUNCTION fail_insert();`)
			_ = db.Close() // the trigger is committed
		}
		return err
	}())
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err == nil || !strings.Contains(err.Error(), "recording run") {
		t.Fatalf("Run = %v", err)
	}
	keep := w.cfg.History.Keep
	if rep.ExitCode != ExitInfra || rep.History != keep || len(rep.Errors) != 2 || !strings.Contains(rep.Errors[0], "disk full") ||
		rep.Errors[1] != fmt.Sprintf("tonight's run is kept in %s (history.keep) as run %d and sent to %s by the next nightly that reaches it", keep, rep.RunID, target) {
		t.Fatalf("exit %d, history %q, run %d, errors %q", rep.ExitCode, rep.History, rep.RunID, rep.Errors)
	}
	local, err := history.OpenRead(keep)
	must(t, err)
	defer func() { _ = local.Close() }()
	d, err := local.Show(rep.RunID)
	if err != nil || d.Run.Status != history.Failed || len(d.Checks) != len(rep.Checks) || len(d.Drift) == 0 {
		t.Errorf("the kept run: %+v, %v", d, err)
	}
}

// The fleet's nightly.toml in docs/nightly.md loads: its history is the
// URL, kept locally in the config's state directory when unreachable.
func TestFleetDocExample(t *testing.T) {
	b, err := os.ReadFile("../docs/nightly.md")
	must(t, err)
	doc := string(b)
	i := strings.Index(doc, "## A fleet")
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindStringSubmatch(doc[i:])
	if i < 0 || m == nil {
		t.Fatal("docs/nightly.md has no fleet section with a toml block")
	}
	dir := t.TempDir()
	t.Setenv("ARPATCH_STATE", filepath.Join(dir, "state"))
	p := filepath.Join(dir, "nightly.toml")
	must(t, os.WriteFile(p, []byte(m[1]), 0o644))
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.History.Path != "postgres://arpatch@db.internal/arpatch" || cfg.Path(cfg.History.Path) != cfg.History.Path || cfg.History.HardwareKey != "box-a" ||
		!strings.HasPrefix(cfg.History.Keep, filepath.Join(dir, "state", "nightly")) || filepath.Base(cfg.History.Keep) != "kept.db" {
		t.Errorf("fleet config: %+v", cfg.History)
	}
}

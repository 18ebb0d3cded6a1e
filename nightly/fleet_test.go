package nightly

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/goroutine"
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

// keptIn returns the runs of the history at target, each with all that
// Show reads of it.
func keptIn(t *testing.T, target string) []*history.Detail {
	t.Helper()
	s, err := history.OpenRead(target)
	must(t, err)
	defer func() { must(t, s.Close()) }()
	runs, err := s.Runs(0)
	must(t, err)
	var out []*history.Detail
	for i := len(runs) - 1; i >= 0; i-- {
		d, err := s.Show(runs[i].ID)
		must(t, err)
		out = append(out, d)
	}
	return out
}

// sameRun reports whether two runs hold the same, but for their ids.
func sameRun(a, b *history.Detail) bool {
	x, y := *a, *b
	x.Run.ID, y.Run.ID = 0, 0
	return reflect.DeepEqual(x, y)
}

// checkKept checks a night kept in history.keep: exit 4, failed, its
// report naming keep and its run there; a failed "history" check saying
// why (want) and where the run is kept; every step run all the same (two
// arms benched, each output checked, B judged against A tonight, each arm
// against history.keep); and the kept run holding all of it. It returns
// the kept run.
func checkKept(t *testing.T, rep *Report, keep, target, want string) *history.Detail {
	t.Helper()
	var c history.Check
	for _, x := range rep.Checks {
		if x.Name == "history" {
			c = x
		}
	}
	if rep.ExitCode != ExitInfra || rep.Status != history.Failed || rep.History != keep || c.Status != history.CheckFail || !strings.Contains(c.Detail, want) ||
		!strings.HasSuffix(c.Detail, "; tonight's run is kept in "+keep+" (history.keep) and sent to "+target+" by the next nightly that reaches it") {
		t.Fatalf("kept night: exit %d, %s, history %q, check %+v", rep.ExitCode, rep.Status, rep.History, c)
	}
	if rep.Bench == nil || len(rep.Bench.Arms) != 2 {
		t.Fatalf("kept night benched nothing: %+v", rep.Checks)
	}
	if r := findReg(rep, "patched", "tok_s", "base"); r.Verdict != VerdictImprovement {
		t.Errorf("kept night, B against A tonight: %+v", r)
	}
	if r := findReg(rep, "patched", "tok_s", "history"); r.Verdict != VerdictNotEnoughData {
		t.Errorf("kept night, against history.keep (nothing there yet): %+v", r)
	}
	var d *history.Detail
	for _, k := range keptIn(t, keep) {
		if k.Run.ID == rep.RunID {
			d = k
		}
	}
	if d == nil || d.Run.Status != history.Failed || *d.Run.ExitCode != ExitInfra || d.Run.Verdict != rep.Verdict || len(d.Arms) != 2 || len(d.Arms[1].Trials) != 5 ||
		len(d.Checks) != len(rep.Checks) || len(d.Drift) == 0 {
		t.Fatalf("the kept run %d in %s: %+v", rep.RunID, keep, d)
	}
	return d
}

// TestUnreachableHistoryKeepsTheRun: a nightly whose PostgreSQL history
// cannot be reached at its start still builds, benches and judges (B
// against A tonight, each arm against history.keep, default
// STATE/nightly/KEY/kept.db), keeps the whole run there and exits 4
// saying where it is; the next nightly that reaches the server sends the
// kept run there first, whole, and empties kept.db.
func TestUnreachableHistoryKeepsTheRun(t *testing.T) {
	target := pgtest.Schema(t)
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		down := "postgres://arpatch@127.0.0.1:1/arpatch?connect_timeout=2"
		w.pointAt(down, "box-a")
		w.serve("a", 1000)
		w.serve("b", 1600)
		keep := w.cfg.History.Keep
		if !strings.HasPrefix(keep, filepath.Join(w.dir, "state", "nightly")) || filepath.Base(keep) != "kept.db" {
			t.Fatalf("history.keep defaults to %q", keep)
		}
		rep := w.run(context.Background(), false)
		if len(rep.Builds) != 2 || rep.Builds[0].Error != "" {
			t.Errorf("kept night's builds: %+v", rep.Builds)
		}
		kept := checkKept(t, rep, keep, down, "history "+down+": cannot reach the server: ")

		w.pointAt(target, "box-a")
		w.cfg.History.Keep = keep
		w.serve("a", 1000)
		w.serve("b", 1600)
		rep = w.run(context.Background(), true)
		if rep.ExitCode != ExitOK || rep.History != target {
			t.Fatalf("with the server up: exit %d, %q, %v", rep.ExitCode, rep.History, rep.Errors)
		}
		runs := keptIn(t, target)
		if len(runs) != 2 || !sameRun(runs[0], kept) || runs[1].Run.ID != rep.RunID {
			t.Fatalf("shared history after the send: %d runs; the first %+v\nwant the kept run %+v", len(runs), runs[0], kept)
		}
		if left := keptIn(t, keep); len(left) != 0 {
			t.Errorf("still kept after the send: %+v", left)
		}
	})
}

// TestHistoryFailingAtRecordKeepsTheRun: when the shared history takes
// the night's start but refuses its record (a trigger fails every sample
// inserted, as a full disk would), the whole run is kept in history.keep,
// judged against the shared history's window (read before the failure),
// and the shared row it began says where it went; once the server takes
// writes again, the next nightly replaces that row with the kept run,
// whole, and empties kept.db.
func TestHistoryFailingAtRecordKeepsTheRun(t *testing.T) {
	target := pgtest.Schema(t)
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.pointAt(target, "box-a")
		w.serve("a", 1000)
		w.serve("b", 1600)
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("night 1: exit %d %v", rep.ExitCode, rep.Errors)
		}
		pgExec(t, target, `CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$;
			CREATE TRIGGER disk_full BEFORE INSERT ON samples FOR EACH ROW EXECUTE FUNCTION fail_insert();`)
		rep := w.run(context.Background(), true)
		keep := w.cfg.History.Keep
		var c history.Check
		for _, x := range rep.Checks {
			if x.Name == "history" {
				c = x
			}
		}
		if rep.ExitCode != ExitInfra || rep.History != keep || !strings.Contains(c.Detail, "recording run 2: ERROR: disk full") ||
			!strings.HasSuffix(c.Detail, "; tonight's run is kept in "+keep+" (history.keep) and sent to "+target+" by the next nightly that reaches it") {
			t.Fatalf("night 2: exit %d, history %q, check %+v", rep.ExitCode, rep.History, c)
		}
		if r := findReg(rep, "patched", "tok_s", "history"); r.RefRuns != 1 || r.RefSamples != 5 {
			t.Errorf("night 2 against the shared history's window: %+v", r)
		}
		kept := keptIn(t, keep)
		if len(kept) != 1 || len(kept[0].Arms) != 2 || len(kept[0].Checks) != len(rep.Checks) {
			t.Fatalf("kept: %+v", kept)
		}
		began := keptIn(t, target)[1]
		if began.Run.Status != history.Failed || !strings.HasSuffix(began.Run.Verdict, fmt.Sprintf("; kept in %s as run %d until it is sent here", keep, rep.RunID)) || len(began.Arms) != 0 {
			t.Errorf("the shared row night 2 began: %+v", began.Run)
		}

		pgExec(t, target, `DROP TRIGGER disk_full ON samples`)
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK || rep.History != target {
			t.Fatalf("night 3: exit %d %v", rep.ExitCode, rep.Errors)
		}
		runs := keptIn(t, target)
		if len(runs) != 3 || runs[1].Run.ID != began.Run.ID || !sameRun(runs[1], kept[0]) {
			t.Fatalf("shared history after the send: %d runs; run %d is %+v\nwant the kept run %+v", len(runs), began.Run.ID, runs[1], kept[0])
		}
		if left := keptIn(t, keep); len(left) != 0 {
			t.Errorf("still kept after the send: %+v", left)
		}
	})
}

// TestServerStoppedMidBenchKeepsAJudgedRun: a server that stops while
// the arms are benched fails the night's read of the reference window:
// the night is judged against history.keep instead (B against A tonight
// included) and kept there whole; the row it began on the server is
// left running, and once the server is back the next nightly replaces it
// with the kept run, whole.
func TestServerStoppedMidBenchKeepsAJudgedRun(t *testing.T) {
	srv := pgtest.Own(t)
	keep := filepath.Join(t.TempDir(), "kept.db")
	var kept *history.Detail
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.pointAt(srv.URL, "box-a")
		w.cfg.History.Keep = keep
		w.serve("a", 1000)
		w.serve("b", 1600)
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("night 1: exit %d %v", rep.ExitCode, rep.Errors)
		}
		var once sync.Once
		b := sglangtest.New(sglangtest.Config{TokPerSec: 1600, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.01})
		url, stop := w.net.Serve(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			once.Do(srv.Stop)
			b.ServeHTTP(rw, r)
		}))
		defer stop()
		w.cfg.Bench.URLB = url
		rep := w.run(context.Background(), true)
		kept = checkKept(t, rep, keep, srv.URL, "reading the reference window of ")
	})
	must(t, srv.Start())
	w := newWorld(t)
	w.pointAt(srv.URL, "box-a")
	w.cfg.History.Keep = keep
	if rep := w.runSkipBench(true); rep.ExitCode != ExitOK {
		t.Fatalf("night 3: exit %d %v", rep.ExitCode, rep.Errors)
	}
	runs := keptIn(t, srv.URL)
	if len(runs) != 3 || !sameRun(runs[1], kept) {
		t.Fatalf("shared history after the send: %d runs; the second %+v\nwant the kept run %+v", len(runs), runs[1], kept)
	}
	if left := keptIn(t, keep); len(left) != 0 {
		t.Errorf("still kept after the send: %+v", left)
	}
}

// pgExec runs q on the PostgreSQL history at target.
func pgExec(t *testing.T, target, q string) {
	t.Helper()
	db, err := sql.Open("pgx", target)
	must(t, err)
	defer func() { _ = db.Close() }() // q is committed or failed
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
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

// TestPasswordURLRunsNothing: a history URL with a password, in a
// config built in code (not read by LoadConfig, which refuses it too),
// is a config error before any step: no report, no history, no kept run,
// and the password is nowhere, neither in the error nor in any file.
func TestPasswordURLRunsNothing(t *testing.T) {
	w := newWorld(t)
	w.cfg.History.Path = "postgres://ci:s3cret@127.0.0.1:1/arpatch?connect_timeout=1"
	w.cfg.History.Keep = filepath.Join(w.dir, "kept.db")
	var log strings.Builder
	code, err := Execute(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true, Log: &log, Out: &log,
		Probe: func(context.Context) Environment { return Environment{} }})
	var ce *ConfigError
	if !errors.As(err, &ce) || code != 0 || !strings.Contains(err.Error(), "history.path: postgres://ci:xxxxx@127.0.0.1:1/arpatch?connect_timeout=1 holds a password") ||
		strings.Contains(err.Error()+log.String(), "s3cret") {
		t.Fatalf("Execute = %d, %v; log %q", code, err, log.String())
	}
	must(t, filepath.WalkDir(w.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(p); err != nil || strings.Contains(string(b), "s3cret") || filepath.Ext(p) == ".db" || filepath.Base(p) == "nightly.json" {
			t.Errorf("%s: %v (the night left it, or it holds the password)", p, err)
		}
		return nil
	}))
}

// TestBenchFailureIsNoRegression: a night whose bench cannot reach its
// servers is an infrastructure failure, and its verdict says only that:
// the bench's own failed check is not a regression (on an SQLite history
// and on a PostgreSQL one, where a night kept in history.keep names the
// regressions it was judged to have).
func TestBenchFailureIsNoRegression(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			target := ""
			if store == "postgres" {
				target = pgtest.Schema(t)
			}
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t)
				if target != "" {
					w.pointAt(target, "box-a")
				}
				w.serve("a", 1000)
				w.serve("b", 1600)
				w.servers["a"].stop() // arm A's server is down tonight
				rep := w.run(context.Background(), true)
				if rep.ExitCode != ExitInfra || !strings.HasPrefix(rep.Verdict, "infrastructure failure: bench: ") || strings.Contains(rep.Verdict, "regression") {
					t.Errorf("exit %d, verdict %q; want an infrastructure failure of the bench, no regression", rep.ExitCode, rep.Verdict)
				}
			})
		})
	}
}

// TestSharedKeepIsSentOnce: two nightlies that name one history.keep
// but take different nightly locks (history.path spelt as localhost in
// one config and 127.0.0.1 in another) send its runs one at a time:
// while another process holds the keep's lock nothing is sent and the
// log says why, and two sends at once store each kept run once.
func TestSharedKeepIsSentOnce(t *testing.T) {
	target := pgtest.Schema(t)
	keep := filepath.Join(t.TempDir(), "kept.db")
	local, err := history.Open(keep)
	must(t, err)
	start := time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)
	const n = 12
	for i := range n {
		id, err := local.BeginRun(history.Run{StartedAt: start.Add(time.Duration(i) * 24 * time.Hour), HardwareKey: "box-a", Workload: "w", PID: 4242})
		must(t, err)
		o := history.Outcome{Status: history.Failed, ExitCode: ExitInfra, Arms: []history.ArmRecord{{Name: "patched",
			Trials: []history.TrialRecord{{Index: 1, Values: map[string]float64{"tok_s": 90}, Samples: []history.SampleRecord{{CompletionTokens: 90}}}}}}}
		must(t, local.Record(id, o))
	}
	must(t, local.Close())
	open := func() *history.Store {
		s, err := history.Open(target)
		must(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()

	unlock, err := history.Lock(keep) // another nightly sending it
	must(t, err)
	if msg := sendKept(a, keep); !strings.HasPrefix(msg, "the runs kept in "+keep+" stay there for now: ") || !strings.Contains(msg, "held by pid") {
		t.Errorf("with the keep's lock held: %q", msg)
	}
	if runs, err := a.Runs(0); err != nil || len(runs) != 0 {
		t.Fatalf("sent while the keep's lock was held: %d runs, %v", len(runs), err)
	}
	unlock()

	var wg sync.WaitGroup
	msgs := make([]string, 2)
	for i, s := range []*history.Store{a, b} {
		wg.Add(1)
		goroutine.Go(func() { defer wg.Done(); msgs[i] = sendKept(s, keep) })
	}
	wg.Wait()
	runs, err := a.Runs(0)
	must(t, err)
	seen := map[time.Time]int{}
	for _, r := range runs {
		seen[r.StartedAt]++
	}
	if len(runs) != n || len(seen) != n {
		t.Errorf("after two sends at once the shared history holds %d runs of %d nights, want %d once each (%q)", len(runs), len(seen), n, msgs)
	}
	if left := keptIn(t, keep); len(left) != 0 {
		t.Errorf("%d runs still kept", len(left))
	}
	sent := 0
	for _, m := range msgs {
		if strings.HasPrefix(m, "sent 12 runs kept in "+keep+" to ") && strings.Contains(m, " (now runs [") {
			sent++
		}
	}
	if sent != 1 {
		t.Errorf("the two sends said %q: want one that sent the 12 runs", msgs)
	}
}

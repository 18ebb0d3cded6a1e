package history

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenExisting: the open of history accept refuses what the read
// commands refuse (a missing file, an empty one, a database without
// arpatch's schema), making nothing there, and migrates an older schema,
// saying from which version; on PostgreSQL it refuses a database without
// the schema, creating no table.
func TestOpenExisting(t *testing.T) { eachStore(t, testOpenExisting) }

func testOpenExisting(t *testing.T, target string) {
	if IsURL(target) {
		if s, err := OpenExisting(target); err == nil || !strings.Contains(err.Error(), "has no arpatch schema (no schema_migrations table in schema ") {
			if s != nil {
				_ = s.Close()
			}
			t.Errorf("OpenExisting of an empty schema: %v", err)
		}
	} else {
		dir := filepath.Dir(target)
		zero := filepath.Join(dir, "zero.db")
		must(t, os.WriteFile(zero, nil, 0o644))
		other := filepath.Join(dir, "other.db")
		db, err := sql.Open("sqlite", other)
		must(t, err)
		_, err = db.Exec(`CREATE TABLE notes (x TEXT)`)
		must(t, err)
		must(t, db.Close())
		for p, want := range map[string]string{
			zero:                          "history " + zero + " is an empty file (0 bytes), not a history: a nightly writes one there on its first run; the history commands (accept included) never make one",
			other:                         "history " + other + " is a SQLite database without arpatch's schema",
			filepath.Join(dir, "none.db"): "history stat " + filepath.Join(dir, "none.db") + ": no such file or directory",
		} {
			if s, err := OpenExisting(p); err == nil || !strings.HasPrefix(err.Error(), want) {
				if s != nil {
					_ = s.Close()
				}
				t.Errorf("OpenExisting(%s) = %v, want %q", filepath.Base(p), err, want)
			}
		}
		if fi, err := os.Stat(zero); err != nil || fi.Size() != 0 {
			t.Errorf("the empty file after OpenExisting: %v, %v", fi, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "none.db")); !os.IsNotExist(err) {
			t.Errorf("OpenExisting made none.db: %v", err)
		}
	}
	o, err := OpenAt(target, 3)
	must(t, err)
	finished := func(s *Store) int64 {
		id, err := s.BeginRun(Run{HardwareKey: "h"})
		must(t, err)
		must(t, s.FinishRun(id, Complete, 0, "no regression"))
		return id
	}
	id := finished(o)
	must(t, o.Close())
	s, err := OpenExisting(target)
	must(t, err)
	defer func() { must(t, s.Close()) }()
	if v, err := s.Version(); s.MigratedFrom() != 3 || err != nil || v != SchemaVersion {
		t.Errorf("OpenExisting of schema 3: migrated from %d to %d, %v", s.MigratedFrom(), v, err)
	}
	must(t, s.Accept(id))
	again, err := OpenExisting(target)
	must(t, err)
	if again.MigratedFrom() != 0 {
		t.Errorf("a current history migrated from %d", again.MigratedFrom())
	}
	must(t, again.Close())
}

// TestPlotDefaultsToBenchedRun: a time plot with nothing chosen plots
// the newest run with bench results, not a newer --skip-bench run (of
// another workload, whose series has no point), as --x concurrency does.
func TestPlotDefaultsToBenchedRun(t *testing.T) { eachStore(t, testPlotDefaultsToBenchedRun) }

func testPlotDefaultsToBenchedRun(t *testing.T, target string) {
	s := openTest(t, target)
	seed(t, s, 3, 90)
	drift, err := s.BeginRun(Run{HardwareKey: "8x GPU", Workload: "drift only"})
	must(t, err)
	must(t, s.FinishRun(drift, Complete, 0, "no regression"))
	pts, sel, err := s.Points("tok_s", Series{})
	if err != nil || len(pts["pcie"]) != 3 || sel != (Series{HardwareKey: "8x GPU", Workload: "", Level: 1}) {
		t.Errorf("Points after a --skip-bench run: %d points, %+v, %v", len(pts["pcie"]), sel, err)
	}
	if err := s.Plot("tok_s", filepath.Join(t.TempDir(), "p.svg"), Series{}); err != nil {
		t.Errorf("Plot after a --skip-bench run: %v", err)
	}
}

// TestPlotRemedyNamesOnlyWhatWasAsked: a plot with no point says why,
// and names as flags to leave out only those the user gave: with none
// given, none (the history has no bench results to plot at all).
func TestPlotRemedyNamesOnlyWhatWasAsked(t *testing.T) { eachStore(t, testPlotRemedy) }

func testPlotRemedy(t *testing.T, target string) {
	s := openTest(t, target)
	out := filepath.Join(t.TempDir(), "p.svg")
	why := "runs with --skip-bench have none; runs recorded before tok_s existed have none of it"
	want := "history " + target + " has no run with bench results to plot (" + why + ")"
	if err := s.Plot("tok_s", out, Series{}); err == nil || err.Error() != want {
		t.Errorf("plot of an empty history: %v\nwant %s", err, want)
	}
	seed(t, s, 2, 90)
	want = "history " + target + ` has no run with bench results to plot on hardware "box-z", workload "" at concurrency 4 (` + why + "; leave out --hardware, --concurrency to plot the newest run's)"
	if err := s.Plot("tok_s", out, Series{HardwareKey: "box-z", Level: 4}); err == nil || err.Error() != want {
		t.Errorf("plot of another host: %v\nwant %s", err, want)
	}
}

// TestTimeAxisYears: the time axis' ticks name the year when the runs
// span more than one, the hour when they lie within three days (across
// a new year too), and only the month and day otherwise, the label then
// naming the year.
func TestTimeAxisYears(t *testing.T) {
	at := func(y int, m time.Month, d, h int) float64 {
		return float64(time.Date(y, m, d, h, 0, 0, 0, time.UTC).Unix())
	}
	for _, c := range []struct {
		first, last float64
		want        string
	}{
		{at(2024, 3, 28, 3), at(2026, 2, 19, 3), "2006-01-02"},
		{at(2025, 12, 31, 22), at(2026, 1, 1, 3), "2006-01-02 15:04"},
		{at(2025, 11, 30, 22), at(2026, 1, 1, 3), "2006-01-02"},
		{at(2026, 1, 1, 3), at(2026, 1, 2, 3), "01-02 15:04"},
		{at(2026, 1, 1, 3), at(2026, 11, 2, 3), "01-02"},
	} {
		if got := timeFormat(c.first, c.last); got != c.want {
			t.Errorf("timeFormat(%v, %v) = %q, want %q", time.Unix(int64(c.first), 0).UTC(), time.Unix(int64(c.last), 0).UTC(), got, c.want)
		}
	}
	// And on a plot of runs two years apart, the ticks carry the year.
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	for _, y := range []int{2024, 2025, 2026} {
		id, err := s.BeginRun(Run{HardwareKey: "h", StartedAt: time.Date(y, 3, 1, 3, 0, 0, 0, time.UTC)})
		must(t, err)
		must(t, s.AddArm(id, "pcie", "pcie", "", false, 1, []TrialRecord{{Index: 1, Values: tokOnly(100)}}))
		must(t, s.FinishRun(id, Complete, 0, ""))
	}
	out := filepath.Join(t.TempDir(), "p.svg")
	must(t, s.Plot("tok_s", out, Series{}))
	b, err := os.ReadFile(out)
	must(t, err)
	if !strings.Contains(string(b), ">2025-") || !strings.Contains(string(b), ">run start (UTC)<") {
		t.Errorf("no tick names a year on a plot of 2024 to 2026")
	}
	if got := timeLabel(timeFormat(at(2024, 3, 1, 3), at(2024, 9, 1, 3)), at(2024, 3, 1, 3)); got != "run start (UTC, 2024)" {
		t.Errorf("label of a plot within 2024: %q", got)
	}
}

// TestOpenRefusesAnotherProgramsDatabase: Open (a nightly's write) makes
// no history inside an SQLite file that holds another program's tables,
// and leaves the file as it was; an empty SQLite database (no tables)
// becomes a history.
func TestOpenRefusesAnotherProgramsDatabase(t *testing.T) {
	p := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite", p)
	if err == nil {
		_, err = db.Exec(`CREATE TABLE foo (x INTEGER)`)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Open(p); err == nil || !strings.Contains(err.Error(), "history "+p+": creating the schema version table: not a history: it holds table foo and no arpatch schema") {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("Open of another program's database: %v", err)
	}
	db, err = sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the database holds %d tables after the refusal (want foo alone): %v", n, err)
	}
	empty := filepath.Join(t.TempDir(), "empty.db")
	if db, err := sql.Open("sqlite", empty); err == nil {
		_, _ = db.Exec(`PRAGMA user_version = 0`)
		_ = db.Close()
	}
	s, err := Open(empty)
	if err != nil {
		t.Fatalf("Open of an SQLite database without tables: %v", err)
	}
	_ = s.Close()
}

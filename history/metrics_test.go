package history

import (
	"bytes"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"github.com/arpatch/arpatch/harness/sglang"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/stats"
)

// TestEveryMetricHasItsColumn checks that each metric of stats.Table has
// its REAL column in the trials table of a new database, added by a
// migration, so that a new metric cannot ship without one.
func TestEveryMetricHasItsColumn(t *testing.T) { eachStore(t, testEveryMetricHasItsColumn) }

func testEveryMetricHasItsColumn(t *testing.T, target string) {
	s := openTest(t, target)
	cols := columnTypes(t, s, "trials")
	real, steps := "REAL", migrations
	if s.pg {
		real, steps = "double precision", pgMigrations
	}
	for _, m := range stats.Table {
		if cols[m.Column] != real {
			t.Errorf("metric %s: trials column %q is %q, want %s (add a migration)", m.Name, m.Column, cols[m.Column], real)
		}
		added := regexp.MustCompile(`(?i)\b` + regexp.QuoteMeta(m.Column) + ` ` + real + `\b`)
		if !slices.ContainsFunc(steps, added.MatchString) {
			t.Errorf("metric %s: no migration adds column %s", m.Name, m.Column)
		}
	}
}

// columnTypes are the columns of table in s, name to declared type
// (SQLite's pragma_table_info; PostgreSQL's information_schema, in the
// schema on the search path).
func columnTypes(t *testing.T, s *Store, table string) map[string]string {
	t.Helper()
	q := `SELECT name, type FROM pragma_table_info(?)`
	if s.pg {
		q = `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position`
	}
	cols := map[string]string{}
	err := s.each("reading the columns of "+table, q, []any{table}, func(r *sql.Rows) error {
		var name, typ string
		err := r.Scan(&name, &typ)
		cols[name] = typ
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

// TestMetricsRoundTrip stores a trial with every metric of stats.Table
// (each a different value) and reads each back where it is read: Show,
// Window, the CSV and JSON exports, and plot points.
func TestMetricsRoundTrip(t *testing.T) { eachStore(t, testMetricsRoundTrip) }

func testMetricsRoundTrip(t *testing.T, target string) {
	s := openTest(t, target)
	vals := map[string]float64{}
	for i, m := range stats.Table {
		vals[m.Name] = 10.25 + float64(i)
	}
	id, err := s.BeginRun(Run{HardwareKey: "hw", StartedAt: time.Date(2026, 11, 2, 3, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddArm(id, "pcie", "pcie", "", false, 1, []TrialRecord{{Index: 1, Concurrency: 4, Wall: 2.5, Values: vals}}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(id, Complete, 0, ""); err != nil {
		t.Fatal(err)
	}
	d, err := s.Show(id)
	if err != nil || !reflect.DeepEqual(d.Arms[0].Trials[0].Values, vals) {
		t.Fatalf("show: %+v %v", d, err)
	}
	for _, m := range stats.Table {
		got, runs, err := s.Window("hw", "", "pcie", m.Name, 4, 7, 0)
		if err != nil || !reflect.DeepEqual(got, []float64{vals[m.Name]}) || !reflect.DeepEqual(runs, []int64{id}) {
			t.Errorf("window %s: %v %v %v", m.Name, got, runs, err)
		}
		pts, _, err := s.Points(m.Name, Series{})
		if err != nil || len(pts["pcie"]) != 1 || pts["pcie"][0].Center != vals[m.Name] {
			t.Errorf("points %s: %+v %v", m.Name, pts, err)
		}
	}
	rows, err := s.Export()
	if err != nil || len(rows) != 1 {
		t.Fatalf("export: %v %v", rows, err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, rows); err != nil {
		t.Fatal(err)
	}
	// The metric columns come from stats.Table, each holding its value
	// (10.25 + its index, as stored above).
	cells := make([]string, len(stats.Table))
	for i := range stats.Table {
		cells[i] = strconv.FormatFloat(10.25+float64(i), 'g', -1, 64)
	}
	want := "run_id,started_at,status,hardware_key,workload,sglang_commit,arm,invalid,trial,concurrency,wall_s," +
		strings.Join(stats.Names(), ",") + ",errors,samples\n" +
		"1,2026-11-02T03:00:00Z,complete,hw,,,pcie,false,1,4,2.5," + strings.Join(cells, ",") + ",0,0\n"
	if cells[0] != "10.25" || cells[len(cells)-1] == "10.25" || b.String() != want {
		t.Errorf("csv:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteJSON(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"wall_s": 2.5,`) || !strings.Contains(b.String(), `"tpot_ms": 16.25,`) || !strings.Contains(b.String(), `"tpot_ms_p99": 17.25`) {
		t.Errorf("json:\n%s", b.String())
	}
	var back []ExportRow
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || !reflect.DeepEqual(back[0].Values, vals) || back[0].Arm != "pcie" || back[0].Concurrency != 4 {
		t.Errorf("json back: %+v %v", back, err)
	}
	if _, _, err := s.Window("hw", "", "pcie", "speed", 4, 7, 0); err == nil || !strings.Contains(err.Error(), `unknown metric "speed"; known: tok_s, decode_tok_s,`) {
		t.Errorf("unknown metric: %v", err)
	}
}

// TestMigrationFromV4 opens a history written by arpatch before TPOT p99
// (schema version 4, its rows inserted with that arpatch's statement, a
// trial without samples), and checks that it migrates, that the old trial
// reads back with every metric it had and none for TPOT p99 (null in
// JSON, empty in CSV),
// and that the old runs stay out of TPOT p99's windows and plots but
// keep counting for tok/s.
func TestMigrationFromV4(t *testing.T) { eachStore(t, testMigrationFromV4) }

func testMigrationFromV4(t *testing.T, p string) {
	old, err := OpenAt(p, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO runs (started_at, status, pid, hardware_key, workload, exit_code, finished_at) VALUES ('2026-11-01T03:00:00Z', 'complete', 1, 'hw', 'w', 0, '2026-11-01T04:00:00Z')`,
		`INSERT INTO arms (run_id, name, recipe, build_key, invalid, agreement) VALUES (1, 'pcie', 'pcie', 'k', 0, 1)`,
		// arpatch's AddArm before version 5:
		`INSERT INTO trials (arm_id, idx, concurrency, wall_s, tok_s, decode_tok_s, accept_length, ttft_ms_p50, ttft_ms_p99, itl_ms_p50, tpot_ms, errors)
			VALUES (1, 1, 1, 3.5, 90.5, 100.5, 2.5, 20.5, 30.5, 1.5, 11.5, 0)`,
	} {
		if _, err := old.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.db.Exec(`UPDATE trials SET tpot_ms_p99 = 1`); err == nil {
		t.Fatal("version 4 already has tpot_ms_p99")
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, p)
	if v, _ := s.Version(); v != SchemaVersion {
		t.Fatalf("migrated to %d", v)
	}
	d, err := s.Show(1)
	want := map[string]float64{"tok_s": 90.5, "decode_tok_s": 100.5, "accept_length": 2.5, "ttft_ms_p50": 20.5, "ttft_ms_p99": 30.5, "itl_ms_p50": 1.5, "tpot_ms": 11.5}
	if err != nil || !reflect.DeepEqual(d.Arms[0].Trials[0].Values, want) {
		t.Fatalf("old trial: %+v %v", d, err)
	}
	// Only the old run: no TPOT p99 to plot, and the errors say why.
	if err := s.Plot("tpot_ms_p99", filepath.Join(t.TempDir(), "x.svg"), Series{}); err == nil || !strings.Contains(err.Error(), "runs recorded before tpot_ms_p99 existed have none of it") {
		t.Errorf("plot without values: %v", err)
	}
	if _, _, err := s.LevelCurves("tpot_ms_p99", Series{}, 0); err == nil || !strings.Contains(err.Error(), "has no run with tpot_ms_p99 to plot: arpatch versions from before that metric recorded its runs") {
		t.Errorf("curves without values: %v", err)
	}
	if pts, _, err := s.Points("tok_s", Series{}); err != nil || len(pts["pcie"]) != 1 || pts["pcie"][0].Center != 90.5 {
		t.Errorf("tok_s of the old run: %+v %v", pts, err)
	}
	// Tonight's run, by this arpatch, with TPOT p99.
	id, _ := s.BeginRun(Run{HardwareKey: "hw", Workload: "w", StartedAt: time.Date(2026, 11, 2, 3, 0, 0, 0, time.UTC)})
	now := map[string]float64{"tok_s": 91, "tpot_ms": 11, "tpot_ms_p99": 14.5}
	if err := s.AddArm(id, "pcie", "pcie", "k", false, 1, []TrialRecord{{Index: 1, Concurrency: 1, Values: now}}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(id, Complete, 0, ""); err != nil {
		t.Fatal(err)
	}
	if vals, runs, err := s.Window("hw", "w", "pcie", "tpot_ms_p99", 1, 7, 0); err != nil || !reflect.DeepEqual(vals, []float64{14.5}) || !reflect.DeepEqual(runs, []int64{id}) {
		t.Errorf("tpot_ms_p99 window: %v %v %v", vals, runs, err)
	}
	if vals, runs, err := s.Window("hw", "w", "pcie", "tpot_ms_p99", 1, 7, id); err != nil || len(vals) != 0 || len(runs) != 0 {
		t.Errorf("tpot_ms_p99 window before tonight: %v %v %v", vals, runs, err)
	}
	if vals, _, err := s.Window("hw", "w", "pcie", "tok_s", 1, 7, 0); err != nil || !reflect.DeepEqual(vals, []float64{91, 90.5}) {
		t.Errorf("tok_s window: %v %v", vals, err)
	}
	if pts, _, err := s.Points("tpot_ms_p99", Series{}); err != nil || len(pts["pcie"]) != 1 || pts["pcie"][0].RunID != id || pts["pcie"][0].Center != 14.5 {
		t.Errorf("tpot_ms_p99 points: %+v %v", pts, err)
	}
	if pts, _, err := s.Points("tok_s", Series{}); err != nil || len(pts["pcie"]) != 2 {
		t.Errorf("tok_s points: %+v %v", pts, err)
	}
	curves, run, err := s.LevelCurves("tpot_ms_p99", Series{}, 0)
	if err != nil || run != id || len(curves) != 1 || len(curves[0].Points) != 1 || curves[0].Points[0].Center != 14.5 {
		t.Errorf("tpot_ms_p99 against concurrency: %+v run %d %v", curves, run, err)
	}
	if _, _, err := s.LevelCurves("tpot_ms_p99", Series{}, 1); err == nil || !strings.Contains(err.Error(), "run 1 has no tpot_ms_p99: an arpatch from before that metric recorded it") {
		t.Errorf("tpot_ms_p99 of the old run: %v", err)
	}
	svg := filepath.Join(t.TempDir(), "tpot.svg")
	if err := s.Plot("tpot_ms_p99", svg, Series{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), ">tpot_ms_p99 (ms)</text>") || !strings.Contains(string(b), "tpot_ms_p99 per run on hw") {
		t.Errorf("plot of tpot_ms_p99 lacks its title or axis (%v)", err)
	}
	rows, err := s.Export()
	if err != nil || len(rows) != 2 {
		t.Fatalf("export: %v %v", rows, err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, rows); err != nil {
		t.Fatal(err)
	}
	// By column name: a metric added after these (NULL in both rows) is
	// an empty cell and needs no edit here.
	recs := csvByColumn(t, b.String())
	for i, want := range []map[string]string{
		{"wall_s": "3.5", "tok_s": "90.5", "decode_tok_s": "100.5", "accept_length": "2.5", "ttft_ms_p50": "20.5", "ttft_ms_p99": "30.5", "itl_ms_p50": "1.5", "tpot_ms": "11.5", "tpot_ms_p99": "", "errors": "0", "samples": "0"},
		{"wall_s": "0", "tok_s": "91", "tpot_ms": "11", "tpot_ms_p99": "14.5", "errors": "0", "samples": "0"},
	} {
		for _, m := range stats.Names() {
			if _, ok := want[m]; !ok {
				want[m] = "" // not recorded for this trial
			}
		}
		for col, v := range want {
			if got, ok := recs[i][col]; !ok || got != v {
				t.Errorf("csv row %d, %s = %q, want %q:\n%s", i+1, col, got, v, b.String())
			}
		}
	}
	b.Reset()
	if err := WriteJSON(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"tpot_ms": 11.5,
    "tpot_ms_p99": null`) || !strings.Contains(b.String(), `"tpot_ms_p99": 14.5`) {
		t.Errorf("json:\n%s", b.String())
	}
}

// openTest opens the history at p, closed (and checked) when the test
// ends.
func openTest(t *testing.T, p string) *Store {
	t.Helper()
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestMigrationFillsTPOTp99 checks that migration 5 computes TPOT p99 for
// the trials stored before it from their samples, by bench_serving's
// rule, and leaves a trial without samples without one.
func TestMigrationFillsTPOTp99(t *testing.T) { eachStore(t, testMigrationFillsTPOTp99) }

func testMigrationFillsTPOTp99(t *testing.T, p string) {
	old, err := OpenAt(p, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO runs (started_at, status, pid, hardware_key) VALUES ('2026-11-01T03:00:00Z', 'complete', 1, 'hw')`,
		`INSERT INTO arms (run_id, name) VALUES (1, 'pcie')`,
		`INSERT INTO trials (arm_id, idx, concurrency, tok_s, tpot_ms) VALUES (1, 1, 1, 90, 15)`,
		`INSERT INTO trials (arm_id, idx, concurrency, tok_s, tpot_ms) VALUES (1, 2, 1, 91, 16)`,
		// Trial 1's requests, as nightly stored them: TPOT 10, 20, 40 ms
		// and 0 ms (every token in the first chunk); a one-token request
		// and a failed one have none.
		`INSERT INTO samples (trial_id, prompt, ttft_s, e2e_s, completion_tokens, spec_verify_ct, error) VALUES
			(1, 0, 0.5, 0.6, 11, 4, ''),
			(1, 1, 0.25, 0.35, 6, 2, ''),
			(1, 2, 0.125, 0.285, 5, 2, ''),
			(1, 3, 0.05, 0.05, 8, 3, ''),
			(1, 4, 0.05, 0.5, 1, 1, ''),
			(1, 5, 0, 0, 9, 0, 'HTTP 500: boom')`,
	} {
		if _, err := old.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, p)
	d, err := s.Show(1)
	if err != nil || len(d.Arms) != 1 || len(d.Arms[0].Trials) != 2 {
		t.Fatalf("show: %+v %v", d, err)
	}
	// np.percentile([0, 10, 20, 40], 99): k = 2.97, 20 + 0.97 x 20 = 39.4.
	one, two := d.Arms[0].Trials[0].Values, d.Arms[0].Trials[1].Values
	if got, ok := one["tpot_ms_p99"]; !ok || math.Abs(got-39.4) > 1e-9 || one["tpot_ms"] != 15 {
		t.Errorf("trial 1: %v", one)
	}
	if _, ok := two["tpot_ms_p99"]; ok || two["tok_s"] != 91 {
		t.Errorf("trial 2 has no samples, so no TPOT p99: %v", two)
	}
	// Migration 7 counted the samples stored before it.
	if n1, n2 := d.Arms[0].Trials[0].Samples, d.Arms[0].Trials[1].Samples; n1 != 6 || n2 != 0 {
		t.Errorf("samples after migration 7: trial 1 %d (want 6), trial 2 %d (want 0)", n1, n2)
	}
}

// TestSampleCountsHeld: every trial's n_samples is the count of its
// stored samples, for trials stored by Record (0, 1, and more than the
// 500 of one INSERT) and for a run Send moved into another history, on
// both stores.
func TestSampleCountsHeld(t *testing.T) { eachStore(t, testSampleCountsHeld) }

func testSampleCountsHeld(t *testing.T, p string) {
	from, to := openTest(t, filepath.Join(t.TempDir(), "kept.db")), openTest(t, p)
	var trials []TrialRecord
	for k, n := range []int{0, 1, 8, 1201} {
		tr := TrialRecord{Index: k + 1, Values: map[string]float64{"tok_s": 90}}
		for i := range n {
			tr.Samples = append(tr.Samples, SampleRecord{Prompt: i, TTFT: 0.02, E2E: 1, CompletionTokens: 90, SpecVerifyCt: 30})
		}
		trials = append(trials, tr)
	}
	for _, s := range []*Store{from, to} {
		id, err := s.BeginRun(Run{HardwareKey: "hw", Workload: "w", PID: 7})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Record(id, Outcome{Arms: []ArmRecord{{Name: "pcie", Trials: trials}}, Status: Complete}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Send(from, to); err != nil {
		t.Fatal(err)
	}
	var mismatched, rows int
	err := to.db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(CASE WHEN n_samples <> (SELECT COUNT(*) FROM samples WHERE samples.trial_id = trials.id) THEN 1 ELSE 0 END), 0) FROM trials`).Scan(&rows, &mismatched)
	if err != nil || rows != 8 || mismatched != 0 {
		t.Fatalf("%d trials, %d whose n_samples is not their count of samples (%v)", rows, mismatched, err)
	}
	runs, err := to.Runs(0)
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	for _, r := range runs {
		d, err := to.Show(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, tr := range d.Arms[0].Trials {
			got = append(got, tr.Samples)
		}
		if !slices.Equal(got, []int{0, 1, 8, 1201}) {
			t.Errorf("run %d: samples %v, want [0 1 8 1201]", r.ID, got)
		}
	}
}

// TestFromSamples: the metrics fillFromSamples computes are exactly those
// stats.Compute gets right from the fields the samples table keeps: a
// trial computed from full requests (each token's arrival, text, the
// trial's wall time) and from the stored fields alone agree on them, and
// differ on every other metric.
func TestFromSamples(t *testing.T) {
	full := []sglang.Sample{
		{Prompt: 0, TTFT: 0.5, E2E: 0.6, CompletionTokens: 11, SpecVerifyCt: 4, Text: "a", ITL: []float64{0.01, 0.01, 0.02}},
		{Prompt: 1, TTFT: 0.25, E2E: 0.35, CompletionTokens: 6, SpecVerifyCt: 2, Text: "b", ITL: []float64{0.02, 0.03}},
		{Prompt: 2, TTFT: 0.125, E2E: 0.285, CompletionTokens: 5, SpecVerifyCt: 2, Text: "c", ITL: []float64{0.04}},
	}
	var stored []sglang.Sample
	for _, x := range full {
		stored = append(stored, sglang.Sample{Prompt: x.Prompt, TTFT: x.TTFT, E2E: x.E2E, CompletionTokens: x.CompletionTokens, SpecVerifyCt: x.SpecVerifyCt, Err: x.Err})
	}
	a, b := stats.Compute(stats.Trial{Samples: full, Wall: 2}), stats.Compute(stats.Trial{Samples: stored})
	for _, m := range stats.Table {
		if same := m.Get(a) == m.Get(b) && m.Get(a) != 0; same != fromSamples[m.Name] {
			t.Errorf("%s: from the stored fields %v, from full requests %v; fromSamples says %v", m.Name, m.Get(b), m.Get(a), fromSamples[m.Name])
		}
	}
}

// A migration that adds a metric the samples cannot give (ITL here)
// leaves the trials stored before it NULL, not 0.
func TestFillLeavesWhatSamplesCannotGive(t *testing.T) {
	eachStore(t, testFillLeavesWhatSamplesCannotGive)
}

func testFillLeavesWhatSamplesCannotGive(t *testing.T, target string) {
	s := openTest(t, target)
	for _, q := range []string{
		`INSERT INTO runs (started_at, status, pid, hardware_key) VALUES ('2026-11-01T03:00:00Z', 'complete', 1, 'hw')`,
		`INSERT INTO arms (run_id, name) VALUES (1, 'pcie')`,
		`INSERT INTO trials (arm_id, idx, concurrency, tok_s) VALUES (1, 1, 1, 90)`,
		`INSERT INTO samples (trial_id, prompt, ttft_s, e2e_s, completion_tokens, spec_verify_ct, error) VALUES (1, 0, 0.5, 0.6, 11, 4, '')`,
	} {
		if _, err := s.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	err := s.inTx("filling", func(tx runner) error {
		for _, m := range []string{"itl_ms_p50", "ttft_ms_p50"} {
			if err := fillFromSamples(tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var itl, ttft sql.NullFloat64
	if err := s.db.QueryRow(`SELECT itl_ms_p50, ttft_ms_p50 FROM trials WHERE id = 1`).Scan(&itl, &ttft); err != nil {
		t.Fatal(err)
	}
	if itl.Valid || !ttft.Valid || ttft.Float64 != 500 {
		t.Errorf("after the fill: itl_ms_p50 %+v (want NULL), ttft_ms_p50 %+v (want 500)", itl, ttft)
	}
}

// csvByColumn reads WriteCSV's output: one map per row, from the header's
// names to the row's cells.
func csvByColumn(t *testing.T, text string) []map[string]string {
	t.Helper()
	all, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil || len(all) == 0 {
		t.Fatalf("csv: %v\n%s", err, text)
	}
	var out []map[string]string
	for _, r := range all[1:] {
		m := map[string]string{}
		for i, h := range all[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	return out
}

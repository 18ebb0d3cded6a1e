package history

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fullReads are the queries that read every row of what they scan by
// design, or a bounded part of it (each with its reason: a LIMIT alone
// is no excuse, a SCAN under it may still read every row), and why; every
// other query must reach its rows through an index (or the primary key).
var fullReads = map[string]string{
	"SELECT id, started_at, finished_at, status, pid, exit_code, hardware_key, sglang_commit, upstream_head, series_hash, arpatch_version, verdict, workload, accepted FROM runs ORDER BY id DESC LIMIT 30":     "Runs(30): runs' rowid b-tree read from its end, stopping after 30 rows (no temp b-tree: the order is the key's)",
	"SELECT t.arm_id, " + trialColumns + " FROM trials t ORDER BY t.arm_id, t.idx, t.concurrency":                                                                                                               "Export: every trial",
	"SELECT id, run_id, name, invalid FROM arms ORDER BY run_id, id":                                                                                                                                            "Export: every arm",
	"SELECT id, started_at, status, hardware_key, workload, sglang_commit FROM runs ORDER BY id":                                                                                                                "Export: every run",
	"SELECT id, started_at, finished_at, status, pid, exit_code, hardware_key, sglang_commit, upstream_head, series_hash, arpatch_version, verdict, workload, accepted FROM runs WHERE status <> ? ORDER BY id": "Send: every finished run of the kept history, which holds only the runs not sent yet",
}

// TestQueryPlansUseIndexes runs every command of the store on a small
// history, records each query it runs (traceSQL), and asks SQLite for
// each one's plan (EXPLAIN QUERY PLAN, with the query's own arguments):
// no query may scan a whole table, so that each command stays linear in
// the rows it touches, except the full reads above and queries bounded by
// a LIMIT.
func TestQueryPlansUseIndexes(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	kept := openTest(t, filepath.Join(t.TempDir(), "kept.db")) // migrated before the trace
	type call struct {
		q    string
		args []any
	}
	var calls []call
	traceSQL = func(q string, args []any) { calls = append(calls, call{q, slices.Clone(args)}) }
	defer func() { traceSQL = nil }()

	ids := seed(t, s, 3, 90)
	must(t, s.AddCheck(ids[2], Check{Name: "pcie tok_s vs history", Kind: KindRegression, Status: CheckFail}))
	run, err := s.BeginRun(Run{HardwareKey: "8x GPU", Env: map[string]string{"driver": "580"}})
	must(t, err)
	must(t, s.Record(run, benchOutcome(int(run))))
	stale, err := s.BeginRun(Run{HardwareKey: "8x GPU"})
	must(t, err)
	_, err = s.MarkStale()
	must(t, err)
	must(t, s.Accept(ids[1]))
	_, _, err = s.Window("8x GPU", "", "pcie", "tok_s", 1, 7, run)
	must(t, err)
	_, err = s.Env(ids[0])
	must(t, err)
	_, err = s.Show(run)
	must(t, err)
	_, err = s.Runs(30)
	must(t, err)
	_, err = s.Export()
	must(t, err)
	_, _, err = s.Points("tok_s", Series{})
	must(t, err)
	_, _, err = s.Points("tok_s", Series{HardwareKey: "8x GPU"})
	must(t, err)
	_, _, err = s.LevelCurves("tok_s", Series{}, 0)
	must(t, err)
	_, _, err = s.LevelCurves("tok_s", Series{HardwareKey: "8x GPU", Workload: ""}, stale)
	if err == nil {
		t.Error("LevelCurves of a run without trials: no error")
	}
	must(t, s.FinishRun(stale, Failed, 4, "x"))
	// A kept run sent here twice: stored, then replaced (history.Send).
	k, err := kept.BeginRun(Run{HardwareKey: "8x GPU", Env: map[string]string{"driver": "580"}})
	must(t, err)
	must(t, kept.Record(k, benchOutcome(3)))
	r, err := kept.Show(k)
	must(t, err)
	_, err = Send(kept, s)
	must(t, err)
	_, err = s.importRun(r.Run, benchOutcome(3))
	must(t, err)
	traceSQL = nil

	seen := map[string]bool{}
	for _, c := range calls {
		q := strings.Join(strings.Fields(c.q), " ")
		verb := strings.ToUpper(strings.Fields(q)[0])
		if seen[q] || verb == "INSERT" && !strings.Contains(q, "SELECT") || verb == "CREATE" {
			continue
		}
		seen[q] = true
		var scans []string
		err := s.each("explaining", "EXPLAIN QUERY PLAN "+c.q, c.args, func(r *sql.Rows) error {
			var id, parent, unused int
			var detail string
			if err := r.Scan(&id, &parent, &unused, &detail); err != nil {
				return err
			}
			t.Logf("%.60s...: %s", q, detail)
			if strings.HasPrefix(detail, "SCAN ") && detail != "SCAN CONSTANT ROW" { // a SELECT of values only
				scans = append(scans, detail)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if len(scans) > 0 && fullReads[q] == "" {
			t.Errorf("%s\nscans a whole table: %s", q, strings.Join(scans, "; "))
		}
	}
	for q := range fullReads {
		if !seen[q] {
			t.Errorf("full read never run (rename it in fullReads): %s", q)
		}
	}
	if len(seen) < 20 {
		t.Errorf("only %d distinct queries traced", len(seen))
	}
}

package history

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExportStreamsAsReference: ExportCSV and ExportJSON write what the
// straightforward export writes (Export's rows through WriteCSV and
// WriteJSON), byte for byte, on an empty history and on one with the
// fields the encoders treat apart: strings CSV must quote (a comma, a
// quote, a newline, a leading space, `\.`) or JSON escapes (<, &, non-
// ASCII), metrics stored as NULL, floats JSON writes in exponent form,
// an arm without trials, and runs whose arms outnumber and interleave.
func TestExportStreamsAsReference(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	compare := func(name string) {
		t.Helper()
		rows, err := s.Export()
		must(t, err)
		var want, got bytes.Buffer
		must(t, WriteCSV(&want, rows))
		must(t, s.ExportCSV(&got))
		if got.String() != want.String() {
			t.Errorf("%s: csv:\n%s\nwant\n%s", name, got.String(), want.String())
		}
		want.Reset()
		got.Reset()
		must(t, WriteJSON(&want, rows))
		must(t, s.ExportJSON(&got))
		if got.String() != want.String() {
			t.Errorf("%s: json:\n%s\nwant\n%s", name, got.String(), want.String())
		}
		if len(rows) > 0 && got.Len() < 100 {
			t.Errorf("%s: %d rows exported as %q", name, len(rows), got.String())
		}
	}
	compare("empty history")
	odd := []string{"a,b", `say "hi"`, "two\nlines", " leading space", `\.`, "<b>&amp;</b>", "Blackwell – 8×", ""}
	start := time.Date(2026, 11, 2, 3, 0, 0, 0, time.FixedZone("CET", 3600))
	for i, w := range odd {
		id, err := s.BeginRun(Run{StartedAt: start.Add(time.Duration(i) * time.Hour), HardwareKey: odd[(i+1)%len(odd)], Workload: w, SGLangCommit: odd[(i+2)%len(odd)], Env: benchEnv})
		must(t, err)
		o := benchOutcome(i)
		o.Arms[0].Name = odd[(i+3)%len(odd)]
		o.Arms[1].Trials[0].Values["tok_s"] = 1.5e-9
		o.Arms[1].Trials[1].Values["tok_s"] = 3e22
		o.Arms[1].Trials[2].Values["tok_s"] = -0.1
		o.Arms[1].Trials[3].Wall = 1e-7
		if i == 2 {
			o.Arms = append(o.Arms, ArmRecord{Name: "no trials", Recipe: "x"})
		}
		must(t, s.Record(id, o))
	}
	if _, err := s.db.Exec(`UPDATE trials SET tpot_ms = NULL WHERE idx = 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE trials SET decode_tok_s = NULL, tpot_ms_p99 = NULL WHERE idx = 4`); err != nil {
		t.Fatal(err)
	}
	_, err := s.BeginRun(Run{HardwareKey: "still running"}) // no arms yet
	must(t, err)
	compare("odd fields")

	// Run 2's nightly is gone while it looks running: exported as
	// history list shows it; run 3's is this process, still running.
	if _, err := s.db.Exec(`UPDATE runs SET status = ?, pid = ? WHERE id = 2`, Running, 999999999); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE runs SET status = ? WHERE id = 3`, Running); err != nil {
		t.Fatal(err)
	}
	compare("a dead run")
	var b bytes.Buffer
	must(t, s.ExportCSV(&b))
	for id, want := range map[string]string{"2": "killed?", "3": "running", "1": "complete"} {
		if !strings.Contains(b.String(), "\n"+id+",2026-11-02T0"+string(rune('3'+id[0]-'1'))+":00:00+01:00,"+want+",") {
			t.Errorf("run %s not exported as %s:\n%s", id, want, b.String())
		}
	}
}

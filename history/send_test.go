package history

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestSendKeptRuns: the runs a nightly kept locally while the shared
// history was unreachable go to it whole (every field Show and Export
// read, samples included), oldest first, each once: a run sent before a
// crash that kept it locally is not sent again; a run still running stays.
func TestSendKeptRuns(t *testing.T) { eachStore(t, testSendKeptRuns) }

func testSendKeptRuns(t *testing.T, target string) {
	kept := openTest(t, filepath.Join(t.TempDir(), "kept.db"))
	shared := openTest(t, target)
	seed(t, shared, 2, 90) // the fleet's runs before
	start := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var want []*Detail
	for i := 1; i <= 2; i++ {
		id, err := kept.BeginRun(Run{StartedAt: start.Add(time.Duration(i) * time.Hour), HardwareKey: "host-b", Workload: "w", PID: 77, SGLangCommit: "c0ffee", Env: benchEnv})
		must(t, err)
		o := benchOutcome(i * 50) // a regression: exit 1, failed status checks
		o.Status = Failed
		must(t, kept.Record(id, o))
		d, err := kept.Show(id)
		must(t, err)
		want = append(want, d)
	}
	running, err := kept.BeginRun(Run{HardwareKey: "host-b"})
	must(t, err)
	wantRows, err := kept.Export()
	must(t, err)

	sent, err := Send(kept, shared)
	if err != nil || len(sent) != 2 || sent[0] >= sent[1] {
		t.Fatalf("Send = %v, %v", sent, err)
	}
	for i, id := range sent {
		got, err := shared.Show(id)
		must(t, err)
		got.Run.ID, want[i].Run.ID = 0, 0
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("run %d in the shared history:\n%+v\nwant\n%+v", id, got, want[i])
		}
	}
	rows, err := shared.Export()
	must(t, err)
	rows = rows[len(rows)-len(wantRows):]
	for i := range rows {
		rows[i].RunID, wantRows[i].RunID = 0, 0
	}
	if !reflect.DeepEqual(rows, wantRows) {
		t.Errorf("exported trials differ after the send")
	}
	left, err := kept.Runs(0)
	if err != nil || len(left) != 1 || left[0].ID != running {
		t.Errorf("left in the kept history: %+v, %v; want only the running run %d", left, err, running)
	}
	var samples int
	must(t, kept.x().row(`SELECT COUNT(*) FROM samples`).Scan(&samples))
	if samples != 0 {
		t.Errorf("%d samples left in the kept history", samples)
	}

	// A crash after the shared history took a run but before the kept one
	// lost it: the next send does not store it twice.
	id, err := kept.importRun(want[0].Run, benchOutcome(50))
	must(t, err)
	again, err := Send(kept, shared)
	if err != nil || !reflect.DeepEqual(again, sent[:1]) {
		t.Errorf("sending a run already sent: %v, %v; want %v", again, err, sent[:1])
	}
	if _, err := kept.Show(id); err == nil {
		t.Error("the run already sent is still kept")
	}
	all, err := shared.Runs(0)
	if err != nil || len(all) != 4 {
		t.Errorf("%d runs in the shared history, want 4 (%v)", len(all), err)
	}
}

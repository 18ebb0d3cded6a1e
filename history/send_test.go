package history

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
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

// TestSendReplacesTheRowItBegan: a night that began in the shared
// history (BeginRun there) and was kept locally when the server failed
// it partway is the same run in both; the shared row, ended "failed"
// with nothing in it, is replaced by the kept run, whole, under its own
// id, and no second row appears.
func TestSendReplacesTheRowItBegan(t *testing.T) { eachStore(t, testSendReplacesTheRowItBegan) }

func testSendReplacesTheRowItBegan(t *testing.T, target string) {
	kept := openTest(t, filepath.Join(t.TempDir(), "kept.db"))
	shared := openTest(t, target)
	seed(t, shared, 2, 90)
	row := Run{StartedAt: time.Date(2026, 12, 1, 3, 0, 0, 123456789, time.UTC), PID: 4242, HardwareKey: "host-b", Workload: "w", SGLangCommit: "c0ffee", Env: benchEnv}
	began, err := shared.BeginRun(row)
	must(t, err)
	must(t, shared.FinishRun(began, Failed, 4, "infrastructure failure: recording run: disk full"))
	id, err := kept.BeginRun(row)
	must(t, err)
	o := benchOutcome(7)
	o.Status, o.ExitCode, o.Verdict = Failed, 4, "infrastructure failure: history ...: disk full; and regression: pcie tok_s vs history"
	must(t, kept.Record(id, o))
	want, err := kept.Show(id)
	must(t, err)

	sent, err := Send(kept, shared)
	if err != nil || len(sent) != 1 || sent[0] != began {
		t.Fatalf("Send = %v, %v; want [%d], the row the night began", sent, err, began)
	}
	got, err := shared.Show(began)
	must(t, err)
	got.Run.ID, want.Run.ID = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("run %d in the shared history:\n%+v\nwant the kept run\n%+v", began, got, want)
	}
	if runs, err := shared.Runs(0); err != nil || len(runs) != 3 {
		t.Errorf("%d runs in the shared history, want 3: %v", len(runs), err)
	}
	if left, err := kept.Runs(0); err != nil || len(left) != 0 {
		t.Errorf("left in the kept history: %+v, %v", left, err)
	}
}

// TestSendKeepsWhatTheServerDropped: a kept run the shared history does
// not hold whole after the send (here a trigger drops every sample
// inserted, without an error) stays in the kept history, and the error
// says what is missing; once the server takes it whole, it goes.
func TestSendKeepsWhatTheServerDropped(t *testing.T) { eachStore(t, testSendKeepsWhatTheServerDropped) }

func testSendKeepsWhatTheServerDropped(t *testing.T, target string) {
	kept := openTest(t, filepath.Join(t.TempDir(), "kept.db"))
	shared := openTest(t, target)
	id, err := kept.BeginRun(Run{HardwareKey: "host-b", Workload: "w", Env: benchEnv})
	must(t, err)
	must(t, kept.Record(id, benchOutcome(3)))
	q, undo := `CREATE TRIGGER drop_samples BEFORE INSERT ON samples BEGIN SELECT RAISE(IGNORE); END`, `DROP TRIGGER drop_samples`
	if shared.pg {
		q = `CREATE FUNCTION drop_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
			CREATE TRIGGER drop_samples BEFORE INSERT ON samples FOR EACH ROW EXECUTE FUNCTION drop_row();`
		undo = `DROP TRIGGER drop_samples ON samples`
	}
	_, err = shared.db.Exec(q)
	must(t, err)
	sent, err := Send(kept, shared)
	if err == nil || len(sent) != 0 || !strings.Contains(err.Error(), "0 samples") || !strings.Contains(err.Error(), "the kept run has 2, 10, 80,") ||
		!strings.HasSuffix(err.Error(), fmt.Sprintf("; run %d stays in %s", id, kept.Path)) {
		t.Fatalf("Send with samples dropped = %v, %v", sent, err)
	}
	if left, err := kept.Runs(0); err != nil || len(left) != 1 {
		t.Fatalf("kept after a send the server did not hold: %+v, %v", left, err)
	}
	_, err = shared.db.Exec(undo)
	must(t, err)
	again, err := Send(kept, shared)
	if err != nil || len(again) != 1 {
		t.Fatalf("Send once the server takes samples: %v, %v", again, err)
	}
	if runs, err := shared.Runs(0); err != nil || len(runs) != 1 || runs[0].ID != again[0] {
		t.Errorf("shared history after the second send: %+v, %v", runs, err)
	}
}

package history

import (
	"bytes"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/stats"
)

// ArmDetail is an arm of a run with its trial metrics.
type ArmDetail struct {
	Name      string         `json:"name"`
	Recipe    string         `json:"recipe"`
	BuildKey  string         `json:"build_key"`
	Invalid   bool           `json:"invalid"`
	Agreement *float64       `json:"agreement,omitempty"` // share of prompts whose output agrees with the baseline's, 0..1; nil when not recorded
	Trials    []TrialMetrics `json:"trials"`
}

// TrialMetrics is a stored trial without its samples. In JSON each
// metric of stats.Table is a key of its own ("tok_s": 1313.1), null when
// the trial's arpatch did not record it.
type TrialMetrics struct {
	Index       int     `json:"trial"`       // 1-based trial number, as the CSV's "trial"
	Concurrency int     `json:"concurrency"` // requests in flight
	Wall        float64 `json:"wall_s"`      // seconds, first request sent to last response done
	Errors      int     `json:"errors"`      // requests that failed
	Samples     int     `json:"samples"`     // requests stored
	// Values holds the metrics by stats.Table name, each in its unit; a
	// metric stored as NULL (recorded before its migration) is absent.
	Values map[string]float64 `json:"-"`
}

// MarshalJSON writes the fields, then each metric of stats.Table in its
// order.
func (t TrialMetrics) MarshalJSON() ([]byte, error) {
	type plain TrialMetrics
	b, err := json.Marshal(plain(t))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1])
	for _, m := range stats.Table {
		v := []byte("null")
		if x, ok := t.Values[m.Name]; ok {
			if v, err = json.Marshal(x); err != nil {
				return nil, fmt.Errorf("trial %d %s: %w", t.Index, m.Name, err)
			}
		}
		fmt.Fprintf(&buf, ",%q:%s", m.Name, v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *TrialMetrics) UnmarshalJSON(b []byte) error {
	type plain TrialMetrics
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*t = TrialMetrics(p)
	t.Values = map[string]float64{}
	for _, m := range stats.Table {
		r, ok := raw[m.Name]
		if !ok {
			continue
		}
		var v *float64
		if err := json.Unmarshal(r, &v); err != nil {
			return fmt.Errorf("trial %d %s: %w", t.Index, m.Name, err)
		}
		if v != nil {
			t.Values[m.Name] = *v
		}
	}
	return nil
}

// Detail is everything stored about one run.
type Detail struct {
	Run    Run           `json:"run"`
	Drift  []DriftRecord `json:"drift"`
	Checks []Check       `json:"checks"`
	Arms   []ArmDetail   `json:"arms"`
}

// Show returns run id with its environment, drift, checks and arms.
func (s *Store) Show(id int64) (*Detail, error) {
	what := fmt.Sprintf("reading run %d", id)
	runs, err := s.selectRuns(what, `WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no run %d in %s", id, s.Path)
	}
	d := &Detail{Run: runs[0]}
	if d.Run.Env, err = s.Env(id); err != nil {
		return nil, err
	}
	err = s.each(what, `SELECT series, commit_hash, rev, patch, fit, detail FROM drift WHERE run_id = ? ORDER BY rowid`, []any{id}, func(r *sql.Rows) error {
		var x DriftRecord
		err := r.Scan(&x.Series, &x.Commit, &x.Rev, &x.Patch, &x.Fit, &x.Detail)
		d.Drift = append(d.Drift, x)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = s.each(what, `SELECT name, kind, status, detail FROM checks WHERE run_id = ? ORDER BY rowid`, []any{id}, func(r *sql.Rows) error {
		var c Check
		err := r.Scan(&c.Name, &c.Kind, &c.Status, &c.Detail)
		d.Checks = append(d.Checks, c)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The arms with their trials, in one query: arms in the order they
	// were stored, each arm's trials by index and level; an arm without
	// trials comes as one row of NULLs (the LEFT JOIN).
	q := `SELECT a.id, a.name, a.recipe, a.build_key, a.invalid, a.agreement, ` + trialColumns + `
		FROM arms a LEFT JOIN trials t ON t.arm_id = a.id WHERE a.run_id = ? ORDER BY a.id, t.idx, t.concurrency`
	last := int64(-1)
	err = s.each(what, q, []any{id}, func(r *sql.Rows) error {
		var armID int64
		var a ArmDetail
		var ag sql.NullFloat64
		var t trialRow
		if err := r.Scan(append([]any{&armID, &a.Name, &a.Recipe, &a.BuildKey, &a.Invalid, &ag}, t.dest()...)...); err != nil {
			return fmt.Errorf("arm %s: %w", a.Name, err)
		}
		if armID != last {
			if ag.Valid {
				a.Agreement = &ag.Float64
			}
			d.Arms = append(d.Arms, a)
			last = armID
		}
		if t.index.Valid {
			arm := &d.Arms[len(d.Arms)-1]
			arm.Trials = append(arm.Trials, t.metrics())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// trialColumns are the columns of a trial t that trialRow scans: its
// index, level, wall time, errors, the count of its samples (n_samples,
// written with them), and every metric of stats.Table.
var trialColumns = func() string {
	cols := []string{"t.idx", "t.concurrency", "t.wall_s", "t.errors", "t.n_samples"}
	for _, m := range stats.Table {
		cols = append(cols, "t."+m.Column)
	}
	return strings.Join(cols, ", ")
}()

// trialRow is one trial as trialColumns read it; every field is NULL in
// an arm's row that has no trial (a LEFT JOIN).
type trialRow struct {
	index, level, errors, samples sql.NullInt64
	wall                          sql.NullFloat64
	vals                          []sql.NullFloat64
}

// dest is what Scan fills, in trialColumns' order.
func (t *trialRow) dest() []any {
	t.vals = make([]sql.NullFloat64, len(stats.Table))
	d := []any{&t.index, &t.level, &t.wall, &t.errors, &t.samples}
	for i := range t.vals {
		d = append(d, &t.vals[i])
	}
	return d
}

// metrics is the trial, a metric stored as NULL left out of Values.
func (t *trialRow) metrics() TrialMetrics {
	m := TrialMetrics{Index: int(t.index.Int64), Concurrency: int(t.level.Int64), Wall: t.wall.Float64, Errors: int(t.errors.Int64),
		Samples: int(t.samples.Int64), Values: make(map[string]float64, len(stats.Table))}
	for i, v := range t.vals {
		if v.Valid {
			m.Values[stats.Table[i].Name] = v.Float64
		}
	}
	return m
}

// ExportRow is one trial of one arm of one run, flat: in JSON the run's
// fields, then the trial's.
type ExportRow struct {
	ExportRun
	TrialMetrics
}

// ExportRun is the run and arm of an ExportRow.
type ExportRun struct {
	RunID       int64     `json:"run_id"`
	StartedAt   time.Time `json:"started_at"`
	Status      RunStatus `json:"status"`
	HardwareKey string    `json:"hardware_key"`
	Workload    string    `json:"workload"`
	Commit      string    `json:"sglang_commit"`
	Arm         string    `json:"arm"`
	Invalid     bool      `json:"invalid"`
}

// MarshalJSON writes one flat object: the run's fields, then the trial's
// (TrialMetrics.MarshalJSON).
func (r ExportRow) MarshalJSON() ([]byte, error) {
	run, err := json.Marshal(r.ExportRun)
	if err != nil {
		return nil, err
	}
	trial, err := json.Marshal(r.TrialMetrics)
	if err != nil {
		return nil, err
	}
	return append(append(run[:len(run)-1], ','), trial[1:]...), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *ExportRow) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &r.ExportRun); err != nil {
		return err
	}
	return json.Unmarshal(b, &r.TrialMetrics)
}

// Export returns every trial of every run (a run still running whose
// nightly is gone as Killed, as history list reports it), oldest run first, each run's
// arms in the order they were stored and each arm's trials by index and
// level. It reads the runs, the arms and the trials in one query each
// and joins them here, so that each row's columns are read once (the
// driver's cost is per column read): linear in the trials.
func (s *Store) Export() ([]ExportRow, error) {
	const what = "exporting the trials"
	trials := map[int64][]TrialMetrics{} // by arm
	n := 0
	var armID int64
	var t trialRow
	dest := append([]any{&armID}, t.dest()...) // filled again by each row
	err := s.each(what, `SELECT t.arm_id, `+trialColumns+` FROM trials t ORDER BY t.arm_id, t.idx, t.concurrency`, nil, func(r *sql.Rows) error {
		if err := r.Scan(dest...); err != nil {
			return fmt.Errorf("a trial of arm %d: %w", armID, err)
		}
		trials[armID] = append(trials[armID], t.metrics())
		n++
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]ExportRow, 0, n)
	err = s.eachExportArm(what, func(e ExportRun, armID int64) error {
		for _, t := range trials[armID] {
			out = append(out, ExportRow{e, t})
		}
		return nil
	})
	return out, err
}

// csvHeader is the export's CSV header (WriteCSV's and ExportCSV's): the
// run's fields, trial, concurrency, wall_s, each metric of stats.Table by
// name, errors and samples.
func csvHeader() []string {
	head := []string{"run_id", "started_at", "status", "hardware_key", "workload", "sglang_commit", "arm", "invalid", "trial", "concurrency", "wall_s"}
	return append(append(head, stats.Names()...), "errors", "samples")
}

// WriteCSV writes rows with a header line: the run's fields, trial,
// concurrency, wall_s, each metric of stats.Table by name (empty where
// the trial's arpatch did not record it), errors and samples.
func WriteCSV(w io.Writer, rows []ExportRow) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader()); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	for _, r := range rows {
		rec := []string{strconv.FormatInt(r.RunID, 10), r.StartedAt.Format(time.RFC3339), string(r.Status), r.HardwareKey, r.Workload, r.Commit, r.Arm,
			strconv.FormatBool(r.Invalid), strconv.Itoa(r.Index), strconv.Itoa(r.Concurrency), f(r.Wall)}
		for _, m := range stats.Table {
			v, ok := r.Values[m.Name]
			if !ok {
				rec = append(rec, "")
				continue
			}
			rec = append(rec, f(v))
		}
		if err := cw.Write(append(rec, strconv.Itoa(r.Errors), strconv.Itoa(r.Samples))); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes rows as a JSON array.
func WriteJSON(w io.Writer, rows []ExportRow) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if rows == nil {
		rows = []ExportRow{}
	}
	return enc.Encode(rows)
}

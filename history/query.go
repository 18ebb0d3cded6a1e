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
	runs, err := s.Runs(0)
	if err != nil {
		return nil, err
	}
	d := &Detail{}
	found := false
	for _, r := range runs {
		if r.ID == id {
			d.Run, found = r, true
		}
	}
	if !found {
		return nil, fmt.Errorf("no run %d in %s", id, s.Path)
	}
	if d.Run.Env, err = s.Env(id); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("reading run %d", id)
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
	type armRow struct {
		id int64
		a  ArmDetail
	}
	var arms []armRow
	err = s.each(what, `SELECT id, name, recipe, build_key, invalid, agreement FROM arms WHERE run_id = ? ORDER BY id`, []any{id}, func(r *sql.Rows) error {
		var a armRow
		var ag sql.NullFloat64
		if err := r.Scan(&a.id, &a.a.Name, &a.a.Recipe, &a.a.BuildKey, &a.a.Invalid, &ag); err != nil {
			return err
		}
		if ag.Valid {
			a.a.Agreement = &ag.Float64
		}
		arms = append(arms, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, ar := range arms {
		if ar.a.Trials, err = s.trials(what, ar.id, ar.a.Name); err != nil {
			return nil, err
		}
		d.Arms = append(d.Arms, ar.a)
	}
	return d, nil
}

// trials reads the trials of arm armID (named arm), by index and level,
// with every metric of stats.Table stored for each; what says what for
// the error.
func (s *Store) trials(what string, armID int64, arm string) ([]TrialMetrics, error) {
	cols := []string{"idx", "concurrency", "COALESCE(wall_s, 0)", "COALESCE(errors, 0)", "(SELECT COUNT(*) FROM samples WHERE trial_id = trials.id)"}
	for _, m := range stats.Table {
		cols = append(cols, m.Column)
	}
	var out []TrialMetrics
	err := s.each(what, `SELECT `+strings.Join(cols, ", ")+` FROM trials WHERE arm_id = ? ORDER BY idx, concurrency`, []any{armID}, func(r *sql.Rows) error {
		m := TrialMetrics{Values: map[string]float64{}}
		vals := make([]sql.NullFloat64, len(stats.Table))
		dest := []any{&m.Index, &m.Concurrency, &m.Wall, &m.Errors, &m.Samples}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := r.Scan(dest...); err != nil {
			return fmt.Errorf("arm %s: %w", arm, err)
		}
		for i, v := range vals {
			if v.Valid {
				m.Values[stats.Table[i].Name] = v.Float64
			}
		}
		out = append(out, m)
		return nil
	})
	return out, err
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

// Export returns every trial of every run, oldest first.
func (s *Store) Export() ([]ExportRow, error) {
	runs, err := s.Runs(0)
	if err != nil {
		return nil, err
	}
	var out []ExportRow
	for i := len(runs) - 1; i >= 0; i-- {
		d, err := s.Show(runs[i].ID)
		if err != nil {
			return nil, err
		}
		for _, a := range d.Arms {
			for _, t := range a.Trials {
				out = append(out, ExportRow{ExportRun{RunID: d.Run.ID, StartedAt: d.Run.StartedAt, Status: d.Run.Status, HardwareKey: d.Run.HardwareKey, Workload: d.Run.Workload,
					Commit: d.Run.SGLangCommit, Arm: a.Name, Invalid: a.Invalid}, t})
			}
		}
	}
	return out, nil
}

// WriteCSV writes rows with a header line: the run's fields, trial,
// concurrency, wall_s, each metric of stats.Table by name (empty where
// the trial's arpatch did not record it), errors and samples.
func WriteCSV(w io.Writer, rows []ExportRow) error {
	cw := csv.NewWriter(w)
	head := []string{"run_id", "started_at", "status", "hardware_key", "workload", "sglang_commit", "arm", "invalid", "trial", "concurrency", "wall_s"}
	head = append(append(head, stats.Names()...), "errors", "samples")
	if err := cw.Write(head); err != nil {
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

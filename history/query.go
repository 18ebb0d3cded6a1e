package history

import (
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// ArmDetail is an arm of a run with its trial metrics.
type ArmDetail struct {
	Name      string         `json:"name"`
	Recipe    string         `json:"recipe"`
	BuildKey  string         `json:"build_key"`
	Invalid   bool           `json:"invalid"`
	Agreement *float64       `json:"agreement,omitempty"`
	Trials    []TrialMetrics `json:"trials"`
}

// TrialMetrics is a stored trial without its samples.
type TrialMetrics struct {
	Index        int     `json:"trial"` // 1-based trial number, as the CSV's "trial"
	Concurrency  int     `json:"concurrency"`
	Wall         float64 `json:"wall_s"`
	TokS         float64 `json:"tok_s"`
	DecodeTokS   float64 `json:"decode_tok_s"`
	AcceptLength float64 `json:"accept_length"`
	TTFTp50ms    float64 `json:"ttft_ms_p50"`
	TTFTp99ms    float64 `json:"ttft_ms_p99"`
	ITLp50ms     float64 `json:"itl_ms_p50"`
	TPOTms       float64 `json:"tpot_ms"`
	Errors       int     `json:"errors"`
	Samples      int     `json:"samples"`
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
		err := s.each(what, `SELECT idx, concurrency, COALESCE(wall_s, 0), COALESCE(tok_s, 0), COALESCE(decode_tok_s, 0), COALESCE(accept_length, 0),
			COALESCE(ttft_ms_p50, 0), COALESCE(ttft_ms_p99, 0), COALESCE(itl_ms_p50, 0), COALESCE(tpot_ms, 0), COALESCE(errors, 0),
			(SELECT COUNT(*) FROM samples WHERE trial_id = trials.id) FROM trials WHERE arm_id = ? ORDER BY idx, concurrency`, []any{ar.id}, func(t *sql.Rows) error {
			var m TrialMetrics
			if err := t.Scan(&m.Index, &m.Concurrency, &m.Wall, &m.TokS, &m.DecodeTokS, &m.AcceptLength, &m.TTFTp50ms, &m.TTFTp99ms, &m.ITLp50ms, &m.TPOTms, &m.Errors, &m.Samples); err != nil {
				return fmt.Errorf("arm %s: %w", ar.a.Name, err)
			}
			ar.a.Trials = append(ar.a.Trials, m)
			return nil
		})
		if err != nil {
			return nil, err
		}
		d.Arms = append(d.Arms, ar.a)
	}
	return d, nil
}

// ExportRow is one trial of one arm of one run, flat.
type ExportRow struct {
	RunID       int64     `json:"run_id"`
	StartedAt   time.Time `json:"started_at"`
	Status      RunStatus `json:"status"`
	HardwareKey string    `json:"hardware_key"`
	Workload    string    `json:"workload"`
	Commit      string    `json:"sglang_commit"`
	Arm         string    `json:"arm"`
	Invalid     bool      `json:"invalid"`
	TrialMetrics
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
				out = append(out, ExportRow{RunID: d.Run.ID, StartedAt: d.Run.StartedAt, Status: d.Run.Status, HardwareKey: d.Run.HardwareKey, Workload: d.Run.Workload,
					Commit: d.Run.SGLangCommit, Arm: a.Name, Invalid: a.Invalid, TrialMetrics: t})
			}
		}
	}
	return out, nil
}

// WriteCSV writes rows with a header line.
func WriteCSV(w io.Writer, rows []ExportRow) error {
	cw := csv.NewWriter(w)
	err := cw.Write([]string{"run_id", "started_at", "status", "hardware_key", "workload", "sglang_commit", "arm", "invalid", "trial", "concurrency", "wall_s", "tok_s", "decode_tok_s",
		"accept_length", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "tpot_ms", "errors", "samples"})
	if err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	for _, r := range rows {
		err := cw.Write([]string{strconv.FormatInt(r.RunID, 10), r.StartedAt.Format(time.RFC3339), string(r.Status), r.HardwareKey, r.Workload, r.Commit, r.Arm,
			strconv.FormatBool(r.Invalid), strconv.Itoa(r.Index), strconv.Itoa(r.Concurrency), f(r.Wall), f(r.TokS), f(r.DecodeTokS), f(r.AcceptLength),
			f(r.TTFTp50ms), f(r.TTFTp99ms), f(r.ITLp50ms), f(r.TPOTms), strconv.Itoa(r.Errors), strconv.Itoa(r.Samples)})
		if err != nil {
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

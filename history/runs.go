package history

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// Run is one nightly.
type Run struct {
	ID             int64      `json:"id"`
	StartedAt      time.Time  `json:"started_at"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	Status         RunStatus  `json:"status"`
	PID            int        `json:"pid"`
	ExitCode       *int       `json:"exit_code,omitempty"`
	HardwareKey    string     `json:"hardware_key"`
	SGLangCommit   string     `json:"sglang_commit"`
	UpstreamHead   string     `json:"upstream_head"`
	SeriesHash     string     `json:"series_hash"`
	ArpatchVersion string     `json:"arpatch_version"`
	Verdict        string     `json:"verdict"`
	// Workload names what was benched (model, prompts, tokens,
	// concurrency, speculative settings): runs compare only within one.
	Workload string `json:"workload"`
	// Accepted marks a run taken as the new reference after a deliberate
	// change (arpatch history accept): later nights compare with it and
	// the runs after it, not with the runs before.
	Accepted bool              `json:"accepted,omitempty"`
	Env      map[string]string `json:"environment,omitempty"`
}

// BeginRun records a run as running, with this process's pid, and returns
// its id.
func (s *Store) BeginRun(r Run) (int64, error) {
	if r.StartedAt.IsZero() {
		r.StartedAt = time.Now().UTC()
	}
	if r.PID == 0 {
		r.PID = os.Getpid()
	}
	tx, err := s.db.Begin()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	res, err := tx.Exec(`INSERT INTO runs (started_at, status, pid, hardware_key, sglang_commit, upstream_head, series_hash, arpatch_version, workload)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.StartedAt.Format(time.RFC3339Nano), Running, r.PID, r.HardwareKey, r.SGLangCommit, r.UpstreamHead, r.SeriesHash, r.ArpatchVersion, r.Workload)
	if err != nil {
		return 0, err
	}
	id, _ := res.LastInsertId()
	for k, v := range r.Env {
		if _, err := tx.Exec(`INSERT INTO environment (run_id, key, value) VALUES (?, ?, ?)`, id, k, v); err != nil {
			return 0, err
		}
	}
	return id, tx.Commit()
}

// Update sets run fields learned after the start (upstream head, commit).
func (s *Store) Update(id int64, sglangCommit, upstreamHead, seriesHash string) error {
	_, err := s.db.Exec(`UPDATE runs SET sglang_commit = COALESCE(NULLIF(?, ''), sglang_commit), upstream_head = COALESCE(NULLIF(?, ''), upstream_head), series_hash = COALESCE(NULLIF(?, ''), series_hash) WHERE id = ?`,
		sglangCommit, upstreamHead, seriesHash, id)
	return err
}

// SetEnv records more environment of a run.
func (s *Store) SetEnv(id int64, env map[string]string) error {
	for k, v := range env {
		if _, err := s.db.Exec(`INSERT OR REPLACE INTO environment (run_id, key, value) VALUES (?, ?, ?)`, id, k, v); err != nil {
			return err
		}
	}
	return nil
}

// Env returns the environment recorded for run id (key to value; empty
// when none was).
func (s *Store) Env(id int64) (map[string]string, error) {
	rows, err := s.db.Query(`SELECT key, value FROM environment WHERE run_id = ?`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, rows.Err()
}

// FinishRun ends a run: status complete, failed or incomplete.
func (s *Store) FinishRun(id int64, status RunStatus, exitCode int, verdict string) error {
	_, err := s.db.Exec(`UPDATE runs SET status = ?, exit_code = ?, verdict = ?, finished_at = ? WHERE id = ?`,
		status, exitCode, verdict, time.Now().UTC().Format(time.RFC3339Nano), id)
	return err
}

// Accept marks run id as the new reference: the regression window of
// later runs on its hardware and workload starts at it, so a deliberate
// change (a new upstream, a new toolchain) stops being flagged. The run
// must be complete; failed, incomplete and running ones are refused.
func (s *Store) Accept(id int64) error {
	var status RunStatus
	if err := s.db.QueryRow(`SELECT status FROM runs WHERE id = ?`, id).Scan(&status); errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("no run %d in %s", id, s.Path)
	} else if err != nil {
		return err
	}
	if status != Complete {
		return fmt.Errorf("run %d is %s: only a complete run can be a reference", id, status)
	}
	_, err := s.db.Exec(`UPDATE runs SET accepted = 1 WHERE id = ?`, id)
	return err
}

// MarkStale marks every run still "running" as incomplete and returns
// their ids. Call it while holding the nightly lock (Lock): no other
// nightly can then be running, so such a run was killed midway.
func (s *Store) MarkStale() ([]int64, error) {
	rows, err := s.db.Query(`SELECT id FROM runs WHERE status = ?`, Running)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		if _, err := s.db.Exec(`UPDATE runs SET status = ?, verdict = 'killed midway', finished_at = COALESCE(finished_at, ?) WHERE id = ?`,
			Incomplete, time.Now().UTC().Format(time.RFC3339Nano), id); err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// DriftRecord is one patch of one series at one commit.
type DriftRecord struct {
	Series string `json:"series"`
	Commit string `json:"commit"`
	Rev    string `json:"rev"`
	Patch  string `json:"patch"`
	Fit    string `json:"fit"`
	Detail string `json:"detail,omitempty"`
}

// AddDrift records drift results.
func (s *Store) AddDrift(runID int64, recs []DriftRecord) error {
	for _, d := range recs {
		if _, err := s.db.Exec(`INSERT INTO drift (run_id, series, commit_hash, rev, patch, fit, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			runID, d.Series, d.Commit, d.Rev, d.Patch, d.Fit, d.Detail); err != nil {
			return err
		}
	}
	return nil
}

// Check is one outcome for JUnit and plots: drift per series, a build, an
// arm's validity, a regression check.
type Check struct {
	Name   string      `json:"name"`
	Kind   CheckKind   `json:"kind"`
	Status CheckStatus `json:"status"`
	Detail string      `json:"detail,omitempty"`
}

// AddCheck records a check.
func (s *Store) AddCheck(runID int64, c Check) error {
	_, err := s.db.Exec(`INSERT INTO checks (run_id, name, kind, status, detail) VALUES (?, ?, ?, ?, ?)`, runID, c.Name, c.Kind, c.Status, c.Detail)
	return err
}

// TrialRecord is one trial's metrics with its samples.
type TrialRecord struct {
	Index                                  int
	Concurrency                            int // requests in flight (0 is stored as 1)
	Wall, TokS, DecodeTokS, AcceptLength   float64
	TTFTp50ms, TTFTp99ms, ITLp50ms, TPOTms float64
	Errors                                 int
	Samples                                []SampleRecord
}

// SampleRecord is one request.
type SampleRecord struct {
	Prompt                         int
	TTFT, E2E                      float64
	CompletionTokens, SpecVerifyCt int
	Error                          string
}

// AddArm records an arm with its trials and samples, in one transaction.
func (s *Store) AddArm(runID int64, name, recipe, buildKey string, invalid bool, agreement float64, trials []TrialRecord) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.Exec(`INSERT INTO arms (run_id, name, recipe, build_key, invalid, agreement) VALUES (?, ?, ?, ?, ?, ?)`, runID, name, recipe, buildKey, invalid, agreement)
	if err != nil {
		return err
	}
	armID, _ := res.LastInsertId()
	for _, t := range trials {
		r, err := tx.Exec(`INSERT INTO trials (arm_id, idx, concurrency, wall_s, tok_s, decode_tok_s, accept_length, ttft_ms_p50, ttft_ms_p99, itl_ms_p50, tpot_ms, errors)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, armID, t.Index, max(t.Concurrency, 1), t.Wall, t.TokS, t.DecodeTokS, t.AcceptLength, t.TTFTp50ms, t.TTFTp99ms, t.ITLp50ms, t.TPOTms, t.Errors)
		if err != nil {
			return err
		}
		tid, _ := r.LastInsertId()
		for _, sm := range t.Samples {
			if _, err := tx.Exec(`INSERT INTO samples (trial_id, prompt, ttft_s, e2e_s, completion_tokens, spec_verify_ct, error) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				tid, sm.Prompt, sm.TTFT, sm.E2E, sm.CompletionTokens, sm.SpecVerifyCt, sm.Error); err != nil {
				return err
			}
		}
	}
	return tx.Commit()
}

// MetricColumns maps metric names to trial columns.
var MetricColumns = map[string]string{
	"tok_s": "tok_s", "decode_tok_s": "decode_tok_s", "accept_length": "accept_length",
	"ttft_ms_p50": "ttft_ms_p50", "ttft_ms_p99": "ttft_ms_p99", "itl_ms_p50": "itl_ms_p50", "tpot_ms": "tpot_ms",
}

func column(metric string) (string, error) {
	c, ok := MetricColumns[metric]
	if !ok {
		return "", fmt.Errorf("unknown metric %q; known: %s", metric, strings.Join(Metrics, ", "))
	}
	return c, nil
}

// Metrics lists the metric names of MetricColumns, sorted.
var Metrics = func() []string {
	names := slices.Sorted(maps.Keys(MetricColumns))
	return names
}()

// Window returns the per-trial values of metric for arm at concurrency
// level over the last n reference runs before run id before (0: all),
// newest run first, and the ids of those runs: like is compared with
// like, level by level. A reference run is complete, on hardwareKey, of the
// same workload, failed no regression or validity check (whatever its
// exit code: a night with drift can regress too) unless accepted,
// and is not older than the newest accepted run. n must be 1 or more.
func (s *Store) Window(hardwareKey, workload, arm, metric string, level, n int, before int64) ([]float64, []int64, error) {
	col, err := column(metric)
	if err != nil {
		return nil, nil, err
	}
	if n < 1 {
		return nil, nil, fmt.Errorf("history window %d: use 1 or more runs", n)
	}
	// The reference starts at the newest accepted run, if any.
	var since int64
	err = s.db.QueryRow(`SELECT COALESCE(MAX(id), 0) FROM runs WHERE hardware_key = ? AND workload = ? AND accepted = 1 AND (? = 0 OR id < ?)`,
		hardwareKey, workload, before, before).Scan(&since)
	if err != nil {
		return nil, nil, err
	}
	q := `SELECT id FROM runs WHERE hardware_key = ? AND workload = ? AND status = ? AND (? = 0 OR id < ?) AND id >= ?
		AND (accepted = 1 OR (COALESCE(exit_code, 0) != ? AND NOT EXISTS (SELECT 1 FROM checks
			WHERE checks.run_id = runs.id AND checks.status = ? AND checks.kind IN (` + placeholders(len(barsReference)) + `))))
		AND EXISTS (SELECT 1 FROM arms JOIN trials ON trials.arm_id = arms.id
			WHERE arms.run_id = runs.id AND arms.name = ? AND arms.invalid = 0 AND trials.concurrency = ?)
		ORDER BY id DESC LIMIT ?`
	args := []any{hardwareKey, workload, Complete, before, before, since, ExitFailedChecks, CheckFail}
	for _, k := range barsReference {
		args = append(args, k)
	}
	rows, err := s.db.Query(q, append(args, arm, level, n)...)
	if err != nil {
		return nil, nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	var vals []float64
	for _, id := range ids {
		r, err := s.db.Query(`SELECT t.`+col+` FROM trials t JOIN arms a ON t.arm_id = a.id WHERE a.run_id = ? AND a.name = ? AND t.concurrency = ? ORDER BY t.idx`, id, arm, level)
		if err != nil {
			return nil, nil, err
		}
		for r.Next() {
			var v sql.NullFloat64
			r.Scan(&v)
			if v.Valid {
				vals = append(vals, v.Float64)
			}
		}
		r.Close()
	}
	return vals, ids, nil
}

// Runs lists the newest runs first, at most limit (0: all).
func (s *Store) Runs(limit int) ([]Run, error) {
	q := `SELECT id, started_at, finished_at, status, pid, exit_code, hardware_key, sglang_commit, upstream_head, series_hash, arpatch_version, verdict, workload, accepted FROM runs ORDER BY id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := s.db.Query(q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		var r Run
		var started string
		var finished sql.NullString
		var exit sql.NullInt64
		if err := rows.Scan(&r.ID, &started, &finished, &r.Status, &r.PID, &exit, &r.HardwareKey, &r.SGLangCommit, &r.UpstreamHead, &r.SeriesHash, &r.ArpatchVersion, &r.Verdict, &r.Workload, &r.Accepted); err != nil {
			return nil, err
		}
		r.StartedAt, _ = time.Parse(time.RFC3339Nano, started)
		if finished.Valid {
			t, _ := time.Parse(time.RFC3339Nano, finished.String)
			r.FinishedAt = &t
		}
		if exit.Valid {
			e := int(exit.Int64)
			r.ExitCode = &e
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

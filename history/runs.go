package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/patches"
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
// its id. On PostgreSQL the run holds its advisory lock, on a connection
// of its own, from before its row is committed until Record or FinishRun
// ends it (or Close, or this process's end): MarkStale on any host leaves
// it alone until then. Errors name the database file.
func (s *Store) BeginRun(r Run) (int64, error) {
	if r.StartedAt.IsZero() {
		r.StartedAt = time.Now().UTC()
	}
	if r.PID == 0 {
		r.PID = os.Getpid()
	}
	const what = "recording a new run"
	var on beginner = s.db
	var conn *sql.Conn
	if s.pg {
		c, err := s.db.Conn(context.Background())
		if err != nil {
			return 0, s.wrap(what, err)
		}
		on, conn = c, c
	}
	var id int64
	err := s.inTxOn(on, what, func(tx runner) error {
		var err error
		id, err = tx.insert(`INSERT INTO runs (started_at, status, pid, hardware_key, sglang_commit, upstream_head, series_hash, arpatch_version, workload)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.StartedAt.Format(time.RFC3339Nano), Running, r.PID, r.HardwareKey, r.SGLangCommit, r.UpstreamHead, r.SeriesHash, r.ArpatchVersion, r.Workload)
		if err != nil {
			return err
		}
		if conn != nil {
			if err := s.holdRun(tx, id); err != nil {
				return err
			}
		}
		return setEnv(tx, id, r.Env)
	})
	if conn != nil {
		if err != nil {
			discard(conn) // a lock taken in the failed transaction ends with its session
			return 0, err
		}
		l := &runLock{s: s, id: id, conn: conn, stop: make(chan struct{}), done: make(chan struct{})}
		s.mu.Lock()
		if s.live == nil { // closed meanwhile
			s.mu.Unlock()
			discard(conn)
			return id, s.wrap(what, errors.New("the history was closed"))
		}
		s.live[id] = l
		s.mu.Unlock()
		goroutine.Go(l.keep)
	}
	return id, err
}

// Outcome is what a nightly learned about its run, stored at its end in
// one transaction (Record): all of it or, on an error, none.
type Outcome struct {
	// SGLangCommit is the commit built and benched, UpstreamHead the
	// tracked ref's head (40 hex digits each); "" keeps what BeginRun
	// stored.
	SGLangCommit, UpstreamHead string
	Env                        map[string]string // more environment (server versions)
	Drift                      []DriftRecord
	Arms                       []ArmRecord
	Checks                     []Check
	Status                     RunStatus // Complete, Failed or Incomplete
	ExitCode                   int       // the nightly's exit code
	Verdict                    string    // the one-line verdict
}

// Record stores a run's outcome and ends the run, in one transaction. The
// error names the database file and the run.
func (s *Store) Record(id int64, o Outcome) error {
	err := s.inTx(fmt.Sprintf("recording run %d", id), func(tx runner) error {
		if err := record(tx, id, o); err != nil {
			return err
		}
		return finishRun(tx, id, o.Status, o.ExitCode, o.Verdict)
	})
	if err == nil {
		s.releaseRun(id)
	}
	return err
}

// record stores o's commits, environment, drift, arms and checks for run
// id, in tx.
func record(tx runner, id int64, o Outcome) error {
	if _, err := tx.exec(`UPDATE runs SET sglang_commit = COALESCE(NULLIF(?, ''), sglang_commit), upstream_head = COALESCE(NULLIF(?, ''), upstream_head) WHERE id = ?`,
		o.SGLangCommit, o.UpstreamHead, id); err != nil {
		return err
	}
	if err := setEnv(tx, id, o.Env); err != nil {
		return err
	}
	for _, d := range o.Drift {
		if _, err := tx.exec(`INSERT INTO drift (run_id, series, commit_hash, rev, patch, fit, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			id, d.Series, d.Commit, d.Rev, d.Patch, string(d.Fit), d.Detail); err != nil {
			return err
		}
	}
	for _, a := range o.Arms {
		if err := addArm(tx, id, a); err != nil {
			return err
		}
	}
	for _, c := range o.Checks {
		if err := addCheck(tx, id, c); err != nil {
			return err
		}
	}
	return nil
}

// beginner is what starts a transaction: the pool or one connection.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTx runs f in a transaction on the pool (inTxOn).
func (s *Store) inTx(what string, f func(tx runner) error) error {
	return s.inTxOn(s.db, what, f)
}

// inTxOn runs f in a transaction begun on b, committed when f returns
// nil, rolled back otherwise. The error says what failed (what) and
// names the database file.
func (s *Store) inTxOn(b beginner, what string, f func(tx runner) error) error {
	tx, err := b.BeginTx(context.Background(), nil)
	if err == nil {
		if err = f(runner{s, tx}); err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback() // err is what to report; a failed rollback leaves nothing committed either
		}
	}
	return s.wrap(what, err)
}

// setEnv records more environment of a run.
func setEnv(tx runner, id int64, env map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if _, err := tx.exec(`INSERT INTO environment (run_id, key, value) VALUES (?, ?, ?) ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value`, id, k, env[k]); err != nil {
			return err
		}
	}
	return nil
}

// Env returns the environment recorded for run id (key to value; empty
// when none was).
func (s *Store) Env(id int64) (map[string]string, error) {
	m := map[string]string{}
	err := s.each(fmt.Sprintf("reading the environment of run %d", id), `SELECT key, value FROM environment WHERE run_id = ?`, []any{id}, func(r *sql.Rows) error {
		var k, v string
		err := r.Scan(&k, &v)
		m[k] = v
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// FinishRun ends a run: status complete, failed or incomplete. The error
// names the database file.
func (s *Store) FinishRun(id int64, status RunStatus, exitCode int, verdict string) error {
	err := s.inTx(fmt.Sprintf("ending run %d", id), func(tx runner) error { return finishRun(tx, id, status, exitCode, verdict) })
	if err == nil {
		s.releaseRun(id)
	}
	return err
}

func finishRun(tx runner, id int64, status RunStatus, exitCode int, verdict string) error {
	_, err := tx.exec(`UPDATE runs SET status = ?, exit_code = ?, verdict = ?, finished_at = ? WHERE id = ?`,
		status, exitCode, verdict, time.Now().UTC().Format(time.RFC3339Nano), id)
	return err
}

// Accept marks run id as the new reference: the regression window of
// later runs on its hardware and workload starts at it, so a deliberate
// change (a new upstream, a new toolchain) stops being flagged. The run
// must be complete; failed, incomplete and running ones are refused.
func (s *Store) Accept(id int64) error {
	var status RunStatus
	if err := s.x().row(`SELECT status FROM runs WHERE id = ?`, id).Scan(&status); errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("no run %d in %s", id, s.Path)
	} else if err != nil {
		return s.wrap(fmt.Sprintf("reading run %d", id), err)
	}
	if status != Complete {
		return fmt.Errorf("run %d is %s: only a complete run can be a reference", id, status)
	}
	_, err := s.x().exec(`UPDATE runs SET accepted = 1 WHERE id = ?`, id)
	return s.wrap(fmt.Sprintf("accepting run %d", id), err)
}

// MarkStale marks every run still "running" whose process is gone as
// incomplete and returns their ids. On SQLite, call it while holding the
// nightly lock (Lock): no other nightly can then be running, so such a
// run was killed midway. On PostgreSQL, where nightlies of other hosts
// run at once, a run is marked only when no session holds its lock
// (BeginRun) twice, staleRecheck apart: its process, and so its
// connection, ended. A server that restarted (or ended the sessions
// after a crash of one) has freed every lock at once, and a live run
// takes its own again within lockCheck (runLock.keep): the second look
// leaves it running. A run that ends while this runs keeps its end (the
// update takes only runs still running). The error names the database
// file.
func (s *Store) MarkStale() ([]int64, error) {
	var ids []int64
	err := s.each("reading the running runs", `SELECT id FROM runs WHERE status = ?`, []any{Running}, func(r *sql.Rows) error {
		var id int64
		err := r.Scan(&id)
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.pg && len(ids) > 0 {
		held, err := s.lockedRuns()
		if err != nil {
			return nil, err
		}
		ids = slices.DeleteFunc(ids, func(id int64) bool { return held[int64(uint32(int32(id)))] })
		if len(ids) > 0 {
			time.Sleep(staleRecheck) // the second look is runIsLive's, below
		}
	}
	var marked []int64
	err = s.inTx("marking runs killed midway incomplete", func(tx runner) error {
		marked = nil
		for _, id := range ids {
			if s.pg {
				live, err := s.runIsLive(tx, id)
				if err != nil {
					return err
				}
				if live {
					continue
				}
			}
			res, err := tx.exec(`UPDATE runs SET status = ?, verdict = ?, finished_at = COALESCE(finished_at, ?) WHERE id = ? AND status = ?`,
				Incomplete, VerdictKilled, time.Now().UTC().Format(time.RFC3339Nano), id, Running)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				marked = append(marked, id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return marked, nil
}

// Gone returns, of runs, the ids of those still running whose nightly's
// process is gone, each with why it looks so: on SQLite (a history of
// this host) its pid runs no process here; on PostgreSQL no session holds
// its lock (BeginRun), which its process held on any host for as long as
// it lived. The next nightly marks them incomplete (MarkStale). It writes
// nothing, and works on a read-only open.
func (s *Store) Gone(runs []Run) (map[int64]string, error) {
	held, err := s.lockedRuns()
	if err != nil {
		return nil, err
	}
	gone := map[int64]string{}
	for _, r := range runs {
		switch {
		case r.Status != Running:
		case s.pg && !held[int64(uint32(int32(r.ID)))]:
			gone[r.ID] = "no session holds its lock: its nightly's process ended"
		case !s.pg && !lockfile.Alive(r.PID):
			gone[r.ID] = fmt.Sprintf("pid %d is gone", r.PID)
		}
	}
	return gone, nil
}

// DriftRecord is one patch of one series at one commit.
type DriftRecord struct {
	Series string                `json:"series"`
	Commit string                `json:"commit"`
	Rev    string                `json:"rev"`
	Patch  string                `json:"patch"`
	Fit    patches.SeriesVerdict `json:"fit"` // the patch's fit (patches.Fit's words) or checkout.VerdictError
	Detail string                `json:"detail,omitempty"`
}

// Check is one outcome for JUnit and plots: drift per series, a build, an
// arm's validity, a regression check.
type Check struct {
	Name   string      `json:"name"`
	Kind   CheckKind   `json:"kind"`
	Status CheckStatus `json:"status"`
	Detail string      `json:"detail,omitempty"`
}

// AddCheck records a check. The error names the database file.
func (s *Store) AddCheck(runID int64, c Check) error {
	return s.inTx(fmt.Sprintf("recording a check of run %d", runID), func(tx runner) error { return addCheck(tx, runID, c) })
}

func addCheck(tx runner, runID int64, c Check) error {
	_, err := tx.exec(`INSERT INTO checks (run_id, name, kind, status, detail) VALUES (?, ?, ?, ?, ?)`, runID, c.Name, c.Kind, c.Status, c.Detail)
	return err
}

// TrialRecord is one trial's metrics with its samples.
type TrialRecord struct {
	Index       int     // 1-based trial number (stats.Trial.Index)
	Concurrency int     // requests in flight (0 is stored as 1)
	Wall        float64 // seconds, first request sent to last response done
	// Values holds the trial's metrics by stats.Table name, each in its
	// metric's unit (stats.Values gives them); each is stored in its
	// metric's column, and one left out is stored as NULL.
	Values  map[string]float64
	Errors  int // requests that failed (sglang.Sample.Err set)
	Samples []SampleRecord
}

// SampleRecord is one request, as sglang.Sample measured it.
type SampleRecord struct {
	Prompt int // index in the workload, 0-based
	// TTFT and E2E are seconds from the request's start to its first
	// output and to its end (columns ttft_s, e2e_s), not milliseconds.
	TTFT, E2E                      float64
	CompletionTokens, SpecVerifyCt int // tokens generated; speculative verify passes
	Error                          string
}

// ArmRecord is one arm of a run with its trials.
type ArmRecord struct {
	Name, Recipe, BuildKey string
	Invalid                bool    // its figures are no result: its output failed the bench's checks, or it had no verdict (an INVALID baseline)
	Agreement              float64 // share of prompts whose output agrees with the baseline's, 0..1
	Trials                 []TrialRecord
}

// AddArm records an arm with its trials and samples, in one transaction.
// The error names the database file.
func (s *Store) AddArm(runID int64, name, recipe, buildKey string, invalid bool, agreement float64, trials []TrialRecord) error {
	return s.inTx(fmt.Sprintf("recording arm %s of run %d", name, runID), func(tx runner) error {
		return addArm(tx, runID, ArmRecord{Name: name, Recipe: recipe, BuildKey: buildKey, Invalid: invalid, Agreement: agreement, Trials: trials})
	})
}

func addArm(tx runner, runID int64, a ArmRecord) error {
	armID, err := tx.insert(`INSERT INTO arms (run_id, name, recipe, build_key, invalid, agreement) VALUES (?, ?, ?, ?, ?, ?)`, runID, a.Name, a.Recipe, a.BuildKey, boolInt(a.Invalid), a.Agreement)
	if err != nil {
		return err
	}
	cols := []string{"arm_id", "idx", "concurrency", "wall_s", "errors", "n_samples"}
	for _, m := range stats.Table {
		cols = append(cols, m.Column)
	}
	insert := `INSERT INTO trials (` + strings.Join(cols, ", ") + `) VALUES (` + placeholders(len(cols)) + `)`
	for _, t := range a.Trials {
		args := []any{armID, t.Index, max(t.Concurrency, 1), t.Wall, t.Errors, len(t.Samples)}
		for _, m := range stats.Table {
			if v, ok := t.Values[m.Name]; ok {
				args = append(args, v)
			} else {
				args = append(args, nil)
			}
		}
		tid, err := tx.insert(insert, args...)
		if err != nil {
			return err
		}
		if err := addSamples(tx, tid, t.Samples); err != nil {
			return err
		}
	}
	return nil
}

// addSamples stores a trial's samples, up to 500 in one INSERT (3,500
// parameters, under SQLite's 32,766 and PostgreSQL's 65,535): one
// statement per trial, not one per request.
func addSamples(tx runner, trial int64, samples []SampleRecord) error {
	for len(samples) > 0 {
		n := min(len(samples), 500)
		rows := make([]string, n)
		args := make([]any, 0, 7*n)
		for i, sm := range samples[:n] {
			rows[i] = `(` + placeholders(7) + `)`
			args = append(args, trial, sm.Prompt, sm.TTFT, sm.E2E, sm.CompletionTokens, sm.SpecVerifyCt, sm.Error)
		}
		if _, err := tx.exec(`INSERT INTO samples (trial_id, prompt, ttft_s, e2e_s, completion_tokens, spec_verify_ct, error) VALUES `+strings.Join(rows, ", "), args...); err != nil {
			return err
		}
		samples = samples[n:]
	}
	return nil
}

// boolInt is b as the 0 or 1 the schema's INTEGER flags hold.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// column is the trials column of metric, a stats.Table name.
func column(metric string) (string, error) {
	m, ok := stats.Lookup(metric)
	if !ok {
		return "", fmt.Errorf("unknown metric %q; known: %s", metric, stats.Known())
	}
	return m.Column, nil
}

// Window returns the per-trial values of metric (a stats.Table name, in
// its unit) for arm at concurrency level over the last n reference runs
// before run id before (0: all), newest run first, and the ids of those
// runs: like is compared with like, level by level. Runs whose arpatch
// did not record the metric yet (NULL: before its migration) are left
// out. A reference run is complete, on hardwareKey, of the
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
	what := fmt.Sprintf("reading the reference window of %s %s", arm, metric)
	// The reference starts at the newest accepted run, if any.
	var since int64
	err = s.x().row(`SELECT COALESCE(MAX(id), 0) FROM runs WHERE hardware_key = ? AND workload = ? AND accepted = 1 AND (? = 0 OR id < ?)`,
		hardwareKey, workload, before, before).Scan(&since)
	if err != nil {
		return nil, nil, s.wrap(what, err)
	}
	q := `SELECT id FROM runs WHERE hardware_key = ? AND workload = ? AND status = ? AND (? = 0 OR id < ?) AND id >= ?
		AND (accepted = 1 OR (COALESCE(exit_code, 0) != ? AND NOT EXISTS (SELECT 1 FROM checks
			WHERE checks.run_id = runs.id AND checks.status = ? AND checks.kind IN (` + placeholders(len(barsReference)) + `))))
		AND EXISTS (SELECT 1 FROM arms JOIN trials ON trials.arm_id = arms.id
			WHERE arms.run_id = runs.id AND arms.name = ? AND arms.invalid = 0 AND trials.concurrency = ? AND trials.` + col + ` IS NOT NULL)
		ORDER BY id DESC LIMIT ?`
	args := []any{hardwareKey, workload, Complete, before, before, since, ExitFailedChecks, CheckFail}
	for _, k := range barsReference {
		args = append(args, k)
	}
	var ids []int64
	err = s.each(what, q, append(args, arm, level, n), func(r *sql.Rows) error {
		var id int64
		err := r.Scan(&id)
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	var vals []float64
	for _, id := range ids {
		err := s.each(what, `SELECT t.`+col+` FROM trials t JOIN arms a ON t.arm_id = a.id WHERE a.run_id = ? AND a.name = ? AND t.concurrency = ? ORDER BY t.idx`,
			[]any{id, arm, level}, func(r *sql.Rows) error {
				var v sql.NullFloat64
				if err := r.Scan(&v); err != nil {
					return fmt.Errorf("run %d: %w", id, err)
				}
				if v.Valid {
					vals = append(vals, v.Float64)
				}
				return nil
			})
		if err != nil {
			return nil, nil, err
		}
	}
	return vals, ids, nil
}

// Runs lists the newest runs first, at most limit (0: all).
func (s *Store) Runs(limit int) ([]Run, error) {
	q := `ORDER BY id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	return s.selectRuns("reading runs", q)
}

// selectRuns returns the runs that rest (a WHERE, ORDER BY or LIMIT
// clause, with args) selects; what says what for the error.
func (s *Store) selectRuns(what, rest string, args ...any) ([]Run, error) {
	q := `SELECT id, started_at, finished_at, status, pid, exit_code, hardware_key, sglang_commit, upstream_head, series_hash, arpatch_version, verdict, workload, accepted FROM runs ` + rest
	var out []Run
	err := s.each(what, q, args, func(rows *sql.Rows) error {
		var r Run
		var started string
		var finished sql.NullString
		var exit sql.NullInt64
		if err := rows.Scan(&r.ID, &started, &finished, &r.Status, &r.PID, &exit, &r.HardwareKey, &r.SGLangCommit, &r.UpstreamHead, &r.SeriesHash, &r.ArpatchVersion, &r.Verdict, &r.Workload, &r.Accepted); err != nil {
			return err
		}
		var err error
		if r.StartedAt, err = parseTime(r.ID, "started_at", started); err != nil {
			return err
		}
		if finished.Valid {
			t, err := parseTime(r.ID, "finished_at", finished.String)
			if err != nil {
				return err
			}
			r.FinishedAt = &t
		}
		if exit.Valid {
			e := int(exit.Int64)
			r.ExitCode = &e
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// parseTime reads a time stored as RFC 3339 text in column col of run id.
func parseTime(id int64, col, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return t, fmt.Errorf("run %d: %s: %w", id, col, err)
	}
	return t, nil
}

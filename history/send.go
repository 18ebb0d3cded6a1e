package history

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Send moves every finished run of from, oldest first, into to: the runs
// a nightly kept in a local history while its shared history could not
// be reached or written (nightly's history.keep). Each run goes into to
// in one transaction, whole, with its own start, end, status, exit code
// and verdict (importRun), and is deleted from from only once to holds
// all of it (held: its arms, trials, samples, checks, drift and
// environment counted there), in another transaction. A run to holds
// already (the same hardware key, workload, start and pid) is that same
// night: the row its nightly began there before the shared history
// failed it partway, or a copy sent before a crash between the two
// transactions; it is replaced by the kept run, so it is never lost nor
// stored twice. Runs still running in from are left: mark them first
// (MarkStale, under the nightly lock). It returns the ids the runs got in
// to (or had there), and the first error, naming the history it
// concerns; the runs not yet sent stay in from.
func Send(from, to *Store) ([]int64, error) {
	runs, err := from.selectRuns("reading the runs to send", `WHERE status <> ? ORDER BY id`, Running)
	if err != nil {
		return nil, err
	}
	var sent []int64
	for _, r := range runs {
		o, err := from.outcome(r.ID)
		if err != nil {
			return sent, err
		}
		id, err := to.importRun(r, o)
		if err != nil {
			return sent, err
		}
		if err := to.held(id, o); err != nil {
			return sent, fmt.Errorf("%w; run %d stays in %s", err, r.ID, from.Path)
		}
		if err := from.deleteRun(r.ID); err != nil {
			return sent, err
		}
		sent = append(sent, id)
	}
	return sent, nil
}

// held checks that run id holds all of o: as many arms, trials and
// samples of each arm, checks, drift records and environment keys.
func (s *Store) held(id int64, o Outcome) error {
	var arms, trials, samples, checks, drift, env int
	err := s.x().row(`SELECT (SELECT COUNT(*) FROM arms WHERE run_id = ?),
		(SELECT COUNT(*) FROM trials t JOIN arms a ON t.arm_id = a.id WHERE a.run_id = ?),
		(SELECT COUNT(*) FROM samples sm JOIN trials t ON sm.trial_id = t.id JOIN arms a ON t.arm_id = a.id WHERE a.run_id = ?),
		(SELECT COUNT(*) FROM checks WHERE run_id = ?), (SELECT COUNT(*) FROM drift WHERE run_id = ?), (SELECT COUNT(*) FROM environment WHERE run_id = ?)`,
		id, id, id, id, id, id).Scan(&arms, &trials, &samples, &checks, &drift, &env)
	if err != nil {
		return s.wrap(fmt.Sprintf("reading back run %d", id), err)
	}
	var wt, ws int
	for _, a := range o.Arms {
		wt += len(a.Trials)
		for _, t := range a.Trials {
			ws += len(t.Samples)
		}
	}
	got := []int{arms, trials, samples, checks, drift, env}
	want := []int{len(o.Arms), wt, ws, len(o.Checks), len(o.Drift), len(o.Env)}
	if !slices.Equal(got, want) {
		return fmt.Errorf("history %s: run %d holds %d arms, %d trials, %d samples, %d checks, %d drift records and %d environment keys; the kept run has %d, %d, %d, %d, %d and %d",
			s.Path, id, arms, trials, samples, checks, drift, env, want[0], want[1], want[2], want[3], want[4], want[5])
	}
	return nil
}

// outcome reads back everything Record stored for run id, samples
// included.
func (s *Store) outcome(id int64) (Outcome, error) {
	d, err := s.Show(id)
	if err != nil {
		return Outcome{}, err
	}
	o := Outcome{SGLangCommit: d.Run.SGLangCommit, UpstreamHead: d.Run.UpstreamHead, Env: d.Run.Env, Drift: d.Drift, Checks: d.Checks, Status: d.Run.Status, Verdict: d.Run.Verdict}
	if d.Run.ExitCode != nil {
		o.ExitCode = *d.Run.ExitCode
	}
	what := fmt.Sprintf("reading the samples of run %d", id)
	samples := map[int64][]SampleRecord{} // by trial
	err = s.each(what, `SELECT sm.trial_id, sm.prompt, sm.ttft_s, sm.e2e_s, sm.completion_tokens, sm.spec_verify_ct, COALESCE(sm.error, '')
		FROM arms a JOIN trials t ON t.arm_id = a.id JOIN samples sm ON sm.trial_id = t.id WHERE a.run_id = ? ORDER BY sm.rowid`, []any{id}, func(r *sql.Rows) error {
		var trial int64
		var x SampleRecord
		err := r.Scan(&trial, &x.Prompt, &x.TTFT, &x.E2E, &x.CompletionTokens, &x.SpecVerifyCt, &x.Error)
		samples[trial] = append(samples[trial], x)
		return err
	})
	if err != nil {
		return Outcome{}, err
	}
	// Each arm's trials' ids, in Show's order (an arm without trials
	// comes as one row of NULL).
	var trials [][]int64
	prev := int64(-1)
	err = s.each(what, `SELECT a.id, t.id FROM arms a LEFT JOIN trials t ON t.arm_id = a.id WHERE a.run_id = ? ORDER BY a.id, t.idx, t.concurrency`, []any{id}, func(r *sql.Rows) error {
		var arm int64
		var trial sql.NullInt64
		if err := r.Scan(&arm, &trial); err != nil {
			return err
		}
		if arm != prev {
			trials, prev = append(trials, nil), arm
		}
		if trial.Valid {
			trials[len(trials)-1] = append(trials[len(trials)-1], trial.Int64)
		}
		return nil
	})
	if err != nil {
		return Outcome{}, err
	}
	for k, a := range d.Arms {
		if k >= len(trials) || len(trials[k]) != len(a.Trials) {
			return Outcome{}, fmt.Errorf("history %s: run %d changed while it was read", s.Path, id)
		}
		ar := ArmRecord{Name: a.Name, Recipe: a.Recipe, BuildKey: a.BuildKey, Invalid: a.Invalid}
		if a.Agreement != nil {
			ar.Agreement = *a.Agreement
		}
		for j, t := range a.Trials {
			ar.Trials = append(ar.Trials, TrialRecord{Index: t.Index, Concurrency: t.Concurrency, Wall: t.Wall, Values: t.Values, Errors: t.Errors, Samples: samples[trials[k][j]]})
		}
		o.Arms = append(o.Arms, ar)
	}
	return o, nil
}

// importRun stores run r with outcome o as a finished run, in one
// transaction, and returns its id here. A run of the same hardware key,
// workload, start and pid already here is the same night (Send): its
// contents are replaced by r's and o's, under its id.
func (s *Store) importRun(r Run, o Outcome) (int64, error) {
	var id int64
	started := r.StartedAt.Format(time.RFC3339Nano)
	err := s.inTx(fmt.Sprintf("storing run %s of %s", started, r.HardwareKey), func(tx runner) error {
		var finished any
		if r.FinishedAt != nil {
			finished = r.FinishedAt.Format(time.RFC3339Nano)
		}
		err := tx.row(`SELECT id FROM runs WHERE hardware_key = ? AND workload = ? AND started_at = ? AND pid = ?`, r.HardwareKey, r.Workload, started, r.PID).Scan(&id)
		switch {
		case err == nil:
			if err := clearRun(tx, id, false); err != nil {
				return err
			}
			_, err = tx.exec(`UPDATE runs SET finished_at = ?, status = ?, exit_code = ?, sglang_commit = ?, upstream_head = ?, series_hash = ?, arpatch_version = ?, verdict = ?
				WHERE id = ?`, finished, r.Status, r.ExitCode, r.SGLangCommit, r.UpstreamHead, r.SeriesHash, r.ArpatchVersion, r.Verdict, id)
			if err != nil {
				return err
			}
		case errors.Is(err, sql.ErrNoRows):
			id, err = tx.insert(`INSERT INTO runs (started_at, finished_at, status, pid, exit_code, hardware_key, sglang_commit, upstream_head, series_hash, arpatch_version, verdict, workload)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, started, finished, r.Status, r.PID, r.ExitCode, r.HardwareKey, r.SGLangCommit, r.UpstreamHead, r.SeriesHash, r.ArpatchVersion, r.Verdict, r.Workload)
			if err != nil {
				return err
			}
		default:
			return err
		}
		return record(tx, id, o)
	})
	return id, err
}

// deleteRun removes run id and everything stored with it, in one
// transaction.
func (s *Store) deleteRun(id int64) error {
	return s.inTx(fmt.Sprintf("deleting run %d", id), func(tx runner) error { return clearRun(tx, id, true) })
}

// clearRun removes, in tx, everything stored with run id, and its row
// too when row is set.
func clearRun(tx runner, id int64, row bool) error {
	qs := []string{
		`DELETE FROM samples WHERE trial_id IN (SELECT t.id FROM trials t JOIN arms a ON t.arm_id = a.id WHERE a.run_id = ?)`,
		`DELETE FROM trials WHERE arm_id IN (SELECT id FROM arms WHERE run_id = ?)`,
		`DELETE FROM arms WHERE run_id = ?`,
		`DELETE FROM checks WHERE run_id = ?`,
		`DELETE FROM drift WHERE run_id = ?`,
		`DELETE FROM environment WHERE run_id = ?`,
	}
	if row {
		qs = append(qs, `DELETE FROM runs WHERE id = ?`)
	}
	for _, q := range qs {
		if _, err := tx.exec(q, id); err != nil {
			return err
		}
	}
	return nil
}

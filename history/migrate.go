package history

// The schema's versions and the steps between them.

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
)

// migrations[i] brings the schema from version i to i+1.
var migrations = []string{
	// 1: runs, environment, drift, arms, trials, samples.
	`CREATE TABLE runs (
		id INTEGER PRIMARY KEY,
		started_at TEXT NOT NULL,
		finished_at TEXT,
		status TEXT NOT NULL,           -- running, complete, failed, incomplete
		pid INTEGER NOT NULL,
		exit_code INTEGER,
		hardware_key TEXT NOT NULL,
		sglang_commit TEXT NOT NULL DEFAULT '',
		upstream_head TEXT NOT NULL DEFAULT '',
		series_hash TEXT NOT NULL DEFAULT '',
		arpatch_version TEXT NOT NULL DEFAULT '',
		verdict TEXT NOT NULL DEFAULT ''
	);
	CREATE TABLE environment (
		run_id INTEGER NOT NULL REFERENCES runs(id),
		key TEXT NOT NULL,
		value TEXT NOT NULL,
		PRIMARY KEY (run_id, key)
	);
	CREATE TABLE drift (
		run_id INTEGER NOT NULL REFERENCES runs(id),
		series TEXT NOT NULL,
		commit_hash TEXT NOT NULL,
		rev TEXT NOT NULL,
		patch TEXT NOT NULL,
		fit TEXT NOT NULL,              -- exact, offset, applied, conflict
		detail TEXT NOT NULL DEFAULT ''
	);
	CREATE TABLE arms (
		id INTEGER PRIMARY KEY,
		run_id INTEGER NOT NULL REFERENCES runs(id),
		name TEXT NOT NULL,
		recipe TEXT NOT NULL DEFAULT '',
		build_key TEXT NOT NULL DEFAULT '',
		invalid INTEGER NOT NULL DEFAULT 0
	);
	CREATE TABLE trials (
		id INTEGER PRIMARY KEY,
		arm_id INTEGER NOT NULL REFERENCES arms(id),
		idx INTEGER NOT NULL,
		wall_s REAL, tok_s REAL, decode_tok_s REAL, accept_length REAL,
		ttft_ms_p50 REAL, ttft_ms_p99 REAL, itl_ms_p50 REAL, tpot_ms REAL,
		errors INTEGER
	);
	CREATE TABLE samples (
		trial_id INTEGER NOT NULL REFERENCES trials(id),
		prompt INTEGER, ttft_s REAL, e2e_s REAL, completion_tokens INTEGER, spec_verify_ct INTEGER, error TEXT
	);
	CREATE INDEX runs_by_hw ON runs(hardware_key, status, id);`,
	// 2: every check's outcome (for JUnit and plot marks), and the
	// agreement share per arm.
	`CREATE TABLE checks (
		run_id INTEGER NOT NULL REFERENCES runs(id),
		name TEXT NOT NULL,
		kind TEXT NOT NULL,             -- drift, build, validity, regression, ab
		status TEXT NOT NULL,           -- pass, fail, skip
		detail TEXT NOT NULL DEFAULT ''
	);
	ALTER TABLE arms ADD COLUMN agreement REAL;`,
	// 3: the workload a run benched (only runs of one workload compare),
	// and runs accepted as a new reference after a deliberate change.
	`ALTER TABLE runs ADD COLUMN workload TEXT NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN accepted INTEGER NOT NULL DEFAULT 0;`,
	// 4: the concurrency level of each trial (a run may sweep several);
	// trials stored before it ran at one level, recorded as 1.
	`ALTER TABLE trials ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 1;`,
	// 5: TPOT p99 per trial (stats.Table's tpot_ms_p99, ms), computed
	// for the trials stored before it from their samples (fills[5]); a
	// trial without samples has none (NULL), and is left out of its
	// windows, plots and exports.
	`ALTER TABLE trials ADD COLUMN tpot_ms_p99 REAL;`,
	// 6: an index for every way the commands reach a row (a run's arms,
	// an arm's trials, a trial's samples, a run's checks and drift; runs
	// by series and by status), so that each touches only its own rows
	// (TestQueryPlansUseIndexes).
	`CREATE INDEX runs_by_series ON runs(hardware_key, workload, id);
	CREATE INDEX runs_by_status ON runs(status, id);
	CREATE INDEX arms_by_run ON arms(run_id);
	CREATE INDEX trials_by_arm ON trials(arm_id, idx, concurrency);
	CREATE INDEX samples_by_trial ON samples(trial_id);
	CREATE INDEX checks_by_run ON checks(run_id);
	CREATE INDEX drift_by_run ON drift(run_id);`,
	// 7: each trial's count of samples, written with them (Record), so
	// that show and export count none (docs/performance.md); the trials
	// stored before it are counted here.
	`ALTER TABLE trials ADD COLUMN n_samples INTEGER NOT NULL DEFAULT 0;
	UPDATE trials SET n_samples = (SELECT COUNT(*) FROM samples WHERE samples.trial_id = trials.id);`,
}

// fills[v], when set, runs after migrations[v-1] in its transaction: it
// computes the values of the metric that migration adds for the trials
// stored before it.
var fills = map[int]func(runner) error{
	5: func(tx runner) error { return fillFromSamples(tx, "tpot_ms_p99") },
}

// fromSamples are the metrics (stats.Table names) that stats.Compute gets
// from what the samples table keeps of a request: its TTFT, E2E,
// completion tokens, verify count and error. tok_s needs the trial's wall
// time and itl_ms_p50 each token's arrival, which no sample keeps.
// TestFromSamples derives this list from Compute; a metric added later
// that Compute reads from those fields alone belongs here.
var fromSamples = map[string]bool{"decode_tok_s": true, "accept_length": true, "ttft_ms_p50": true, "ttft_ms_p99": true, "tpot_ms": true, "tpot_ms_p99": true}

// fillFromSamples sets metric (a stats.Table name) of every trial with
// stored samples to what stats.Compute gives from them, when the metric
// is one of fromSamples. Any other metric is left NULL for the trials
// stored before its column (shown as "none" by exports, windows and
// plots), not set to the 0 that Compute would give without its inputs.
func fillFromSamples(tx runner, metric string) error {
	m, ok := stats.Lookup(metric)
	if !ok {
		return fmt.Errorf("unknown metric %q", metric)
	}
	if !fromSamples[metric] {
		return nil
	}
	byTrial := map[int64][]sglang.Sample{}
	var order []int64
	err := tx.each("reading the samples", `SELECT trial_id, COALESCE(prompt, 0), COALESCE(ttft_s, 0), COALESCE(e2e_s, 0), COALESCE(completion_tokens, 0),
			COALESCE(spec_verify_ct, 0), COALESCE(error, '') FROM samples ORDER BY trial_id, rowid`, nil, func(rows *sql.Rows) error {
		var id int64
		var x sglang.Sample
		if err := rows.Scan(&id, &x.Prompt, &x.TTFT, &x.E2E, &x.CompletionTokens, &x.SpecVerifyCt, &x.Err); err != nil {
			return fmt.Errorf("samples of trial %d: %w", id, err)
		}
		if _, seen := byTrial[id]; !seen {
			order = append(order, id)
		}
		byTrial[id] = append(byTrial[id], x)
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range order {
		v := m.Get(stats.Compute(stats.Trial{Samples: byTrial[id]}))
		if _, err := tx.exec(`UPDATE trials SET `+m.Column+` = ? WHERE id = ?`, v, id); err != nil {
			return fmt.Errorf("trial %d: %w", id, err)
		}
	}
	return nil
}

// SchemaVersion is the version this arpatch writes.
var SchemaVersion = len(migrations)

// OpenAt opens (creating if needed) the history at path and migrates it
// only up to schema version v (1..SchemaVersion), for the tests of what
// meets an older history, in this package and its callers: an older
// arpatch's history without the hand-written undoing of a migration. It
// takes no run lock and sets no WAL mode; a history it opened is closed
// with Close.
func OpenAt(path string, v int) (*Store, error) {
	if IsURL(path) {
		db, err := sql.Open("pgx", path)
		if err != nil {
			return nil, err
		}
		s := &Store{Path: path, db: db, pg: true, live: map[int64]*runLock{}}
		var schema string
		if err := db.QueryRow(`SELECT current_schema()`).Scan(&schema); err != nil {
			return nil, err
		}
		s.space = lockSpace(schema)
		return s, s.migrate(v)
	}
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	s := &Store{Path: path, db: db}
	return s, s.migrate(v)
}

// Version returns the schema version of the database.
func (s *Store) Version() (int, error) {
	var v int
	err := s.x().row(`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// migrate brings the schema to version to, one transaction per step,
// each holding the write lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: the
// schema's advisory lock) and skipping a step another opener applied
// meanwhile. The steps are migrations or, on PostgreSQL, pgMigrations.
//
// The steps are written here rather than through a migration library
// (goose, golang-migrate): a step may compute values in Go (fills, from
// stats.Compute); histories already in use keep their versions in
// schema_migrations(version, applied_at), a table golang-migrate would
// take for its own and goose would not read; and openers of a brand-new
// SQLite history at once must skip what another applied, which neither
// library's SQLite support does (TestConcurrentOpenOfNewDatabase). What
// the two dialects need beyond that is the lock above.
func (s *Store) migrate(to int) error {
	steps := migrations
	if s.pg {
		steps = pgMigrations
	}
	err := s.inTx("creating the schema version table", func(tx runner) error {
		if err := s.lockSchema(tx); err != nil {
			return err
		}
		return s.versionTable(tx)
	})
	if err != nil {
		return err
	}
	cur, err := s.Version()
	if err != nil {
		return s.wrap("reading the schema version", err)
	}
	if cur > SchemaVersion {
		return fmt.Errorf("history %s has schema version %d; this arpatch knows up to %d: use a newer arpatch", s.Path, cur, SchemaVersion)
	}
	if cur < to && cur > 0 {
		s.migratedFrom = cur
	}
	for v := cur; v < to; v++ {
		err := s.inTx(fmt.Sprintf("migration to version %d", v+1), func(tx runner) error {
			if err := s.lockSchema(tx); err != nil {
				return err
			}
			// Another process opening the same database may have applied
			// this step since cur was read: read again, holding the write
			// lock, and skip a step already applied.
			var now int
			if err := tx.row(`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&now); err != nil {
				return err
			}
			if now > v {
				return nil
			}
			if _, err := tx.exec(steps[v]); err != nil {
				return err
			}
			if fill := fills[v+1]; fill != nil {
				if err := fill(tx); err != nil {
					return err
				}
			}
			_, err := tx.exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v+1, time.Now().UTC().Format(time.RFC3339))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

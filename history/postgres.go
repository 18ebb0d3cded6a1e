package history

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// A history on PostgreSQL (through pgx) has the schema and the queries of
// an SQLite one: pgMigrations[i] is migrations[i] in PostgreSQL's types
// (TestSchemasMatch), and every query is written once with ? parameters,
// which the runner numbers ($1, $2, ...) for PostgreSQL. What SQLite's
// single writer gives for free, PostgreSQL gets from transactions and
// advisory locks, so that nightlies on several hosts can share one
// history:
//
//   - each migration step runs in a transaction holding the schema lock
//     (pg_advisory_xact_lock), re-reading the version first, as SQLite's
//     BEGIN IMMEDIATE does;
//   - a run this process begins holds a session lock on its id
//     (pg_advisory_lock) from before its row is committed until its end
//     is recorded, on a connection of its own; MarkStale marks
//     incomplete only runs whose lock no session holds (their process
//     died, its connection with it), never a live run of another host;
//   - Record writes all of a run in one transaction, as on SQLite.

// lockSpace is the first key of every advisory lock arpatch takes
// ("arpt"); the second is 0 for the schema or a run's id.
const lockSpace int32 = 0x61727074

// IsURL reports whether target names a PostgreSQL history, a postgres://
// or postgresql:// URL, rather than an SQLite file.
func IsURL(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// connectTimeout bounds connecting to a server whose URL sets no
// connect_timeout: an unreachable server is an error in seconds, not
// minutes.
const connectTimeout = 10 * time.Second

// openPostgres opens the history at a postgres:// URL and, unless
// readOnly, migrates it (readOnly: default_transaction_read_only, so
// that the server refuses every write, and the schema must be current).
// A password in the URL is refused: the URL is printed in errors,
// remedies and reports, so it goes in PGPASSWORD or ~/.pgpass, which pgx
// reads.
func openPostgres(raw string, readOnly bool) (*Store, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", raw, err)
	}
	if _, set := u.User.Password(); set || u.Query().Has("password") {
		u.User = url.User(u.User.Username())
		q := u.Query()
		q.Del("password")
		u.RawQuery = q.Encode()
		return nil, fmt.Errorf("history %s: the URL holds a password, which arpatch would print in its errors and reports: put it in ~/.pgpass or PGPASSWORD instead", u.Redacted())
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", raw, err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	if readOnly {
		cfg.RuntimeParams["default_transaction_read_only"] = "on"
	}
	db := stdlib.OpenDB(*cfg)
	s := &Store{Path: raw, db: db, pg: true, live: map[int64]*sql.Conn{}}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout+5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close() // the error below is what to report
		return nil, fmt.Errorf("history %s: cannot reach the server: %w", raw, err)
	}
	if readOnly {
		err = s.current()
	} else {
		err = s.migrate(SchemaVersion)
	}
	if err != nil {
		_ = db.Close() // err is what to report
		return nil, err
	}
	return s, nil
}

// rebind numbers q's ? parameters for PostgreSQL ($1, $2, ...), leaving
// those inside quotes alone.
func rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// lockSchema, in a transaction on PostgreSQL, waits for the schema lock,
// which the transaction holds until it ends. SQLite's transactions hold
// its write lock from their start (BEGIN IMMEDIATE): nothing to do there.
func (s *Store) lockSchema(tx runner) error {
	if !s.pg {
		return nil
	}
	_, err := tx.exec(`SELECT pg_advisory_xact_lock(?, 0)`, lockSpace)
	return err
}

// holdRun, in the transaction that inserts run id on connection c, takes
// the run's session lock, held after the commit until releaseRun.
func (s *Store) holdRun(tx runner, id int64) error {
	_, err := tx.exec(`SELECT pg_advisory_lock(?, ?)`, lockSpace, int32(id))
	return err
}

// releaseRun ends the session lock of run id, if this Store holds it,
// and returns its connection to the pool; a connection whose unlock
// fails is discarded (its session, and so the lock, ends with it).
func (s *Store) releaseRun(id int64) {
	s.mu.Lock()
	c := s.live[id]
	delete(s.live, id)
	s.mu.Unlock()
	if c == nil {
		return
	}
	if _, err := c.ExecContext(context.Background(), rebind(`SELECT pg_advisory_unlock(?, ?)`), lockSpace, int32(id)); err != nil {
		discard(c)
		return
	}
	_ = c.Close() // back to the pool, its lock released
}

// discard closes c's session instead of returning it to the pool, so
// that the session locks it holds end.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn }) // ErrBadConn makes database/sql close it
	_ = c.Close()                                           // already closed: no error worth reporting
}

// runIsLive reports, in a transaction, whether a session holds run id's
// lock (its nightly is still running): trying the lock for the
// transaction fails then.
func (s *Store) runIsLive(tx runner, id int64) (bool, error) {
	var free bool
	err := tx.row(`SELECT pg_try_advisory_xact_lock(?, ?)`, lockSpace, int32(id)).Scan(&free)
	return !free, err
}

// pgMigrations[i] is migrations[i] in PostgreSQL's types: identity
// columns for SQLite's INTEGER PRIMARY KEY, DOUBLE PRECISION for REAL
// (PostgreSQL's REAL has 24 bits), BIGINT for ids, and a rowid identity
// column for the tables whose insertion order SQLite's implicit rowid
// keeps (drift, checks, samples).
var pgMigrations = []string{
	`CREATE TABLE runs (
		id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		started_at TEXT NOT NULL,
		finished_at TEXT,
		status TEXT NOT NULL,
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
		run_id BIGINT NOT NULL REFERENCES runs(id),
		key TEXT NOT NULL,
		value TEXT NOT NULL,
		PRIMARY KEY (run_id, key)
	);
	CREATE TABLE drift (
		rowid BIGINT GENERATED ALWAYS AS IDENTITY,
		run_id BIGINT NOT NULL REFERENCES runs(id),
		series TEXT NOT NULL,
		commit_hash TEXT NOT NULL,
		rev TEXT NOT NULL,
		patch TEXT NOT NULL,
		fit TEXT NOT NULL,
		detail TEXT NOT NULL DEFAULT ''
	);
	CREATE TABLE arms (
		id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		run_id BIGINT NOT NULL REFERENCES runs(id),
		name TEXT NOT NULL,
		recipe TEXT NOT NULL DEFAULT '',
		build_key TEXT NOT NULL DEFAULT '',
		invalid INTEGER NOT NULL DEFAULT 0
	);
	CREATE TABLE trials (
		id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		arm_id BIGINT NOT NULL REFERENCES arms(id),
		idx INTEGER NOT NULL,
		wall_s DOUBLE PRECISION, tok_s DOUBLE PRECISION, decode_tok_s DOUBLE PRECISION, accept_length DOUBLE PRECISION,
		ttft_ms_p50 DOUBLE PRECISION, ttft_ms_p99 DOUBLE PRECISION, itl_ms_p50 DOUBLE PRECISION, tpot_ms DOUBLE PRECISION,
		errors INTEGER
	);
	CREATE TABLE samples (
		rowid BIGINT GENERATED ALWAYS AS IDENTITY,
		trial_id BIGINT NOT NULL REFERENCES trials(id),
		prompt INTEGER, ttft_s DOUBLE PRECISION, e2e_s DOUBLE PRECISION, completion_tokens INTEGER, spec_verify_ct INTEGER, error TEXT
	);
	CREATE INDEX runs_by_hw ON runs(hardware_key, status, id);`,
	`CREATE TABLE checks (
		rowid BIGINT GENERATED ALWAYS AS IDENTITY,
		run_id BIGINT NOT NULL REFERENCES runs(id),
		name TEXT NOT NULL,
		kind TEXT NOT NULL,
		status TEXT NOT NULL,
		detail TEXT NOT NULL DEFAULT ''
	);
	ALTER TABLE arms ADD COLUMN agreement DOUBLE PRECISION;`,
	migrations[2],
	migrations[3],
	`ALTER TABLE trials ADD COLUMN tpot_ms_p99 DOUBLE PRECISION;`,
	migrations[5],
}

package history

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
//     is recorded, on a connection of its own (runLock), taken again on a
//     new connection when that one is lost (a server restart); MarkStale
//     marks incomplete only runs whose lock no session holds (their
//     process died, its connection with it), never a live run of another
//     host, and a live run that was marked while it had lost its lock
//     is running again once it holds it (runLock.retake);
//   - Record writes all of a run in one transaction, as on SQLite.
//
// The locks' first key is the history's (lockSpace of its schema), so
// that histories in other schemas of one database never share a lock.

// lockSpace is the first key of the advisory locks of the history in
// schema: "arpatch " and the schema's name, hashed (FNV-1a) to 31 bits;
// the second key is 0 for the schema or a run's id.
func lockSpace(schema string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte("arpatch " + schema)) // a hash.Hash never fails
	return int32(h.Sum32() & 0x7fffffff)
}

// connectTimeout bounds connecting to a server whose URL sets no
// connect_timeout: an unreachable server is an error in seconds, not
// minutes.
const connectTimeout = 10 * time.Second

// pgMode is how openPostgres opens a history.
type pgMode int

const (
	pgWrite    pgMode = iota // migrated, made if need be (Open)
	pgRead                   // read-only, the schema current (OpenRead)
	pgExisting               // migrated, but refused when no history is there (OpenExisting)
)

// openPostgres opens the history at a postgres:// URL in mode: pgRead
// sets default_transaction_read_only, so that the server refuses every
// write, and the schema must be current; pgWrite and pgExisting migrate
// it, and pgExisting refuses a database without arpatch's schema. A URL
// that does not parse, or holds a password, is refused as CheckTarget
// refuses it; a server that cannot be reached, or that refuses the
// connection, is an error saying which (connectError).
func openPostgres(raw string, mode pgMode) (*Store, error) {
	cfg, err := pgConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("history %w", err)
	}
	readOnly := mode == pgRead
	if readOnly {
		cfg.RuntimeParams["default_transaction_read_only"] = "on"
	}
	db := stdlib.OpenDB(*cfg)
	s := &Store{Path: raw, db: db, pg: true, live: map[int64]*runLock{}}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout+5*time.Second)
	defer cancel()
	var current sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&current); err != nil {
		_ = db.Close() // the error below is what to report
		return nil, connectError(raw, err)
	}
	if !current.Valid { // no schema of search_path exists
		_ = db.Close() // nothing was read or written
		path := cmp.Or(cfg.RuntimeParams["search_path"], "the server's default ($user, public)")
		return nil, fmt.Errorf("history %s: no schema of its search_path (%s) exists in database %s: create it (`CREATE SCHEMA name` as a user with CREATE on the database), or name one that exists", Redact(raw), path, cfg.Database)
	}
	schema := current.String
	s.space = lockSpace(schema)
	if mode == pgExisting {
		var made bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&made); err != nil || !made {
			_ = db.Close() // the error below is what to report
			if err != nil {
				return nil, s.wrap("reading the schema", err)
			}
			return nil, fmt.Errorf("history %s has no arpatch schema (no schema_migrations table in schema %s): not a history a nightly wrote; the history commands (accept included) never make one", s.Path, schema)
		}
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

// connectError is why the history at target could not be opened: the
// server cannot be reached (down, a wrong host or port: pgx could not
// talk to it), or it refused the connection (it answered with an error:
// a wrong password or user, no such database, a URL parameter it does
// not know). pgx's error lists each address it tried, one per line, and
// says the same cause again for each fallback (with TLS, then without):
// each cause is said once, on one line.
func connectError(target string, err error) error {
	what, remedy := "cannot reach the server", ""
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		what = "the server refused the connection"
		switch pe.Code {
		case "28P01", "28000": // invalid_password, invalid_authorization_specification
			remedy = ": check the user in the URL, and its password in ~/.pgpass or PGPASSWORD"
		case "3D000": // invalid_catalog_name
			remedy = ": create the database (createdb), or name one that exists"
		case "42704", "22023": // undefined_object (an unknown parameter), invalid_parameter_value
			remedy = ": a query parameter of the URL is one the server does not take; remove it or fix its value"
		}
	}
	return fmt.Errorf("history %s: %s: %s%s", Redact(target), what, oneLine(err), remedy)
}

// oneLine is err's text on one line: pgx's "failed to connect to
// `user=U database=D`:" and its lines, one per address tried, joined with
// "; " and each said once.
func oneLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || slices.Contains(parts, l) {
			continue
		}
		parts = append(parts, l)
	}
	if len(parts) > 1 && strings.HasSuffix(parts[0], ":") {
		return parts[0] + " " + strings.Join(parts[1:], "; ")
	}
	return strings.Join(parts, "; ")
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
	_, err := tx.exec(`SELECT pg_advisory_xact_lock(?, 0)`, s.space)
	return err
}

// holdRun, in the transaction that inserts run id on connection c, takes
// the run's session lock, held after the commit until releaseRun.
func (s *Store) holdRun(tx runner, id int64) error {
	_, err := tx.exec(`SELECT pg_advisory_lock(?, ?)`, s.space, int32(id))
	return err
}

// lockCheck is how often a run's lock connection is checked (runLock.keep),
// and so about how long a run goes without its lock after its server
// restarts. A variable for tests.
var lockCheck = 2 * time.Second

// staleRecheck is how long MarkStale waits before it looks again at the
// runs whose lock it found free, on PostgreSQL: three times lockCheck,
// so that a live run that lost its lock to a server's restart holds it
// again by then. A variable for tests.
var staleRecheck = 3 * lockCheck

// runLock is the session lock of a run this Store began: the connection
// that holds it, checked every lockCheck and replaced, with the lock
// taken again, when it is lost.
type runLock struct {
	s    *Store
	id   int64
	mu   sync.Mutex // guards conn
	conn *sql.Conn
	stop chan struct{} // closed by release
	done chan struct{} // closed when keep returns
}

// keep checks the lock's connection every lockCheck until stop, and
// takes the lock again on a new connection when it is gone.
func (l *runLock) keep() {
	defer close(l.done)
	t := time.NewTicker(lockCheck)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.conn.PingContext(ctx)
		cancel()
		if err != nil {
			l.retake()
		}
		l.mu.Unlock()
	}
}

// retake, with l.mu held, replaces a lost lock connection with a new one
// holding the run's lock again, and makes the run running again if
// another host's MarkStale marked it killed meanwhile (its lock was free:
// it looked dead). It leaves the old connection in place when the server
// still cannot be reached; keep tries again at its next check.
func (l *runLock) retake() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.s.db.Conn(ctx)
	if err != nil {
		return
	}
	var got bool
	if err := c.QueryRowContext(ctx, rebind(`SELECT pg_try_advisory_lock(?, ?)`), l.s.space, int32(l.id)).Scan(&got); err != nil || !got {
		discard(c) // a MarkStale holds it for an instant: try again at the next check
		return
	}
	if _, err := c.ExecContext(ctx, rebind(`UPDATE runs SET status = ?, verdict = '', finished_at = NULL WHERE id = ? AND status = ? AND verdict = ?`),
		Running, l.id, Incomplete, VerdictKilled); err != nil {
		discard(c)
		return
	}
	discard(l.conn) // its session is gone already
	l.conn = c
}

// releaseRun ends the session lock of run id, if this Store holds it,
// and returns its connection to the pool; a connection whose unlock
// fails is discarded (its session, and so the lock, ends with it).
func (s *Store) releaseRun(id int64) {
	s.mu.Lock()
	l := s.live[id]
	delete(s.live, id)
	s.mu.Unlock()
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
	if _, err := l.conn.ExecContext(context.Background(), rebind(`SELECT pg_advisory_unlock(?, ?)`), s.space, int32(id)); err != nil {
		discard(l.conn)
		return
	}
	_ = l.conn.Close() // back to the pool, its lock released
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
	err := tx.row(`SELECT pg_try_advisory_xact_lock(?, ?)`, s.space, int32(id)).Scan(&free)
	return !free, err
}

// lockedRuns returns the ids of the runs whose lock a session holds (on
// PostgreSQL; nil on SQLite), read from pg_locks: it takes no lock, and
// works on a read-only open. A run id above 2^31 is matched by its low
// 32 bits, as the lock is.
func (s *Store) lockedRuns() (map[int64]bool, error) {
	if !s.pg {
		return nil, nil
	}
	held := map[int64]bool{}
	err := s.each("reading the runs' locks", `SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
		AND classid::bigint = ? AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, []any{int64(s.space)}, func(r *sql.Rows) error {
		var id int64
		err := r.Scan(&id)
		held[id] = true
		return err
	})
	return held, err
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
	migrations[6],
}

// privilegeHint is the remedy for a PostgreSQL error of a missing
// privilege (SQLSTATE 42501, insufficient_privilege), "" for any other
// error: what the history's database user needs. A new history needs
// CREATE on the schema, and each migration of a new arpatch alters its
// tables, which only their owner may (ERROR: must be owner of table);
// an up-to-date one needs only to read and write rows, and a read-only
// user reads.
// Upstream: postgres src/backend/utils/errcodes.txt@REL_15_18 (42501).
func privilegeHint(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		return ""
	}
	return "the database user lacks a privilege: writing a history (nightly, history accept) needs SELECT, INSERT, UPDATE and DELETE on its tables and USAGE on their sequences " +
		"(GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA s TO u; GRANT USAGE ON ALL SEQUENCES IN SCHEMA s TO u); making its schema needs CREATE on the schema, and migrating it (a new arpatch's first write) needs to own its tables: run that first write as their owner, or make u their owner (ALTER TABLE t OWNER TO u for each)"
}

// versionTable makes the schema_migrations table when the database has
// none. It looks first: CREATE TABLE IF NOT EXISTS needs PostgreSQL's
// CREATE on the schema even when the table exists, and a user of an
// up-to-date history needs only to read and write rows.
func (s *Store) versionTable(tx runner) error {
	q := `SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`
	if s.pg {
		q = `SELECT to_regclass('schema_migrations') IS NOT NULL`
	}
	var made bool
	if err := tx.row(q).Scan(&made); err != nil || made {
		return err
	}
	if !s.pg {
		// An SQLite file with tables but no arpatch schema is another
		// program's database: a history is never made inside it. (A
		// PostgreSQL schema may hold others' tables beside a history.)
		var other string
		err := tx.row(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name LIMIT 1`).Scan(&other)
		if err == nil {
			return fmt.Errorf("not a history: it holds table %s and no arpatch schema, so it is another program's database; name a new file for the history (a nightly makes one where none is)", other)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	_, err := tx.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`)
	return err
}

// Package history keeps nightly runs in an SQLite database
// (modernc.org/sqlite: pure Go, no cgo) in WAL mode, whose -wal and -shm
// files stay beside it between opens (the -wal emptied at each close;
// see Open), or, for a fleet of hosts, in a PostgreSQL database named by
// a postgres:// URL with the same schema and queries (postgres.go): runs
// and their environment, the drift of every series at every commit
// checked, the arms with their trials and samples, and every check's
// outcome. Schema changes are versioned migrations. A run starts as
// "running" and ends "complete" or "failed"; a run whose process died is
// marked "incomplete" and is never a reference for regressions.
package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/statedir"
)

// Store is an open history database.
type Store struct {
	Path string // the SQLite file, or the PostgreSQL URL (IsURL)
	db   *sql.DB
	pg   bool // PostgreSQL

	space int32 // PostgreSQL: the first key of the history's advisory locks (lockSpace)

	mu   sync.Mutex
	live map[int64]*runLock // PostgreSQL: the runs begun here and not ended, each with the connection holding its lock

	guard        *os.FileInfo // an immutable read's file at open (readDSN), checked by Close
	migratedFrom int          // the older schema version Open migrated from; 0 for none
}

// Open opens (creating if needed) the database at path in WAL mode and
// migrates it to SchemaVersion, one transaction per step. A database
// newer than this arpatch is refused. Several processes may open one
// database, a brand-new one included, at once: each migration step takes
// the write lock first (BEGIN IMMEDIATE) and is skipped when another
// opener has applied it. Its errors name path.
//
// The WAL's two files, path-wal and path-shm, stay beside the database
// when it closes (SQLITE_FCNTL_PERSIST_WAL), so each Open reuses them
// instead of making and deleting two files; durability and crash safety
// are WAL mode's, as before (synchronous FULL, the default). The last
// connection to close still checkpoints every commit into path and then
// empties path-wal (journal_size_limit 0): path alone holds the whole
// history, and a path-wal left beside a database deleted or replaced
// holds no frames to replay into the new one. path-shm is an index SQLite
// rebuilds on the next open. Keeping the two files is only an
// optimisation, best effort: when it cannot be set (keepWAL fails), Open
// goes on and SQLite deletes them at the last close, as by default.
// Upstream: sqlite src/wal.c@version-3.54.1 (sqlite3WalClose), the SQLite
// that modernc.org/sqlite v1.62.0 embeds: after its checkpoint, a WAL
// with SQLITE_FCNTL_PERSIST_WAL set is truncated to journal_size_limit
// instead of deleted, and the -shm is kept with it.
//
// A postgres:// or postgresql:// URL opens a PostgreSQL history instead
// (openPostgres), migrated the same way under an advisory lock.
func Open(path string) (*Store, error) {
	if err := CheckTarget(path); err != nil {
		return nil, fmt.Errorf("history %w", err)
	}
	if IsURL(path) {
		return openPostgres(path, pgWrite)
	}
	// The path goes into a file: URI, where '#' and '?' would cut it.
	// _txlock=immediate: every transaction is BEGIN IMMEDIATE, taking the
	// write lock at its start (waiting for it up to busy_timeout), so a
	// transaction that reads and then writes never finds its snapshot
	// stale at its first write (SQLITE_BUSY, which no busy timeout
	// retries) and migrate's re-read of the version is current.
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=journal_size_limit(0)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := setWAL(db); err != nil {
		_ = db.Close() // the error above is what to report
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	_ = keepWAL(db) // best effort: without it SQLite deletes the two files at close, as by default
	s := &Store{Path: path, db: db}
	if err := s.migrate(SchemaVersion); err != nil {
		_ = db.Close() // the error above is what to report
		return nil, err
	}
	return s, nil
}

// OpenRead opens the history at path for reading only (SQLite's
// mode=ro): it writes nothing, neither a schema, a migration nor WAL mode,
// so a read command (history list, show, export, plot) leaves the file as
// it found it, and it creates no file beside it that its owner could not
// write (readDSN). It refuses, naming path, a target CheckTarget refuses,
// a file that does not exist, an empty file (0 bytes, which SQLite would
// take as an empty database), a database without arpatch's schema, and a
// schema other than SchemaVersion: an older one is migrated by the next
// writer (a nightly, or history accept), a newer one needs a newer
// arpatch. A postgres:// URL opens a PostgreSQL history whose server
// refuses writes (default_transaction_read_only), refused the same ways.
func OpenRead(path string) (*Store, error) {
	if err := CheckTarget(path); err != nil {
		return nil, fmt.Errorf("history %w", err)
	}
	if IsURL(path) {
		return openPostgres(path, pgRead)
	}
	s, err := openSQLiteRead(path)
	if err != nil {
		return nil, err
	}
	if err := s.current(); err != nil {
		_ = s.db.Close() // err is what to report
		return nil, err
	}
	return s, nil
}

// OpenExisting opens the history at path for a command that changes a
// history already there (history accept): as Open, migrating an older
// schema (MigratedFrom says from which version), but a target that is
// not yet a history is refused as OpenRead refuses it (a missing or empty
// file, a database without arpatch's schema), never made into one.
func OpenExisting(path string) (*Store, error) {
	if err := CheckTarget(path); err != nil {
		return nil, fmt.Errorf("history %w", err)
	}
	if IsURL(path) {
		return openPostgres(path, pgExisting)
	}
	r, err := openSQLiteRead(path)
	if err != nil {
		return nil, err
	}
	if _, err := r.Version(); err != nil {
		_ = r.db.Close() // the error below is what to report
		return nil, r.wrap("reading the schema version (is this a history a nightly wrote?)", err)
	}
	if err := r.Close(); err != nil {
		return nil, err
	}
	return Open(path)
}

// MigratedFrom is the schema version the history had when this Store
// opened it, if Open migrated it from an older one; 0 when it did not.
func (s *Store) MigratedFrom() int { return s.migratedFrom }

// openSQLiteRead opens the SQLite history at path read-only (readDSN),
// refusing what is no history (OpenRead); the schema version is not
// checked.
func openSQLiteRead(path string) (*Store, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("history %w", err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("history %s is a directory, not a history file", path)
	}
	if fi.Size() == 0 {
		return nil, fmt.Errorf("history %s is an empty file (0 bytes), not a history: a nightly writes one there on its first run; the history commands (accept included) never make one", path)
	}
	dsn, guard, err := readDSN(path, fi)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &Store{Path: path, db: db, guard: guard}
	var tables int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&tables); err != nil {
		_ = db.Close() // the error below is what to report
		return nil, s.wrap("reading the schema", err)
	}
	if tables == 0 {
		_ = db.Close() // the error below is what to report
		return nil, fmt.Errorf("history %s is a SQLite database without arpatch's schema (no schema_migrations table): not a history a nightly wrote; the history commands (accept included) never make one", path)
	}
	return s, nil
}

// readDSN is the SQLite URI that opens the history at path (fi its
// stat) read-only. A WAL-mode database is read through its path-wal and
// path-shm; when either is missing, SQLite's mode=ro still creates them,
// which fails where the directory is not writable (a backup, a read-only
// mount: "attempt to write a readonly database") and, where it is,
// leaves two files owned by the reader that the history's owner then
// cannot write, breaking its next nightly. So when they are missing and
// the reader cannot create them or is not the file's owner (root is
// served as the owner: SQLite gives the files it creates as root to the
// database file's owner), the history is opened immutable=1, reading
// path alone without locks: path-wal then holds nothing path lacks (an
// empty or missing -wal; one with commits in it is refused, naming how
// to fold them in). An immutable read could see a nightly's checkpoint
// change path under it: guard, checked by Close, holds path's size and
// time of change at open, and Close fails when they moved.
//
// Upstream: sqlite www/wal.html@version-3.54.1 ("Read-Only Databases"):
// a read-only WAL database opens if its -shm and -wal exist or can be
// created, or if it is immutable.
func readDSN(path string, fi os.FileInfo) (string, *os.FileInfo, error) {
	base := "file:" + uriPath(path) + "?mode=ro&_pragma=busy_timeout(10000)"
	walFi, werr := os.Stat(path + "-wal")
	_, serr := os.Stat(path + "-shm")
	if werr == nil && serr == nil {
		return base, nil, nil
	}
	owner := true
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() != 0 && int(st.Uid) != os.Geteuid() {
		owner = false
	}
	if owner && unix.Access(filepath.Dir(path), unix.W_OK) == nil {
		return base, nil, nil // this user may make the two files, as their owner would
	}
	if werr == nil && walFi.Size() > 0 {
		return "", nil, fmt.Errorf("history %s: its write-ahead log %s-wal holds commits not yet in it, and there is no %s-shm, which this user cannot create: "+
			"open it once as its owner (arpatch history list --db %s), or copy it and its -wal where you can write", path, path, path, path)
	}
	return "file:" + uriPath(path) + "?mode=ro&immutable=1", &fi, nil
}

// checkGuard is Close's check of an immutable read: the file it read
// (path, stat g at open) has the same size and time of change.
func checkGuard(path string, g os.FileInfo) error {
	fi, err := os.Stat(path)
	if err == nil && fi.Size() == g.Size() && fi.ModTime().Equal(g.ModTime()) {
		return nil
	}
	return fmt.Errorf("history %s changed while it was read (a nightly wrote it): what was read may mix two states; run the command again", path)
}

// current refuses, naming the history, a schema other than
// SchemaVersion.
func (s *Store) current() error {
	cur, err := s.Version()
	switch {
	case err != nil:
		return s.wrap("reading the schema version (is this a history a nightly wrote?)", err)
	case cur > SchemaVersion:
		return fmt.Errorf("history %s has schema version %d; this arpatch knows up to %d: use a newer arpatch", s.Path, cur, SchemaVersion)
	case cur < SchemaVersion:
		return fmt.Errorf("history %s has schema version %d, older than this arpatch's %d: the next `arpatch nightly` on it migrates it (so does `arpatch history accept RUN`, which also makes RUN the reference); history list, show, export and plot only read it", s.Path, cur, SchemaVersion)
	}
	return nil
}

// setWAL puts db in WAL mode (persistent: the first opener of a new
// database sets it for all). SQLite answers SQLITE_BUSY at once, without
// its busy timeout, when another connection has the database open while
// the mode changes (two openers of a brand-new history: seen with the
// SQLite 3.54.1 of modernc.org/sqlite v1.62.0, in
// TestConcurrentOpenOfNewDatabase); the change is
// then tried again every 10 ms for up to 10 s, the busy timeout's length.
// It returns the pragma's last error.
func setWAL(db *sql.DB) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := db.Exec(`PRAGMA journal_mode=WAL`)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// keepWAL sets SQLITE_FCNTL_PERSIST_WAL on db's one connection (Open
// allows one, and the pool keeps it idle rather than closing it), so that
// closing it leaves the -wal and -shm files in place. A connection the
// pool had to replace would delete them at its close, as SQLite does by
// default: a cost, not a risk. It returns the error of getting the
// connection or of the file control, or one saying the driver has none.
// A variable so that a test can make it fail.
var keepWAL = func(db *sql.DB) error {
	c, err := db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // returns the connection to the pool
	return c.Raw(func(dc any) error {
		fc, ok := dc.(sqlite.FileControl)
		if !ok {
			return fmt.Errorf("the driver's connection (%T) has no SQLite file control", dc)
		}
		_, err := fc.FileControlPersistWAL("main", 1)
		return err
	})
}

// each runs query q on the pool and calls scan on each row (runner.each).
func (s *Store) each(what, q string, args []any, scan func(*sql.Rows) error) error {
	return s.x().each(what, q, args, scan)
}

// querier is what the pool, a connection and a transaction share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// runner runs the store's queries on the pool or in a transaction. Every
// query of the store goes through it, written once with ? parameters.
type runner struct {
	s *Store
	q querier
}

// x is a runner on the store's pool.
func (s *Store) x() runner { return runner{s, s.db} }

// traceSQL, when set (by tests), sees every query a runner runs, with
// its arguments, before it runs.
var traceSQL func(query string, args []any)

func (r runner) prepare(q string, args []any) string {
	if traceSQL != nil {
		traceSQL(q, args)
	}
	if r.s.pg {
		return rebind(q)
	}
	return q
}

func (r runner) exec(q string, args ...any) (sql.Result, error) {
	return r.q.ExecContext(context.Background(), r.prepare(q, args), args...)
}

func (r runner) row(q string, args ...any) *sql.Row {
	return r.q.QueryRowContext(context.Background(), r.prepare(q, args), args...)
}

// insert runs an INSERT of one row and returns its id (RETURNING id).
func (r runner) insert(q string, args ...any) (int64, error) {
	var id int64
	err := r.row(q+` RETURNING id`, args...).Scan(&id)
	return id, err
}

// each runs query q and calls scan on each row, then closes the rows. The
// error (of the query, a scan or the iteration) says what failed (what)
// and names the database file.
func (r runner) each(what, q string, args []any, scan func(*sql.Rows) error) error {
	err := func() error {
		rows, err := r.q.QueryContext(context.Background(), r.prepare(q, args), args...)
		if err != nil {
			return err
		}
		defer func() { _ = rows.Close() }() // read-only; rows.Err reports the iteration
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}()
	return r.s.wrap(what, err)
}

// wrap names the database file and what failed in err; nil stays nil.
func (s *Store) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	if s.pg {
		if hint := privilegeHint(err); hint != "" {
			return fmt.Errorf("history %s: %s: %w: %s", s.Path, what, err, hint)
		}
	}
	return fmt.Errorf("history %s: %s: %w", s.Path, what, err)
}

// Close closes the database. On PostgreSQL, a run begun here and not
// ended loses its lock: the next MarkStale marks it incomplete.
func (s *Store) Close() error {
	s.mu.Lock()
	var ids []int64
	for id := range s.live {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.releaseRun(id) // now, not when the server notices the session gone
	}
	s.mu.Lock()
	s.live = nil
	s.mu.Unlock()
	err := s.db.Close()
	if s.guard != nil && err == nil {
		err = checkGuard(s.Path, *s.guard)
	}
	return err
}

// Lock takes the lock that keeps two nightlies of one host off one
// history: a file next to an SQLite database, or for a PostgreSQL URL
// history-HASH.lock in the state directory, HASH naming the database the
// URL reaches however it is spelt (identity: postgres:// or
// postgresql://, a default port written or not), so that two spellings
// of one history take one lock (nightlies of other hosts share the
// server's history, each run under its own advisory lock). It returns a
// *lockfile.HeldError when another live process holds it, and
// CheckTarget's error for a target that is no history.
func Lock(target string) (func(), error) {
	if err := CheckTarget(target); err != nil {
		return nil, fmt.Errorf("history %w", err)
	}
	if !IsURL(target) {
		return lockfile.Acquire(target + ".lock")
	}
	id, err := identity(target)
	if err != nil {
		return nil, fmt.Errorf("history %w", err)
	}
	p, err := statedir.Path("history-" + digest.Short(digest.SHA256Hex([]byte(id))) + ".lock")
	if err != nil {
		return nil, err
	}
	return lockfile.Acquire(p)
}

// uriPath escapes the characters a SQLite file: URI gives meaning to.
func uriPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

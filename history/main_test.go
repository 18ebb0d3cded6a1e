package history

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/pgtest"
)

// scratch holds what outlives one test or benchmark in this binary (the
// benchmarks' history), removed when the binary ends.
var scratch string

func TestMain(m *testing.M) {
	if p := os.Getenv(asUserEnv); p != "" {
		os.Exit(asUserMain(p))
	}
	// No test but the restart's (which sets its own) has a live run
	// that loses its lock: MarkStale need not wait seconds to look again.
	staleRecheck = 100 * time.Millisecond
	code := m.Run()
	dropBenchSchema()
	pgtest.Stop()
	if scratch != "" {
		_ = os.RemoveAll(scratch) // scratch space only
	}
	os.Exit(code)
}

// tempDirFor makes a directory under the binary's scratch directory.
func tempDirFor(name string) (string, error) {
	if scratch == "" {
		d, err := os.MkdirTemp("", "arpatch-history-test-")
		if err != nil {
			return "", err
		}
		scratch = d
	}
	return os.MkdirTemp(scratch, name)
}

// eachStore runs f on a new SQLite history (a file in a temporary
// directory) and on a new PostgreSQL one (a schema of its own on the
// tests' server, internal/pgtest; skipped, saying why, when no server can
// be had): the store's suite runs against both.
func eachStore(t *testing.T, f func(t *testing.T, target string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, filepath.Join(t.TempDir(), "h.db")) })
	t.Run("postgres", func(t *testing.T) { f(t, pgtest.Schema(t)) })
}

// failInserts makes every INSERT into table fail with message, as a full
// disk would fail it (a trigger, in the store's dialect), until the
// function it returns drops the trigger.
func failInserts(t *testing.T, s *Store, table, message string) func() {
	t.Helper()
	q := `CREATE TRIGGER disk_full BEFORE INSERT ON ` + table + ` BEGIN SELECT RAISE(ABORT, '` + message + `'); END`
	undo := `DROP TRIGGER disk_full`
	if s.pg {
		q = `CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '` + message + `'; END $$;
			CREATE TRIGGER disk_full BEFORE INSERT ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION fail_insert();`
		undo = `DROP TRIGGER disk_full ON ` + table
	}
	if _, err := s.db.Exec(q); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := s.db.Exec(undo); err != nil {
			t.Fatal(err)
		}
	}
}

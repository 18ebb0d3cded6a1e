package history

import (
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/pgtest"
)

// TestSchemasMatch: a new SQLite history and a new PostgreSQL one have
// the same tables, each with the same columns in the same order and of
// the same kind (integer, real, text), and the same indexes over the same
// columns; PostgreSQL's rowid columns stand for SQLite's implicit rowid.
func TestSchemasMatch(t *testing.T) {
	lite := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	pg := openTest(t, pgtest.Schema(t))
	kind := map[string]string{"INTEGER": "integer", "REAL": "real", "TEXT": "text",
		"integer": "integer", "bigint": "integer", "double precision": "real", "text": "text"}
	schema := func(s *Store) map[string][]string {
		tables := map[string][]string{}
		q := `SELECT m.name, c.name, c.type FROM sqlite_master m, pragma_table_info(m.name) c WHERE m.type = 'table' ORDER BY m.name, c.cid`
		if s.pg {
			q = `SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND column_name <> 'rowid'
				ORDER BY table_name, ordinal_position`
		}
		err := s.each("reading the schema", q, nil, func(r *sql.Rows) error {
			var table, col, typ string
			err := r.Scan(&table, &col, &typ)
			tables[table] = append(tables[table], col+" "+kind[typ])
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		q = `SELECT m.name, i.name, GROUP_CONCAT(c.name) FROM sqlite_master m, pragma_index_list(m.name) i, pragma_index_info(i.name) c
			WHERE m.type = 'table' AND i.origin = 'c' GROUP BY m.name, i.name`
		if s.pg {
			q = `SELECT t.relname, i.relname, string_agg(a.attname, ',' ORDER BY k.n) FROM pg_index x
				JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace ns ON ns.oid = t.relnamespace
				CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
				WHERE ns.nspname = current_schema() AND NOT x.indisprimary GROUP BY t.relname, i.relname`
		}
		err = s.each("reading the indexes", q, nil, func(r *sql.Rows) error {
			var table, index, cols string
			err := r.Scan(&table, &index, &cols)
			tables["index "+index] = []string{table + "(" + cols + ")"}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return tables
	}
	a, b := schema(lite), schema(pg)
	if len(a) < 15 || !reflect.DeepEqual(a, b) {
		for k := range a {
			if !reflect.DeepEqual(a[k], b[k]) {
				t.Errorf("%s:\n sqlite:   %v\n postgres: %v", k, a[k], b[k])
			}
		}
		for k := range b {
			if a[k] == nil {
				t.Errorf("%s only on PostgreSQL: %v", k, b[k])
			}
		}
	}
	if len(pgMigrations) != len(migrations) {
		t.Errorf("%d PostgreSQL migrations for %d SQLite ones", len(pgMigrations), len(migrations))
	}
}

// TestConcurrentNightliesLoseNoRun: nightlies of four hosts (each a store
// of its own on one history) record 15 runs each at once while another
// marks stale runs between them; every run is there, complete, with all
// of its arms, trials, samples, checks and drift, and no live run was
// marked incomplete.
func TestConcurrentNightliesLoseNoRun(t *testing.T) { eachStore(t, testConcurrentNightliesLoseNoRun) }

func testConcurrentNightliesLoseNoRun(t *testing.T, target string) {
	must(t, func() error {
		s, err := Open(target)
		if err == nil {
			err = s.Close()
		}
		return err
	}())
	const hosts, nights = 4, 15
	var wg sync.WaitGroup
	errs := make(chan error, hosts+1)
	stop := make(chan struct{})
	for h := 0; h < hosts; h++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				s, err := Open(target)
				if err != nil {
					return err
				}
				defer func() { _ = s.Close() }()
				for i := 0; i < nights; i++ {
					id, err := s.BeginRun(Run{HardwareKey: fmt.Sprintf("host-%d", h), Workload: "w"})
					if err != nil {
						return err
					}
					if err := s.Record(id, benchOutcome(i+1)); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	go func() {
		errs <- func() error {
			s, err := Open(target)
			if err != nil {
				return err
			}
			defer func() { _ = s.Close() }()
			for {
				select {
				case <-stop:
					return nil
				case <-time.After(5 * time.Millisecond):
				}
				if s.pg {
					// SQLite's MarkStale needs the nightly lock, which these
					// hosts do not take: only PostgreSQL's judges liveness.
					if marked, err := s.MarkStale(); err != nil || len(marked) > 0 {
						return fmt.Errorf("MarkStale marked live runs %v, %v", marked, err)
					}
				}
			}
		}()
	}()
	wg.Wait()
	close(stop)
	for i := 0; i < hosts+1; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	s := openTest(t, target)
	runs, err := s.Runs(0)
	must(t, err)
	if len(runs) != hosts*nights {
		t.Fatalf("%d runs, want %d", len(runs), hosts*nights)
	}
	want := benchOutcome(1)
	for _, r := range runs {
		d, err := s.Show(r.ID)
		must(t, err)
		samples := 0
		for _, a := range d.Arms {
			for _, tr := range a.Trials {
				samples += tr.Samples
			}
		}
		if d.Run.Status != Complete || len(d.Arms) != 2 || len(d.Arms[1].Trials) != 5 || samples != 80 || len(d.Checks) != len(want.Checks) || len(d.Drift) != len(want.Drift) {
			t.Errorf("run %d: %s, %d arms, %d samples, %d checks, %d drift", r.ID, d.Run.Status, len(d.Arms), samples, len(d.Checks), len(d.Drift))
		}
	}
}

// TestMarkStaleSparesLiveRuns: on PostgreSQL a run another host is still
// running holds its lock, and MarkStale leaves it; once that host's
// process is gone (its store closed without ending the run), the run is
// marked incomplete; a run ended meanwhile keeps its end.
func TestMarkStaleSparesLiveRuns(t *testing.T) {
	target := pgtest.Schema(t)
	a, b := openTest(t, target), openTest(t, target)
	live, err := a.BeginRun(Run{HardwareKey: "host-a"})
	must(t, err)
	ended, err := a.BeginRun(Run{HardwareKey: "host-a"})
	must(t, err)
	gone, err := Open(target)
	must(t, err)
	dead, err := gone.BeginRun(Run{HardwareKey: "host-c"})
	must(t, err)
	if marked, err := b.MarkStale(); err != nil || len(marked) != 0 {
		t.Fatalf("MarkStale with every run live: %v, %v", marked, err)
	}
	must(t, gone.Close())
	must(t, a.FinishRun(ended, Complete, 0, "no regression"))
	if marked, err := b.MarkStale(); err != nil || !reflect.DeepEqual(marked, []int64{dead}) {
		t.Fatalf("MarkStale after host-c died: %v, %v; want [%d]", marked, err, dead)
	}
	for id, want := range map[int64]RunStatus{live: Running, ended: Complete, dead: Incomplete} {
		d, err := b.Show(id)
		if err != nil || d.Run.Status != want {
			t.Errorf("run %d: %s, %v; want %s", id, runOf(d), err, want)
		}
	}
}

// TestOpenReadOnPostgres: a read command's open of a PostgreSQL history
// reads a current one, refuses to write through it (the server refuses),
// and refuses an older schema, naming the URL.
func TestOpenReadOnPostgres(t *testing.T) {
	target := pgtest.Schema(t)
	s := openTest(t, target)
	seed(t, s, 2, 90)
	r, err := OpenRead(target)
	must(t, err)
	defer func() { must(t, r.Close()) }()
	if runs, err := r.Runs(0); err != nil || len(runs) != 2 {
		t.Errorf("Runs, read-only: %d, %v", len(runs), err)
	}
	if err := r.Accept(1); err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Errorf("Accept through a read-only open: %v", err)
	}
	older := pgtest.Schema(t)
	o, err := OpenAt(older, 1)
	must(t, err)
	must(t, o.Close())
	if _, err := OpenRead(older); err == nil || !strings.Contains(err.Error(), "history "+older+" has schema version 1, older than") {
		t.Errorf("OpenRead of schema version 1: %v", err)
	}
}

// A URL with a password is refused without printing it; a server that
// does not answer is an error in seconds, naming the URL.
func TestOpenPostgresRefusals(t *testing.T) {
	for _, u := range []string{"postgres://ci:s3cret@db.example/arpatch", "postgresql://ci@db.example/arpatch?password=s3cret"} {
		_, err := Open(u)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "put it in ~/.pgpass or PGPASSWORD") {
			t.Errorf("Open(%s) = %v", u, err)
		}
	}
	u := "postgres://arpatch@127.0.0.1:1/arpatch?connect_timeout=2"
	start := time.Now()
	if _, err := Open(u); err == nil || !strings.HasPrefix(err.Error(), "history "+u+": cannot reach the server: ") {
		t.Errorf("Open of a port nothing listens on: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refusing an unreachable server took %v", d)
	}
}

// A search_path naming no schema that exists is said as that, with its
// remedy, for a write and a read, not as a server that cannot be
// reached.
func TestSearchPathWithoutSchema(t *testing.T) {
	base, why := pgtest.Server()
	if base == "" {
		t.Skip(why)
	}
	u := pgtest.WithParam(base, "search_path", "no_such_schema_arpatch")
	for name, open := range map[string]func(string) (*Store, error){"Open": Open, "OpenRead": OpenRead} {
		s, err := open(u)
		if err == nil {
			_ = s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "no schema of its search_path (no_such_schema_arpatch) exists in database") ||
			!strings.Contains(err.Error(), "create it (`CREATE SCHEMA name`") || strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The remedy, as printed: with the schema made, the history opens.
	admin, err := sql.Open("pgx", base)
	must(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(`DROP SCHEMA no_such_schema_arpatch CASCADE`); _ = admin.Close() })
	_, err = admin.Exec(`CREATE SCHEMA no_such_schema_arpatch`)
	must(t, err)
	s, err := Open(u)
	must(t, err)
	must(t, s.Close())
}

// A migration by a user that may write rows but does not own the tables
// is refused with the privilege remedy, which names ownership; once the
// user owns them (ALTER TABLE t OWNER TO u, as the remedy says) the
// migration runs.
func TestMigrationNeedsTheOwner(t *testing.T) {
	target := pgtest.Schema(t)
	u, err := url.Parse(target)
	must(t, err)
	schema := u.Query().Get("search_path")
	owner, err := Open(target)
	must(t, err)
	must(t, owner.Close())
	admin, err := sql.Open("pgx", target)
	must(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	rw := schema + "_mig"
	for _, q := range []string{`ALTER TABLE trials DROP COLUMN n_samples`, `DELETE FROM schema_migrations WHERE version = 7`,
		`CREATE ROLE ` + rw + ` LOGIN`, `GRANT USAGE, CREATE ON SCHEMA ` + schema + ` TO ` + rw,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + rw,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + rw} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{`REASSIGN OWNED BY ` + rw + ` TO CURRENT_USER`, `DROP OWNED BY ` + rw, `DROP ROLE ` + rw} {
			if _, err := admin.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	v := *u
	v.User = url.User(rw)
	as := v.String()
	if s, err := Open(as); err == nil || !strings.Contains(err.Error(), "must be owner of table") || !strings.Contains(err.Error(), "ALTER TABLE t OWNER TO u for each") {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("a migration by a user that owns no table: %v", err)
	}
	for _, tb := range []string{"runs", "environment", "drift", "arms", "trials", "samples", "checks", "schema_migrations"} {
		if _, err := admin.Exec(`ALTER TABLE ` + tb + ` OWNER TO ` + rw); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(as)
	must(t, err)
	if ver, err := s.Version(); err != nil || ver != SchemaVersion {
		t.Errorf("after the owner's change: version %d, %v", ver, err)
	}
	must(t, s.Close())
}

func TestRebind(t *testing.T) {
	for q, want := range map[string]string{
		`SELECT a FROM t WHERE b = ? AND c IN (?, ?)`:               `SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)`,
		`UPDATE t SET a = COALESCE(NULLIF(?, ''), a) WHERE '?' = ?`: `UPDATE t SET a = COALESCE(NULLIF($1, ''), a) WHERE '?' = $2`,
		`SELECT 1`: `SELECT 1`,
	} {
		if got := rebind(q); got != want {
			t.Errorf("rebind(%s) = %s, want %s", q, got, want)
		}
	}
	if !slices.Equal([]bool{IsURL("postgres://h/d"), IsURL("postgresql://h/d"), IsURL("/var/h.db"), IsURL("postgres.db")}, []bool{true, true, false, false}) {
		t.Error("IsURL")
	}
}

// TestRunKeepsItsLockAcrossARestart: a live run's lock ends with its
// connection when the server restarts; the run takes it again on a new
// connection within lockCheck, so another host's MarkStale then spares it
// (and a mark made before it did is undone: the run is running again),
// and the run ends as recorded. Gone tells a live run from a dead one
// the same way, on a read-only open.
func TestRunKeepsItsLockAcrossARestart(t *testing.T) {
	srv := pgtest.Own(t)
	defer func(d time.Duration) { lockCheck = d }(lockCheck)
	lockCheck = 100 * time.Millisecond
	a := openTest(t, srv.URL)
	live, err := a.BeginRun(Run{HardwareKey: "host-a"})
	must(t, err)
	gone, err := Open(srv.URL)
	must(t, err)
	dead, err := gone.BeginRun(Run{HardwareKey: "host-c"})
	must(t, err)
	must(t, gone.Close())

	must(t, srv.Restart())
	b := openTest(t, srv.URL)
	_, err = b.MarkStale() // may run before run live holds its lock again
	must(t, err)
	locked := func() bool {
		held, err := b.lockedRuns()
		must(t, err)
		return held[live]
	}
	for deadline := time.Now().Add(10 * time.Second); !locked(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("run %d did not take its lock again after the restart", live)
		}
	}
	d, err := b.Show(live)
	if err != nil || d.Run.Status != Running || d.Run.Verdict != "" || d.Run.FinishedAt != nil {
		t.Fatalf("live run %d after the restart: %s, %v", live, runOf(d), err)
	}
	if marked, err := b.MarkStale(); err != nil || len(marked) != 0 {
		t.Errorf("MarkStale once the live run holds its lock again: %v, %v", marked, err)
	}
	r, err := OpenRead(srv.URL)
	must(t, err)
	runs, err := r.Runs(0)
	must(t, err)
	g, err := r.Gone(runs)
	must(t, err)
	must(t, r.Close())
	if len(g) != 0 { // dead was marked incomplete by the MarkStale above
		t.Errorf("Gone after MarkStale: %v", g)
	}
	must(t, a.Record(live, benchOutcome(1)))
	if d, err := b.Show(live); err != nil || d.Run.Status != Complete || len(d.Arms) != 2 {
		t.Errorf("live run %d after its record: %s, %v", live, runOf(d), err)
	}
	if d, err := b.Show(dead); err != nil || d.Run.Status != Incomplete {
		t.Errorf("dead run %d: %s, %v", dead, runOf(d), err)
	}
}

// TestMarkStaleSparesARunRetakingItsLock: right after a server restart
// no session holds any run's lock, the live runs' included, until each
// takes its own again (runLock.keep, within lockCheck): another host's
// MarkStale then must not mark a live run incomplete, however soon after
// the restart it runs. It looks again staleRecheck later and marks only
// the runs still without a lock. (Here the live run's check is made by
// hand, after MarkStale's first look, so that the order is certain.)
func TestMarkStaleSparesARunRetakingItsLock(t *testing.T) {
	srv := pgtest.Own(t)
	defer func(d, r time.Duration) { lockCheck, staleRecheck = d, r }(lockCheck, staleRecheck)
	lockCheck, staleRecheck = time.Hour, 3*time.Second // keep never checks by itself
	a := openTest(t, srv.URL)
	live, err := a.BeginRun(Run{HardwareKey: "host-a"})
	must(t, err)
	gone, err := Open(srv.URL)
	must(t, err)
	dead, err := gone.BeginRun(Run{HardwareKey: "host-c"})
	must(t, err)
	must(t, gone.Close())
	must(t, srv.Restart())

	b := openTest(t, srv.URL)
	type result struct {
		marked []int64
		err    error
	}
	done := make(chan result)
	go func() {
		m, err := b.MarkStale()
		done <- result{m, err}
	}()
	time.Sleep(time.Second) // MarkStale has found both locks free, and waits
	l := a.live[live]
	l.mu.Lock()
	l.retake() // keep's check, as it runs every lockCheck
	l.mu.Unlock()
	if held, err := b.lockedRuns(); err != nil || !held[live] {
		t.Fatalf("run %d did not take its lock again: %v, %v", live, held, err)
	}
	r := <-done
	if r.err != nil || !slices.Equal(r.marked, []int64{dead}) {
		t.Errorf("MarkStale right after the restart marked %v (%v); want only the dead run %d, not the live %d", r.marked, r.err, dead, live)
	}
	if d, err := b.Show(live); err != nil || d.Run.Status != Running || d.Run.Verdict != "" {
		t.Errorf("live run %d: %s, %v", live, runOf(d), err)
	}
}

// TestGone: a running run whose process is gone is told from a live one
// on both stores, read-only: on SQLite by its pid, on PostgreSQL by its
// lock (history list shows it "killed?").
func TestGone(t *testing.T) { eachStore(t, testGone) }

func testGone(t *testing.T, target string) {
	s := openTest(t, target)
	live, err := s.BeginRun(Run{HardwareKey: "h"})
	must(t, err)
	done, err := s.BeginRun(Run{HardwareKey: "h"})
	must(t, err)
	must(t, s.FinishRun(done, Complete, 0, "no regression"))
	other, err := Open(target)
	must(t, err)
	dead, err := other.BeginRun(Run{HardwareKey: "h", PID: 999999999})
	must(t, err)
	must(t, other.Close()) // on PostgreSQL its lock ends with it
	r, err := OpenRead(target)
	must(t, err)
	defer func() { must(t, r.Close()) }()
	runs, err := r.Runs(0)
	must(t, err)
	g, err := r.Gone(runs)
	must(t, err)
	want := "pid 999999999 is gone"
	if s.pg {
		want = "no session holds its lock: its nightly's process ended"
	}
	if len(g) != 1 || g[dead] != want {
		t.Errorf("Gone = %v; want only run %d: %q (live %d, done %d)", g, dead, want, live, done)
	}
}

// TestRowsOnlyUser: once a history's schema is up to date, a database
// user with only SELECT, INSERT, UPDATE and DELETE on its tables (no
// CREATE on the schema) opens it, writes a night and accepts it; a user
// with SELECT only opens it and reads, and its accept is refused, saying
// what privileges writing needs.
func TestRowsOnlyUser(t *testing.T) {
	target := pgtest.Schema(t)
	u, err := url.Parse(target)
	must(t, err)
	schema := u.Query().Get("search_path")
	owner, err := Open(target) // makes the schema
	must(t, err)
	first, err := owner.BeginRun(Run{HardwareKey: "h"})
	must(t, err)
	must(t, owner.FinishRun(first, Complete, 0, "no regression"))
	must(t, owner.Close())

	admin, err := sql.Open("pgx", target)
	must(t, err)
	t.Cleanup(func() { _ = admin.Close() }) // only grants went through it
	rw, ro := schema+"_rw", schema+"_ro"
	for _, q := range []string{
		`CREATE ROLE ` + rw + ` LOGIN`, `CREATE ROLE ` + ro + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + rw + `, ` + ro,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + rw,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + rw,
		`GRANT SELECT ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + ro,
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + rw + `, ` + ro, `DROP ROLE ` + rw, `DROP ROLE ` + ro} {
			if _, err := admin.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	as := func(role string) string {
		v := *u
		v.User = url.User(role)
		return v.String()
	}

	s, err := Open(as(rw))
	must(t, err)
	id, err := s.BeginRun(Run{HardwareKey: "h"})
	must(t, err)
	must(t, s.FinishRun(id, Complete, 0, "no regression"))
	must(t, s.Accept(id))
	must(t, s.Close())

	r, err := Open(as(ro))
	must(t, err)
	defer func() { _ = r.Close() }() // read only
	runs, err := r.Runs(0)
	must(t, err)
	if len(runs) != 2 || !runs[0].Accepted && !runs[1].Accepted {
		t.Errorf("runs as %s: %+v, want 2, one accepted", ro, runs)
	}
	err = r.Accept(first)
	want := fmt.Sprintf("history %s: accepting run %d: ERROR: permission denied for table runs (SQLSTATE 42501): the database user lacks a privilege: writing a history (nightly, history accept) needs SELECT, INSERT, UPDATE and DELETE", as(ro), first)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("accept as %s: %v\nwant it to start %q", ro, err, want)
	}
}

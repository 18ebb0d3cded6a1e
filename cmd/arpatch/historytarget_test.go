package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/pgtest"
)

// TestHistoryTargetMistakes: a history.path or --db that cannot be a
// history (a URL that does not parse, holds a password, or is not a
// PostgreSQL URL) is a usage error (exit 2) found before anything runs,
// naming the key with its file and line (nightly) or the flag, and the
// forms that work; it creates no file, and prints no password. A flag
// given by both its names says so.
func TestHistoryTargetMistakes(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("ARPATCH_STATE", filepath.Join(dir, "state"))
	n := 0
	toml := func(path string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("n%d.toml", n))
		if err := os.WriteFile(p, []byte("[history]\npath = \""+path+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nightly", "--config", toml("postgres://ci:s3cret@db.example/arpatch")}, dir + "/n1.toml:2: history.path: postgres://ci:xxxxx@db.example/arpatch holds a password, which arpatch would print in its errors and reports: put it in ~/.pgpass or PGPASSWORD instead"},
		{[]string{"nightly", "--config", toml("postgres://arpatch@[::1/arpatch")}, dir + "/n2.toml:2: history.path: postgres://arpatch@[::1/arpatch: failed to parse as URL"},
		{[]string{"nightly", "--config", toml("postgres://arpatch@db:99999/arpatch")}, dir + "/n3.toml:2: history.path: postgres://arpatch@db:99999/arpatch: invalid port"},
		{[]string{"nightly", "--config", toml("postgres://arpatch@db/arpatch?connect_timeout=abc")}, dir + "/n4.toml:2: history.path: postgres://arpatch@db/arpatch?connect_timeout=abc: invalid connect_timeout"},
		{[]string{"nightly", "--config", toml("Postgres://arpatch@db/fleet")}, dir + `/n5.toml:2: history.path: "Postgres://arpatch@db/fleet" looks like a URL but is not a history arpatch reads (write the scheme in lower case: postgres://arpatch@db/fleet): ` + history.Forms},
		{[]string{"nightly", "--config", toml("postgres:fleet2")}, dir + `/n6.toml:2: history.path: "postgres:fleet2" looks like a URL`},
		{[]string{"history", "list", "--db", "postgres://arpatch@[::1/arpatch"}, "--db postgres://arpatch@[::1/arpatch: failed to parse as URL"},
		{[]string{"history", "list", "--db", "postgres://ci:s3cret@db/arpatch"}, "--db postgres://ci:xxxxx@db/arpatch holds a password"},
		{[]string{"history", "plot", "--out", "p.svg", "--db", "pg://arpatch@db/fleet"}, `--db "pg://arpatch@db/fleet" looks like a URL but is not a history arpatch reads (a PostgreSQL URL starts postgres://): ` + history.Forms},
		{[]string{"history", "export", "--db", "mysql://x@y/z"}, `--db "mysql://x@y/z" looks like a URL but is not a history arpatch reads: ` + history.Forms},
		{[]string{"history", "accept", "1", "--db", "Postgres://arpatch@db/fleet"}, `--db "Postgres://arpatch@db/fleet" looks like a URL`},
		{[]string{"history", "list", "--db", "a.db", "--history", "b.db"}, "--db and --history are two names of one flag: give it once"},
		// Passwords wherever pgx would read one, and look-alikes that
		// would have been file names: refused, nothing printed of the
		// password, no file made.
		{[]string{"nightly", "--config", toml("host=db user=ci password=s3cret")}, dir + `/n7.toml:2: history.path: "host=db user=ci password=xxxxx" is a keyword/value connection string`},
		{[]string{"nightly", "--config", toml("password=s3cret host=db")}, dir + `/n8.toml:2: history.path: "password=xxxxx host=db" is a keyword/value connection string`},
		{[]string{"nightly", "--config", toml("Postgres://ci:s3cret@db/fleet")}, dir + `/n9.toml:2: history.path: "Postgres://ci:xxxxx@db/fleet" looks like a URL but is not a history arpatch reads (write the scheme in lower case: postgres://ci:xxxxx@db/fleet)`},
		{[]string{"nightly", "--config", toml("postgres//ci@db/fleet")}, dir + `/n10.toml:2: history.path: "postgres//ci@db/fleet" looks like a PostgreSQL URL without the colon`},
		{[]string{"history", "list", "--db", "postgres://ci:pa?s3cret@db/arpatch"}, "--db postgres://ci:xxxxx@db/arpatch holds a password"},
		{[]string{"history", "show", "1", "--db", "postgres://ci@db/arpatch?sslpassword=s3cret"}, "--db postgres://ci@db/arpatch?sslpassword=xxxxx holds a password"},
		{[]string{"history", "export", "--db", "postgres:ci:s3cret@db/arpatch"}, `--db "postgres:ci:xxxxx@db/arpatch" looks like a URL`},
		{[]string{"history", "list", "--db", "sslmode=disable host=db"}, `--db "sslmode=disable host=db" is a keyword/value connection string`},
		// A password key in any case (pgx would send PASSWORD= to the
		// server as a setting), a scheme with one slash, and a URL
		// without its scheme.
		{[]string{"history", "list", "--db", "postgres://postgres@127.0.0.1:54330/arpatch?PASSWORD=s3cret"}, "--db postgres://postgres@127.0.0.1:54330/arpatch?PASSWORD=xxxxx holds a password"},
		{[]string{"history", "list", "--db", "postgres://ci@db/arpatch?sslpassword=s3cret&Password=s3cret"}, "--db postgres://ci@db/arpatch?sslpassword=xxxxx&Password=xxxxx holds a password"},
		{[]string{"nightly", "--config", toml("postgres://ci@db/arpatch?SSLPASSWORD=s3cret")}, dir + "/n11.toml:2: history.path: postgres://ci@db/arpatch?SSLPASSWORD=xxxxx holds a password"},
		{[]string{"history", "list", "--db", "postgres:/postgres:s3cret@127.0.0.1:54330/arpatch"}, `--db "postgres:/postgres:xxxxx@127.0.0.1:54330/arpatch" looks like a URL but is not a history arpatch reads (a PostgreSQL URL starts postgres://)`},
		{[]string{"nightly", "--config", toml("postgresql:/u:s3cret@h/db")}, dir + `/n12.toml:2: history.path: "postgresql:/u:xxxxx@h/db" looks like a URL but is not a history arpatch reads (a PostgreSQL URL starts postgres://)`},
		{[]string{"nightly", "--config", toml("postgres@127.0.0.1/arpatch")}, dir + `/n13.toml:2: history.path: "postgres@127.0.0.1/arpatch" looks like USER@HOST/DATABASE, a PostgreSQL URL without its scheme: write postgres://postgres@127.0.0.1/arpatch for a PostgreSQL history, or ./postgres@127.0.0.1/arpatch for an SQLite file of that name`},
		{[]string{"history", "export", "--db", "ci@db.internal"}, `--db "ci@db.internal" looks like USER@HOST/DATABASE`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"arpatch"}, c.args...), &out, &errb)
		if code != exitUsage || !strings.HasPrefix(errb.String(), "arpatch: "+c.want) || strings.Contains(errb.String()+out.String(), "s3cret") {
			t.Errorf("%v: exit %d, stderr %q\nwant exit 2 and it to start %q", c.args, code, errb.String(), "arpatch: "+c.want)
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir && !strings.HasSuffix(p, ".toml") {
			t.Errorf("%s appeared", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHistoryAcceptOpensOnlyAHistory: history accept refuses a missing
// or empty --db as the read commands do (exit 1), leaving the empty file
// empty; on an older schema it migrates it, saying so on stderr, then
// accepts.
func TestHistoryAcceptOpensOnlyAHistory(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero.db")
	if err := os.WriteFile(zero, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"history", "accept", "1", "--db", zero}, {"history", "list", "--db", zero}} {
		var out, errb bytes.Buffer
		want := "arpatch: history " + zero + " is an empty file (0 bytes), not a history: a nightly writes one there on its first run; the history commands (accept included) never make one\n"
		if code := run(context.Background(), append([]string{"arpatch"}, args...), &out, &errb); code != exitFailure || errb.String() != want {
			t.Errorf("%v: exit %d, stderr %q\nwant exit 1 and %q", args, code, errb.String(), want)
		}
	}
	if fi, err := os.Stat(zero); err != nil || fi.Size() != 0 {
		t.Errorf("zero.db after accept: %v %v", fi, err)
	}

	// A history one migration older than this arpatch's, with one run.
	old := filepath.Join(dir, "old.db")
	newest := history.SchemaVersion
	s, err := history.OpenAt(old, newest-1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.BeginRun(history.Run{HardwareKey: "h"})
	if err == nil {
		err = s.FinishRun(id, history.Complete, 0, "no regression")
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "history", "list", "--db", old}, &out, &errb); code != exitFailure ||
		!strings.Contains(errb.String(), fmt.Sprintf("has schema version %d, older than this arpatch's %d: the next `arpatch nightly` on it migrates it (so does `arpatch history accept RUN`, which also makes RUN the reference); history list, show, export and plot only read it", newest-1, newest)) {
		t.Errorf("list of the older schema: exit %d, %q", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	code := run(context.Background(), []string{"arpatch", "history", "accept", "1", "--db", old}, &out, &errb)
	if want := fmt.Sprintf("arpatch: migrated history %s from schema version %d to %d (history accept writes it; list, show, export and plot never do)\n", old, newest-1, newest); code != exitOK || errb.String() != want ||
		out.String() != "run 1 is the new reference for its hardware and workload\n" {
		t.Errorf("accept of the older schema: exit %d, stdout %q, stderr %q\nwant %q", code, out.String(), errb.String(), want)
	}
}

// testPostgres is a new, empty PostgreSQL history for t: a schema of its
// own on $ARPATCH_TEST_POSTGRES's server, else a server of t's own
// (internal/pgtest; t skips, saying why, when none can be started).
func testPostgres(t *testing.T) string {
	t.Helper()
	if os.Getenv(pgtest.Env) != "" {
		return pgtest.Schema(t)
	}
	return pgtest.Own(t).URL
}

// TestHistoryShowsKilledRuns: a run still "running" whose nightly is
// gone (its pid on SQLite, its lock on PostgreSQL) is "killed?" in
// history list and history show alike, with why; a live run is running
// in both.
func TestHistoryShowsKilledRuns(t *testing.T) {
	for _, c := range []struct{ store, target string }{{"sqlite", filepath.Join(t.TempDir(), "h.db")}, {"postgres", ""}} {
		t.Run(c.store, func(t *testing.T) {
			target := c.target
			if target == "" {
				target = testPostgres(t)
			}
			live, err := history.Open(target)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = live.Close() }() // its run stays live until the test ends
			liveID, err := live.BeginRun(history.Run{HardwareKey: "box-a"})
			if err != nil {
				t.Fatal(err)
			}
			other, err := history.Open(target)
			if err != nil {
				t.Fatal(err)
			}
			deadID, err := other.BeginRun(history.Run{HardwareKey: "box-b", PID: 999999999}) // no such process
			if cerr := other.Close(); err == nil {
				err = cerr // on PostgreSQL its lock ends with it
			}
			if err != nil {
				t.Fatal(err)
			}
			why := map[string]string{"sqlite": "pid 999999999 is gone", "postgres": "no session holds its lock: its nightly's process ended"}[c.store]
			var out, errb bytes.Buffer
			if code := run(context.Background(), []string{"arpatch", "history", "list", "--db", target}, &out, &errb); code != exitOK {
				t.Fatalf("list: exit %d, %s", code, errb.String())
			}
			lines := strings.Split(out.String(), "\n")
			if len(lines) < 3 || !strings.HasPrefix(lines[1], fmt.Sprintf("%-5d", deadID)) || !strings.Contains(lines[1], " killed? ") ||
				!strings.HasSuffix(lines[1], why+"; the next nightly marks this run incomplete") ||
				!strings.HasPrefix(lines[2], fmt.Sprintf("%-5d", liveID)) || !strings.Contains(lines[2], " running ") {
				t.Errorf("list:\n%s", out.String())
			}
			for id, want := range map[int64]string{
				deadID: fmt.Sprintf("run %d: killed?, exit -, %s; the next nightly marks this run incomplete\n", deadID, why),
				liveID: fmt.Sprintf("run %d: running, exit -\n", liveID),
			} {
				out.Reset()
				if code := run(context.Background(), []string{"arpatch", "history", "show", fmt.Sprint(id), "--db", target}, &out, &errb); code != exitOK {
					t.Fatalf("show %d: exit %d, %s", id, code, errb.String())
				}
				if first, _, _ := strings.Cut(out.String(), "\n"); first+"\n" != want {
					t.Errorf("show %d: %q, want %q", id, first, want)
				}
			}
			for id, want := range map[int64][2]string{deadID: {"killed?", why + "; the next nightly marks this run incomplete"}, liveID: {"running", ""}} {
				out.Reset()
				if code := run(context.Background(), []string{"arpatch", "history", "show", fmt.Sprint(id), "--db", target, "--json"}, &out, &errb); code != exitOK {
					t.Fatalf("show %d --json: exit %d, %s", id, code, errb.String())
				}
				var d history.Detail
				if err := json.Unmarshal(out.Bytes(), &d); err != nil || string(d.Run.Status) != want[0] || d.Run.Verdict != want[1] {
					t.Errorf("show %d --json: status %q verdict %q (%v), want %q %q", id, d.Run.Status, d.Run.Verdict, err, want[0], want[1])
				}
			}
		})
	}
}

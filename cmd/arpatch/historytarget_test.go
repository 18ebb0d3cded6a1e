package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/history"
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

	old := filepath.Join(dir, "old.db")
	s, err := history.Open(old)
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
	// Schema version 5: migration 6 (its indexes) undone.
	db, err := sql.Open("sqlite", old)
	if err == nil {
		_, err = db.Exec(`DROP INDEX runs_by_series; DROP INDEX runs_by_status; DROP INDEX arms_by_run; DROP INDEX trials_by_arm;
			DROP INDEX samples_by_trial; DROP INDEX checks_by_run; DROP INDEX drift_by_run; DELETE FROM schema_migrations WHERE version = 6`)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "history", "list", "--db", old}, &out, &errb); code != exitFailure ||
		!strings.Contains(errb.String(), "has schema version 5, older than this arpatch's 6: the next `arpatch nightly` or `arpatch history accept` migrates it (they write it); history list, show, export and plot only read it") {
		t.Errorf("list of schema 5: exit %d, %q", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	code := run(context.Background(), []string{"arpatch", "history", "accept", "1", "--db", old}, &out, &errb)
	if want := "arpatch: migrated history " + old + " from schema version 5 to 6 (history accept writes it; list, show, export and plot never do)\n"; code != exitOK || errb.String() != want ||
		out.String() != "run 1 is the new reference for its hardware and workload\n" {
		t.Errorf("accept of schema 5: exit %d, stdout %q, stderr %q\nwant %q", code, out.String(), errb.String(), want)
	}
}

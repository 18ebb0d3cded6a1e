package history

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/pgtest"
)

// TestCheckTarget: PostgreSQL URLs that parse pass, and so do file paths
// (one with a colon written ./NAME); a URL that does not parse (as pgx
// parses it), one with a password, and every value that looks like a URL
// or a connection string but is no PostgreSQL URL are refused, each
// naming what is wrong and, for the look-alikes, the forms that work;
// no refusal prints the password.
func TestCheckTarget(t *testing.T) {
	for _, ok := range []string{"postgres://arpatch@db.internal/arpatch", "postgresql://arpatch@db.internal:5433/arpatch?sslmode=disable", "postgres://xxxxx@db/xxxxx?application_name=xxxxx",
		"postgres://arpatch@/arpatch?host=/run/postgresql", "history.db", "/var/lib/arpatch/history.db", "./postgres:fleet2", "../a:b.db", "dir/h.db", ""} {
		if err := CheckTarget(ok); err != nil {
			t.Errorf("CheckTarget(%q) = %v", ok, err)
		}
	}
	for _, c := range []struct{ target, want string }{
		{"postgres://ci:s3cret@db.example/arpatch", "postgres://ci:xxxxx@db.example/arpatch holds a password, which arpatch would print in its errors and reports: put it in ~/.pgpass or PGPASSWORD instead"},
		{"postgresql://ci@db.example/arpatch?password=s3cret", "postgresql://ci@db.example/arpatch?password=xxxxx holds a password"},
		{"postgres://ci:s3cret@[::1/arpatch", "postgres://ci:xxxxx@[::1/arpatch holds a password"},
		{"postgres://arpatch@[::1/arpatch", "postgres://arpatch@[::1/arpatch: failed to parse as URL (end of string reached when looking for matching \"]\" in IPv6 host address in URI)"},
		{"postgres://arpatch@db:99999/arpatch", "postgres://arpatch@db:99999/arpatch: invalid port"},
		{"postgres://arpatch@db/arpatch?connect_timeout=abc", "postgres://arpatch@db/arpatch?connect_timeout=abc: invalid connect_timeout"},
		{"Postgres://arpatch@/fleet?host=/tmp/pg", `"Postgres://arpatch@/fleet?host=/tmp/pg" looks like a URL but is not a history arpatch reads (write the scheme in lower case: postgres://arpatch@/fleet?host=/tmp/pg): ` + Forms},
		{"pg://arpatch@db/fleet", `"pg://arpatch@db/fleet" looks like a URL but is not a history arpatch reads (a PostgreSQL URL starts postgres://): ` + Forms},
		{"postgres:fleet2", `"postgres:fleet2" looks like a URL but is not a history arpatch reads (a PostgreSQL URL starts postgres://): ` + Forms},
		{"mysql://x@y/z", `"mysql://x@y/z" looks like a URL but is not a history arpatch reads: ` + Forms},
		{"sqlite:history.db", `"sqlite:history.db" looks like a URL but is not a history arpatch reads: ` + Forms},
		{"host=db user=arpatch dbname=arpatch", `"host=db user=arpatch dbname=arpatch" is a keyword/value connection string: arpatch takes a PostgreSQL history as a URL: ` + Forms},
		// Every refusal prints the value with its password masked,
		// wherever pgx would read one from.
		{"postgres://ci:pa?s3cret@db/arpatch", "postgres://ci:xxxxx@db/arpatch holds a password"},
		{"postgres://ci:pa#s3cret@db/arpatch", "postgres://ci:xxxxx@db/arpatch holds a password"},
		{"postgres://ci@db/arpatch?sslpassword=s3cret", "postgres://ci@db/arpatch?sslpassword=xxxxx holds a password"},
		{"postgres://ci@db/arpatch?pass%77ord=s3cret", "postgres://ci@db/arpatch?pass%77ord=xxxxx holds a password"},
		{"postgres://ci:pa/s3cret@db/arpatch", "postgres://ci:xxxxxx@db/arpatch holds a password"},
		{"Postgres://ci:s3cret@db/arpatch", `"Postgres://ci:xxxxx@db/arpatch" looks like a URL but is not a history arpatch reads (write the scheme in lower case: postgres://ci:xxxxx@db/arpatch): `},
		{"postgres:ci:s3cret@db/arpatch", `"postgres:ci:xxxxx@db/arpatch" looks like a URL but is not a history arpatch reads (a PostgreSQL URL starts postgres://): `},
		{"host=db user=ci password=s3cret", `"host=db user=ci password=xxxxx" is a keyword/value connection string: `},
		{"host=db password = 's3 cret' user=ci", `"host=db password = xxxxx user=ci" is a keyword/value connection string: `},
		{"password=s3cret host=db", `"password=xxxxx host=db" is a keyword/value connection string: `},
		{"sslmode=disable host=db", `"sslmode=disable host=db" is a keyword/value connection string: `},
		{"postgres//ci@db/arpatch", `"postgres//ci@db/arpatch" looks like a PostgreSQL URL without the colon after its scheme (postgres://...): ` + Forms},
		// A password that is Redact's own mask, as a remedy prints a URL.
		{"postgres://ci:xxxxx@db/arpatch", "postgres://ci:xxxxx@db/arpatch holds a password"},
		{"postgres://ci@db/arpatch?password=xxxxx", "postgres://ci@db/arpatch?password=xxxxx holds a password"},
	} {
		err := CheckTarget(c.target)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("CheckTarget(%q) = %v\nwant it to start %q", c.target, err, c.want)
		}
	}
	if err := CheckKeep("postgres://arpatch@db/keep"); err == nil || !strings.Contains(err.Error(), "history.keep is the local SQLite file") {
		t.Errorf("CheckKeep of a URL: %v", err)
	}
}

// Every way into a history (Open, OpenRead, OpenExisting, Lock) refuses
// what CheckTarget refuses, creating no file: a mistyped URL never
// becomes an SQLite history under an odd name.
func TestTyposMakeNoFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("ARPATCH_STATE", filepath.Join(dir, "state"))
	for _, target := range []string{"Postgres://arpatch@/fleet?host=/tmp/pg", "pg://arpatch@db/fleet", "postgres:fleet2", "mysql://x@y/z", "postgres://ci:s3cret@db/x",
		"postgres//arpatch@db/fleet", "password=s3cret host=db", "sslmode=disable host=db", "postgres://ci:pa?s3cret@db/x"} {
		for name, open := range map[string]func(string) (*Store, error){"Open": Open, "OpenRead": OpenRead, "OpenExisting": OpenExisting} {
			if s, err := open(target); err == nil || !strings.HasPrefix(err.Error(), "history ") || strings.Contains(err.Error(), "s3cret") {
				if s != nil {
					_ = s.Close()
				}
				t.Errorf("%s(%q) = %v", name, target, err)
			}
		}
		if release, err := Lock(target); err == nil {
			release()
			t.Errorf("Lock(%q) took a lock", target)
		}
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range ents {
		t.Errorf("%s appeared", e.Name())
	}
}

// Redact replaces only a URL's passwords, wherever pgx reads one (the
// user info up to the '@' pgx's parser ends it at, a password= or
// sslpassword= parameter, whole: pgx reads "s3cret#x" as the password),
// and leaves the rest as written (never %-encoded); the look-alikes
// CheckTarget refuses are masked as well as pgx can, and a path is
// printed as it is, colons and '@' included.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://ci:s3cret@/arpatch?host=/tmp/pg":                   "postgres://ci:xxxxx@/arpatch?host=/tmp/pg",
		"postgresql://ci@db/arpatch?sslmode=disable&password=s3cret#x": "postgresql://ci@db/arpatch?sslmode=disable&password=xxxxx",
		"postgres://ci:p%40ss@db:5432/arpatch":                         "postgres://ci:xxxxx@db:5432/arpatch",
		"postgres://ci@/arpatch?host=/tmp/pg":                          "postgres://ci@/arpatch?host=/tmp/pg",
		"postgres://ci:pa?ss@db/arpatch":                               "postgres://ci:xxxxx@db/arpatch",
		"postgres://ci@db/arpatch?application_name=a@b":                "postgres://ci@db/arpatch?application_name=a@b",
		"postgres://ci@db/arpatch?sslpassword=s3cret&sslmode=require":  "postgres://ci@db/arpatch?sslpassword=xxxxx&sslmode=require",
		"user=ci password='s3 cret' host=db":                           "user=ci password=xxxxx host=db",
		"pg://ci:s3cret@db/x?password=s3cret":                          "pg://ci:xxxxx@db/x?password=xxxxx",
		"pg://ci@db/x":                                                 "pg://ci@db/x",
		"postgres//ci:s3cret@db/x":                                     "postgres//ci:xxxxx@db/x",
		"/var/lib/h:1.db":                                              "/var/lib/h:1.db",
		"./ci:s3cret@db.db":                                            "./ci:s3cret@db.db",
		"history.db":                                                   "history.db",
		// Keys in any case, as pgx would send PASSWORD= to the server.
		"postgres://postgres@127.0.0.1:54330/arpatch?PASSWORD=secretpw":          "postgres://postgres@127.0.0.1:54330/arpatch?PASSWORD=xxxxx",
		"postgres://u@h/db?sslpassword=s3cret&PASSWORD=secretpw":                 "postgres://u@h/db?sslpassword=xxxxx&PASSWORD=xxxxx",
		"postgres://u@h/db?Password=secretpw&SSLPASSWORD=s3cret&sslmode=require": "postgres://u@h/db?Password=xxxxx&SSLPASSWORD=xxxxx&sslmode=require",
		"postgres://u@h/db?PASS%57ORD=secretpw":                                  "postgres://u@h/db?PASS%57ORD=xxxxx",
		"host=db PASSWORD = secretpw":                                            "host=db PASSWORD = xxxxx",
		// One slash, none, or a user taken for a scheme.
		"postgres:/postgres:secretpw@127.0.0.1:54330/arpatch": "postgres:/postgres:xxxxx@127.0.0.1:54330/arpatch",
		"postgresql:/u:secretpw@h/db":                         "postgresql:/u:xxxxx@h/db",
		"postgres:u:secretpw@h/db":                            "postgres:u:xxxxx@h/db",
		"u:secretpw@h/db":                                     "u:xxxxx@h/db",
		"postgres@127.0.0.1/arpatch":                          "postgres@127.0.0.1/arpatch",
		"POSTGRES:///u:secretpw@h/db?PASSWORD=secretpw":       "POSTGRES:///u:xxxxx@h/db?PASSWORD=xxxxx",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestLockIsPerDatabase: the per-host lock of a PostgreSQL history
// names the database the URL reaches, not its spelling: postgres:// and
// postgresql://, the default port written out, a socket directory with
// a trailing slash or %-encoded, all take one lock; another database,
// user or search_path is another history, with a lock of its own.
func TestLockIsPerDatabase(t *testing.T) {
	t.Setenv("ARPATCH_STATE", t.TempDir())
	first := "postgres://arpatch@/fleet?host=/tmp/pgsock"
	release, err := Lock(first)
	must(t, err)
	defer release()
	for _, same := range []string{"postgresql://arpatch@/fleet?host=/tmp/pgsock", "postgres://arpatch@/fleet?host=/tmp/pgsock/",
		"postgres://arpatch@/fleet?host=%2Ftmp%2Fpgsock&port=5432", "postgres://arpatch@:5432/fleet?host=/tmp/pgsock&sslmode=disable"} {
		var held *lockfile.HeldError
		if r, err := Lock(same); !errors.As(err, &held) {
			if r != nil {
				r()
			}
			t.Errorf("Lock(%s) while %s is held: %v; want it held", same, first, err)
		}
	}
	for _, other := range []string{"postgres://arpatch@/fleet2?host=/tmp/pgsock", "postgres://ci@/fleet?host=/tmp/pgsock",
		"postgres://arpatch@/fleet?host=/tmp/pgsock&search_path=box", "postgres://arpatch@/fleet?host=/tmp/pgsock&port=5433"} {
		r, err := Lock(other)
		if err != nil {
			t.Errorf("Lock(%s) while %s is held: %v", other, first, err)
			continue
		}
		r()
	}
}

// A server that refuses the connection (a parameter it does not know,
// a database it does not have) is not said to be unreachable, and pgx's
// multi-line error comes on one line, each cause once; an unreachable
// one is.
func TestConnectErrors(t *testing.T) {
	base, why := pgtest.Server()
	if base == "" {
		t.Skipf("no PostgreSQL server: %s", why)
	}
	for _, c := range []struct{ url, want string }{
		{pgtest.WithParam(base, "no_such_setting", "1"), `: the server refused the connection: failed to connect to ` + "`user=postgres database=postgres`" + `: `},
		{strings.Replace(base, "/postgres?", "/no_such_db?", 1), `: the server refused the connection: failed to connect to ` + "`user=postgres database=no_such_db`" + `: `},
		{"postgres://arpatch@127.0.0.1:1/arpatch?connect_timeout=2", `: cannot reach the server: failed to connect to ` + "`user=arpatch database=arpatch`" + `: `},
	} {
		_, err := Open(c.url)
		if err == nil || !strings.HasPrefix(err.Error(), "history "+c.url+c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%s) = %q\nwant it to start %q, on one line", c.url, err, "history "+c.url+c.want)
		}
	}
	_, err := Open(strings.Replace(base, "/postgres?", "/no_such_db?", 1))
	if err == nil || !strings.HasSuffix(err.Error(), ": create the database (createdb), or name one that exists") {
		t.Errorf("no such database: %v", err)
	}
}

// FuzzRedact: whatever the scheme's spelling (case, slashes, a lost
// colon, none), and whatever the password key's case, no password
// survives Redact, nor the error CheckTarget gives.
func FuzzRedact(f *testing.F) {
	f.Add("postgres:/", "u", "secretpw", "h:5432", "PASSWORD")
	f.Add("postgresql://", "ci", "s3cret", "db", "sslpassword")
	f.Add("", "postgres", "pw12", "127.0.0.1", "Password")
	f.Add("pg//", "u", "a?b#c/d", "h", "SSLPassword")
	f.Fuzz(func(t *testing.T, scheme, user, secret, host, key string) {
		if len(secret) < 4 || strings.ContainsAny(secret, "@&\x00\n") || strings.ContainsAny(user+host, ":@/?&") ||
			strings.ContainsAny(scheme, "@?&") || strings.Contains(scheme+user+host+key, secret) || strings.Contains("xxxxx", secret) ||
			!strings.Contains(strings.ToLower(key), "password") || strings.ContainsAny(key, "?&=#%") {
			return
		}
		for _, in := range []string{
			scheme + user + ":" + secret + "@" + host + "/db",
			scheme + user + "@" + host + "/db?" + key + "=" + secret,
			scheme + user + "@" + host + "/db?sslmode=disable&" + key + "=" + secret + "&x=1",
		} {
			if isPath(in) {
				continue // a file name, printed as written
			}
			if r := Redact(in); strings.Contains(r, secret) {
				t.Errorf("Redact(%q) = %q", in, r)
			}
			if err := CheckTarget(in); err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("CheckTarget(%q) = %v", in, err)
			}
		}
	})
}

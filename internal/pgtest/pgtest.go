// Package pgtest gives tests a real PostgreSQL server: the one named by
// $ARPATCH_TEST_POSTGRES (a postgres:// URL, as .ci/run exports it), or
// else one it starts for the test binary from the installed server's
// programs (initdb and postgres: on PATH, or Debian's
// /usr/lib/postgresql/VERSION/bin), listening on a unix socket in a
// temporary directory only, never on a network address, and stopped
// with the binary. As root it runs them as the postgres user (initdb
// refuses root), through runuser.
//
// Each test gets a schema of its own (Schema), so tests never see each
// other's rows. When no server can be had, Schema skips the test and says
// why.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/arpatch/arpatch/internal/goroutine"
)

// Env is the variable that names a server to use instead of starting one.
const Env = "ARPATCH_TEST_POSTGRES"

var (
	once    sync.Once
	baseURL string // the server's URL, "" when none
	why     string // why there is none
	stop    func()
	n       atomic.Int64
)

// Server returns the URL of the server the tests use, starting one the
// first time when $ARPATCH_TEST_POSTGRES is unset, or "" and why none
// could be had.
func Server() (string, string) {
	once.Do(func() {
		if u := os.Getenv(Env); u != "" {
			baseURL = u
			return
		}
		baseURL, stop, why = start()
	})
	return baseURL, why
}

// Stop stops the server Server started, if it did; call it from TestMain
// after the tests.
func Stop() {
	if stop != nil {
		stop()
	}
}

// Schema returns the URL of a new, empty schema on the server (its
// search_path), dropped when t ends; it skips t, saying why, when there
// is no server.
func Schema(t testing.TB) string {
	t.Helper()
	base, why := Server()
	if base == "" {
		t.Skipf("no PostgreSQL server: %s", why)
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), n.Add(1))
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }() // nothing written through it after the schema
	if _, err := db.Exec(`CREATE SCHEMA ` + name); err != nil {
		t.Fatalf("PostgreSQL at %s: %v", base, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err == nil {
			_, err = db.Exec(`DROP SCHEMA ` + name + ` CASCADE`)
			_ = db.Close() // best effort: the server is the tests' own
		}
		if err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
		}
	})
	return WithParam(base, "search_path", name)
}

// WithParam returns URL u with the query parameter k set to v.
func WithParam(u, k, v string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	q := p.Query()
	q.Set(k, v)
	p.RawQuery = q.Encode()
	return p.String()
}

// Own starts a server of t's own (not the shared one: a test that stops
// or restarts its server must not take the other tests' with it), in a
// temporary directory on a unix socket, stopped when t ends; it skips t,
// saying why, when no server can be started. Its URL names the
// database "postgres" as the postgres user.
func Own(t testing.TB) *Instance {
	t.Helper()
	in, why := newInstance()
	if in == nil {
		t.Skipf("no PostgreSQL server of the test's own: %s", why)
	}
	t.Cleanup(in.remove)
	return in
}

// Instance is a server this package started: its data directory and
// socket directory, and the running postgres process.
type Instance struct {
	URL  string
	dir  string // socket directory, holding data/
	bin  string
	cred *syscall.Credential // the postgres user's, when root

	mu     sync.Mutex
	srv    *exec.Cmd
	exited chan struct{}
	log    *strings.Builder
}

// start starts a server in a temporary directory on a unix socket: its
// URL and stop, or why it could not.
func start() (string, func(), string) {
	in, why := newInstance()
	if in == nil {
		return "", nil, why
	}
	return in.URL, in.remove, ""
}

// newInstance makes a data directory and starts a server on it, or
// says why it could not.
func newInstance() (*Instance, string) {
	bin, err := binDir()
	if err != nil {
		return nil, err.Error()
	}
	dir, err := os.MkdirTemp("", "arpatch-pgtest-")
	if err != nil {
		return nil, err.Error()
	}
	in := &Instance{dir: dir, bin: bin, URL: "postgres://postgres@/postgres?host=" + url.QueryEscape(dir)}
	// As root the programs run as postgres (the child itself, no
	// runuser between: signals reach it).
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir) // nothing in it yet
			return nil, "running as root, and there is no postgres user to run the server as (" + err.Error() + ")"
		}
		var uid, gid uint32
		if _, err := fmt.Sscan(pg.Uid+" "+pg.Gid, &uid, &gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Sprintf("the postgres user's ids %s:%s: %v", pg.Uid, pg.Gid, err)
		}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err.Error()
		}
		in.cred = &syscall.Credential{Uid: uid, Gid: gid}
	}
	c := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	c.Dir, c.SysProcAttr = dir, &syscall.SysProcAttr{Credential: in.cred}
	if out, err := c.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Sprintf("initdb: %v: %s", err, lastLine(out))
	}
	if err := in.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err.Error()
	}
	return in, ""
}

// Start starts the server on its data directory and waits until it
// answers (up to 60 s). The server is this process's child, not pg_ctl's
// daemon: when the test binary dies, however it dies, the kernel sends it
// SIGTERM (Pdeathsig), and it shuts down.
func (in *Instance) Start() error {
	in.mu.Lock()
	srv := exec.Command(filepath.Join(in.bin, "postgres"), "-D", filepath.Join(in.dir, "data"), "-k", in.dir, "-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=100")
	srv.Dir = in.dir
	in.log = &strings.Builder{}
	srv.Stdout, srv.Stderr = in.log, in.log
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: in.cred, Pdeathsig: syscall.SIGTERM}
	if err := srv.Start(); err != nil {
		in.mu.Unlock()
		return fmt.Errorf("postgres: %v", err)
	}
	exited := make(chan struct{})
	goroutine.Go(func() { _ = srv.Wait(); close(exited) }) // its output is in log
	in.srv, in.exited = srv, exited
	in.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ping(in.URL)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited: %s", lastLine([]byte(in.log.String())))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			in.Stop()
			return fmt.Errorf("the server started in %s does not answer: %v", in.dir, err)
		}
	}
}

// Stop stops the server (a fast shutdown: every session ends, as a
// server's restart ends them) and waits for it to exit, up to 30 s before
// it is killed. Its data stay for Start.
func (in *Instance) Stop() {
	in.mu.Lock()
	srv, exited := in.srv, in.exited
	in.srv = nil
	in.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = srv.Process.Kill() // a server that will not stop
		<-exited
	}
}

// Restart stops the server and starts it again on the same data and
// socket: every session it had is gone.
func (in *Instance) Restart() error {
	in.Stop()
	return in.Start()
}

// remove stops the server and removes its directory.
func (in *Instance) remove() {
	in.Stop()
	_ = os.RemoveAll(in.dir)
}

// binDir finds the directory of initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin") // a bad pattern is the only error
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("%s is unset and initdb is neither on PATH nor in /usr/lib/postgresql/*/bin (install Debian's postgresql package, or set %s to a server's postgres:// URL)", Env, Env)
}

func ping(u string) error {
	db, err := sql.Open("pgx", u)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }() // only pinged
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

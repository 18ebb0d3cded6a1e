package testrepo

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Shared holds fixtures that a test binary makes once and its tests share
// read-only: repositories they clone from, read and compare before and
// after, but never commit to, and directories (a patch series, an empty
// HOME) they read. Making a small fixture repository writes its tree and
// about 20 files and directories of git's; on a file system that pays for
// every recently deleted inode at each creation, one per test adds up.
// Each fixture's tree (.git and modification times included) is recorded
// when it is made; Close, and Check at the end of a test, fail where a
// test changed it, since the tests after it would see another fixture
// than they asked for. TestMain calls Run (or Close after the tests). The
// zero value is ready to use.
type Shared struct {
	mu    sync.Mutex
	dir   string
	repos map[string]*sharedFixture
}

type sharedFixture struct {
	key, dir, commit string
	made             Snapshot // nil for a Scratch directory: never checked
}

// Get returns the repository made for key and its commit: the first call
// for a key runs mk on a new directory (which does not exist yet), records
// its tree and keeps what mk returns; later calls return the same. It
// returns mk's error, the error making the directory that holds the
// fixtures, or SnapshotTree's.
func (s *Shared) Get(key string, mk func(dir string) (commit string, err error)) (dir, commit string, err error) {
	f, err := s.make(key, "up", true, mk)
	if err != nil {
		return "", "", err
	}
	return f.dir, f.commit, nil
}

// Dir returns the directory made for key, as Get does for a repository,
// for a read-only fixture that is no repository (a patch series, an empty
// HOME): the first call runs mk on a new path (which does not exist yet),
// records its tree and keeps it; later calls return the same. It returns
// mk's error, the error making the directory that holds the fixtures, or
// SnapshotTree's.
func (s *Shared) Dir(key string, mk func(dir string) error) (string, error) {
	f, err := s.make(key, "", true, func(dir string) (string, error) { return "", mk(dir) })
	if err != nil {
		return "", err
	}
	return f.dir, nil
}

// Scratch returns a directory made for key, as Dir does, that the tests
// may write to (a build root they share, a cache of probes): its tree is
// not recorded, and neither Check nor Close checks it. It returns mk's
// error or the error making the directory that holds the fixtures.
func (s *Shared) Scratch(key string, mk func(dir string) error) (string, error) {
	f, err := s.make(key, "", false, func(dir string) (string, error) { return "", mk(dir) })
	if err != nil {
		return "", err
	}
	return f.dir, nil
}

// make returns key's fixture, making it in a new path under s's directory
// (sub under a numbered directory, the numbered directory itself when sub
// is "") with mk on the first call, and recording its tree when record
// is set.
func (s *Shared) make(key, sub string, record bool, mk func(dir string) (string, error)) (*sharedFixture, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.repos[key]; ok {
		return f, nil
	}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "arpatch-shared-fixtures-")
		if err != nil {
			return nil, err
		}
		s.dir, s.repos = d, map[string]*sharedFixture{}
	}
	f := &sharedFixture{key: key, dir: filepath.Join(s.dir, strconv.Itoa(len(s.repos)), sub)}
	var err error
	if f.commit, err = mk(f.dir); err != nil {
		return nil, err
	}
	if record {
		if f.made, err = SnapshotTree(f.dir, sharedPrint); err != nil {
			return nil, err
		}
	}
	s.repos[key] = f
	return f, nil
}

// sharedPrint is what a fixture's record holds: every path, .git
// included, with its type, mode and bytes, and each file's modification
// time. Directories' times are not recorded (a lock file made and removed
// under .git changes its directory's).
var sharedPrint = SnapshotOptions{WithGit: true, ModTime: true}

// changed returns nil when f's tree is as it was made, else an error
// naming the fixture and the paths that differ (the first ten).
func (f *sharedFixture) changed() error {
	now, err := SnapshotTree(f.dir, sharedPrint)
	if err != nil {
		return fmt.Errorf("shared fixture %s (%s): %w", f.key, f.dir, err)
	}
	d := f.made.Diff(now)
	if len(d) == 0 {
		return nil
	}
	more := ""
	if len(d) > 10 {
		d, more = d[:10], fmt.Sprintf(" and %d more", len(d)-10)
	}
	return fmt.Errorf("shared fixture %s (%s) changed since it was made: %s%s differ; a test that commits to or edits a fixture must make its own", f.key, f.dir, strings.Join(d, ", "), more)
}

// Check registers a cleanup that fails t (t.Errorf, naming the test) if
// the fixture at dir, which Get or Dir returned, changed during the test:
// Close finds the same at the end, but cannot say which test it was. A dir
// that is no recorded fixture of s fails t at once.
func (s *Shared) Check(t testing.TB, dir string) {
	t.Helper()
	s.mu.Lock()
	var f *sharedFixture
	for _, r := range s.repos {
		if r.dir == dir && r.made != nil {
			f = r
		}
	}
	s.mu.Unlock()
	if f == nil {
		t.Fatalf("%s is no recorded shared fixture", dir)
		return
	}
	t.Cleanup(func() {
		if err := f.changed(); err != nil {
			t.Errorf("%s: %v", t.Name(), err)
		}
	})
}

// Close checks that every fixture (but Scratch directories) is as it was
// made, then removes them all. The error names each fixture a test
// changed and the paths that differ (the tests after that one saw another
// tree than they asked for), and any removal error.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		return nil
	}
	keys := slices.Sorted(maps.Keys(s.repos))
	var errs []error
	for _, k := range keys {
		if f := s.repos[k]; f.made != nil {
			errs = append(errs, f.changed())
		}
	}
	errs = append(errs, os.RemoveAll(s.dir))
	s.dir, s.repos = "", nil
	return errors.Join(errs...)
}

// Run is for TestMain: it runs the tests, then Close. It returns m.Run's
// exit code, or 1 where the tests passed and Close fails (its error goes
// to stderr).
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

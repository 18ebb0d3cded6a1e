package testrepo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSharedMakesOnceAndCatchesACommit(t *testing.T) {
	var s Shared
	made := 0
	mk := func(dir string) (string, error) {
		made++
		if err := WriteFiles(dir, map[string]string{"a.txt": "a\n"}); err != nil {
			return "", err
		}
		return Init(dir)
	}
	d1, c1, err := s.Get("a", mk)
	if err != nil {
		t.Fatal(err)
	}
	d2, c2, err := s.Get("a", mk)
	if err != nil || d2 != d1 || c2 != c1 || made != 1 {
		t.Fatalf("second Get: %s %s %v, made %d times; want %s %s, once", d2, c2, err, made, d1, c1)
	}
	if d3, _, err := s.Get("b", mk); err != nil || d3 == d1 || made != 2 {
		t.Fatalf("another key: %s %v, made %d times", d3, err, made)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close, nothing committed: %v", err)
	}
	if _, err := os.Stat(d1); !os.IsNotExist(err) {
		t.Errorf("%s is left after Close: %v", d1, err)
	}

	// A commit to a shared repository fails Close, naming it and what
	// the commit changed.
	d, _, err := s.Get("moved", mk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Change(d, "a test's own change", map[string]string{"a.txt": "b\n"}); err != nil {
		t.Fatal(err)
	}
	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "shared fixture moved ("+d+") changed since it was made: .git/index, ") {
		t.Errorf("close after a commit: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(d)); !os.IsNotExist(err) {
		t.Errorf("%s is left after Close: %v", d, err)
	}
}

// Dir makes a plain directory once per key; Close removes it and checks
// its tree as it checks the repositories'.
func TestSharedDirMakesOnce(t *testing.T) {
	var s Shared
	made := 0
	mk := func(dir string) error {
		made++
		return WriteFiles(dir, map[string]string{"s/series.toml": "name = \"x\"\n"})
	}
	d1, err := s.Dir("series", mk)
	if err != nil {
		t.Fatal(err)
	}
	if d2, err := s.Dir("series", mk); err != nil || d2 != d1 || made != 1 {
		t.Fatalf("second Dir: %s %v, made %d times; want %s, once", d2, err, made, d1)
	}
	if b, err := os.ReadFile(filepath.Join(d1, "s", "series.toml")); err != nil || string(b) != "name = \"x\"\n" {
		t.Errorf("made file: %q, %v", b, err)
	}
	if _, _, err := s.Get("repo", func(dir string) (string, error) {
		if err := WriteFiles(dir, map[string]string{"a.txt": "a\n"}); err != nil {
			return "", err
		}
		return Init(dir)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := os.Stat(d1); !os.IsNotExist(err) {
		t.Errorf("%s is left after Close: %v", d1, err)
	}
}

// errorsOf is a testing.TB that records what Errorf and Fatalf say and
// runs its cleanups when asked, so that a test can see another fail.
type errorsOf struct {
	testing.TB
	name     string
	errs     []string
	cleanups []func()
}

func (e *errorsOf) Name() string     { return e.name }
func (e *errorsOf) Helper()          {}
func (e *errorsOf) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }
func (e *errorsOf) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}
func (e *errorsOf) Fatalf(format string, args ...any) { e.Errorf(format, args...) }
func (e *errorsOf) Fatal(args ...any)                 { e.errs = append(e.errs, fmt.Sprint(args...)) }
func (e *errorsOf) end() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// An edit of a shared fixture (a file's bytes, a new file, a file only
// touched, a file under .git) fails Check's cleanup, naming the test and
// the paths, and Close; a test that changes nothing passes Check; a
// Scratch directory may be written.
func TestSharedCatchesAnEdit(t *testing.T) {
	var s Shared
	up, _, err := s.Get("up", func(dir string) (string, error) {
		if err := WriteFiles(dir, map[string]string{"a.txt": "a\n", "b.txt": "b\n"}); err != nil {
			return "", err
		}
		return Init(dir)
	})
	if err != nil {
		t.Fatal(err)
	}
	series, err := s.Dir("series", func(dir string) error {
		return WriteFiles(dir, map[string]string{"fx/series.toml": "name = \"fx\"\n"})
	})
	if err != nil {
		t.Fatal(err)
	}
	scratch, err := s.Scratch("scratch", func(dir string) error { return os.Mkdir(dir, 0o755) })
	if err != nil {
		t.Fatal(err)
	}

	quiet := &errorsOf{TB: t, name: "TestQuiet"}
	s.Check(quiet, up)
	s.Check(quiet, series)
	if err := os.WriteFile(filepath.Join(scratch, "made"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	quiet.end()
	if quiet.errs != nil {
		t.Errorf("a test that changed no fixture: %q", quiet.errs)
	}

	guilty := &errorsOf{TB: t, name: "TestGuilty"}
	s.Check(guilty, up)
	s.Check(guilty, series)
	later := time.Now().Add(time.Hour)
	for _, err := range []error{
		os.WriteFile(filepath.Join(series, "fx/series.toml"), []byte("name = \"fy\"\n"), 0o644),
		os.WriteFile(filepath.Join(up, "new.txt"), nil, 0o644),
		os.Chtimes(filepath.Join(up, "b.txt"), later, later),
		os.WriteFile(filepath.Join(up, ".git/description"), []byte("x\n"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	guilty.end()
	// Cleanups run last first: series was checked second.
	want := []string{
		"TestGuilty: shared fixture series (" + series + ") changed since it was made: fx/series.toml differ",
		"TestGuilty: shared fixture up (" + up + ") changed since it was made: .git/description, b.txt, new.txt differ",
	}
	if len(guilty.errs) != 2 || !strings.HasPrefix(guilty.errs[0], want[0]) || !strings.HasPrefix(guilty.errs[1], want[1]) {
		t.Errorf("a test that edited two fixtures:\n%s\nwant prefixes\n%s", strings.Join(guilty.errs, "\n"), strings.Join(want, "\n"))
	}
	notFixture := &errorsOf{TB: t, name: "TestScratch"}
	s.Check(notFixture, scratch)
	if len(notFixture.errs) != 1 || !strings.Contains(notFixture.errs[0], "is no recorded shared fixture") {
		t.Errorf("Check of a Scratch directory: %q", notFixture.errs)
	}

	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "shared fixture series ("+series+") changed since it was made: fx/series.toml differ") ||
		!strings.Contains(err.Error(), "shared fixture up (") || strings.Contains(err.Error(), "scratch") {
		t.Errorf("close after the edits: %v", err)
	}
}

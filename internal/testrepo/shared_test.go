package testrepo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

	// A commit to a shared repository fails Close, naming it.
	d, c, err := s.Get("moved", mk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Change(d, "a test's own change", map[string]string{"a.txt": "b\n"}); err != nil {
		t.Fatal(err)
	}
	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "shared fixture moved: HEAD is") || !strings.Contains(err.Error(), "not the fixture commit "+c) {
		t.Errorf("close after a commit: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(d)); !os.IsNotExist(err) {
		t.Errorf("%s is left after Close: %v", d, err)
	}
}

// Dir makes a plain directory once per key; Close removes it and checks
// no HEAD there (it has none), beside the repositories it does check.
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

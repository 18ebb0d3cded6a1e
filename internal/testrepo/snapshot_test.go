package testrepo

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A Snapshot records each path's type, permission bits, size and sha256
// (a symlink's target, .git only when asked, an Extra path under .git or
// its absence, a modification time only when asked), and Diff and Hash
// see a change to any of them.
func TestSnapshotTree(t *testing.T) {
	dir := t.TempDir()
	for p, c := range map[string]string{"a/x.txt": "x\n", "run.sh": "#!/bin/sh\n", ".git/HEAD": "ref: refs/heads/master\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/x.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	snap := func(o SnapshotOptions) Snapshot {
		t.Helper()
		s, err := SnapshotTree(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := snap(SnapshotOptions{Extra: []string{".git/HEAD", ".git/arpatch/state.json"}})
	want := Snapshot{
		"a":                       "drwxr-xr-x",
		"a/x.txt":                 "-rw-r--r-- 2 " + sha256Hex("x\n"),
		"run.sh":                  "-rwxr-xr-x 10 " + sha256Hex("#!/bin/sh\n"),
		"link":                    "Lrwxrwxrwx -> a/x.txt",
		".git/HEAD":               "-rw-r--r-- 23 " + sha256Hex("ref: refs/heads/master\n"),
		".git/arpatch/state.json": "absent",
	}
	root, err := os.Lstat(dir) // t.TempDir's mode
	if err != nil {
		t.Fatal(err)
	}
	want["."] = root.Mode().String()
	if d := s.Diff(want); d != nil {
		t.Errorf("snapshot differs at %v: %v", d, s)
	}
	if g := snap(SnapshotOptions{WithGit: true}); g[".git"] != "drwxr-xr-x" || g[".git/HEAD"] != want[".git/HEAD"] {
		t.Errorf("with .git: %v", g)
	}
	if e := SnapshotEntry(0o644, []byte("x\n"), 0); e != want["a/x.txt"] {
		t.Errorf("SnapshotEntry = %q, want %q", e, want["a/x.txt"])
	}

	when := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "run.sh"), when, when); err != nil {
		t.Fatal(err)
	}
	if d := snap(SnapshotOptions{Extra: []string{".git/HEAD", ".git/arpatch/state.json"}}).Diff(s); d != nil {
		t.Errorf("a new modification time counted without ModTime: %v", d)
	}
	m := snap(SnapshotOptions{ModTime: true})
	if w := SnapshotEntry(0o755, []byte("#!/bin/sh\n"), when.UnixNano()); m["run.sh"] != w {
		t.Errorf("with ModTime: run.sh %q, want %q", m["run.sh"], w)
	}

	// One change of each kind, each seen by Diff and Hash.
	changes := map[string]func() error{
		"a/x.txt": func() error { return os.WriteFile(filepath.Join(dir, "a/x.txt"), []byte("y\n"), 0o644) },
		"run.sh":  func() error { return os.Chmod(filepath.Join(dir, "run.sh"), 0o644) },
		"link": func() error {
			if err := os.Remove(filepath.Join(dir, "link")); err != nil {
				return err
			}
			return os.Symlink("run.sh", filepath.Join(dir, "link"))
		},
		"a/new":                   func() error { return os.WriteFile(filepath.Join(dir, "a/new"), nil, 0o644) },
		".git/arpatch/state.json": func() error { return os.MkdirAll(filepath.Join(dir, ".git/arpatch/state.json"), 0o755) },
	}
	for _, p := range []string{"a/x.txt", "run.sh", "link", "a/new", ".git/arpatch/state.json"} {
		before := snap(SnapshotOptions{Extra: []string{".git/arpatch/state.json"}})
		if err := changes[p](); err != nil {
			t.Fatal(err)
		}
		after := snap(SnapshotOptions{Extra: []string{".git/arpatch/state.json"}})
		if d := before.Diff(after); !slices.Equal(d, []string{p}) {
			t.Errorf("changing %s: Diff = %v", p, d)
		}
		if before.Hash() == after.Hash() {
			t.Errorf("changing %s: same Hash", p)
		}
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

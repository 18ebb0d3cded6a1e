package safefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, p, s string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.txt"), "A", 0o644)
	write(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "gone.txt"), "G", 0o600)
	write(t, filepath.Join(dir, "solo", "deep", "only.txt"), "O", 0o644)
	root := Root{Dir: dir}
	changes := []Change{
		{Path: "a.txt", Data: []byte("A2")},
		{Path: "run.sh", Data: []byte("#!/bin/sh\necho\n")},
		{Path: "gone.txt"},
		{Path: "solo/deep/only.txt"},
		{Path: "new/deep/n.txt", Data: []byte("N"), Mode: 0o755},
	}

	// Fail on the last change: everything before it is put back.
	Faults = func(op, rel string) error {
		if op == "write" && rel == "new/deep/n.txt" {
			return errors.New("disk full")
		}
		return nil
	}
	err := root.Write(changes)
	Faults = nil
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "restored") {
		t.Fatalf("err = %v, want the failure and a note that the tree was restored", err)
	}
	if read(t, filepath.Join(dir, "a.txt")) != "A" || read(t, filepath.Join(dir, "gone.txt")) != "G" || read(t, filepath.Join(dir, "solo/deep/only.txt")) != "O" {
		t.Error("files were not restored")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "gone.txt")); fi.Mode().Perm() != 0o600 {
		t.Errorf("restored mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("created directories were left behind")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*arpatch*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left: %v", leftovers)
	}

	// Without the failure, all changes land; modes are kept or set.
	if err := root.Write(changes); err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(dir, "a.txt")) != "A2" || read(t, filepath.Join(dir, "new/deep/n.txt")) != "N" {
		t.Error("changes not written")
	}
	if _, err := os.Stat(filepath.Join(dir, "gone.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("gone.txt not deleted")
	}
	// Like git, deleting a directory's last file removes the directory.
	if _, err := os.Stat(filepath.Join(dir, "solo")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("solo/ left empty")
	}
	for p, want := range map[string]fs.FileMode{"run.sh": 0o755, "a.txt": 0o644, "new/deep/n.txt": 0o755} {
		if fi, _ := os.Stat(filepath.Join(dir, p)); fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
}

func TestRefusesPathsThatLeaveTheRoot(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "S", 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "ok.txt"), "ok", 0o644)
	root := Root{Dir: dir}
	for _, p := range []string{"link/secret", "../x", "/etc/passwd", "a/../../x", "a\\b"} {
		err := root.Write([]Change{{Path: "ok.txt", Data: []byte("changed")}, {Path: p, Data: []byte("x")}})
		var pe *PathError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want *PathError", p, err)
		}
		if _, err := root.ReadFile(p); !errors.As(err, &pe) {
			t.Errorf("ReadFile(%s): err = %v, want *PathError", p, err)
		}
	}
	if read(t, filepath.Join(dir, "ok.txt")) != "ok" || read(t, filepath.Join(outside, "secret")) != "S" {
		t.Error("a refused group still wrote something")
	}
	if _, err := root.ReadFile("missing.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
}

func TestCanWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for p, ok := range map[string]bool{
		filepath.Join(dir, "new.json"):         true,
		filepath.Join(dir, "a", "b", "x.json"): true, // parents are made
		file:                                   true, // replaced
		dir:                                    false,
		filepath.Join(file, "x.json"):          false,
	} {
		if err := CanWrite(p); (err == nil) != ok {
			t.Errorf("CanWrite(%s) = %v", p, err)
		}
	}
}

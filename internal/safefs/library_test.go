package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Why Root is not the standard library's os.Root (docs/libraries.md):
// os.Root confines a path to its directory but follows a symlink that
// stays inside it, so a patch path through an in-tree link writes the
// file the link names, which git apply refuses ("beyond a symbolic
// link") and Root refuses before any write. os.Root also has no atomic
// or all-or-nothing write: Root.Write's temp file, fsync, rename and
// rollback stay ours.
func TestOSRootFollowsInTreeSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }() // a directory handle: nothing to flush
	if err := r.WriteFile("link/x", []byte("through the link\n"), 0o644); err != nil {
		t.Fatalf("os.Root refused the in-tree link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "real", "x")); string(b) != "through the link\n" {
		t.Fatalf("os.Root wrote %q to real/x", b)
	}
	err = Root{Dir: dir}.Write([]Change{{Path: "link/y", Data: []byte("no\n"), Mode: 0o644}})
	var pe *PathError
	if !errors.As(err, &pe) {
		t.Errorf("safefs wrote through the link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "real", "y")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("real/y exists (%v): something was written", err)
	}
}

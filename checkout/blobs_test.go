package checkout

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/safefs"
)

// gitBlob is git's blob id of b (go-git's, as `git hash-object` gives it).
func gitBlob(b []byte) string { return plumbing.ComputeHash(plumbing.BlobObject, b).String() }

// The gate rule reads an applied checkout through listedRoot: a directory
// is absent to ReadFile (the Python judge asks NAME/__init__.py and
// NAME.py of a package), and BlobID gives the index's blob id of a file
// only where the work tree shows it clean; an edited, deleted or
// untracked file is read, and nothing is trusted beside an untracked
// .gitattributes.
func TestListedRootTrustsOnlyCleanFiles(t *testing.T) {
	f := newFixtureOwn(t)
	f.cloneAndRevert(t)
	edit := func(p, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(f.work, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("kernel/untouched.cuh", "// edited\n")
	edit("kernel/new.cuh", "// untracked\n")
	if err := os.Remove(filepath.Join(f.work, "docs/obsolete.md")); err != nil {
		t.Fatal(err)
	}
	repo, err := gitsrc.Open(f.work)
	if err != nil {
		t.Fatal(err)
	}
	root := safefs.Root{Dir: f.work}
	wt, err := readWorkTree(repo, f.commit, root)
	if err != nil {
		t.Fatal(err)
	}
	tracked, err := repo.TrackedPaths()
	if err != nil {
		t.Fatal(err)
	}
	l := listedRoot{root, tracked, func() map[string]string { return cleanBlobs(repo, wt) }}
	for _, p := range []string{"tools/launch.sh", "kernel/dispatch.cuh", "tools/run.bat"} {
		got, err := l.BlobID(p)
		if want := gitBlob([]byte(upstreamFiles[p])); got != want || err != nil {
			t.Errorf("BlobID(%s) = %q, %v; want the clean file's %s", p, got, err, want)
		}
	}
	for _, p := range []string{"kernel/untouched.cuh", "kernel/new.cuh", "docs/obsolete.md", "nope.py"} {
		if got, err := l.BlobID(p); got != "" || err != nil {
			t.Errorf("BlobID(%s) = %q, %v; want \"\" (read it)", p, got, err)
		}
	}
	if _, err := l.ReadFile("kernel"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a directory: %v; want fs.ErrNotExist", err)
	}
	if b, err := l.ReadFile("kernel/untouched.cuh"); string(b) != "// edited\n" || err != nil {
		t.Errorf("ReadFile of the edited file = %q, %v", b, err)
	}

	edit(".gitattributes", "*.cuh text eol=crlf\n")
	if wt, err = readWorkTree(repo, f.commit, root); err != nil {
		t.Fatal(err)
	}
	if ids := cleanBlobs(repo, wt); len(ids) != 0 {
		t.Errorf("with an untracked .gitattributes: %d files trusted; want none", len(ids))
	}
}

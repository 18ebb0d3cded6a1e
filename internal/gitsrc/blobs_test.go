package gitsrc

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CommitTree.BlobID and IndexBlobs give git's own blob ids (git
// rev-parse COMMIT:PATH, git ls-files -s) without reading a blob, absent
// where ReadFile says absent and "" where it refuses (a symlink); the
// index's ids leave out skip-worktree entries, and all of them where git
// may convert the work tree's bytes (core.autocrlf, a .gitattributes).
func TestBlobIDsAreGits(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "--template=")
	files := map[string]string{"a.py": "print(1)\n", "pkg/__init__.py": "", "pkg/b.py": "x = 2\n", "run.sh": "#!/bin/sh\n"}
	for f, body := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.py", filepath.Join(dir, "link.py")); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "x")
	head := git("rev-parse", "HEAD")
	repo, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := repo.TreeAt(head)
	if err != nil {
		t.Fatal(err)
	}
	for f := range files {
		want := git("rev-parse", "HEAD:"+f)
		if got, err := tree.BlobID(f); got != want || err != nil {
			t.Errorf("BlobID(%s) = %q, %v; git says %s", f, got, err, want)
		}
	}
	if got, err := tree.BlobID("link.py"); got != "" || err != nil {
		t.Errorf("BlobID of a symlink = %q, %v; want \"\" (read it)", got, err)
	}
	for _, p := range []string{"pkg", "nope.py", "pkg/nope/x.py"} {
		if _, err := tree.BlobID(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("BlobID(%s): %v; want fs.ErrNotExist, as ReadFile", p, err)
		}
	}

	index := func() map[string]string {
		t.Helper()
		r, err := Open(dir) // a new Repo: the config is read again
		if err != nil {
			t.Fatal(err)
		}
		ids, err := r.IndexBlobs()
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	ids := index()
	if len(ids) != len(files) {
		t.Errorf("IndexBlobs = %v; want the %d regular files", ids, len(files))
	}
	for f := range files {
		if want := strings.Fields(git("ls-files", "-s", f))[1]; ids[f] != want {
			t.Errorf("IndexBlobs[%s] = %q; git ls-files -s says %s", f, ids[f], want)
		}
	}
	git("update-index", "--skip-worktree", "a.py")
	if _, ok := index()["a.py"]; ok {
		t.Errorf("IndexBlobs holds a skip-worktree entry (git status does not look at its file)")
	}
	git("update-index", "--no-skip-worktree", "a.py")
	git("config", "core.autocrlf", "true")
	if ids := index(); len(ids) != 0 {
		t.Errorf("with core.autocrlf=true: IndexBlobs = %v; want none", ids)
	}
	git("config", "core.autocrlf", "false")
	if err := os.WriteFile(filepath.Join(dir, "pkg", ".gitattributes"), []byte("*.py text eol=crlf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "pkg/.gitattributes")
	if ids := index(); len(ids) != 0 {
		t.Errorf("with a tracked .gitattributes: IndexBlobs = %v; want none", ids)
	}
	git("rm", "-q", "--cached", "pkg/.gitattributes")
	if err := os.MkdirAll(filepath.Join(home, ".config", "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "git", "attributes"), []byte("*.py ident\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ids := index(); len(ids) != 0 {
		t.Errorf("with a global attributes file: IndexBlobs = %v; want none", ids)
	}
}

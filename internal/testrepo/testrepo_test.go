package testrepo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/util"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// looseAndPacks counts the loose-object directories and the packs of the
// repository at dir.
func looseAndPacks(t *testing.T, dir string) (loose, packs int) {
	t.Helper()
	l, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "[0-9a-f][0-9a-f]"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "pack-*.pack"))
	if err != nil {
		t.Fatal(err)
	}
	return len(l), len(p)
}

// commitStep makes step i of a fixture at dir: WriteFiles and Init for
// the first, Change with the message "step" after. It returns the commit.
func commitStep(t *testing.T, dir string, i int, files map[string]string) string {
	t.Helper()
	var c string
	var err error
	if i == 0 {
		if err = WriteFiles(dir, files); err == nil {
			c, err = Init(dir)
		}
	} else {
		c, err = Change(dir, "step", files)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fsck runs `git fsck --strict` on dir where git is installed, and
// checks that git's HEAD is head.
func fsck(t *testing.T, dir, head string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		return
	}
	if out, err := exec.Command("git", "-C", dir, "fsck", "--strict", "--no-dangling").CombinedOutput(); err != nil {
		t.Errorf("git fsck: %v\n%s", err, out)
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if got := strings.TrimSpace(string(out)); err != nil || got != head {
		t.Errorf("git rev-parse HEAD = %q (%v), want %s", got, err, head)
	}
}

// Commit writes one pack per commit (all in one past maxPacks) and no
// loose object, with the commit hashes go-git's own loose commits of the
// same trees get; Unpack and Pack turn the objects loose and back into
// one pack; git reads all three.
func TestCommitPacksWithGoGitsHashes(t *testing.T) {
	steps := []map[string]string{
		{"a/b/c.txt": "one\n", "a/d.txt": "d\n", "top.txt": "top\n"},
		{"a/b/c.txt": "two\n", "e/f.txt": "new\n"},
		{"a/d.txt": "", "top.txt": "top\n"}, // a deletion; top.txt unchanged
		{},                                  // an empty commit
	}
	for len(steps) < maxPacks+2 { // past maxPacks: all in one pack
		steps = append(steps, map[string]string{"more.txt": strconv.Itoa(len(steps))})
	}
	// The reference: go-git alone, its objects and work tree in memory
	// (the hashes are the objects', wherever they are kept).
	packed, plainFS := t.TempDir(), memfs.New()
	plain, err := git.Init(memory.NewStorage(), plainFS)
	if err != nil {
		t.Fatal(err)
	}
	var commits []string
	for i, files := range steps {
		c := commitStep(t, packed, i, files)
		commits = append(commits, c)
		// A pack per commit, folded into one past maxPacks.
		if loose, packs := looseAndPacks(t, packed); loose != 0 || packs != i%maxPacks+1 {
			t.Errorf("after commit %d: %d loose-object directories, %d packs; want 0 and %d", i, loose, packs, i%maxPacks+1)
		}

		// The same tree committed by go-git alone.
		msg := "step"
		if i == 0 {
			msg = "fixture: initial tree"
		}
		for p, content := range files {
			if content == "" {
				err = plainFS.Remove(p)
			} else {
				err = util.WriteFile(plainFS, p, []byte(content), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		w, err := plain.Worktree()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddWithOptions(&git.AddOptions{All: true}); err != nil {
			t.Fatal(err)
		}
		h, err := w.Commit(msg, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true})
		if err != nil {
			t.Fatal(err)
		}
		if h.String() != c {
			t.Errorf("commit %d: %s, go-git alone gives %s", i, c, h)
		}
	}
	fsck(t, packed, commits[len(commits)-1])

	if err := Unpack(packed); err != nil {
		t.Fatal(err)
	}
	if loose, packs := looseAndPacks(t, packed); loose == 0 || packs != 0 {
		t.Errorf("after Unpack: %d loose-object directories, %d packs; want some and 0", loose, packs)
	}
	fsck(t, packed, commits[len(commits)-1])

	if err := Pack(packed); err != nil {
		t.Fatal(err)
	}
	if loose, packs := looseAndPacks(t, packed); loose != 0 || packs != 1 {
		t.Errorf("after Pack: %d loose-object directories, %d packs; want 0 and 1", loose, packs)
	}
	// Packing a packed repository again keeps its one pack.
	if err := Pack(packed); err != nil {
		t.Fatal(err)
	}
	if loose, packs := looseAndPacks(t, packed); loose != 0 || packs != 1 {
		t.Errorf("after a second Pack: %d loose-object directories, %d packs; want 0 and 1", loose, packs)
	}
	fsck(t, packed, commits[len(commits)-1])
	r, err := git.PlainOpen(packed)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commits {
		if _, err := r.CommitObject(plumbing.NewHash(c)); err != nil {
			t.Errorf("commit %s after Pack: %v", c, err)
		}
	}
}

// TestCommitErrorsNameTheDirectory: go-git's errors come back naming the
// directory Commit was given (here: not a repository).
func TestCommitErrorsNameTheDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := Commit(dir, "x"); err == nil || !strings.HasPrefix(err.Error(), dir+": opening the repository: ") {
		t.Errorf("Commit in a directory that is no repository: %v", err)
	}
}

// A History's commits are Init's and Change's for the same files and
// messages; each Write adds one pack and moves master; the directory
// holds no work tree; git reads it.
func TestHistoryIsInitAndChangeWithoutAWorkTree(t *testing.T) {
	steps := []map[string]string{
		{"a/b.txt": "one\n", "c.txt": "c\n"},
		{"a/b.txt": "two\n"},
		{"c.txt": ""},
	}
	plain := t.TempDir()
	var want []string
	for i, s := range steps {
		want = append(want, commitStep(t, plain, i, s))
	}
	dir := filepath.Join(t.TempDir(), "h")
	h := NewHistory(dir)
	var got []string
	for i, s := range steps {
		msg := "step"
		if i == 0 {
			msg = "fixture: initial tree"
		}
		got = append(got, h.MustChange(t, msg, s))
		if i == 0 || i == 2 {
			h.MustWrite(t)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("History commits %v, Init and Change %v", got, want)
	}
	if loose, packs := looseAndPacks(t, dir); loose != 0 || packs != 2 {
		t.Errorf("%d loose-object directories, %d packs; want 0 and 2 (one per Write)", loose, packs)
	}
	if err := h.Write(); err != nil { // nothing new: no pack
		t.Fatal(err)
	}
	if _, packs := looseAndPacks(t, dir); packs != 2 {
		t.Errorf("a Write with nothing new made a pack: %d", packs)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 || ents[0].Name() != ".git" {
		t.Errorf("the directory holds %v (%v), want only .git", ents, err)
	}
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	if head, err := r.Head(); err != nil || head.Hash().String() != want[2] || head.Name() != plumbing.Master {
		t.Errorf("HEAD %v, %v; want master at %s", head, err, want[2])
	}
	if _, err := exec.LookPath("git"); err == nil {
		if out, err := exec.Command("git", "-C", dir, "fsck", "--strict", "--no-dangling").CombinedOutput(); err != nil {
			t.Errorf("git fsck: %v\n%s", err, out)
		}
	}
	if _, err := h.Change("x", map[string]string{"nosuch": ""}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("removing a missing file: %v", err)
	}
	// MustChange and MustWrite fail the test with Change's and Write's
	// errors.
	rec := &errorsOf{TB: t}
	if c := h.MustChange(rec, "x", map[string]string{"nosuch": ""}); c != "" || len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "nosuch") {
		t.Errorf("MustChange removing a missing file: %q, failed with %q", c, rec.errs)
	}
	rec = &errorsOf{TB: t}
	NewHistory(filepath.Join(dir, ".git", "HEAD", "h")).MustWrite(rec)
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], filepath.Join(dir, ".git", "HEAD", "h")) {
		t.Errorf("MustWrite under a file: failed with %q", rec.errs)
	}
}

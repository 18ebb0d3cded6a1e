package testrepo

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-billy/v5/util"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/arpatch/arpatch/internal/gitsrc/gitdir"
)

// History is a fixture repository for tests that read its history
// (commits, trees, renames) and never check it out. Its commits are made
// in memory (go-git's memory storage and an in-memory work tree, with
// Commit's author and time, so the same files and message give the same
// commit as Init and Change); Write puts what was committed since the
// last Write into dir/.git as one pack and points master, HEAD's branch,
// at the last commit. dir holds no work tree and no index, as `git clone
// --no-checkout` leaves one: a history of several commits costs its git
// directory and two files per Write, not a work tree, an index and a pack
// per commit. The zero value is not ready; use NewHistory.
type History struct {
	dir     string
	r       *git.Repository
	wt      billy.Filesystem
	head    plumbing.Hash
	written map[plumbing.Hash]bool
	disk    *filesystem.Storage // nil until the first Write
}

// NewHistory returns an empty History to be written at dir (which Write
// creates; it must not hold a repository).
func NewHistory(dir string) *History {
	wt := memfs.New()
	r, err := git.Init(memory.NewStorage(), wt)
	if err != nil {
		panic(err) // memory storage and an empty file system cannot fail
	}
	return &History{dir: dir, r: r, wt: wt, written: map[plumbing.Hash]bool{}}
}

// Dir is the directory Write writes the repository at.
func (h *History) Dir() string { return h.dir }

// Change writes files into the in-memory work tree (content "" removes
// the file; files are mode 100644) and commits everything with msg,
// returning the 40-hex commit. Nothing is written to disk. It returns
// go-git's error staging or committing, or an error for a file to remove
// that is not there.
func (h *History) Change(msg string, files map[string]string) (string, error) {
	for p, c := range files {
		var err error
		if c == "" {
			err = h.wt.Remove(p)
		} else {
			err = util.WriteFile(h.wt, p, []byte(c), 0o644)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
	}
	w, err := h.r.Worktree()
	if err != nil {
		return "", err
	}
	c, err := commitAll(w, msg)
	if err != nil {
		return "", err
	}
	h.head = c
	return c.String(), nil
}

// MustChange is Change for a test: it returns the commit, or fails t
// (t.Fatal) with Change's error.
func (h *History) MustChange(t testing.TB, msg string, files map[string]string) string {
	t.Helper()
	c, err := h.Change(msg, files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MustWrite is Write for a test: it fails t (t.Fatal) with Write's
// error.
func (h *History) MustWrite(t testing.TB) {
	t.Helper()
	if err := h.Write(); err != nil {
		t.Fatal(err)
	}
}

// Write writes the objects committed since the last Write into
// Dir()/.git as one pack (the git directory made by gitdir.Create at the
// first Write) and sets master to the last commit. With nothing new it
// writes nothing. It returns the error making the git directory or
// writing the pack or the ref, naming the directory.
func (h *History) Write() error {
	if h.disk == nil {
		gd := filepath.Join(h.dir, ".git")
		if err := gitdir.Create(gd, nil); err != nil {
			return fmt.Errorf("%s: %w", h.dir, err)
		}
		h.disk = filesystem.NewStorage(osfs.New(gd), cache.NewObjectLRUDefault())
	}
	iter, err := h.r.Storer.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		return err
	}
	var hashes []plumbing.Hash
	if err := iter.ForEach(func(o plumbing.EncodedObject) error {
		if hs := o.Hash(); !h.written[hs] {
			hashes = append(hashes, hs)
		}
		return nil
	}); err != nil {
		return err
	}
	if len(hashes) == 0 {
		return nil
	}
	if _, err := writePack(h.disk, h.r.Storer, hashes, 0); err != nil {
		return fmt.Errorf("%s: packing: %w", h.dir, err)
	}
	for _, hs := range hashes {
		h.written[hs] = true
	}
	if err := h.disk.SetReference(plumbing.NewHashReference(plumbing.Master, h.head)); err != nil {
		return fmt.Errorf("%s: setting master: %w", h.dir, err)
	}
	return nil
}

package gitsrc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/arpatch/arpatch/internal/testrepo"
)

// historyFixture has three commits that rewrite large files a little, so
// that its pack holds deltas (and deltas of deltas); it returns them
// oldest first. It is made once per test binary and shared, read-only;
// ownHistoryFixture is the same repository for a test that alters it.
func historyFixture(t *testing.T) (dir string, commits []string) {
	t.Helper()
	return madeFixture(t, "history", makeHistory)
}

func ownHistoryFixture(t *testing.T) (dir string, commits []string) {
	t.Helper()
	return madeFixture(t, "", makeHistory)
}

// makeHistory writes historyFixture's repository at dir (no work tree)
// and returns its HEAD.
func makeHistory(dir string) (string, error) {
	var lines []string
	for i := range 400 {
		lines = append(lines, fmt.Sprintf("line %d of a file long enough to deltify", i))
	}
	h := testrepo.NewHistory(dir)
	var c string
	for v := range 3 {
		lines[v*100] = fmt.Sprintf("version %d", v)
		files := map[string]string{"big.txt": strings.Join(lines, "\n"), "a/b/other.txt": strings.Join(lines[v:], "\n"), fmt.Sprintf("v%d.txt", v): "v\n"}
		msg := fmt.Sprint("v", v)
		if v == 0 {
			msg = "fixture: initial tree"
		}
		var err error
		if c, err = h.Change(msg, files); err != nil {
			return "", err
		}
	}
	if err := h.Write(); err != nil {
		return "", err
	}
	return c, testrepo.Pack(dir)
}

// madeFixture returns the repository mk makes (at a new dir, returning
// its HEAD) and its commits, oldest first (lineage): made once per test
// binary and shared under key, or for the calling test alone when key is
// "".
func madeFixture(t *testing.T, key string, mk func(dir string) (string, error)) (dir string, commits []string) {
	t.Helper()
	var head string
	var err error
	if key == "" {
		dir = filepath.Join(t.TempDir(), "up")
		head, err = mk(dir)
	} else {
		dir, head, err = fixtures.Get(key, mk)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir, lineage(t, dir, head)
}

// lineage returns head and its first parents in the repository at dir,
// oldest first.
func lineage(t *testing.T, dir, head string) []string {
	t.Helper()
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{head}
	for {
		co, err := r.CommitObject(plumbing.NewHash(out[0]))
		if err != nil {
			t.Fatal(err)
		}
		if len(co.ParentHashes) == 0 {
			return out
		}
		out = append([]string{co.ParentHashes[0].String()}, out...)
	}
}

// The object reader gives go-git's bytes for every object of a pack with
// deltas.
func TestObjectReaderMatchesGoGit(t *testing.T) {
	dir, _ := historyFixture(t)
	repo, err := OpenAny(dir)
	if err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(dir, ".git/objects/pack/*.pack"))
	if len(packs) != 1 {
		t.Fatalf("%d packs", len(packs))
	}
	f, err := os.Open(packs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read-only
	s := packfile.NewScanner(f)
	_, n, err := s.Header()
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for range n {
		h, err := s.NextObjectHeader()
		if err != nil {
			t.Fatal(err)
		}
		if h.Type == plumbing.OFSDeltaObject || h.Type == plumbing.REFDeltaObject {
			deltas++
		}
	}
	if deltas == 0 {
		t.Fatal("the fixture's pack holds no deltas")
	}
	iter, _ := repo.r.Storer.IterEncodedObjects(plumbing.AnyObject)
	count := 0
	err = iter.ForEach(func(o plumbing.EncodedObject) error {
		rd, _ := o.Reader()
		want, _ := io.ReadAll(rd)
		if err := rd.Close(); err != nil {
			t.Fatal(err)
		}
		typ, got, err := repo.objects().read(o.Hash())
		if err != nil || typ != o.Type() || !bytes.Equal(got, want) {
			t.Errorf("%s: read %s %d bytes, %v; go-git has %s %d bytes", o.Hash(), typ, len(got), err, o.Type(), len(want))
		}
		count++
		return nil
	})
	if err != nil || count != int(n) {
		t.Errorf("compared %d objects of %d: %v", count, n, err)
	}
	if _, _, err := repo.objects().read(plumbing.NewHash(strings.Repeat("ab", 20))); !errors.Is(err, errNotHere) {
		t.Errorf("a missing object: %v", err)
	}
}

// A pack whose bytes were altered is caught by the hash check, never
// returned.
func TestObjectReaderChecksHashes(t *testing.T) {
	dir, commits := ownHistoryFixture(t) // its pack index is altered
	packs, _ := filepath.Glob(filepath.Join(dir, ".git/objects/pack/*.pack"))
	repo, _ := OpenAny(dir)
	tree, err := repo.TreeAt(commits[2])
	if err != nil {
		t.Fatal(err)
	}
	e, err := tree.entry("big.txt")
	if err != nil {
		t.Fatal(err)
	}
	idx := strings.TrimSuffix(packs[0], ".pack") + ".idx"
	off, err := packOffset(idx, e.Hash)
	if err != nil {
		t.Fatal(err)
	}
	// Point the index entry at another object's offset: the bytes read
	// are some other object's.
	other, _ := tree.entry("v2.txt")
	otherOff, _ := packOffset(idx, other.Hash)
	b, _ := os.ReadFile(idx)
	n := int64(len(b)-8-1024-40) / 28
	for i := range n {
		at := 8 + 1024 + n*24 + i*4
		if int64(b[at])<<24|int64(b[at+1])<<16|int64(b[at+2])<<8|int64(b[at+3]) == off {
			b[at], b[at+1], b[at+2], b[at+3] = byte(otherOff>>24), byte(otherOff>>16), byte(otherOff>>8), byte(otherOff)
		}
	}
	if err := os.Chmod(idx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh, _ := OpenAny(dir)
	if _, _, err := fresh.objects().read(e.Hash); err == nil || !strings.Contains(err.Error(), "its bytes hash to") {
		t.Errorf("altered index: %v", err)
	}
}

// TreeAt reads every file at every commit as go-git does, in a packed
// repository and in one of loose objects.
func TestCommitTreeMatchesGoGit(t *testing.T) {
	dir, commits := historyFixture(t)
	loose, c1 := richFixture(t, false)
	for _, tc := range []struct {
		dir     string
		commits []string
	}{{dir, commits}, {loose, []string{c1}}} {
		repo, err := OpenAny(tc.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range tc.commits {
			tree, err := repo.TreeAt(c)
			if err != nil {
				t.Fatal(err)
			}
			paths, err := tree.Paths()
			if err != nil || len(paths) < 3 {
				t.Fatalf("Paths: %v, %v", paths, err)
			}
			gc, _ := repo.r.CommitObject(plumbing.NewHash(c))
			gt, _ := gc.Tree()
			for _, p := range append(paths, "a", "nope", "a/nope", "../x") {
				got, gerr := tree.ReadFile(p)
				f, ferr := gt.File(p)
				switch {
				case ferr != nil:
					if !errors.Is(gerr, fs.ErrNotExist) {
						t.Errorf("%s at %s: %v, go-git finds none", p, c[:8], gerr)
					}
				case f.Mode.IsFile() && f.Mode.String() != "0120000":
					want, _ := f.Contents()
					if gerr != nil || string(got) != want {
						t.Errorf("%s at %s: %q %v, go-git %q", p, c[:8], got, gerr, want)
					}
					if m := tree.Mode(p); "0"+m != f.Mode.String() {
						t.Errorf("%s: mode %s, go-git %s", p, m, f.Mode)
					}
				default:
					if gerr == nil || !strings.Contains(gerr.Error(), "not a regular file") {
						t.Errorf("%s (mode %s): %v", p, f.Mode, gerr)
					}
				}
			}
		}
	}
}

// packOffset finds h's offset in the pack index file idx.
func packOffset(idx string, h plumbing.Hash) (int64, error) {
	b, err := os.ReadFile(idx)
	if err != nil {
		return 0, err
	}
	if off, ok := idxOffset(b, h); ok {
		return off, nil
	}
	return 0, errNotHere
}

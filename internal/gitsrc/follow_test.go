package gitsrc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/testrepo"
)

// history is a fixture repository of commits made one step at a time
// (each step writes files, content "" removing one, and commits); the
// tests only read it, so it has no work tree (testrepo.History). Its
// directory is h.h.Dir().
type history struct {
	t *testing.T
	h *testrepo.History
	c []string
}

func newHistory(t *testing.T, files map[string]string) *history {
	t.Helper()
	h := &history{t: t, h: testrepo.NewHistory(filepath.Join(t.TempDir(), "up"))}
	h.step("fixture: initial tree", files)
	return h
}

func (h *history) step(msg string, files map[string]string) string {
	h.t.Helper()
	c := h.h.MustChange(h.t, msg, files)
	h.c = append(h.c, c)
	return c
}

// repo writes the steps made so far and opens the repository.
func (h *history) repo() *Repo {
	h.t.Helper()
	h.h.MustWrite(h.t)
	r, err := OpenAny(h.h.Dir())
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// body is a file long enough for rename detection to score edits.
func body(n int, tag string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString("line " + string(rune('a'+i%26)) + tag + "\n")
	}
	return b.String()
}

func TestFollowRenameUnchanged(t *testing.T) {
	h := newHistory(t, map[string]string{"sgl-kernel/csrc/ar.cuh": body(20, ""), "README": "r\n"})
	h.step("unrelated", map[string]string{"README": "r2\n"})
	mv := h.step("Move sgl-kernel under aot\n\nlong body", map[string]string{"sgl-kernel/csrc/ar.cuh": "", "python/aot/csrc/ar.cuh": body(20, "")})
	last := h.step("later", map[string]string{"README": "r3\n"})
	moves, err := h.repo().Follow(h.c[0], last, "sgl-kernel/csrc/ar.cuh")
	if err != nil {
		t.Fatal(err)
	}
	want := Rename{From: "sgl-kernel/csrc/ar.cuh", To: "python/aot/csrc/ar.cuh", Commit: mv, Subject: "Move sgl-kernel under aot"}
	if len(moves) != 1 || moves[0] != want {
		t.Fatalf("moves %+v, want [%+v]", moves, want)
	}
	if s := moves[0].String(); s != "moved to python/aot/csrc/ar.cuh at "+mv[:12] {
		t.Errorf("String() = %q", s)
	}
	// A file still in place has no moves.
	if moves, err := h.repo().Follow(h.c[0], last, "README"); err != nil || len(moves) != 0 {
		t.Errorf("README: %v %v", moves, err)
	}
}

func TestFollowRenameWithEdit(t *testing.T) {
	// The move also changes two lines of twenty: still a rename (>= 50%).
	h := newHistory(t, map[string]string{"old/a.py": body(20, "")})
	edited := strings.Replace(strings.Replace(body(20, ""), "line c\n", "line C\n", 1), "line d\n", "line D\n", 1)
	mv := h.step("move and edit", map[string]string{"old/a.py": "", "new/b.py": edited})
	moves, err := h.repo().Follow(h.c[0], mv, "old/a.py")
	if err != nil || len(moves) != 1 || moves[0].To != "new/b.py" || moves[0].Commit != mv {
		t.Fatalf("moves %+v err %v", moves, err)
	}
}

func TestFollowRenameChain(t *testing.T) {
	h := newHistory(t, map[string]string{"a/x.cuh": body(12, "")})
	m1 := h.step("first move", map[string]string{"a/x.cuh": "", "b/x.cuh": body(12, "")})
	h.step("edit in between", map[string]string{"b/x.cuh": body(12, "") + "tail\n"})
	m2 := h.step("second move", map[string]string{"b/x.cuh": "", "c/y.cuh": body(12, "") + "tail\n"})
	last := h.step("after", map[string]string{"other": "o\n"})
	moves, err := h.repo().Follow(h.c[0], last, "a/x.cuh")
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != 2 || moves[0].To != "b/x.cuh" || moves[0].Commit != m1 || moves[1].From != "b/x.cuh" || moves[1].To != "c/y.cuh" || moves[1].Commit != m2 {
		t.Fatalf("moves %+v", moves)
	}
}

func TestFollowDeletedAndPicksTheRightTwin(t *testing.T) {
	h := newHistory(t, map[string]string{"a/x.cuh": body(12, ""), "a/y.cuh": body(12, "y")})
	// x is deleted, y moves in the same commit: x has no rename.
	del := h.step("drop x, move y", map[string]string{"a/x.cuh": "", "a/y.cuh": "", "b/y.cuh": body(12, "y")})
	_, err := h.repo().Follow(h.c[0], del, "a/x.cuh")
	var de *DeletedError
	if !errors.As(err, &de) || de.Commit != del || de.Path != "a/x.cuh" {
		t.Fatalf("err %v, want a DeletedError at %s", err, del[:12])
	}
	if !strings.Contains(err.Error(), "a/x.cuh was deleted at "+del[:12]) {
		t.Errorf("message %q", err)
	}
	moves, err := h.repo().Follow(h.c[0], del, "a/y.cuh")
	if err != nil || len(moves) != 1 || moves[0].To != "b/y.cuh" {
		t.Fatalf("y: %+v %v", moves, err)
	}
}

func TestFollowRefusesNonAncestorAndMissingFile(t *testing.T) {
	h := newHistory(t, map[string]string{"a": "1\n"})
	c2 := h.step("two", map[string]string{"a": "2\n"})
	_, err := h.repo().Follow(c2, h.c[0], "a")
	var ne *NotAncestorError
	if !errors.As(err, &ne) {
		t.Fatalf("err %v, want NotAncestorError", err)
	}
	if _, err := h.repo().Follow(h.c[0], c2, "nope"); err == nil || !strings.Contains(err.Error(), "nope does not exist at "+h.c[0][:12]) {
		t.Fatalf("missing file: %v", err)
	}
}

// A file copied to two identical files and deleted in one commit has two
// equally good renames: Follow names both and picks none.
func TestFollowAmbiguousRenameNamesEveryCandidate(t *testing.T) {
	h := newHistory(t, map[string]string{"a/x.txt": body(12, "")})
	c := h.step("split x", map[string]string{"a/x.txt": "", "p.txt": body(12, ""), "q.txt": body(12, "")})
	moves, err := h.repo().Follow(h.c[0], c, "a/x.txt")
	var ae *AmbiguousError
	if !errors.As(err, &ae) || len(moves) != 0 {
		t.Fatalf("moves %+v, err %v; want an AmbiguousError", moves, err)
	}
	if ae.Commit != c || strings.Join(ae.Candidates, ",") != "p.txt,q.txt" {
		t.Errorf("AmbiguousError %+v", ae)
	}
	if !strings.Contains(err.Error(), "p.txt, q.txt") {
		t.Errorf("message %q names not both candidates", err)
	}
	// Two edited copies with the same bytes are as ambiguous.
	h = newHistory(t, map[string]string{"a/x.txt": body(20, "")})
	edited := strings.Replace(body(20, ""), "line c\n", "line C\n", 1)
	c = h.step("split x", map[string]string{"a/x.txt": "", "p.txt": edited, "q.txt": edited})
	if _, err := h.repo().Follow(h.c[0], c, "a/x.txt"); !errors.As(err, &ae) {
		t.Errorf("edited copies: err %v, want an AmbiguousError", err)
	}
	// One exact copy beside a different new file is a plain rename.
	h = newHistory(t, map[string]string{"a/x.txt": body(20, "")})
	c = h.step("move x", map[string]string{"a/x.txt": "", "p.txt": body(20, ""), "q.txt": edited})
	if moves, err := h.repo().Follow(h.c[0], c, "a/x.txt"); err != nil || len(moves) != 1 || moves[0].To != "p.txt" {
		t.Errorf("exact beside edited: %+v %v", moves, err)
	}
}

// In a shallow clone whose history stops between the two commits, Follow
// says so and how to get the history.
func TestFollowInShallowClone(t *testing.T) {
	h := newHistory(t, map[string]string{"a/x.txt": body(12, "")})
	mid := h.step("move x", map[string]string{"a/x.txt": "", "b/x.txt": body(12, "")})
	last := h.step("later", map[string]string{"r": "r\n"})
	// Cut the history at last, as git clone --depth 1 leaves it: the
	// commit before it is not in the object store (its objects loose, to
	// remove the one).
	h.repo() // writes the steps to disk
	if err := testrepo.Unpack(h.h.Dir()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(h.h.Dir(), ".git", "objects", mid[:2], mid[2:])); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.h.Dir(), ".git", "shallow"), []byte(last+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.repo()
	if sh := r.Shallow(); len(sh) != 1 || sh[0] != last {
		t.Errorf("Shallow() = %v, want [%s]", sh, last)
	}
	_, err := r.Follow(h.c[0], last, "a/x.txt")
	var se *ShallowError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "fetch --unshallow") {
		t.Fatalf("err %v, want a ShallowError with its remedy", err)
	}
}

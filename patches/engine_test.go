package patches

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// memTree is an in-memory Tree.
type memTree map[string]string

func (m memTree) ReadFile(p string) ([]byte, error) {
	s, ok := m[p]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return []byte(s), nil
}

func mustPatch(t *testing.T, name, diff string) *Patch {
	t.Helper()
	d, err := ParseDiff(name, []byte(diff))
	if err != nil {
		t.Fatalf("ParseDiff(%s): %v", name, err)
	}
	return &Patch{Name: name, Diff: d}
}

func applyOne(t *testing.T, tree memTree, diff string) (*Result, error) {
	t.Helper()
	return Apply(tree, []*Patch{mustPatch(t, "0001-test.patch", diff)})
}

func fileAfter(t *testing.T, r *Result, path string) string {
	t.Helper()
	for _, f := range r.Files {
		if f.Path == path {
			return string(f.After)
		}
	}
	t.Fatalf("result has no file %s", path)
	return ""
}

const base = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"

const editFour = `diff --git a/f.txt b/f.txt
--- a/f.txt
+++ b/f.txt
@@ -3,3 +3,3 @@
 three
-four
+FOUR
 five
`

func TestApplyExact(t *testing.T) {
	r, err := applyOne(t, memTree{"f.txt": base}, editFour)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fileAfter(t, r, "f.txt"), "one\ntwo\nthree\nFOUR\nfive\nsix\nseven\n"; got != want {
		t.Errorf("after = %q, want %q", got, want)
	}
	if len(r.Hunks) != 1 || r.Hunks[0].Offset != 0 || r.Hunks[0].Line != 3 {
		t.Errorf("hunks = %+v, want one exact hunk at line 3", r.Hunks)
	}
	if len(r.Offsets()) != 0 {
		t.Errorf("Offsets() = %v, want none", r.Offsets())
	}
	if r.Files[0].Op != Modify || string(r.Files[0].Before) != base {
		t.Errorf("file result = %+v, want a Modify with the original bytes", r.Files[0])
	}
}

func TestApplyOffsetIsReported(t *testing.T) {
	tree := memTree{"f.txt": "zero\nzero2\n" + base}
	r, err := applyOne(t, tree, editFour)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fileAfter(t, r, "f.txt"), "zero\nzero2\none\ntwo\nthree\nFOUR\nfive\nsix\nseven\n"; got != want {
		t.Errorf("after = %q, want %q", got, want)
	}
	offs := r.Offsets()
	if len(offs) != 1 || offs[0].Offset != 2 || offs[0].Line != 5 || offs[0].Hunk != "@@ -3,3 +3,3 @@" || offs[0].Path != "f.txt" || offs[0].Patch != "0001-test.patch" {
		t.Errorf("offsets = %+v, want one +2 offset to line 5", offs)
	}
}

func TestApplyNegativeOffsetAndCarry(t *testing.T) {
	// Two hunks; the file lost its first line, so both move by -1, and the
	// second hunk is found at the first one's offset.
	diff := `--- a/f.txt
+++ b/f.txt
@@ -2,3 +2,3 @@
 two
-three
+THREE
 four
@@ -5,3 +5,3 @@
 five
-six
+SIX
 seven
`
	r, err := applyOne(t, memTree{"f.txt": strings.TrimPrefix(base, "one\n")}, diff)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fileAfter(t, r, "f.txt"), "two\nTHREE\nfour\nfive\nSIX\nseven\n"; got != want {
		t.Errorf("after = %q, want %q", got, want)
	}
	for _, h := range r.Hunks {
		if h.Offset != -1 {
			t.Errorf("hunk %s offset %d, want -1", h.Hunk, h.Offset)
		}
	}
}

func TestApplyPicksNearestMatch(t *testing.T) {
	// The context "a b c" appears twice; the hunk says line 6, so the
	// second copy (offset 0) is taken, not the first (offset -4).
	tree := memTree{"f.txt": "a\nb\nc\nx\nx\na\nb\nc\n"}
	diff := "--- a/f.txt\n+++ b/f.txt\n@@ -6,3 +6,3 @@\n a\n-b\n+B\n c\n"
	r, err := applyOne(t, tree, diff)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fileAfter(t, r, "f.txt"), "a\nb\nc\nx\nx\na\nB\nc\n"; got != want {
		t.Errorf("after = %q, want %q", got, want)
	}
}

func TestConflictNamesPatchFileHunkAndLines(t *testing.T) {
	tree := memTree{"f.txt": strings.Replace(base, "three", "THREE", 1)}
	_, err := applyOne(t, tree, editFour)
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *ConflictError", err)
	}
	if ce.Patch != "0001-test.patch" || ce.Path != "f.txt" || ce.Hunk != "@@ -3,3 +3,3 @@" || ce.Line != 3 {
		t.Errorf("conflict = %+v", ce)
	}
	msg := err.Error()
	for _, want := range []string{
		"patch 0001-test.patch, hunk @@ -3,3 +3,3 @@ in f.txt: context does not match at line 3",
		"first difference at line 3:",
		"expected: three",
		"found:    THREE",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

func TestNoFuzz(t *testing.T) {
	// One context line differs by a trailing space: patch(1) with fuzz
	// would apply; arpatch must not.
	tree := memTree{"f.txt": strings.Replace(base, "five\n", "five \n", 1)}
	if _, err := applyOne(t, tree, editFour); err == nil {
		t.Fatal("applied with a context line that differs; want a conflict")
	}
}

func TestCreateAndDelete(t *testing.T) {
	diff := `diff --git a/new/dir/n.py b/new/dir/n.py
new file mode 100755
--- /dev/null
+++ b/new/dir/n.py
@@ -0,0 +1,2 @@
+#!/usr/bin/env python3
+print("hi")
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-gone
-soon
`
	tree := memTree{"old.txt": "gone\nsoon\n"}
	r, err := applyOne(t, tree, diff)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Files) != 2 {
		t.Fatalf("files = %d, want 2", len(r.Files))
	}
	n, o := r.Files[0], r.Files[1]
	if n.Path != "new/dir/n.py" || n.Op != Create || n.Mode != "100755" || string(n.After) != "#!/usr/bin/env python3\nprint(\"hi\")\n" || n.Before != nil {
		t.Errorf("created = %+v", n)
	}
	if o.Path != "old.txt" || o.Op != Delete || o.After != nil || string(o.Before) != "gone\nsoon\n" {
		t.Errorf("deleted = %+v", o)
	}

	// Creating a file that exists, or deleting one with more content, fails.
	_, err = applyOne(t, memTree{"old.txt": "gone\nsoon\n", "new/dir/n.py": "x\n"}, diff)
	var fe *FileError
	if !errors.As(err, &fe) || !errors.Is(err, ErrFileExists) || fe.Path != "new/dir/n.py" {
		t.Errorf("create over existing: err = %v, want FileError ErrFileExists", err)
	}
	_, err = applyOne(t, memTree{"old.txt": "gone\nsoon\nmore\n"}, diff)
	var ce *ConflictError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "holds more") {
		t.Errorf("delete of longer file: err = %v, want a conflict", err)
	}
	_, err = applyOne(t, memTree{}, diff)
	if !errors.Is(err, ErrFileMissing) {
		t.Errorf("delete of missing file: err = %v, want ErrFileMissing", err)
	}
}

func TestNoNewlineAtEOF(t *testing.T) {
	for _, tc := range []struct {
		name, before, diff, after string
	}{{
		name:   "add newline",
		before: "a\nb",
		diff:   "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
		after:  "a\nb\n",
	}, {
		name:   "remove newline",
		before: "a\nb\n",
		diff:   "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n",
		after:  "a\nb",
	}, {
		name:   "edit last line, neither side has a newline",
		before: "a\nb",
		diff:   "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n",
		after:  "a\nc",
	}, {
		name:   "context line without newline",
		before: "a\nb",
		diff:   "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n-a\n+A\n+A2\n b\n\\ No newline at end of file\n",
		after:  "A\nA2\nb",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := applyOne(t, memTree{"f": tc.before}, tc.diff)
			if err != nil {
				t.Fatal(err)
			}
			if got := fileAfter(t, r, "f"); got != tc.after {
				t.Errorf("after = %q, want %q", got, tc.after)
			}
			// The reverse brings the original bytes back.
			back, err := Unapply(memTree{"f": tc.after}, []*Patch{mustPatch(t, "0001-test.patch", tc.diff)})
			if err != nil {
				t.Fatal(err)
			}
			if got := fileAfter(t, back, "f"); got != tc.before {
				t.Errorf("unapplied = %q, want %q", got, tc.before)
			}
		})
	}
	// A file whose last line has a newline does not match a hunk that
	// says it has none.
	_, err := applyOne(t, memTree{"f": "a\nb\n"}, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n")
	if err == nil {
		t.Error("hunk for a file without final newline applied to one with it")
	}
}

func TestCRLFIsKeptByteForByte(t *testing.T) {
	before := "one\r\ntwo\r\nthree\r\n"
	diff := "--- a/w.bat\n+++ b/w.bat\n@@ -1,3 +1,3 @@\n one\r\n-two\r\n+TWO\r\n three\r\n"
	r, err := applyOne(t, memTree{"w.bat": before}, diff)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fileAfter(t, r, "w.bat"), "one\r\nTWO\r\nthree\r\n"; got != want {
		t.Errorf("after = %q, want %q", got, want)
	}
	// An LF patch does not apply to the CRLF file: line endings are bytes.
	_, err = applyOne(t, memTree{"w.bat": before}, "--- a/w.bat\n+++ b/w.bat\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n")
	var ce *ConflictError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "[CRLF]") {
		t.Errorf("LF patch on CRLF file: err = %v, want a conflict showing [CRLF]", err)
	}
}

func TestSeriesOnOneFileAndUnapply(t *testing.T) {
	p1 := mustPatch(t, "0001-a.patch", editFour)
	p2 := mustPatch(t, "0002-b.patch", "--- a/f.txt\n+++ b/f.txt\n@@ -3,3 +3,4 @@\n three\n FOUR\n+four and a half\n five\n")
	r, err := Apply(memTree{"f.txt": base}, []*Patch{p1, p2})
	if err != nil {
		t.Fatal(err)
	}
	after := fileAfter(t, r, "f.txt")
	if want := "one\ntwo\nthree\nFOUR\nfour and a half\nfive\nsix\nseven\n"; after != want {
		t.Fatalf("after = %q, want %q", after, want)
	}
	// Out of order, 0002 does not apply.
	if _, err := Apply(memTree{"f.txt": base}, []*Patch{p2, p1}); err == nil {
		t.Error("0002 applied before 0001")
	}
	back, err := Unapply(memTree{"f.txt": after}, []*Patch{p1, p2})
	if err != nil {
		t.Fatal(err)
	}
	if got := fileAfter(t, back, "f.txt"); got != base {
		t.Errorf("unapplied = %q, want the original", got)
	}
}

func TestCheckStates(t *testing.T) {
	p1 := mustPatch(t, "0001-a.patch", editFour)
	p2 := mustPatch(t, "0002-b.patch", "--- a/g.txt\n+++ b/g.txt\n@@ -1 +1 @@\n-g\n+G\n")
	for _, tc := range []struct {
		name    string
		tree    memTree
		fits    []Fit
		verdict SeriesVerdict
	}{
		{"clean", memTree{"f.txt": base, "g.txt": "g\n"}, []Fit{FitExact, FitExact}, "exact"},
		{"offset", memTree{"f.txt": "0\n" + base, "g.txt": "g\n"}, []Fit{FitOffset, FitExact}, "offset"},
		{"already applied", memTree{"f.txt": strings.Replace(base, "four", "FOUR", 1), "g.txt": "G\n"}, []Fit{FitApplied, FitApplied}, "applied"},
		{"half applied", memTree{"f.txt": strings.Replace(base, "four", "FOUR", 1), "g.txt": "g\n"}, []Fit{FitApplied, FitExact}, "partial"},
		{"conflict does not hide the rest", memTree{"f.txt": "x\n", "g.txt": "g\n"}, []Fit{FitConflict, FitExact}, "conflict"},
		{"missing file", memTree{"f.txt": base}, []Fit{FitExact, FitConflict}, "conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.tree, []*Patch{p1, p2})
			for i, r := range res {
				if r.Fit != tc.fits[i] {
					t.Errorf("%s: fit %s, want %s (err %v)", r.Patch, r.Fit, tc.fits[i], r.Err)
				}
			}
			if v := Verdict(res); v != tc.verdict {
				t.Errorf("verdict %s, want %s", v, tc.verdict)
			}
		})
	}
}

func TestApplyDoesNotTouchTheTree(t *testing.T) {
	tree := memTree{"f.txt": base}
	if _, err := applyOne(t, tree, editFour); err != nil {
		t.Fatal(err)
	}
	if tree["f.txt"] != base {
		t.Error("Apply changed its input tree")
	}
}

// TestUnderAFile: a file created or edited under a path that is a file
// (in the tree, made by the series, or deleted by it: no directory takes
// its place) is refused, as git apply's write is ("Not a directory"), so
// that `patches check` does not call fitting what apply refuses.
func TestUnderAFile(t *testing.T) {
	create := func(p string) string {
		return "diff --git a/" + p + " b/" + p + "\nnew file mode 100644\n--- /dev/null\n+++ b/" + p + "\n@@ -0,0 +1 @@\n+x\n"
	}
	const del = "diff --git a/f.txt b/f.txt\ndeleted file mode 100644\n--- a/f.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
	for name, c := range map[string]struct{ diff, want string }{
		"under a tree file":         {create("f.txt/x"), "patch 0001-test.patch: cannot create f.txt/x: not a directory: f.txt is a file"},
		"deep under a tree file":    {create("f.txt/d/x"), "cannot create f.txt/d/x: not a directory: f.txt is a file"},
		"under a file it creates":   {create("n") + create("n/x"), "cannot create n/x: not a directory: n is a file"},
		"in a deleted file's place": {del + create("f.txt/x"), "cannot create f.txt/x: not a directory: f.txt is a file"},
	} {
		_, err := applyOne(t, memTree{"f.txt": "a\n", "d/g.txt": "g\n"}, c.diff)
		if err == nil || !errors.Is(err, ErrNotADirectory) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// Beside a file, or in a directory: fine.
	if _, err := applyOne(t, memTree{"f.txt": "a\n", "d/g.txt": "g\n"}, create("d/x")+create("f.txt.d/x")); err != nil {
		t.Error(err)
	}
}

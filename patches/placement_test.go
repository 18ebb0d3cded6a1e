package patches

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The placement rules are git apply's (apply.c, apply_one_fragment and
// match_fragment); each case says what git apply 2.39 does with it.
func TestPlacementAnchors(t *testing.T) {
	for _, tc := range []struct {
		name, before, diff string
		after              string // "" = refused
		reason             string // part of the refusal
	}{{
		// Issue 11, input 1: no trailing context, so the hunk appends at
		// the end of the file; the file goes on after "y".
		name:   "no trailing context must end the file",
		before: "x\ny\nq\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,3 @@\n x\n y\n+z\n",
		reason: "must match at the end of the file; its lines are at line 1, but the file goes on with `q` at line 3 (git apply refuses it too)",
	}, {
		name:   "no trailing context, not at line 1, must end the file",
		before: "a\nx\ny\nq\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -2,2 +2,3 @@\n x\n y\n+z\n",
		reason: "must match at the end of the file; its lines are at line 2, but the file goes on with `q` at line 4",
	}, {
		name:   "no trailing context at the end of the file",
		before: "a\nx\ny\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -2,2 +2,3 @@\n x\n y\n+z\n",
		after:  "a\nx\ny\nz\n",
	}, {
		name:   "no trailing context, file grew above: offset to the end",
		before: "new\na\nx\ny\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -2,2 +2,3 @@\n x\n y\n+z\n",
		after:  "new\na\nx\ny\nz\n",
	}, {
		// The sibling: old side at line 1 anchors to the beginning,
		// with or without leading context.
		name:   "old side at line 1 must match at line 1",
		before: "h\nx\ny\nq\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,3 @@\n+z\n x\n y\n",
		reason: "old side starts at line 1 (-1,2), so it must match at the beginning of the file; its lines are at line 2, but the file starts with `h` at line 1",
	}, {
		name:   "old side at line 1 with leading context must match at line 1",
		before: "h\nx\ny\nq\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n x\n-y\n+Y\n q\n",
		reason: "must match at the beginning of the file; its lines are at line 2, but the file starts with `h` at line 1",
	}, {
		// Finding F5: "-0,0" with no context names an empty file; the
		// message says so, not "line 1", and lists no empty blocks.
		name:   "-0,0 on a file that is not empty",
		before: "a\nb\nc\n",
		diff:   "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+new\n",
		reason: "its old side is at line 0 (-0,0), so it must be the whole file: it applies only to an empty file, and f has 3 lines",
	}, {
		name:   "-0,0 on an empty file",
		before: "",
		diff:   "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+new\n",
		after:  "new\n",
	}, {
		name:   "old side at line 1 at line 1",
		before: "x\ny\nq\nr\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,3 @@\n+z\n x\n y\n",
		after:  "z\nx\ny\nq\nr\n",
	}, {
		// Old side at line 2 is not anchored: a leading-context hunk may
		// move.
		name:   "old side at line 2 may move",
		before: "h\nh2\nx\ny\nq\n",
		diff:   "--- a/f.txt\n+++ b/f.txt\n@@ -2,3 +2,3 @@\n x\n-y\n+Y\n q\n",
		after:  "h\nh2\nx\nY\nq\n",
	}, {
		// A zero-context insertion (git diff -U0) is anchored at the end
		// by git apply without --unidiff-zero.
		name:   "zero context insertion goes to the end",
		before: "a\nb\nc\n",
		diff:   "--- a/f\n+++ b/f\n@@ -2,0 +3 @@\n+ins\n",
		after:  "a\nb\nc\nins\n",
	}, {
		// The second hunk's "c" is only where the first hunk wrote it.
		name:   "lines an earlier hunk wrote cannot be matched again",
		before: "a\nb\nc\nq\nr\ns\n",
		diff:   "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n c\n@@ -5,3 +5,3 @@\n c\n-q\n+Q\n r\n",
		reason: "context does not match at line 5",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path := "f.txt"
			if strings.Contains(tc.diff, "a/f\n") {
				path = "f"
			}
			r, err := applyOne(t, memTree{path: tc.before}, tc.diff)
			if tc.after == "" {
				var ce *ConflictError
				if !errors.As(err, &ce) {
					t.Fatalf("err = %v, want a refusal", err)
				}
				if !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("message lacks %q:\n%v", tc.reason, err)
				}
				// Finding F5: an anchoring refusal names the line that
				// breaks the rule; it prints no expected/found blocks
				// (the lines match where they are) and no "line 1" the
				// header does not say.
				if len(ce.Anchored) > 0 {
					for _, bad := range []string{"expected lines:", "found lines:", "starts at line 1 and"} {
						if strings.Contains(err.Error(), bad) {
							t.Errorf("message holds %q:\n%v", bad, err)
						}
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fileAfter(t, r, path); got != tc.after {
				t.Errorf("after = %q, want %q", got, tc.after)
			}
		})
	}
}

// Issue 11, input 2: the hunk does not fit at line 8 and fits equally at
// lines 3 and 13: refused, listing both.
func TestAmbiguousPlacementIsRefused(t *testing.T) {
	before := "h1\nh2\nctxA\nctxB\ntarget\nctxC\nctxD\nf1\nf2\nf3\nf4\nf5\nctxA\nctxB\ntarget\nctxC\nctxD\ntail\n"
	diff := "--- a/f.txt\n+++ b/f.txt\n@@ -8,5 +8,5 @@\n ctxA\n ctxB\n-target\n+PATCHED\n ctxC\n ctxD\n"
	_, err := applyOne(t, memTree{"f.txt": before}, diff)
	var ce *ConflictError
	if !errors.As(err, &ce) || !ce.Ambiguous() {
		t.Fatalf("err = %v, want an ambiguous conflict", err)
	}
	if !slices.Equal(ce.Candidates, []int{3, 13}) || ce.Line != 8 {
		t.Errorf("candidates = %v at line %d, want [3 13] at 8", ce.Candidates, ce.Line)
	}
	for _, want := range []string{"at line 8", "fits equally at lines 3, 13", "does not choose"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
	// Where the header says, one of the copies is taken without asking.
	diff13 := strings.Replace(diff, "@@ -8,5 +8,5 @@", "@@ -13,5 +13,5 @@", 1)
	r, err := applyOne(t, memTree{"f.txt": before}, diff13)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileAfter(t, r, "f.txt"); got != strings.Replace(before, "f5\nctxA\nctxB\ntarget", "f5\nctxA\nctxB\nPATCHED", 1) {
		t.Errorf("after = %q", got)
	}
	// Check reports it as a conflict, naming the candidates.
	fits := Check(memTree{"f.txt": before}, []*Patch{mustPatch(t, "0001-test.patch", diff)})
	if fits[0].Fit != FitConflict || !strings.Contains(fits[0].Err.Error(), "lines 3, 13") {
		t.Errorf("check = %+v", fits[0])
	}
}

// Issue 11, input 4: git apply accepts "@@ -1,0 +1,1 @@" for a created
// file, and any new-side start: it is only where the search begins.
func TestNewSideStartIsOnlyAGuess(t *testing.T) {
	diff := "diff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n.txt\n@@ -1,0 +1,1 @@\n+hello\n"
	r, err := applyOne(t, memTree{}, diff)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileAfter(t, r, "n.txt"); got != "hello\n" {
		t.Errorf("created %q", got)
	}
	// A second hunk whose new start ignores the first hunk's lines.
	r, err = applyOne(t, memTree{"f.txt": base}, "--- a/f.txt\n+++ b/f.txt\n@@ -2,2 +2,3 @@\n two\n+2.5\n three\n@@ -5,2 +5,2 @@\n five\n-six\n+SIX\n")
	if err == nil {
		t.Fatalf("the second hunk has no trailing context and does not end the file; applied %q", fileAfter(t, r, "f.txt"))
	}
	r, err = applyOne(t, memTree{"f.txt": base}, "--- a/f.txt\n+++ b/f.txt\n@@ -2,2 +2,3 @@\n two\n+2.5\n three\n@@ -5,3 +5,3 @@\n five\n-six\n+SIX\n seven\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := fileAfter(t, r, "f.txt"); got != "one\ntwo\n2.5\nthree\nfour\nfive\nSIX\nseven\n" {
		t.Errorf("after = %q", got)
	}
}

func TestOutOfOrderHunksAreNamed(t *testing.T) {
	diff := "--- a/f.txt\n+++ b/f.txt\n@@ -5,3 +5,3 @@\n five\n-six\n+SIX\n seven\n@@ -2,3 +2,3 @@\n two\n-three\n+THREE\n four\n"
	_, err := ParseDiff("0001-x.patch", []byte(diff))
	if err == nil || !strings.Contains(err.Error(), "hunk @@ -2,3 +2,3 @@ is out of order") || strings.Contains(err.Error(), "should start") {
		t.Errorf("err = %v, want an out-of-order refusal", err)
	}
}

func TestWhitespaceOnlyDifferenceIsVisible(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{strings.Replace(base, "five\n", "five \n", 1), "found:    five·"},
		{strings.Replace(base, "five\n", "five\t\n", 1), "found:    five[TAB]"},
		{strings.Replace(base, "five\n", "five\r\n", 1), "five [CRLF]"},
		{strings.Replace(base, "five\n", "five\u00a0\n", 1), `five"\u00a0"`},
	} {
		_, err := applyOne(t, memTree{"f.txt": tc.file}, editFour)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "expected: five") {
			t.Errorf("file %q: message lacks %q:\n%v", tc.file, tc.want, err)
		}
	}
}

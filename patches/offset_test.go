package patches

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// gitOffsets runs `git apply --check -v` on patch in dir, which holds
// exactly files, and returns the offset git reports for each hunk, in
// order ("Hunk #N succeeded at L (offset K lines)"; a hunk it does not
// name landed where its header says, offset 0), and whether it applies.
func gitOffsets(t *testing.T, dir string, files map[string]string, patch string, hunks int) ([]int, bool) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		fp := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fp, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "apply", "--check", "-v", "--whitespace=nowarn")
	cmd.Dir, cmd.Env, cmd.Stdin = dir, gitEnv(dir), strings.NewReader(patch)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if cmd.Run() != nil {
		return nil, false
	}
	offs := make([]int, hunks)
	for _, m := range gitHunkLine.FindAllStringSubmatch(out.String(), -1) {
		k, _ := strconv.Atoi(m[1])
		if k >= 1 && k <= hunks && m[2] != "" {
			offs[k-1], _ = strconv.Atoi(m[2])
		}
	}
	return offs, true
}

var gitHunkLine = regexp.MustCompile(`(?m)^Hunk #(\d+) succeeded at \d+(?: \(offset (-?\d+) lines?\))?`)

// arpatchOffsets is the offset of each hunk the engine applies, in order,
// as git apply would print it, or false when it refuses. For a hunk with
// an empty new side after line N (emptyNewAfter) that is arpatch's
// offset plus one: the one deliberate difference (headerPos).
func arpatchOffsets(files map[string]string, patch string) ([]int, bool) {
	d, err := ParseDiff("0001-p.patch", []byte(patch))
	if err != nil {
		return nil, false
	}
	res, err := Apply(memTree(files), []*Patch{{Name: "0001-p.patch", Diff: d}})
	if err != nil {
		return nil, false
	}
	var empty []bool
	for _, fc := range d.Changes {
		for _, h := range fc.Hunks {
			empty = append(empty, emptyNewAfter(h))
		}
	}
	var out []int
	for i, h := range res.Hunks {
		o := h.Offset
		if i < len(empty) && empty[i] {
			o++
		}
		out = append(out, o)
	}
	return out, true
}

// TestOffsetsAgainstGitApply: where both apply a patch, each hunk's
// offset (lines from where its header says) is the one git apply reports:
// a new file's hunk whose header names a line past 1 ("@@ -1,0 +2,1 @@",
// which arpatch once applied silently, git with "offset -1 lines"), a
// deletion's, an edit's at the first line, and git's own diffs applied to
// files shifted by random edits.
func TestOffsetsAgainstGitApply(t *testing.T) {
	needGit(t)
	dir := filepath.Join(t.TempDir(), "tree")
	newFile := func(h string) string {
		return "diff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n.txt\n" + h + "\n+hello\n"
	}
	del := func(h string) string {
		return "diff --git a/f.txt b/f.txt\ndeleted file mode 100644\n--- a/f.txt\n+++ /dev/null\n" + h + "\n-a\n"
	}
	edit := func(h, body string) string {
		return "diff --git a/g.txt b/g.txt\n--- a/g.txt\n+++ b/g.txt\n" + h + "\n" + body
	}
	files := map[string]string{"f.txt": "a\n", "g.txt": "one\ntwo\nthree\nfour\nfive\n"}
	var cases []string
	for _, h := range []string{"@@ -1,0 +2,1 @@", "@@ -0,0 +2,1 @@", "@@ -0,0 +1,1 @@", "@@ -0,0 +0,1 @@", "@@ -1,0 +1,1 @@", "@@ -0,0 +1 @@", "@@ -5,0 +7 @@", "@@ -0,0 +40,1 @@"} {
		cases = append(cases, newFile(h))
	}
	for _, h := range []string{"@@ -1 +0,0 @@", "@@ -2,1 +0,0 @@", "@@ -1,1 +3,0 @@", "@@ -3 +0,0 @@", "@@ -1,1 +1,0 @@"} {
		cases = append(cases, del(h))
	}
	for _, c := range [][2]string{
		{"@@ -1,2 +1,2 @@", "-one\n+ONE\n two\n"},
		{"@@ -1,2 +4,2 @@", "-one\n+ONE\n two\n"},
		{"@@ -3,2 +3,2 @@", " three\n-four\n+FOUR\n"},
		{"@@ -3,2 +9,2 @@", " three\n-four\n+FOUR\n"},
		{"@@ -2,1 +2,2 @@", " two\n+two and a half\n"},
		{"@@ -2,0 +3,1 @@", "+inserted\n"},
		{"@@ -2,0 +8,1 @@", "+inserted\n"},
		{"@@ -5,1 +5,0 @@", "-five\n"},
		{"@@ -5,1 +2,0 @@", "-five\n"},
	} {
		cases = append(cases, edit(c[0], c[1]))
	}
	both := 0
	for _, p := range cases {
		n := strings.Count(p, "\n@@ ")
		want, gok := gitOffsets(t, dir, files, p, n)
		got, aok := arpatchOffsets(files, p)
		if gok && aok {
			both++
			if len(got) != n || !slices.Equal(got, want) {
				t.Errorf("offsets: arpatch %v, git apply %v\n%s", got, want, p)
			}
		}
	}
	if both < 15 {
		t.Errorf("only %d of %d cases applied by both: the test compares too little", both, len(cases))
	}

	// git's own diffs, applied to targets shifted by random edits.
	r := rand.New(rand.NewSource(26))
	var cs []diffCase
	for range 150 {
		var c diffCase
		c.orig, c.edited, c.target, c.ctx = genCase(r)
		cs = append(cs, c)
	}
	diffs := gitDiffs(t, filepath.Join(t.TempDir(), "diffs"), cs)
	compared, shifted := 0, 0
	for i, p := range diffs {
		if p == "" {
			continue
		}
		files := map[string]string{}
		if cs[i].target != nil {
			files["f.txt"] = *cs[i].target
		}
		n := strings.Count(p, "\n@@ ")
		want, gok := gitOffsets(t, dir, files, p, n)
		got, aok := arpatchOffsets(files, p)
		if !gok || !aok {
			continue
		}
		compared++
		if !slices.Equal(got, want) {
			t.Errorf("case %d: offsets arpatch %v, git apply %v\npatch:\n%s\ntarget %q", i, got, want, p, files["f.txt"])
		}
		for _, o := range want {
			if o != 0 {
				shifted++
				break
			}
		}
	}
	if compared < 50 || shifted < 10 {
		t.Errorf("%d random cases compared, %d with an offset: too few", compared, shifted)
	}
}

// A new file's hunk whose header names a line past the first is applied
// at line 1 and reported as an offset, as git apply reports it (issue
// 26: "@@ -1,0 +2,1 @@" was applied silently); without git on the
// machine too.
func TestNewFileHeaderOffset(t *testing.T) {
	for h, want := range map[string]int{"@@ -1,0 +2,1 @@": -1, "@@ -0,0 +7 @@": -6, "@@ -0,0 +1 @@": 0, "@@ -0,0 +1,1 @@": 0} {
		res, err := applyOne(t, memTree{}, "diff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n.txt\n"+h+"\n+hello\n")
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Hunks[0]; got.Offset != want || got.Line != 1 || (want != 0) != (len(res.Offsets()) == 1) {
			t.Errorf("%s: %+v, want offset %d at line 1", h, got, want)
		}
	}
}

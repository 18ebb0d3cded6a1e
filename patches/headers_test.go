package patches

import (
	"strings"
	"testing"
)

// TestExtendedHeaders enumerates every extended header line git writes
// (apply.c, parse_git_diff_header's table, and the binary markers): each
// is carried out or refused by name, none is ignored.
func TestExtendedHeaders(t *testing.T) {
	const hunk = "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n"
	for _, tc := range []struct {
		header string // lines after "diff --git a/f.txt b/f.txt"
		body   string // what follows; hunk when empty
		refuse string // part of the refusal; "" = carried out
		check  func(t *testing.T, r *Result)
	}{
		{header: "old mode 100644\nnew mode 100755\n", check: func(t *testing.T, r *Result) {
			if f := r.Files[0]; f.OldMode != "100644" || f.Mode != "100755" || string(f.After) != "A\nb\n" {
				t.Errorf("mode change with a hunk: %+v", f)
			}
		}},
		{header: "old mode 100755\nnew mode 100644\n", body: "-", check: func(t *testing.T, r *Result) {
			if f := r.Files[0]; len(r.Files) != 1 || f.OldMode != "100755" || f.Mode != "100644" || string(f.After) != "a\nb\n" {
				t.Errorf("mode-only change: %+v", r.Files)
			}
		}},
		// Issue 11, input 3: "new mode" alone is refused by name, not
		// ignored.
		{header: "new mode 100755\n", refuse: `"old mode" and "new mode" come as a pair`},
		{header: "old mode 100644\nnew mode 120000\n", refuse: "mode 120000 (a symlink) is not supported"},
		{header: "old mode 100644\nnew mode 160000\n", refuse: "mode 160000 (a submodule) is not supported"},
		{header: "index 7898192..e2b3e0c 100644\n", check: func(t *testing.T, r *Result) {
			if f := r.Files[0]; f.OldMode != "" || string(f.After) != "A\nb\n" {
				t.Errorf("index line: %+v", f)
			}
		}},
		{header: "index 7898192..e2b3e0c 120000\n", refuse: "mode 120000 (a symlink)"},
		{header: "similarity index 90%\nrename from g.txt\nrename to f.txt\n", refuse: `"similarity index 90%": renames and copies are not supported`},
		{header: "dissimilarity index 80%\n", refuse: `"dissimilarity index 80%": renames and copies are not supported`},
		{header: "rename from g.txt\nrename to f.txt\n", refuse: `"rename from g.txt": renames and copies are not supported`},
		{header: "rename old g.txt\nrename new f.txt\n", refuse: `"rename old g.txt": renames and copies are not supported`},
		{header: "copy from g.txt\ncopy to f.txt\n", refuse: `"copy from g.txt": renames and copies are not supported`},
		// Issue 11, input 7: a binary patch is named as one.
		{header: "index 7898192..e2b3e0c\nGIT binary patch\nliteral 11\nScmYdPEy(ONc*=J)000\n\nliteral 0\nHcmV?d00001\n\n", body: "-", refuse: "binary patches are not supported"},
		{header: "index 7898192..e2b3e0c\nBinary files a/f.txt and b/f.txt differ\n", body: "-", refuse: "binary patches are not supported"},
		{header: "new file mode 100755\n", body: "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1 @@\n+x\n", refuse: "file already exists"},
		{header: "deleted file mode 100644\n", body: "--- a/f.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n", check: func(t *testing.T, r *Result) {
			if f := r.Files[0]; f.Op != Delete {
				t.Errorf("deleted file: %+v", f)
			}
		}},
		{header: "new file mode 100644\ndeleted file mode 100644\n", body: "-", refuse: `both "new file mode" and "deleted file mode"`},
		{header: "frobnicate yes\n", refuse: "frobnicate yes"},
	} {
		t.Run(strings.SplitN(tc.header, "\n", 2)[0], func(t *testing.T) {
			body := tc.body
			switch body {
			case "":
				body = hunk
			case "-":
				body = ""
			}
			diff := "diff --git a/f.txt b/f.txt\n" + tc.header + body
			r, err := func() (*Result, error) {
				d, err := ParseDiff("0001-h.patch", []byte(diff))
				if err != nil {
					return nil, err
				}
				return Apply(memTree{"f.txt": "a\nb\n"}, []*Patch{{Name: "0001-h.patch", Diff: d}})
			}()
			if tc.refuse != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refuse) {
					t.Errorf("err = %v, want a refusal naming %q", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

// A mode change reverses: Unapply gives the old mode back.
func TestModeChangeReverses(t *testing.T) {
	p := mustPatch(t, "0001-m.patch", "diff --git a/f.txt b/f.txt\nold mode 100644\nnew mode 100755\n")
	r, err := Unapply(memTree{"f.txt": "a\n"}, []*Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	if f := r.Files[0]; f.OldMode != "100755" || f.Mode != "100644" {
		t.Errorf("reversed: %+v", f)
	}
}

// Issue 11, input 4 as a parse: "@@ -1,0 +1,1 @@" for a new file parses
// as git apply reads it.
func TestCreatedFileHeaderAsGitAccepts(t *testing.T) {
	for _, h := range []string{"@@ -0,0 +1 @@", "@@ -1,0 +1,1 @@", "@@ -0,0 +1,1 @@"} {
		if _, err := ParseDiff("0001-n.patch", []byte("diff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n"+h+"\n+x\n")); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
}

// Finding F3: `old mode`, `deleted file mode` and an `index` line's mode
// are one claim, the mode the file has before the patch (git apply reads
// all three as the old mode); the parser records it, with the header that
// made it, for apply to check against the commit, and refuses headers
// that claim two different old modes.
func TestModeClaims(t *testing.T) {
	const mod = "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-a\n+A\n"
	const del = "--- a/f.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
	for _, tc := range []struct {
		header, body, claim, by, refuse string
	}{
		{"old mode 100755\nnew mode 100644\n", mod, "100755", "old mode 100755", ""},
		{"old mode 100755\nnew mode 100755\n", mod, "100755", "old mode 100755", ""},
		{"deleted file mode 100755\n", del, "100755", "deleted file mode 100755", ""},
		{"index 7898192..6178079 100755\n", mod, "100755", "index ... 100755", ""},
		{"deleted file mode 100644\nindex 7898192..0000000 100644\n", del, "100644", "deleted file mode 100644", ""},
		{"index 7898192..6178079\n", mod, "", "", ""},
		{"old mode 100644\nnew mode 100755\nindex 7898192..6178079 100755\n", mod, "", "", `"old mode 100644" and "index ... 100755" claim different old modes`},
		{"deleted file mode 100644\nindex 7898192..0000000 100755\n", del, "", "", "claim different old modes"},
		{"new file mode 100644\nindex 0000000..6178079 100755\n", "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1 @@\n+a\n", "", "", `"index ... 100755" disagrees with the created file's mode 100644`},
	} {
		d, err := ParseDiff("p.patch", []byte("diff --git a/f.txt b/f.txt\n"+tc.header+tc.body))
		if tc.refuse != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refuse) {
				t.Errorf("%q: err = %v, want %q", tc.header, err, tc.refuse)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.header, err)
			continue
		}
		if fc := d.Changes[0]; fc.ModeClaim != tc.claim || fc.ModeClaimBy != tc.by {
			t.Errorf("%q: claim %q by %q, want %q by %q", tc.header, fc.ModeClaim, fc.ModeClaimBy, tc.claim, tc.by)
		}
	}
}

type modedTree struct {
	memTree
	modes map[string]string
}

func (m modedTree) Mode(p string) string { return m.modes[p] }

// Against a tree that knows its modes (a commit's), every mode claim is
// judged by the engine, so `patches check` and apply agree (finding F3).
func TestEngineJudgesModeClaims(t *testing.T) {
	tree := modedTree{memTree{"f.txt": "a\n"}, map[string]string{"f.txt": "100644"}}
	for header, want := range map[string]string{
		"index 7898192..6178079 100755\n":        `the patch says it has mode 100755 ("index ... 100755"), but it has 100644`,
		"old mode 100755\nnew mode 100644\n":     `the patch says it has mode 100755 ("old mode 100755"), but it has 100644`,
		"index 7898192..6178079 100644\n":        "",
		"old mode 100644\nnew mode 100755\n":     "",
		"index 7898192..6178079\n":               "",
		"deleted file mode 100755\n":             `("deleted file mode 100755"), but it has 100644`,
		"deleted file mode 100644\nindex a..0\n": "",
	} {
		body := "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-a\n+A\n"
		if strings.HasPrefix(header, "deleted") {
			body = "--- a/f.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
		}
		p := mustPatch(t, "p.patch", "diff --git a/f.txt b/f.txt\n"+header+body)
		_, err := Apply(tree, []*Patch{p})
		if want == "" && err != nil {
			t.Errorf("%q: %v", header, err)
		}
		if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: err = %v, want %q", header, err, want)
		}
		// A tree that does not know modes does not judge them.
		if _, err := Apply(tree.memTree, []*Patch{p}); err != nil {
			t.Errorf("%q without modes: %v", header, err)
		}
	}
}

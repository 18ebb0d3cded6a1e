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

package patches

import (
	"strings"
	"testing"
)

func TestParseDEP3Header(t *testing.T) {
	src := `Description: sgl-kernel: launch a kernel on PCIe
 continued on a second line
Author: A Person <a@example.com>
Upstream-Status: Pending
Applies-To: sglang 84118acf
# a comment

diff --git a/f b/f
--- a/f
+++ b/f
@@ -1 +1 @@
-a
+b
`
	d, err := ParseDiff("0001-x.patch", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	h := d.Header
	if h.Description != "sgl-kernel: launch a kernel on PCIe\ncontinued on a second line" {
		t.Errorf("Description = %q", h.Description)
	}
	if h.Author != "A Person <a@example.com>" || h.UpstreamStatus != "Pending" || h.AppliesTo != "sglang 84118acf" {
		t.Errorf("header = %+v", h)
	}
	if m := h.Missing(); len(m) != 0 {
		t.Errorf("Missing() = %v, want none", m)
	}
	if len(d.Changes) != 1 || d.Changes[0].Path != "f" || d.Changes[0].Op != Modify {
		t.Errorf("changes = %+v", d.Changes)
	}
	h2, _ := parseHeader([]byte("Subject: only a subject\n"))
	if got := strings.Join(h2.Missing(), ","); got != "Author,Upstream-Status,Applies-To" {
		t.Errorf("Missing() = %s", got)
	}
}

func TestParseRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, diff, want string
	}{
		{"absolute path", "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "not a relative"},
		{"climbs out", "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", "leaves the tree"},
		{"enters .git", "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n", "enters .git"},
		{"rename", "diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", "not supported"},
		{"bad counts", "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-a\n+b\n", "the last hunk ends early: 2 old and 2 new lines missing"},
		{"too many lines", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n+c\n", `line 6: unexpected text "+c" outside a hunk`},
		{"old side overflows", "--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n-a\n-b\n", "line 5: the hunk holds more lines than its header counts"},
		{"junk between hunks", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\njunk between hunks\n@@ -5 +5 @@\n-c\n+d\n", `line 6: unexpected text "junk between hunks" outside a hunk`},
		{"junk before the first hunk", "--- /dev/null\n+++ b/new\nstray\n@@ -0,0 +1 @@\n+x\n", `line 3: unexpected text "stray"`},
		{"junk inside a hunk", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n*b\n", `line 5: "*b" inside a hunk`},
		{"malformed hunk header", "--- a/f\n+++ b/f\n@@ -1 +1\n-a\n+b\n", "line 3: malformed hunk header"},
		{"no diff", "Description: nothing\n", "no diff found"},
		{"same file twice", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n--- a/f\n+++ b/f\n@@ -3 +3 @@\n-c\n+d\n", "appears twice"},
		{"bad header line", "Description nothing\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", "Field: value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDiff("0001-x.patch", []byte(tc.diff))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "0001-x.patch") {
				t.Errorf("err %q does not name the patch", err)
			}
		})
	}
}

func TestParseBlankContextLine(t *testing.T) {
	// Some editors strip the single space of an empty context line.
	d, err := ParseDiff("p", []byte("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-c\n+C\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := d.Changes[0].Hunks[0]
	if strings.Join(h.Old, "") != "a\n\nc\n" || strings.Join(h.New, "") != "a\n\nC\n" {
		t.Errorf("old %q new %q", h.Old, h.New)
	}
}

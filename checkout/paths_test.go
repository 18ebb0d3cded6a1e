package checkout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/testrepo"
)

// TestPathKindsNameTheCause: a patch that writes where the tree's path
// cannot take it is refused with the cause, as git names it (git apply:
// "unable to write file 'f.txt/x' mode 100644: Not a directory"), and
// never with another cause's remedy (skip-worktree bits); nothing is
// changed. Each kind of errno a path gives has a case; a series that
// deletes a file and creates a directory in its place applies, as git's
// does.
func TestPathKindsNameTheCause(t *testing.T) {
	const head = "Description: d\nAuthor: t\nUpstream-Status: Pending\nApplies-To: fixture\n\n"
	create := func(path string) string {
		return "diff --git a/" + path + " b/" + path + "\nnew file mode 100644\n--- /dev/null\n+++ b/" + path + "\n@@ -0,0 +1 @@\n+new\n"
	}
	const delObsolete = "diff --git a/docs/obsolete.md b/docs/obsolete.md\ndeleted file mode 100644\n--- a/docs/obsolete.md\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-old\n-doc\n"
	f := newFixture(t)
	f.cloneAndRevert(t)
	pristine := snapshot(t, f.work)
	dir := filepath.Join(t.TempDir(), "series")
	for _, tc := range []struct {
		name, patch string
		setup       func(t *testing.T) // untracked things the case puts in the tree
		want        string             // "" = applies
	}{
		{"under a tracked file", create("kernel/untouched.cuh/x"), nil,
			"creates kernel/untouched.cuh/x, but kernel/untouched.cuh is a file in commit"},
		{"over a tracked directory", create("kernel"), nil,
			"creates kernel, but kernel is a directory in commit"},
		{"under a file it creates", create("new/n") + create("new/n/x"), nil,
			"creates new/n/x, but new/n is a file the series creates"},
		{"under an untracked file", create("new/pcie/notes.txt"), func(t *testing.T) { write(t, f.work, "new", "mine\n") },
			"creates new/pcie/notes.txt, but new is a file in the tree (untracked or ignored)"},
		{"over an untracked directory", create("new/d"), func(t *testing.T) { write(t, f.work, "new/d/mine.txt", "mine\n") },
			"creates new/d, but new/d is a directory in the tree (untracked or ignored)"},
		{"a deleted file's place (git apply takes it; arpatch refuses)", delObsolete + create("docs/obsolete.md/x"), nil,
			"creates docs/obsolete.md/x, but docs/obsolete.md is a file in commit"},
		{"an edit under a tracked file", "diff --git a/kernel/untouched.cuh/y b/kernel/untouched.cuh/y\n--- a/kernel/untouched.cuh/y\n+++ b/kernel/untouched.cuh/y\n@@ -1 +1 @@\n-a\n+b\n", nil,
			"edits kernel/untouched.cuh/y, but kernel/untouched.cuh is a file in commit"},
		{"an edit it cannot read", "diff --git a/kernel/untouched.cuh b/kernel/untouched.cuh\n--- a/kernel/untouched.cuh\n+++ b/kernel/untouched.cuh\n@@ -1 +1 @@\n-// left alone\n+// touched\n",
			func(t *testing.T) { unreadable(t, filepath.Join(f.work, "kernel/untouched.cuh")) }, "kernel/untouched.cuh cannot be read: Permission denied"},
		{"a name too long", create("new/" + strings.Repeat("n", 300)), nil, "is 300 bytes, more than the "}, // the file system's NAME_MAX, 255 on ext4, then "File name too long"
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch := head + tc.patch
			toml := "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + f.commit + "\"]\n\n[[patch]]\nfile = \"0001-p.patch\"\nsha256 = \"" + sum([]byte(patch)) + "\"\n"
			if err := testrepo.WriteFiles(filepath.Join(dir, "fx"), map[string]string{"series.toml": toml, "0001-p.patch": patch}); err != nil {
				t.Fatal(err)
			}
			cat, err := loadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			f.cat = cat
			before := pristine
			if tc.setup != nil {
				tc.setup(t)
				before = snapshot(t, f.work)
			}
			_, err = f.apply(t)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Revert(RevertOptions{Src: f.work, Catalog: cat}); err != nil {
					t.Fatal(err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was changed") || strings.Contains(err.Error(), "skip-worktree") {
					t.Errorf("err = %v, want a refusal with %q", err, tc.want)
				}
				if d := before.Diff(snapshot(t, f.work)); len(d) > 0 {
					t.Errorf("a refused apply changed: %v", d)
				}
			}
			// Back to the pristine checkout for the next case.
			_ = os.Chmod(filepath.Join(f.work, "kernel/untouched.cuh"), 0o644)
			if err := os.RemoveAll(filepath.Join(f.work, "new")); err != nil {
				t.Fatal(err)
			}
			if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
				t.Fatalf("the tree differs from the pristine checkout in %v", d)
			}
		})
	}
}

func write(t *testing.T, root, rel, data string) {
	t.Helper()
	if err := testrepo.WriteFiles(root, map[string]string{rel: data}); err != nil {
		t.Fatal(err)
	}
}

// unreadable takes read permission from p, skipping the test where that
// cannot make it unreadable (root reads anything).
func unreadable(t *testing.T, p string) {
	t.Helper()
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Open(p); err == nil {
		_ = f.Close()
		_ = os.Chmod(p, 0o644)
		t.Skip("running as root: a file without read permission is still read")
	}
}

package checkout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// The fixture upstream holds a CRLF file, an executable script and a file
// the series deletes; the series also creates a file in a new directory.
var upstreamFiles = map[string]string{
	"tools/run.bat":        "@echo off\r\nset A=1\r\nset B=2\r\n",
	"tools/launch.sh":      "#!/bin/sh\nexec python -m server \"$@\"\n",
	"docs/obsolete.md":     "old\ndoc\n",
	"kernel/dispatch.cuh":  "if (ws == 2) {\n  one();\n} else if (nvlink) {\n  pick();\n}\n",
	"kernel/untouched.cuh": "// left alone\n",
}

const fixturePatch = `Description: fixture changes of every kind
Author: arpatch tests
Upstream-Status: Inappropriate [test fixture]
Applies-To: fixture

diff --git a/docs/obsolete.md b/docs/obsolete.md
deleted file mode 100644
--- a/docs/obsolete.md
+++ /dev/null
@@ -1,2 +0,0 @@
-old
-doc
diff --git a/kernel/dispatch.cuh b/kernel/dispatch.cuh
--- a/kernel/dispatch.cuh
+++ b/kernel/dispatch.cuh
@@ -1,5 +1,5 @@
 if (ws == 2) {
   one();
-} else if (nvlink) {
+} else {
   pick();
 }
diff --git a/new/pcie/notes.sh b/new/pcie/notes.sh
new file mode 100755
--- /dev/null
+++ b/new/pcie/notes.sh
@@ -0,0 +1,2 @@
+#!/bin/sh
+echo pcie
diff --git a/tools/launch.sh b/tools/launch.sh
--- a/tools/launch.sh
+++ b/tools/launch.sh
@@ -1,2 +1,3 @@
 #!/bin/sh
+export SGLANG_FORCE_CUSTOM_AR_PCIE=1
 exec python -m server "$@"
diff --git a/tools/run.bat b/tools/run.bat
--- a/tools/run.bat
+++ b/tools/run.bat
@@ -1,3 +1,3 @@
 @echo off` + "\r" + `
-set A=1` + "\r" + `
+set A=8` + "\r" + `
 set B=2` + "\r" + `
`

type fixtureEnv struct {
	up, work, commit string
	recipe           *recipes.Recipe
	cat              *patches.Catalog
}

// upstream is the fixture upstream most tests share read-only (they clone
// from it and compare it before and after); TestMain closes it.
var upstream testrepo.Shared

// newFixture is a fixture whose upstream is the shared one: the test must
// not commit to it (newFixtureOwn).
func newFixture(t testing.TB) *fixtureEnv {
	t.Helper()
	up, commit, err := upstream.Get("upstreamFiles", makeUpstream)
	if err != nil {
		t.Fatal(err)
	}
	return fixtureAt(t, up, commit)
}

// newFixtureOwn is newFixture with an upstream of the test's own.
func newFixtureOwn(t testing.TB) *fixtureEnv {
	t.Helper()
	up := filepath.Join(t.TempDir(), "up")
	commit, err := makeUpstream(up)
	if err != nil {
		t.Fatal(err)
	}
	return fixtureAt(t, up, commit)
}

// makeUpstream writes upstreamFiles at up and commits them.
func makeUpstream(up string) (string, error) {
	if err := testrepo.WriteFiles(up, upstreamFiles); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(up, "tools/launch.sh"), 0o755); err != nil {
		return "", err
	}
	return testrepo.Init(up)
}

// fixtureAt is the fixture series (tested on commit) and recipe, with
// upstream up and a work tree path in the test's directory. The series
// directory is made once per commit and shared (upstream.Dir): tests read
// it, never write to it.
func fixtureAt(t testing.TB, up, commit string) *fixtureEnv {
	t.Helper()
	series, err := upstream.Dir("series fx tested on "+commit, func(dir string) error {
		sum := sha256.Sum256([]byte(fixturePatch))
		toml := `name = "fx"
family = "fx"
tested_on = ["` + commit + `"]

[[patch]]
file = "0001-all-kinds.patch"
sha256 = "` + hex.EncodeToString(sum[:]) + `"
`
		return testrepo.WriteFiles(filepath.Join(dir, "fx"), map[string]string{"series.toml": toml, "0001-all-kinds.patch": fixturePatch})
	})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := patches.LoadDir(series)
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipes.Parse("fx.toml", []byte("name = \"fx\"\nseries = \"fx\"\n[upstream]\ncommit = \""+commit+"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &fixtureEnv{up: up, work: filepath.Join(t.TempDir(), "work"), commit: commit, recipe: r, cat: cat}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// cloneAndRevert leaves f.work a clean checkout of f.commit with no apply
// state: cloned by an apply, then reverted.
func (f *fixtureEnv) cloneAndRevert(t testing.TB) {
	t.Helper()
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	if _, err := Revert(RevertOptions{Src: f.work}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixtureEnv) apply(t testing.TB) (*ApplyReport, error) {
	t.Helper()
	return Apply(context.Background(), ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: f.work, Repo: f.up, Version: "test"})
}

// snapshot is dir's testrepo.Snapshot without .git: each path's type,
// permission bits and content.
func snapshot(t testing.TB, dir string) testrepo.Snapshot {
	t.Helper()
	s, err := testrepo.SnapshotTree(dir, testrepo.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestApplyEveryKindOfChangeAndRevert(t *testing.T) {
	f := newFixture(t)
	pristine := snapshot(t, f.up)
	// The apply clones under umask 002 (a shared group's), where git's
	// mode for a checkout (0o777 less the umask) differs from 0o755 less
	// it.
	umask := syscall.Umask(0o002)
	rep, err := f.apply(t)
	syscall.Umask(umask)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Cloned || rep.Series.Name != "fx" || len(rep.Result.Files) != 5 {
		t.Fatalf("report = %+v", rep)
	}
	// The checkout's own directory has the mode git clone gives one:
	// 0o777 less the umask (git/git builtin/clone.c@v2.39.5, cmd_clone:
	// mkdir(work_tree, 0777)), 0o775 here.
	if got := mustStat(t, f.work).Mode(); got != fs.ModeDir|0o775 {
		t.Errorf("checkout directory mode %v, want %v", got, fs.ModeDir|0o775)
	}
	// The revert below is compared with up, whose directory was made
	// under the test's own umask: the checkout's gets up's mode back.
	if err := os.Chmod(f.work, mustStat(t, f.up).Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, f.work)
	want := map[string]string{
		"tools/run.bat":       testrepo.SnapshotEntry(0o644, []byte("@echo off\r\nset A=8\r\nset B=2\r\n"), 0),
		"tools/launch.sh":     testrepo.SnapshotEntry(0o755, []byte("#!/bin/sh\nexport SGLANG_FORCE_CUSTOM_AR_PCIE=1\nexec python -m server \"$@\"\n"), 0),
		"kernel/dispatch.cuh": testrepo.SnapshotEntry(0o644, []byte("if (ws == 2) {\n  one();\n} else {\n  pick();\n}\n"), 0),
		"new/pcie/notes.sh":   testrepo.SnapshotEntry(0o755, []byte("#!/bin/sh\necho pcie\n"), 0),
	}
	for p, w := range want {
		if got[p] != w {
			b, _ := os.ReadFile(filepath.Join(f.work, p))
			t.Errorf("%s = %s %q, want %s", p, got[p], b, w)
		}
	}
	if _, ok := got["docs/obsolete.md"]; ok {
		t.Error("docs/obsolete.md was not deleted")
	}
	st, err := ReadState(filepath.Join(f.work, ".git"))
	if err != nil || st == nil || len(st.Files) != 5 || st.Commit != f.commit || st.Patches[0].Name != "0001-all-kinds.patch" {
		t.Fatalf("state = %+v, %v", st, err)
	}

	rev, err := Revert(RevertOptions{Src: f.work})
	if err != nil {
		t.Fatal(err)
	}
	if len(rev.Restored) != 5 {
		t.Errorf("restored %v", rev.Restored)
	}
	if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("after revert these differ from upstream: %v", d)
	}
	if st, _ := ReadState(filepath.Join(f.work, ".git")); st != nil {
		t.Error("state left after revert")
	}
}

func TestApplyRefusesSymlinkInPath(t *testing.T) {
	f := newFixture(t)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	if _, err := Revert(RevertOptions{Src: f.work}); err != nil {
		t.Fatal(err)
	}
	// The series creates new/pcie/notes.sh; make new/ an untracked symlink
	// to a directory outside the tree.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(f.work, "new")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, f.work)
	_, err := f.apply(t)
	var pe *safefs.PathError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "goes through the symlink") {
		t.Fatalf("err = %v, want a refused symlink path", err)
	}
	if d := before.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("refused apply changed %v", d)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Error("a file outside the tree was written")
	}
}

func TestLockRefusesASecondRun(t *testing.T) {
	gitDir := t.TempDir()
	unlock, err := lock(gitDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock(gitDir); err == nil || !strings.Contains(err.Error(), "another arpatch") {
		t.Errorf("second lock: %v", err)
	}
	unlock()
	// A lock left by a dead process is taken over.
	if err := os.WriteFile(filepath.Join(gitDir, "arpatch", "lock"), []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unlock, err = lock(gitDir)
	if err != nil {
		t.Fatalf("stale lock: %v", err)
	}
	unlock()
}

func TestStatusReportsDriftAndOtherChanges(t *testing.T) {
	f := newFixture(t)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.work, "kernel/dispatch.cuh"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.work, "new/pcie/notes.sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.work, "kernel/untouched.cuh"), []byte("also mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Status(f.work, f.cat)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || len(rep.Drift) != 2 {
		t.Fatalf("drift = %+v", rep.Drift)
	}
	if rep.Drift[0].String() != "kernel/dispatch.cuh (changed since apply)" || rep.Drift[1].String() != "new/pcie/notes.sh (upstream bytes again: not patched)" {
		t.Errorf("drift = %v", rep.Drift)
	}
	if len(rep.Other) != 1 || rep.Other[0].Path != "kernel/untouched.cuh" {
		t.Errorf("other = %v", rep.Other)
	}
}

func loadDir(dir string) (*patches.Catalog, error) { return patches.LoadDir(dir) }

func TestMain(m *testing.M) {
	os.Exit(upstream.Run(m))
}

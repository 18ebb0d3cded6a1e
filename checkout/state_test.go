package checkout

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/shell"

	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/testrepo"
)

// editState rewrites the state file through fn; with redigest it also
// recomputes the digest, as a careful hand editor would.
func editState(t *testing.T, gitDir string, redigest bool, fn func(st *State)) {
	t.Helper()
	st, err := ReadState(gitDir)
	if err != nil {
		t.Fatal(err)
	}
	fn(st)
	digest := st.Digest
	if redigest {
		digest = st.digest()
	}
	st.Digest = digest
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(StatePath(gitDir), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Issue 11, point 6: a state edited to list no files, or with an edited
// before-hash, or naming another commit, is one judgement for status,
// apply and revert: each refuses, and nothing changes.
func TestEditedStateIsOneJudgement(t *testing.T) {
	// One checkout for every case: each applies to it, and ends with the
	// remedy, which leaves it upstream's with no state (checked).
	f := newFixture(t)
	for _, tc := range []struct {
		name     string
		redigest bool
		edit     func(st *State, f *fixtureEnv)
		want     string
	}{
		{"files emptied", false, func(st *State, _ *fixtureEnv) { st.Files = []FileState{} }, "lists 1 patches but 0 changed files"},
		{"one file dropped", false, func(st *State, _ *fixtureEnv) { st.Files = st.Files[1:] }, "its digest is"},
		{"one file dropped, digest redone", true, func(st *State, _ *fixtureEnv) { st.Files = st.Files[1:] }, "but series fx at commit"},
		{"before-hash edited, digest redone", true, func(st *State, _ *fixtureEnv) {
			st.Files[1].Before = strings.Repeat("a", 64)
		}, "but the state says"},
		{"another commit, digest redone", true, func(st *State, _ *fixtureEnv) {
			st.Commit = strings.Repeat("b", 40)
		}, "which this repository does not have"},
		// Issue 14 tester, A: status sliced an empty recipe_sha256.
		{"recipe sha256 emptied, schema 1", false, func(st *State, _ *fixtureEnv) {
			st.Schema, st.RecipeSHA256, st.Digest = 1, "", ""
		}, `recipe_sha256 "" is not a sha256`},
		{"recipe sha256 cut, digest redone", true, func(st *State, _ *fixtureEnv) {
			st.RecipeSHA256 = st.RecipeSHA256[:16]
		}, "is not a sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.apply(t); err != nil {
				t.Fatal(err)
			}
			gitDir := filepath.Join(f.work, ".git")
			editState(t, gitDir, tc.redigest, func(st *State) { tc.edit(st, f) })
			before := snapshot(t, f.work)
			stateBytes, _ := os.ReadFile(StatePath(gitDir))

			_, serr := Status(f.work, f.cat)
			_, aerr := f.apply(t)
			_, rerr := Revert(RevertOptions{Src: f.work, Catalog: f.cat})
			_, ferr := Revert(RevertOptions{Src: f.work, Catalog: f.cat, Force: true})
			for name, err := range map[string]error{"status": serr, "apply": aerr, "revert": rerr, "revert --force": ferr} {
				var se *StateError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "git -C "+f.work+" status --short") {
					t.Errorf("%s: err = %v, want a damaged state with %q", name, err, tc.want)
				}
			}
			if d := before.Diff(snapshot(t, f.work)); len(d) > 0 {
				t.Errorf("the tree changed: %v", d)
			}
			if b, _ := os.ReadFile(StatePath(gitDir)); string(b) != string(stateBytes) {
				t.Error("the state changed")
			}
			// Finding F2: the remedy names the real files and runs as
			// printed: afterwards the tree is upstream's and has no state.
			if ferr != nil {
				runRemedies(t, ferr.Error())
			}
			if out, err := exec.Command("git", "-C", f.work, "status", "--porcelain", "--untracked-files=all").CombinedOutput(); err != nil || len(out) > 0 {
				t.Errorf("after the remedy, git status: %s %v", out, err)
			}
			if _, err := os.Stat(StatePath(gitDir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after the remedy the state is still there: %v", err)
			}
		})
	}
}

// runRemedies runs, with sh -c, every backquoted command of msg but the
// one that only looks (git status), in order, as a user pasting them would.
func runRemedies(t *testing.T, msg string) {
	t.Helper()
	if strings.Contains(msg, "FILE...") {
		t.Errorf("the remedy names no files: %s", msg)
	}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(msg, -1) {
		if strings.Contains(m[1], " status --short") {
			continue
		}
		if out, err := exec.Command("sh", "-c", m[1]).CombinedOutput(); err != nil {
			t.Errorf("remedy `%s`: %v\n%s", m[1], err, out)
		}
	}
}

// A damaged state's remedy quotes every file for the shell: names with
// spaces, quotes and dollars run as printed.
func TestDamagedStateRemedyIsQuoted(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "my tree")
	odd := []string{"a b.txt", "it's.py", "$HOME.md", "x;rm -rf y"}
	files := map[string]string{}
	for _, f := range odd {
		files[f] = "upstream\n"
	}
	if err := testrepo.WriteFiles(src, files); err != nil {
		t.Fatal(err)
	}
	if _, err := testrepo.Init(src); err != nil {
		t.Fatal(err)
	}
	for _, f := range odd[:3] {
		if err := os.WriteFile(filepath.Join(src, f), []byte("patched\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "new file.txt"), []byte("created\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := StatePath(filepath.Join(src, ".git"))
	if err := os.MkdirAll(filepath.Dir(state), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte(`{"schema": 2, "files": [{"path": "new file.txt", "op": "create"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &StateError{File: state, Src: src, Problem: "cut short", Restore: odd[:3], Remove: []string{"new file.txt"}}
	runRemedies(t, e.Error())
	if out, err := exec.Command("git", "-C", src, "status", "--porcelain", "--untracked-files=all").CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("after the remedy, git status: %s %v", out, err)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state is still there: %v", err)
	}
}

// A checkout moved to another commit: status is not clean, and apply and
// revert refuse with the same words.
func TestMovedHeadIsOneJudgement(t *testing.T) {
	f := newFixture(t)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	gitDir := filepath.Join(f.work, ".git")
	st, _ := ReadState(gitDir)
	sr, err := Status(f.work, f.cat)
	if err != nil || !sr.Clean() || sr.State.Commit != st.Commit {
		t.Fatalf("status before the move: %v %v", sr, err)
	}
	// HEAD moves (detached, to a commit this test names by hash).
	other := strings.Repeat("c", 40)
	if err := os.WriteFile(filepath.Join(gitDir, "HEAD"), []byte(other+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, aerr := Apply(t.Context(), ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: f.work, Commit: other, Version: "test"})
	_, rerr := Revert(RevertOptions{Src: f.work, Catalog: f.cat})
	for name, err := range map[string]error{"apply": aerr, "revert": rerr} {
		if err == nil || !strings.Contains(err.Error(), "was applied at "+st.Commit) || !strings.Contains(err.Error(), "checkout --detach "+st.Commit) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Issue 11, point 6: a write fails and its rollback fails too. The state
// survives, marked incomplete; status reports it and revert restores.
func TestDoubleFaultKeepsTheState(t *testing.T) {
	f := newFixture(t)
	pristine := snapshot(t, f.up)
	f.cloneAndRevert(t)
	safefs.Faults = func(op, rel string) error {
		if op == "write" && rel == "tools/run.bat" {
			return errors.New("no space left on device")
		}
		if op == "restore" {
			return errors.New("no free inodes")
		}
		return nil
	}
	_, err := f.apply(t)
	safefs.Faults = nil
	if err == nil || !strings.Contains(err.Error(), "restoring the tree also failed") || !strings.Contains(err.Error(), "run `arpatch revert --src "+f.work+"`") {
		t.Fatalf("apply: %v", err)
	}
	st, err := ReadState(filepath.Join(f.work, ".git"))
	if err != nil || st == nil || !st.Incomplete || len(st.Files) != 5 {
		t.Fatalf("state after a double fault: %+v %v", st, err)
	}
	sr, err := Status(f.work, f.cat)
	if err != nil || sr.Clean() || !sr.State.Incomplete {
		t.Errorf("status: %+v %v", sr, err)
	}
	if _, err := f.apply(t); err == nil || !strings.Contains(err.Error(), "interrupted part way") {
		t.Errorf("apply again: %v", err)
	}
	rep, err := Revert(RevertOptions{Src: f.work, Catalog: f.cat})
	if err != nil || len(rep.Restored) == 0 {
		t.Fatalf("revert: %+v %v", rep, err)
	}
	if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("differs from upstream after revert: %v", d)
	}
	// A single fault (the rollback works) leaves no state.
	safefs.Faults = func(op, rel string) error {
		if op == "write" && rel == "tools/run.bat" {
			return errors.New("no space left on device")
		}
		return nil
	}
	_, err = f.apply(t)
	safefs.Faults = nil
	if err == nil || !strings.Contains(err.Error(), "the tree was restored") {
		t.Fatalf("single fault: %v", err)
	}
	if st, err := ReadState(filepath.Join(f.work, ".git")); st != nil || err != nil {
		t.Errorf("state after a restored write: %+v %v", st, err)
	}
}

// Temp files a killed state write left are removed by the next apply or
// revert.
func TestStrayStateTempsAreRemoved(t *testing.T) {
	f := newFixture(t)
	f.cloneAndRevert(t)
	dir := filepath.Dir(StatePath(filepath.Join(f.work, ".git")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(dir, ".state.json.arpatch-12345")
	if err := os.WriteFile(stray, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("apply left %s: %v", stray, err)
	}
	if err := os.WriteFile(stray, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Revert(RevertOptions{Src: f.work, Catalog: f.cat}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("revert left %s: %v", stray, err)
	}
}

// A mode change is carried out, recorded in the state, watched by status
// and reverted; a series whose old mode is not the commit's is refused.
func TestModeChangeIsRecordedAndReverted(t *testing.T) {
	f := newFixture(t)
	pristine := snapshot(t, f.up)
	mode := "Description: d\nAuthor: t\nUpstream-Status: Pending\nApplies-To: fixture\n\n" +
		"diff --git a/kernel/untouched.cuh b/kernel/untouched.cuh\nold mode 100644\nnew mode 100755\n" +
		"diff --git a/tools/launch.sh b/tools/launch.sh\nold mode 100755\nnew mode 100644\n"
	dir := filepath.Join(t.TempDir(), "series")
	toml := "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + f.commit + "\"]\n\n[[patch]]\nfile = \"0001-mode.patch\"\nsha256 = \"" + sum([]byte(mode)) + "\"\n"
	if err := testrepo.WriteFiles(filepath.Join(dir, "fx"), map[string]string{"series.toml": toml, "0001-mode.patch": mode}); err != nil {
		t.Fatal(err)
	}
	cat, err := loadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.cat = cat
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"kernel/untouched.cuh": 0o755, "tools/launch.sh": 0o644} {
		if fi, err := os.Stat(filepath.Join(f.work, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, fi.Mode().Perm(), want, err)
		}
	}
	st, _ := ReadState(filepath.Join(f.work, ".git"))
	if len(st.Files) != 2 || st.Files[0].OldMode != "100644" || st.Files[0].Mode != "100755" || st.Files[0].Before != st.Files[0].After {
		t.Errorf("state files: %+v", st.Files)
	}
	if sr, err := Status(f.work, f.cat); err != nil || !sr.Clean() {
		t.Fatalf("status after apply: %+v %v", sr, err)
	}
	// chmod by hand: drift, and revert wants --force.
	if err := os.Chmod(filepath.Join(f.work, "kernel/untouched.cuh"), 0o644); err != nil {
		t.Fatal(err)
	}
	sr, err := Status(f.work, f.cat)
	if err != nil || sr.Clean() || len(sr.Drift) != 1 || !strings.Contains(sr.Drift[0].String(), "since apply, which set 100755") {
		t.Errorf("status after chmod: %+v %v", sr, err)
	}
	if _, err := Revert(RevertOptions{Src: f.work, Catalog: f.cat}); err == nil {
		t.Error("revert over a changed mode without --force")
	}
	if _, err := Revert(RevertOptions{Src: f.work, Catalog: f.cat, Force: true}); err != nil {
		t.Fatal(err)
	}
	if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("differs from upstream after revert: %v", d)
	}
	// The old mode must be the commit's.
	wrong := strings.Replace(mode, "old mode 100755\nnew mode 100644", "old mode 100644\nnew mode 100755", 1)
	toml = strings.Replace(toml, sum([]byte(mode)), sum([]byte(wrong)), 1)
	if err := testrepo.WriteFiles(filepath.Join(dir, "fx"), map[string]string{"series.toml": toml, "0001-mode.patch": wrong}); err != nil {
		t.Fatal(err)
	}
	if f.cat, err = loadDir(dir); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, f.work)
	if _, err := f.apply(t); err == nil || !strings.Contains(err.Error(), "changes the mode of tools/launch.sh from 100644, but commit") {
		t.Errorf("wrong old mode: %v", err)
	}
	if d := before.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("a refused apply changed: %v", d)
	}
}

// Every remedy command checkout prints quotes the checkout's path for
// the shell (the kind of finding F2): with a space and a quote in it, the
// printed command still splits into the right words.
func TestRemediesQuoteTheCheckout(t *testing.T) {
	f := newFixture(t)
	f.work = filepath.Join(filepath.Dir(f.work), "it's my work")
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(f.work, "kernel", "dispatch.cuh")
	if err := os.WriteFile(edited, []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, rerr := Revert(RevertOptions{Src: f.work, Catalog: f.cat})
	_, aerr := f.apply(t)
	for name, err := range map[string]error{"revert": rerr, "apply": aerr} {
		if err == nil {
			t.Fatalf("%s accepted an edited tree", name)
		}
		found := 0
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(err.Error(), -1) {
			words, perr := shell.Fields(strings.TrimSuffix(m[1], " > my.diff"), nil)
			if perr != nil {
				t.Errorf("%s: `%s` does not parse: %v", name, m[1], perr)
				continue
			}
			for i, w := range words {
				if w == "--src" || w == "-C" {
					found++
					if i+1 >= len(words) || words[i+1] != f.work {
						t.Errorf("%s: `%s` splits into %q, want the checkout %q as one word", name, m[1], words, f.work)
					}
				}
			}
		}
		if found == 0 {
			t.Errorf("%s: no remedy naming the checkout in %v", name, err)
		}
	}
}

// Finding F3: a mode claim is one rule whatever header makes it. `old
// mode`, `deleted file mode` and the mode of an `index` line each say what
// mode the file has before the patch; a claim the commit contradicts is
// refused by name (git apply only warns "has type 100644, expected
// 100755"), and the tree is left as it was. A true claim applies.
func TestModeClaimsAreOneRule(t *testing.T) {
	const head = "Description: d\nAuthor: t\nUpstream-Status: Pending\nApplies-To: fixture\n\n"
	const del = "--- a/docs/obsolete.md\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-old\n-doc\n"
	const mod = "--- a/kernel/untouched.cuh\n+++ b/kernel/untouched.cuh\n@@ -1 +1 @@\n-// left alone\n+// touched\n"
	// One clean checkout for every case: a refused apply leaves it as it
	// was, an accepted one is reverted, and either way the tree is then
	// checked against its pristine snapshot.
	f := newFixture(t)
	f.cloneAndRevert(t)
	pristine := snapshot(t, f.work)
	// One series directory, its two files rewritten for each case (a
	// directory per case would cost six inodes each).
	dir := filepath.Join(t.TempDir(), "series")
	for _, tc := range []struct {
		name, patch, want string // want "" = applies
	}{
		{"deleted file mode, wrong", "diff --git a/docs/obsolete.md b/docs/obsolete.md\ndeleted file mode 100755\n" + del,
			`says docs/obsolete.md has mode 100755 ("deleted file mode 100755"), but commit`},
		{"deleted file mode, right", "diff --git a/docs/obsolete.md b/docs/obsolete.md\ndeleted file mode 100644\n" + del, ""},
		{"index mode, wrong", "diff --git a/kernel/untouched.cuh b/kernel/untouched.cuh\nindex 7898192..6178079 100755\n" + mod,
			`says kernel/untouched.cuh has mode 100755 ("index ... 100755"), but commit`},
		{"index mode, right", "diff --git a/kernel/untouched.cuh b/kernel/untouched.cuh\nindex 7898192..6178079 100644\n" + mod, ""},
		{"index mode on a deletion, wrong", "diff --git a/docs/obsolete.md b/docs/obsolete.md\ndeleted file mode 100755\nindex 7898192..0000000 100755\n" + del,
			`says docs/obsolete.md has mode 100755`},
		{"old mode equal to new mode, wrong", "diff --git a/kernel/untouched.cuh b/kernel/untouched.cuh\nold mode 100755\nnew mode 100755\n" + mod,
			`says kernel/untouched.cuh has mode 100755 ("old mode 100755"), but commit`},
		{"old mode, wrong (as before)", "diff --git a/tools/launch.sh b/tools/launch.sh\nold mode 100644\nnew mode 100755\n",
			"changes the mode of tools/launch.sh from 100644, but commit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch := head + tc.patch
			toml := "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + f.commit + "\"]\n\n[[patch]]\nfile = \"0001-m.patch\"\nsha256 = \"" + sum([]byte(patch)) + "\"\n"
			if err := testrepo.WriteFiles(filepath.Join(dir, "fx"), map[string]string{"series.toml": toml, "0001-m.patch": patch}); err != nil {
				t.Fatal(err)
			}
			cat, err := loadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			f.cat = cat
			_, err = f.apply(t)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Revert(RevertOptions{Src: f.work, Catalog: cat}); err != nil {
					t.Fatal(err) // the next case needs the clean checkout
				}
				if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
					t.Fatalf("applied and reverted, the tree differs from the pristine checkout in %v", d)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("err = %v, want a refusal with %q", err, tc.want)
			}
			if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
				t.Errorf("a refused apply changed: %v", d)
			}
		})
	}
}

package checkout

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	git "github.com/go-git/go-git/v5"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

func TestAlreadyAppliedComparesPatchSets(t *testing.T) {
	f := newFixture(t)
	// A series of two patches: apply with 0002 skipped, then ask for both.
	second := "Description: d\nAuthor: t\nUpstream-Status: Pending\nApplies-To: fixture\n\n" +
		"--- a/kernel/untouched.cuh\n+++ b/kernel/untouched.cuh\n@@ -1 +1 @@\n-// left alone\n+// touched\n"
	dir := filepath.Join(t.TempDir(), "series")
	toml := "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + f.commit + "\"]\n\n[[patch]]\nfile = \"0001-all-kinds.patch\"\nsha256 = \"" + sum([]byte(fixturePatch)) +
		"\"\n\n[[patch]]\nfile = \"0002-second.patch\"\nsha256 = \"" + sum([]byte(second)) + "\"\n"
	if err := testrepo.WriteFiles(filepath.Join(dir, "fx"), map[string]string{"series.toml": toml, "0001-all-kinds.patch": fixturePatch, "0002-second.patch": second}); err != nil {
		t.Fatal(err)
	}
	cat, err := loadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	skip, _ := recipes.Parse("s.toml", []byte("name = \"fx\"\nseries = \"fx\"\nskip = [\"0002-second.patch\"]\n[upstream]\ncommit = \""+f.commit+"\"\n"))
	if _, err := Apply(context.Background(), ApplyOptions{Recipe: skip, Catalog: cat, Src: f.work, Repo: f.up}); err != nil {
		t.Fatal(err)
	}
	full, _ := recipes.Parse("f.toml", []byte("name = \"fx\"\nseries = \"fx\"\n[upstream]\ncommit = \""+f.commit+"\"\n"))
	before := snapshot(t, f.work)
	_, err = Apply(context.Background(), ApplyOptions{Recipe: full, Catalog: cat, Src: f.work})
	if err == nil || !strings.Contains(err.Error(), "another patch set applied") || !strings.Contains(err.Error(), "requested: 0001-all-kinds.patch@") || !strings.Contains(err.Error(), "0002-second.patch@") {
		t.Fatalf("err = %v", err)
	}
	if d := before.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("refused apply changed %v", d)
	}
}

func TestRevertAndStatusAcceptUpstreamBytes(t *testing.T) {
	f := newFixture(t)
	pristine := snapshot(t, f.up)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	// The user restores one file to upstream by hand.
	if err := os.WriteFile(filepath.Join(f.work, "kernel/dispatch.cuh"), []byte(upstreamFiles["kernel/dispatch.cuh"]), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Status(f.work, f.cat)
	if err != nil {
		t.Fatal(err)
	}
	if st.Clean() || len(st.Drift) != 1 || !st.Drift[0].Upstream {
		t.Errorf("drift = %+v", st.Drift)
	}
	rep, err := Revert(RevertOptions{Src: f.work})
	if err != nil {
		t.Fatalf("revert refused a file that holds upstream's bytes: %v", err)
	}
	if len(rep.AlreadyUpstream) != 1 || len(rep.Restored) != 4 || len(rep.Discarded) != 0 {
		t.Errorf("report = %+v", rep)
	}
	if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("differs from upstream after revert: %v", d)
	}
}

func TestInterruptedApplyIsReportedAndReverted(t *testing.T) {
	f := newFixture(t)
	pristine := snapshot(t, f.up)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	// Make it look like a kill during the writes: the state says
	// incomplete, one file is patched, one still upstream, and a temp file
	// is left beside a third.
	gitDir := filepath.Join(f.work, ".git")
	st, _ := ReadState(gitDir)
	st.Incomplete = true
	if err := writeState(gitDir, st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.work, "tools/run.bat"), []byte(upstreamFiles["tools/run.bat"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.work, "kernel/.dispatch.cuh.arpatch-123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}

	sr, err := Status(f.work, f.cat)
	if err != nil || sr.Clean() || sr.Holder != 0 {
		t.Fatalf("status clean = %v, holder %d, err %v", sr.Clean(), sr.Holder, err)
	}
	// The same state while another live process holds the lock is an
	// apply at work, not an interrupted one: Status names its pid. This
	// process's own pid is not another holder (a build holds the lock
	// while it reads the status).
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	for pid, want := range map[int]int{sleeper.Process.Pid: sleeper.Process.Pid, os.Getpid(): 0} {
		if err := lockfile.WritePID(lockPath(gitDir), pid); err != nil {
			t.Fatal(err)
		}
		if sr, err := Status(f.work, f.cat); err != nil || sr.Holder != want {
			t.Errorf("lock held by pid %d: status holder %d, want %d (err %v)", pid, sr.Holder, want, err)
		}
	}
	if err := os.Remove(lockPath(gitDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.apply(t); err == nil || !strings.Contains(err.Error(), "was interrupted part way") {
		t.Errorf("apply on an interrupted tree: %v", err)
	}
	if _, err := Revert(RevertOptions{Src: f.work}); err != nil {
		t.Fatal(err)
	}
	if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("differs from upstream after revert: %v", d)
	}
}

func TestSkipWorktreeEditIsRefused(t *testing.T) {
	f := newFixture(t)
	f.cloneAndRevert(t)
	r, err := git.PlainOpen(f.work)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := r.Storer.Index()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range idx.Entries {
		if e.Name == "kernel/dispatch.cuh" {
			e.SkipWorktree = true
		}
	}
	if err := r.Storer.SetIndex(idx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.work, "kernel/dispatch.cuh"), []byte(upstreamFiles["kernel/dispatch.cuh"]+"// local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, f.work)
	_, err = f.apply(t)
	if err == nil || !strings.Contains(err.Error(), "differ from commit") || !strings.Contains(err.Error(), "kernel/dispatch.cuh") {
		t.Fatalf("err = %v", err)
	}
	if d := before.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("refused apply changed %v", d)
	}
	// The remedy's command, run as printed, lets git status see the edit.
	if _, lerr := exec.LookPath("git"); lerr == nil {
		m := regexp.MustCompile("Clear the bits \\(`([^`]+)`\\)").FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("no command to clear the bits in %v", err)
		}
		if out, cerr := exec.Command("sh", "-c", m[1]).CombinedOutput(); cerr != nil {
			t.Fatalf("%s: %v\n%s", m[1], cerr, out)
		}
		if out, serr := exec.Command("git", "-C", f.work, "status", "--porcelain").Output(); serr != nil || !strings.Contains(string(out), " M kernel/dispatch.cuh") {
			t.Errorf("git status after %s: %q, %v", m[1], out, serr)
		}
	}
}

func TestConcurrentAppliesOneWins(t *testing.T) {
	f := newFixture(t)
	f.cloneAndRevert(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	reps := make([]*ApplyReport, 8)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			reps[i], errs[i] = f.apply(t)
		}(i)
	}
	wg.Wait()
	applied := 0
	for i, err := range errs {
		switch {
		case err == nil && !reps[i].AlreadyApplied:
			applied++
		case err == nil && reps[i].ByHand:
			t.Errorf("run %d saw the tree without its state: %+v", i, reps[i])
		case err != nil && !strings.Contains(err.Error(), "another arpatch"):
			t.Errorf("run %d: unexpected error %v", i, err)
		}
	}
	if applied != 1 {
		t.Errorf("%d runs applied the series, want 1", applied)
	}
}

func TestStateWithBadPathIsRefused(t *testing.T) {
	f := newFixture(t)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	p := StatePath(filepath.Join(f.work, ".git"))
	var st map[string]any
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	st["files"] = []map[string]string{{"path": ".git/config", "op": "create"}}
	b, _ = json.Marshal(st)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Revert(RevertOptions{Src: f.work, Force: true}); err == nil || !strings.Contains(err.Error(), "enters .git") {
		t.Errorf("revert with a tampered state: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.work, ".git", "config")); err != nil {
		t.Errorf(".git/config: %v", err)
	}
}

// TestLinkedWorktree needs the git binary to make the worktree; go-git
// cannot. arpatch itself only reads it.
func TestLinkedWorktree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	f := newFixture(t)
	f.cloneAndRevert(t)
	wt := filepath.Join(t.TempDir(), "wt")
	if out, err := exec.Command("git", "-C", f.work, "worktree", "add", "--detach", wt, f.commit).CombinedOutput(); err != nil {
		t.Skipf("git worktree add: %v %s", err, out)
	}
	if _, err := Apply(context.Background(), ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: wt}); err != nil {
		t.Fatal(err)
	}
	// The state belongs to the worktree, not to the main checkout.
	if st, _ := ReadState(filepath.Join(f.work, ".git")); st != nil {
		t.Error("the worktree's state landed in the main checkout")
	}
	sr, err := Status(wt, f.cat)
	if err != nil || !sr.Clean() {
		t.Fatalf("status: %v %+v", err, sr)
	}
	if _, err := Revert(RevertOptions{Src: wt}); err != nil {
		t.Fatal(err)
	}
	// A linked worktree is a local repository too: patches check reads
	// it, and a clone from it hardlinks objects instead of a transport.
	if gitsrc.LocalGitDir(wt) != filepath.Join(f.work, ".git") {
		t.Errorf("LocalGitDir(worktree) = %q", gitsrc.LocalGitDir(wt))
	}
	if _, err := CheckCommits(wt, []string{f.commit}, f.cat, nil); err != nil {
		t.Errorf("drift check on a linked worktree: %v", err)
	}
}

// The state lists files in patch order, and revert restores them in the
// reverse: patch 1 touches z.py, patch 2 touches a.cuh, so the state reads
// [z.py, a.cuh] (not path order) and revert writes a.cuh first.
func TestStateFilesInPatchOrder(t *testing.T) {
	ps := []*patches.Patch{
		{Name: "0001-gate.patch", Diff: &patches.Diff{Changes: []*patches.FileChange{{Path: "python/z.py"}}}},
		{Name: "0002-dispatch.patch", Diff: &patches.Diff{Changes: []*patches.FileChange{{Path: "kernel/a.cuh"}, {Path: "python/z.py"}}}},
	}
	res := &patches.Result{Files: []*patches.FileResult{{Path: "kernel/a.cuh", After: []byte("a")}, {Path: "python/z.py", After: []byte("z")}}}
	st := newState(ApplyOptions{Recipe: &recipes.Recipe{Name: "r"}}, &ApplyReport{Patches: ps, Result: res}, "c")
	if len(st.Files) != 2 || st.Files[0].Path != "python/z.py" || st.Files[1].Path != "kernel/a.cuh" {
		t.Errorf("state files %+v, want z.py then a.cuh", st.Files)
	}
	undo := orderedWrites(res, ps, true)
	if undo[0].Path != "kernel/a.cuh" || undo[1].Path != "python/z.py" {
		t.Errorf("undo order %s, %s", undo[0].Path, undo[1].Path)
	}
}

func TestInterruptedRevertIsReportedAndFinished(t *testing.T) {
	f := newFixture(t)
	pristine := snapshot(t, f.up)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	// A revert killed part way: the state says reverting, one file is
	// already restored, the others still patched.
	gitDir := filepath.Join(f.work, ".git")
	st, _ := ReadState(gitDir)
	st.Reverting = true
	if err := writeState(gitDir, st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.work, "tools/run.bat"), []byte(upstreamFiles["tools/run.bat"]), 0o644); err != nil {
		t.Fatal(err)
	}
	sr, err := Status(f.work, f.cat)
	if err != nil || sr.Clean() || !sr.State.Reverting {
		t.Fatalf("status: clean %v, err %v", sr.Clean(), err)
	}
	if _, err := f.apply(t); err == nil || !strings.Contains(err.Error(), "a revert of series") || !strings.Contains(err.Error(), "to finish it") {
		t.Errorf("apply during an interrupted revert: %v", err)
	}
	if _, err := Revert(RevertOptions{Src: f.work}); err != nil {
		t.Fatal(err)
	}
	if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("differs from upstream after the second revert: %v", d)
	}
	if st, _ := ReadState(gitDir); st != nil {
		t.Errorf("state left after revert: %+v", st)
	}
}

// An untracked file where the series creates one: refused with the path,
// the file kept byte for byte.
func TestUntrackedFileWhereSeriesCreates(t *testing.T) {
	f := newFixture(t)
	f.cloneAndRevert(t)
	mine := filepath.Join(f.work, "new/pcie/notes.sh")
	if err := os.MkdirAll(filepath.Dir(mine), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mine, []byte("my own notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, f.work)
	_, err := f.apply(t)
	if err == nil || !strings.Contains(err.Error(), "the series creates new/pcie/notes.sh, but the tree already has a file there") || !strings.Contains(err.Error(), "mv "+mine+" "+mine+".mine") {
		t.Errorf("err = %v", err)
	}
	if d := before.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("refused apply changed %v", d)
	}
}

// A patched file the user deleted holds nothing to lose: revert restores
// upstream's bytes without --force.
func TestRevertRestoresDeletedPatchedFile(t *testing.T) {
	f := newFixture(t)
	pristine := snapshot(t, f.up)
	if _, err := f.apply(t); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.work, "kernel/dispatch.cuh")); err != nil {
		t.Fatal(err)
	}
	rep, err := Revert(RevertOptions{Src: f.work})
	if err != nil {
		t.Fatalf("revert: %v", err)
	}
	if len(rep.Discarded) != 0 {
		t.Errorf("discarded %v", rep.Discarded)
	}
	if d := pristine.Diff(snapshot(t, f.work)); len(d) > 0 {
		t.Errorf("differs from upstream after revert: %v", d)
	}
}

// A clone killed with SIGKILL leaves its temp dir; the next clone to the
// same place removes it (its pid is gone) and leaves live ones alone.
func TestStaleCloneTempIsRemoved(t *testing.T) {
	f := newFixture(t)
	parent := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no `true` for a dead pid")
	}
	stale := filepath.Join(parent, ".sg.arpatch-clone-"+strconv.Itoa(dead.Process.Pid)+"-123")
	live := filepath.Join(parent, ".sg.arpatch-clone-"+strconv.Itoa(os.Getpid())+"-456")
	if err := os.MkdirAll(filepath.Join(stale, "objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(live, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(context.Background(), ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: filepath.Join(parent, "sg"), Repo: f.up}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale clone temp dir still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live clone's temp dir was removed: %v", err)
	}
}

// --repo naming a linked worktree means that worktree's HEAD, not the main
// checkout's: patches check, a dry run and a clone from it all resolve
// HEAD as git does. The worktree is laid out by hand, as `git worktree add
// --detach` makes it (go-git cannot make one, and CI may have no git).
func TestRepoLinkedWorktreeHead(t *testing.T) {
	f := newFixtureOwn(t) // commits to its upstream and adds a worktree
	if err := testrepo.WriteFiles(f.up, map[string]string{"python/sglang/srt/distributed/parallel_state.py": "moved on\n"}); err != nil {
		t.Fatal(err)
	}
	later, err := testrepo.Commit(f.up, "later")
	if err != nil {
		t.Fatal(err)
	}
	wt := filepath.Join(t.TempDir(), "wt")
	gd := filepath.Join(f.up, ".git", "worktrees", "wt")
	if err := os.MkdirAll(gd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, s := range map[string]string{
		filepath.Join(gd, "HEAD"): f.commit + "\n", filepath.Join(gd, "commondir"): "../..\n",
		filepath.Join(gd, "gitdir"): filepath.Join(wt, ".git") + "\n", filepath.Join(wt, ".git"): "gitdir: " + gd + "\n",
	} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := CheckCommits(wt, []string{"HEAD"}, f.cat, nil)
	if err != nil || len(rows) != 1 || rows[0].Commit != f.commit {
		t.Fatalf("check --repo worktree --commit HEAD: %+v, %v; want commit %s (the main checkout is at %s)", rows, err, f.commit, later)
	}
	dry, err := Apply(context.Background(), ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: f.work, Repo: wt, Commit: "HEAD", DryRun: true})
	if err != nil || dry.Commit != f.commit {
		t.Fatalf("dry-run apply --repo worktree --commit HEAD: %+v, %v; want %s", dry, err, f.commit)
	}
	rep, err := Apply(context.Background(), ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: f.work, Repo: wt, Commit: "HEAD", Version: "test"})
	if err != nil || rep.Commit != f.commit || !rep.Cloned {
		t.Fatalf("apply --repo worktree --commit HEAD: %+v, %v; want a clone at %s", rep, err, f.commit)
	}
}

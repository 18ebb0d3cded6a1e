package port

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/merge3/merge3test"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/patches"
)

const oldPath = "sgl-kernel/csrc/allreduce/custom_all_reduce.cuh"

// dispatch is a fixture shaped like sgl-kernel's allreduce dispatch.
// Lines 3, 5 and 6 hold what arpatch's gate rule calls of it (upstream's
// constructor, register_buffer and allreduce signatures, around the
// fixture's allreduce(bytes)) and the kernels it names, so that the
// patched dispatch compiles.
const dispatch = `// arpatch test fixture: shaped like sgl-kernel's allreduce dispatch.
#define KL(name) name<<<blocks, threads, 0, stream>>>(out)
namespace sglang { struct Signal {}; __global__ void one_stage(float*) {} __global__ void two_stage(float*) {} __global__ void one_stage_small(float*) {}
struct CustomAllreduce {
  int world_size_; bool full_nvlink_; int blocks = 1, threads = 512; cudaStream_t stream = nullptr; float* out = nullptr;
  CustomAllreduce(Signal**, void*, size_t, int, int ws, bool nvl) : world_size_(ws), full_nvlink_(nvl) {} void register_buffer(void**) {} template <typename T> void allreduce(cudaStream_t s, T*, T* o, int n, int = 512, int = 36) { stream = s; out = reinterpret_cast<float*>(o); allreduce(long(n) * long(sizeof(T))); }
  void allreduce(long bytes) { switch (world_size_) { case 2: case 4: case 8: {
    if (world_size_ == 2) {
      KL(one_stage);
    } else if (full_nvlink_) {
      if (bytes < 256 * 1024) {
        KL(one_stage);
      } else {
        KL(two_stage);
      }
    }
    break; } default: throw std::runtime_error("world size"); } }
};
}  // namespace sglang
`

const patch0001 = `Description: fixture: launch a kernel on PCIe-only GPUs above world size 2
Author: arpatch tests
Upstream-Status: Inappropriate [test fixture]
Applies-To: the fixture tree

diff --git a/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh b/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh
--- a/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh
+++ b/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh
@@ -7,7 +7,7 @@ struct CustomAllreduce {
   void allreduce(long bytes) { switch (world_size_) { case 2: case 4: case 8: {
     if (world_size_ == 2) {
       KL(one_stage);
-    } else if (full_nvlink_) {
+    } else {  // full NVLink, or PCIe-only above 2 GPUs
       if (bytes < 256 * 1024) {
         KL(one_stage);
       } else {
`

// fixture is an upstream history and a sealed one-patch series tested on
// its first commit.
type fixture struct {
	t      testing.TB
	h      *testrepo.History // the upstream at h.Dir(): port only reads history, so no work tree
	base   string
	series *patches.Series
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{t: t, h: testrepo.NewHistory(filepath.Join(t.TempDir(), "up"))}
	var err error
	if f.base, err = f.h.Change("fixture: initial tree", map[string]string{oldPath: dispatch, "README.md": "fixture\n"}); err != nil {
		t.Fatal(err)
	}
	toml := `name = "fix-pcie"
family = "pcie"
description = "fixture series"
tested_on = ["` + f.base + `"]

[[patch]]
file = "0001-dispatch.patch"
sha256 = ""
provides = ["pcie-dispatch-branch"]
`
	// The series is read, never written: made once per base commit.
	root, err := fixtures.Dir("fix-pcie tested on "+f.base, func(dir string) error {
		return sealSeries(filepath.Join(dir, "fix-pcie"), toml, "0001-dispatch.patch", patch0001)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.series = loadSeries(t, filepath.Join(root, "fix-pcie"))
	return f
}

// fixtures holds the series newFixture shares; TestMain removes it.
var fixtures testrepo.Shared

func TestMain(m *testing.M) { os.Exit(fixtures.Run(m)) }

// step writes files ("" removes one) and commits.
func (f *fixture) step(files map[string]string) string {
	f.t.Helper()
	return f.h.MustChange(f.t, "fixture step", files)
}

// repo writes the steps made so far and opens the repository.
func (f *fixture) repo() *gitsrc.Repo {
	f.t.Helper()
	f.h.MustWrite(f.t)
	repo, err := gitsrc.OpenAny(f.h.Dir())
	if err != nil {
		f.t.Fatal(err)
	}
	return repo
}

func (f *fixture) port(to string) *Report {
	f.t.Helper()
	repo := f.repo()
	rep, err := Run(Options{Repo: repo, Series: f.series, To: to})
	if err != nil {
		f.t.Fatal(err)
	}
	return rep
}

// draftApplies writes the draft, loads it as a series (sealed) and
// applies it to the target commit, returning the patched file.
func (f *fixture) draftApplies(rep *Report, to, path string) string {
	f.t.Helper()
	d, err := rep.Draft(f.series, "fix-pcie-next", true)
	if err != nil {
		f.t.Fatal(err)
	}
	root := filepath.Join(f.t.TempDir(), "series")
	if err := d.Write(filepath.Join(root, "fix-pcie-next")); err != nil {
		f.t.Fatal(err)
	}
	cat, err := patches.LoadDir(root)
	if err != nil {
		f.t.Fatal(err)
	}
	s := cat.Series[0]
	if len(s.TestedOn) != 1 || s.TestedOn[0] != to || s.Family != "pcie" || s.Patches[0].Provides[0] != "pcie-dispatch-branch" {
		f.t.Fatalf("draft series %+v", s)
	}
	ps, err := s.Load(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	repo := f.repo()
	tree, _ := repo.TreeAt(to)
	res, err := patches.Apply(tree, ps)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(res.Files) != 1 || res.Files[0].Path != path {
		f.t.Fatalf("draft changed %+v, want %s", res.Files, path)
	}
	gitApplyAgrees(f.t, f.t.TempDir(), tree, d.Files["0001-dispatch.patch"], path, res.Files[0].After)
	return string(res.Files[0].After)
}

// gitApplyAgrees applies the ported patch with `git apply` to the target
// file, written with the patch into dir (over what an earlier call left
// there), and requires the bytes arpatch's engine produced.
func gitApplyAgrees(t testing.TB, dir string, tree patches.Tree, patch []byte, path string, want []byte) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Log("git is not installed; skipping the git apply cross-check")
		return
	}
	before, err := tree.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := testrepo.WriteFiles(dir, map[string]string{path: string(before), "p.patch": string(patch)}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(git, "apply", "p.patch")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply refuses the ported patch: %v\n%s\n%s", err, out, patch)
	}
	got, _ := os.ReadFile(filepath.Join(dir, path))
	if string(got) != string(want) {
		t.Fatalf("git apply gives\n%s\narpatch gives\n%s", got, want)
	}
}

func patched(s string) string {
	return strings.Replace(s, "} else if (full_nvlink_) {", "} else {  // full NVLink, or PCIe-only above 2 GPUs", 1)
}

func onlyHunk(t testing.TB, rep *Report) Hunk {
	t.Helper()
	if len(rep.Patches) != 1 || len(rep.Patches[0].Hunks) != 1 {
		t.Fatalf("report %+v", rep)
	}
	return rep.Patches[0].Hunks[0]
}

func TestPortRenameUnchanged(t *testing.T) {
	f := newFixture(t)
	const newPath = "python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh"
	mv := f.step(map[string]string{oldPath: "", newPath: dispatch})
	rep := f.port(mv)
	h := onlyHunk(t, rep)
	if !rep.Clean || h.Status != Exact || h.Path != newPath || h.File != oldPath || len(h.Moved) != 1 || h.Moved[0].Commit != mv {
		t.Fatalf("hunk %+v clean %v", h, rep.Clean)
	}
	if got := f.draftApplies(rep, mv, newPath); got != patched(dispatch) {
		t.Fatalf("patched file:\n%s", got)
	}
	text := string(rep.Patches[0].Text)
	for _, want := range []string{"diff --git a/" + newPath + " b/" + newPath, "@@ -7,7 +7,7 @@ struct CustomAllreduce {", "Applies-To: sglang " + mv + " (ported by `arpatch patches port` from fix-pcie, tested on " + f.base[:12] + ")"} {
		if !strings.Contains(text, want) {
			t.Errorf("ported patch lacks %q:\n%s", want, text)
		}
	}
}

func TestPortRenamePlusOffset(t *testing.T) {
	f := newFixture(t)
	const newPath = "python/aot/custom_all_reduce.cuh"
	moved := "// one\n// two\n// three\n" + dispatch
	mv := f.step(map[string]string{oldPath: "", newPath: moved})
	rep := f.port(mv)
	h := onlyHunk(t, rep)
	if h.Status != Offset || h.Offset != 3 || h.Line != 10 || h.Path != newPath || len(h.Moved) != 1 {
		t.Fatalf("hunk %+v", h)
	}
	if !strings.Contains(string(rep.Patches[0].Text), "@@ -10,7 +10,7 @@ struct CustomAllreduce {") {
		t.Errorf("the hunk was not re-headed at line 10:\n%s", rep.Patches[0].Text)
	}
	if got := f.draftApplies(rep, mv, newPath); got != patched(moved) {
		t.Fatalf("patched file:\n%s", got)
	}
}

func TestPortThreeWayClean(t *testing.T) {
	f := newFixture(t)
	// Upstream changes a context line of the hunk (line 12, two lines
	// below the patched one) and adds a line at the end: the hunk no
	// longer fits, the merge is clean.
	theirs := strings.Replace(dispatch, "        KL(one_stage);\n      } else {", "        KL(one_stage_small);\n      } else {", 1) + "// end\n"
	c := f.step(map[string]string{oldPath: theirs})
	rep := f.port(c)
	h := onlyHunk(t, rep)
	if !rep.Clean || h.Status != Merged || h.Path != oldPath || len(h.Moved) != 0 {
		t.Fatalf("hunk %+v clean %v", h, rep.Clean)
	}
	text := string(rep.Patches[0].Text)
	// The regenerated hunk carries upstream's new context line.
	if !strings.Contains(text, "\n         KL(one_stage_small);\n") || !strings.Contains(text, "@@ -7,7 +7,7 @@ struct CustomAllreduce {") {
		t.Fatalf("regenerated hunk:\n%s", text)
	}
	if got := f.draftApplies(rep, c, oldPath); got != patched(theirs) {
		t.Fatalf("patched file:\n%s", got)
	}
}

func TestPortOverlapConflictWritesNothing(t *testing.T) {
	f := newFixture(t)
	theirs := strings.Replace(dispatch, "} else if (full_nvlink_) {", "} else if (full_nvlink_ && world_size_ <= 8) {", 1)
	c := f.step(map[string]string{oldPath: theirs})
	rep := f.port(c)
	h := onlyHunk(t, rep)
	if rep.Clean || h.Status != Conflict || len(rep.Patches[0].Conflicts) != 1 || rep.Patches[0].Text != nil {
		t.Fatalf("report %+v", rep)
	}
	cd := rep.Patches[0].Conflicts[0]
	if cd.BaseLine != 10 || len(cd.Base) != 1 || !strings.Contains(cd.Ours[0], "} else {  // full NVLink") || !strings.Contains(cd.Theirs[0], "world_size_ <= 8") || cd.Hunks[0] != "@@ -7,7 +7,7 @@" {
		t.Fatalf("conflict %+v", cd)
	}
	_, err := rep.Draft(f.series, "fix-pcie-next", true)
	if !errors.Is(err, ErrConflicts) {
		t.Fatalf("Draft of a conflicted port: %v", err)
	}
	var b strings.Builder
	rep.WriteText(&b)
	for _, want := range []string{"conflict: 0001-dispatch.patch " + oldPath + " @@ -7,7 +7,7 @@: the patch and upstream changed the same lines (from line 10 at " + f.base[:12] + ")",
		"  ours (the patch):\n    |     } else {  // full NVLink, or PCIe-only above 2 GPUs\n",
		"  theirs (" + c[:12] + "):\n    |     } else if (full_nvlink_ && world_size_ <= 8) {\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	js, _ := json.Marshal(rep)
	if !strings.Contains(string(js), `"status":"conflict"`) || !strings.Contains(string(js), `"clean":false`) {
		t.Errorf("json %s", js)
	}
}

func TestPortRenameChain(t *testing.T) {
	f := newFixture(t)
	m1 := f.step(map[string]string{oldPath: "", "kernels/custom_all_reduce.cuh": dispatch})
	edited := strings.Replace(dispatch, "namespace sglang {", "#include <cstdint>\nnamespace sglang {", 1)
	f.step(map[string]string{"kernels/custom_all_reduce.cuh": edited})
	m2 := f.step(map[string]string{"kernels/custom_all_reduce.cuh": "", "python/aot/custom_all_reduce.cuh": edited})
	rep := f.port(m2)
	h := onlyHunk(t, rep)
	if !rep.Clean || h.Status != Offset || h.Offset != 1 || h.Path != "python/aot/custom_all_reduce.cuh" || len(h.Moved) != 2 || h.Moved[0].Commit != m1 || h.Moved[1].Commit != m2 {
		t.Fatalf("hunk %+v", h)
	}
	if len(rep.Moves) != 2 || !strings.Contains(rep.Summary(), "clean: 1 offset hunks; 2 moves") {
		t.Fatalf("moves %+v summary %q", rep.Moves, rep.Summary())
	}
	if got := f.draftApplies(rep, m2, "python/aot/custom_all_reduce.cuh"); got != patched(edited) {
		t.Fatalf("patched file:\n%s", got)
	}
}

func TestPortDeletedFileIsAConflict(t *testing.T) {
	f := newFixture(t)
	c := f.step(map[string]string{oldPath: ""})
	rep := f.port(c)
	if rep.Clean || len(rep.Patches[0].Conflicts) != 1 || !strings.Contains(rep.Patches[0].Conflicts[0].Reason, oldPath+" was deleted at "+c[:12]) {
		t.Fatalf("report %+v", rep.Patches)
	}
}

func TestDraftRefusesAFullDirectory(t *testing.T) {
	f := newFixture(t)
	mv := f.step(map[string]string{"README.md": "changed\n"})
	rep := f.port(mv)
	d, err := rep.Draft(f.series, "next", false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Files["series.toml"]), `sha256 = ""`) {
		t.Errorf("an unsealed draft records a sha256:\n%s", d.Files["series.toml"])
	}
	dir := filepath.Join(t.TempDir(), "next")
	if err := testrepo.WriteFiles(dir, map[string]string{"mine.txt": "keep\n"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(dir); err == nil || !strings.Contains(err.Error(), "already holds files; nothing was written") {
		t.Fatalf("Write into a full directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "mine.txt")); string(b) != "keep\n" {
		t.Fatal("the user's file changed")
	}
	if _, err := rep.Draft(f.series, "Bad Name", false); err == nil {
		t.Fatal("a bad series name was accepted")
	}
}

func TestPortRefusedByTheEffectRule(t *testing.T) {
	f := newFixture(t)
	// Upstream stops throwing for world sizes its switch does not list:
	// the hunk still fits, but at world size 6 the patched dispatch would
	// launch nothing, so apply would refuse the ported series.
	theirs := strings.Replace(dispatch, `default: throw std::runtime_error("world size");`, "default: break;", 1)
	c := f.step(map[string]string{oldPath: theirs})
	rep := f.port(c)
	if rep.Clean || rep.Refused == "" || onlyHunk(t, rep).Status != Exact {
		t.Fatalf("report %+v", rep)
	}
	if !strings.HasPrefix(rep.Summary(), "refused by arpatch's effect rule: 1 exact hunks") {
		t.Errorf("summary %q", rep.Summary())
	}
	if _, err := rep.Draft(f.series, "next", true); !errors.Is(err, ErrConflicts) || !strings.Contains(err.Error(), "refused by arpatch's effect rule") {
		t.Fatalf("Draft of a refused port: %v", err)
	}
}

// TestPortAgainstGitMergeFile ports random one-file patches onto random
// upstream edits and requires what `git merge-file` does with the same
// three files: clean exactly when it is clean, and then the ported patch,
// applied to upstream's file, gives merge-file's bytes (except where
// upstream already holds the whole patch, which port reports instead of
// writing an empty patch). Lines are unique,
// so any two correct line diffs agree and the comparison is exact.
func TestPortAgainstGitMergeFile(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed; the differential test against git merge-file needs it")
	}
	rng := rand.New(rand.NewSource(7))
	const path = "src/ops.txt"
	var clean, conflicted int
	// One upstream repository for every case, each case two commits on
	// top (its base, then upstream's edit): port looks only from the base
	// to the edit. The cases are drawn first and all their commits made
	// in memory, then written as one pack (not two files per commit).
	dir := filepath.Join(t.TempDir(), "up")
	hist := testrepo.NewHistory(dir)
	if _, err := hist.Change("fixture: initial tree", nil); err != nil {
		t.Fatal(err)
	}
	type mergeCase struct {
		i                  int
		base, ours, theirs []string
		b, o, th           string
	}
	var cases []mergeCase
	var commits []string
	for i := 0; i < 40; i++ {
		var base []string
		for j := 0; j < 12+rng.Intn(20); j++ {
			base = append(base, fmt.Sprintf("line %d of the fixture\n", j))
		}
		ours, theirs := merge3test.RandomEdit(rng, base, "ours"), merge3test.RandomEdit(rng, base, "theirs")
		if slices.Equal(ours, base) || slices.Equal(ours, theirs) {
			continue // no patch, or upstream already holds it
		}
		c := mergeCase{i, base, ours, theirs, strings.Join(base, ""), strings.Join(ours, ""), strings.Join(theirs, "")}
		cases = append(cases, c)
		for _, content := range []string{c.b, c.th} {
			commit, err := hist.Change("base, then upstream edit", map[string]string{path: content})
			if err != nil {
				t.Fatal(err)
			}
			commits = append(commits, commit)
		}
	}
	if err := hist.Write(); err != nil {
		t.Fatal(err)
	}
	// The series, the three files git merge-file reads and git apply's
	// tree are rewritten in place for each case.
	mdir, sdir, adir := t.TempDir(), t.TempDir(), t.TempDir()
	repo, err := gitsrc.OpenAny(dir) // every case's commits are written
	if err != nil {
		t.Fatal(err)
	}
	for k, mc := range cases {
		i, base, ours, theirs, b, o, th := mc.i, mc.base, mc.ours, mc.theirs, mc.b, mc.o, mc.th
		c0, c1 := commits[2*k], commits[2*k+1]
		text := "Description: random edit\nAuthor: arpatch tests\nUpstream-Status: Inappropriate [test]\nApplies-To: fixture\n\n" +
			section(path, &patches.FileResult{Path: path, Op: patches.Modify, After: []byte(o)}, []byte(b), unified(base, ours), "")
		s := sealedSeries(t, sdir, c0, text)
		rep, err := Run(Options{Repo: repo, Series: s, To: c1})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if err := testrepo.WriteFiles(mdir, map[string]string{"base": b, "ours": o, "theirs": th}); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(git, "merge-file", "-p", "ours", "base", "theirs")
		cmd.Dir = mdir
		want, err := cmd.Output()
		gitClean := err == nil
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() < 1) {
			t.Fatal(err)
		}
		if gitClean && string(want) == th {
			// Upstream already holds every change of the patch: port
			// refuses to offer an empty patch (a deliberate difference).
			if rep.Clean || !strings.Contains(rep.Patches[0].Conflicts[0].Reason, "upstream already holds every change") {
				t.Fatalf("case %d: a patch upstream already holds: %+v", i, rep.Patches)
			}
			continue
		}
		if rep.Clean != gitClean {
			t.Fatalf("case %d: port clean=%v, git merge-file clean=%v\nbase %q\nours %q\ntheirs %q\nreport %+v", i, rep.Clean, gitClean, base, ours, theirs, rep.Patches)
		}
		if !rep.Clean {
			conflicted++
			continue
		}
		clean++
		tree, res := applyPorted(t, repo, c1, rep.Patches[0].Text)
		if got := string(res.Files[0].After); got != string(want) {
			t.Fatalf("case %d: ported result %q, git merge-file %q", i, got, want)
		}
		gitApplyAgrees(t, adir, tree, rep.Patches[0].Text, path, res.Files[0].After)
	}
	if clean < 10 || conflicted < 5 {
		t.Fatalf("the cases do not exercise both outcomes: %d clean, %d conflicted", clean, conflicted)
	}
}

// sealedSeries writes a one-patch series tested on commit under dir and
// loads it.
func sealedSeries(t testing.TB, dir, commit, patch string) *patches.Series {
	toml := "name = \"rand\"\nfamily = \"rand\"\ntested_on = [\"" + commit + "\"]\n\n[[patch]]\nfile = \"0001-edit.patch\"\nsha256 = \"\"\n"
	return writeSeries(t, dir, "rand", toml, "0001-edit.patch", patch)
}

// writeSeries writes series.toml and one patch into a series directory
// named name under dir/series (over what an earlier call left there),
// seals it and loads it.
func writeSeries(t testing.TB, dir, name, toml, file, patch string) *patches.Series {
	t.Helper()
	sdir := filepath.Join(dir, "series", name)
	if err := sealSeries(sdir, toml, file, patch); err != nil {
		t.Fatal(err)
	}
	return loadSeries(t, sdir)
}

// sealSeries writes series.toml and one patch into the series directory
// sdir and seals it, in place: a test's fixture needs no atomic
// replacement (a temp file and rename per call).
func sealSeries(sdir, toml, file, patch string) error {
	if err := testrepo.WriteFiles(sdir, map[string]string{"series.toml": toml, file: patch}); err != nil {
		return err
	}
	// Sealed by its directory's name, which series.toml's name must match.
	parent, base := filepath.Split(sdir)
	_, err := patches.Seal(os.DirFS(parent), base, func(name string, data []byte) error {
		return os.WriteFile(filepath.Join(parent, name), data, 0o644)
	})
	return err
}

// loadSeries loads the one series of the series directory sdir.
func loadSeries(t testing.TB, sdir string) *patches.Series {
	t.Helper()
	cat, err := patches.LoadDir(filepath.Dir(sdir))
	if err != nil {
		t.Fatal(err)
	}
	return cat.Series[0]
}

// BenchmarkPort ports the fixture series across a rename and an upstream
// edit that forces the three-way merge, from git's object store.
func BenchmarkPort(b *testing.B) {
	f := newFixture(b)
	const newPath = "python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh"
	theirs := strings.Replace(dispatch, "        KL(one_stage);\n      } else {", "        KL(one_stage_small);\n      } else {", 1)
	c := f.h.MustChange(b, "move and edit", map[string]string{oldPath: "", newPath: theirs})
	repo := f.repo()
	b.ResetTimer()
	for b.Loop() {
		rep, err := Run(Options{Repo: repo, Series: f.series, To: c})
		if err != nil || !rep.Clean || rep.Patches[0].Hunks[0].Status != Merged {
			b.Fatalf("%v %+v", err, rep)
		}
	}
}

func TestPortKeepsModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "up")
	if err := testrepo.WriteFiles(dir, map[string]string{"tools/check.sh": "#!/bin/sh\necho one\necho two\n", "tools/gen.py": "print(1)\nprint(2)\n"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "tools/check.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	c0, err := testrepo.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The series edits the executable script and makes gen.py executable
	// (with an edit); upstream then adds a line at the end of it.
	patch := "Description: modes\nAuthor: arpatch tests\nUpstream-Status: Inappropriate [test]\nApplies-To: fixture\n\n" +
		"diff --git a/tools/check.sh b/tools/check.sh\nindex 1111111..2222222 100755\n--- a/tools/check.sh\n+++ b/tools/check.sh\n@@ -1,3 +1,3 @@\n #!/bin/sh\n-echo one\n+echo ONE\n echo two\n" +
		"diff --git a/tools/gen.py b/tools/gen.py\nold mode 100644\nnew mode 100755\nindex 3333333..4444444\n--- a/tools/gen.py\n+++ b/tools/gen.py\n@@ -1,2 +1,2 @@\n-print(1)\n+print(0)\n print(2)\n"
	s := sealedSeries(t, t.TempDir(), c0, patch)
	c1, err := testrepo.Change(dir, "upstream", map[string]string{"tools/gen.py": "print(1)\nprint(2)\nprint(3)\n"})
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := gitsrc.OpenAny(dir)
	rep, err := Run(Options{Repo: repo, Series: s, To: c1})
	if err != nil || !rep.Clean {
		t.Fatalf("%v %+v", err, rep)
	}
	text := string(rep.Patches[0].Text)
	for _, want := range []string{"\nindex ", " 100755\n--- a/tools/check.sh\n", "diff --git a/tools/gen.py b/tools/gen.py\nold mode 100644\nnew mode 100755\nindex "} {
		if !strings.Contains(text, want) {
			t.Errorf("ported patch lacks %q:\n%s", want, text)
		}
	}
	_, res := applyPorted(t, repo, c1, rep.Patches[0].Text)
	for _, f := range res.Files {
		if f.Path == "tools/gen.py" && (f.Mode != "100755" || f.OldMode != "100644") {
			t.Errorf("gen.py mode %q from %q, want 100755 from 100644", f.Mode, f.OldMode)
		}
	}
}

func TestCommandRunsAsPrinted(t *testing.T) {
	for _, tc := range []struct{ repo, out, dir, want string }{
		{"~/mirrors/sglang.git", "arpatch-port/pcie-2026-07-0bda0b168ad5", "",
			"arpatch patches port --series pcie-2026-07 --to C --repo ~/mirrors/sglang.git --out arpatch-port/pcie-2026-07-0bda0b168ad5"},
		{"/data/my mirrors/sglang", "", "/tmp/it's here",
			`arpatch patches port --series pcie-2026-07 --to C --repo '/data/my mirrors/sglang' --patches-dir "/tmp/it's here"`},
	} {
		got := Command("pcie-2026-07", tc.repo, "C", tc.out, tc.dir)
		if got != tc.want {
			t.Errorf("Command = %s\nwant      %s", got, tc.want)
		}
		// sh splits the printed line into the arguments meant.
		if _, err := exec.LookPath("sh"); err != nil || tc.dir == "" {
			continue
		}
		out, err := exec.Command("sh", "-c", "set -- "+strings.TrimPrefix(got, "arpatch ")+`; printf '%s\n' "$@"`).Output()
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		want := []string{"patches", "port", "--series", "pcie-2026-07", "--to", "C", "--repo", tc.repo, "--patches-dir", tc.dir}
		if !slices.Equal(args, want) {
			t.Errorf("sh reads %q, want %q", args, want)
		}
	}
}

// applyPorted parses a ported patch and applies it to commit.
func applyPorted(t testing.TB, repo *gitsrc.Repo, commit string, text []byte) (*gitsrc.CommitTree, *patches.Result) {
	t.Helper()
	d, err := patches.ParseDiff("ported.patch", text)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := repo.TreeAt(commit)
	if err != nil {
		t.Fatal(err)
	}
	res, err := patches.Apply(tree, []*patches.Patch{{Name: "ported.patch", Diff: d}})
	if err != nil {
		t.Fatalf("the ported patch does not apply: %v\n%s", err, text)
	}
	return tree, res
}

func TestPortBaseCommit(t *testing.T) {
	f := newFixture(t)
	c1 := f.step(map[string]string{"README.md": "one\n"})
	c2 := f.step(map[string]string{oldPath: "// top\n" + dispatch})
	repo := f.repo()
	// --from: the base is the commit given, not tested_on.
	rep, err := Run(Options{Repo: repo, Series: f.series, From: c1, To: c2})
	if err != nil || rep.From != c1 || !rep.Clean || onlyHunk(t, rep).Offset != 1 {
		t.Fatalf("%v %+v", err, rep)
	}
	// A series none of whose tested_on commits the repository holds.
	s := sealedSeries(t, t.TempDir(), strings.Repeat("ab", 20), patch0001)
	_, err = Run(Options{Repo: repo, Series: s, To: c2})
	if err == nil || !strings.Contains(err.Error(), "holds none of its tested_on commits (abababababababababababababababababababab); fetch one, or pass --from") {
		t.Fatalf("err %v", err)
	}
}

// base for a later patch holds the series' earlier patches: the conflict
// display says so.
func TestConflictBaseLabelNamesEarlierPatches(t *testing.T) {
	from := strings.Repeat("be", 20)
	r := &Report{Series: "s", From: from, To: strings.Repeat("cd", 20), Patches: []Patch{
		{Patch: "0001-a.patch", Clean: false, Conflicts: []ConflictDetail{{Patch: "0001-a.patch", Path: "f", Reason: "r", BaseLine: 1, Base: []string{"a\n"}}}},
		{Patch: "0002-b.patch", Clean: false, Conflicts: []ConflictDetail{{Patch: "0002-b.patch", Path: "f", Reason: "r", BaseLine: 3, Base: []string{"x\n"}}}},
	}}
	var b strings.Builder
	r.WriteText(&b)
	if !strings.Contains(b.String(), "  base (bebebebebebe):\n    | a") {
		t.Errorf("the first patch's base is the commit alone:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "  base (bebebebebebe with 0001-a.patch):\n    | x") {
		t.Errorf("the second patch's base does not name 0001:\n%s", b.String())
	}
}

// A moved file named in a patch's DEP-3 header is named by its new path in
// the draft.
func TestRewritePathsInHeader(t *testing.T) {
	h := []byte("Description: fix sgl-kernel/csrc/ar.cuh\n The dispatch in sgl-kernel/csrc/ar.cuh launches nothing.\nApplies-To: x\n\n")
	got := string(rewritePaths(h, []gitsrc.Rename{{From: "sgl-kernel/csrc/ar.cuh", To: "python/aot/csrc/ar.cuh"}}))
	if strings.Contains(got, "sgl-kernel/csrc/ar.cuh") || strings.Count(got, "python/aot/csrc/ar.cuh") != 2 {
		t.Errorf("header after the move:\n%s", got)
	}
}

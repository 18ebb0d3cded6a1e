package patches

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/patches/gaterule"
)

// A fixture tree shaped like upstream: the dispatch header (our own small
// code in the shape of CustomAllreduce::allreduce) and the Python gate.
const (
	cuhPath  = "sgl-kernel/csrc/allreduce/custom_all_reduce.cuh"
	gatePath = "python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py"
	cuh      = `class CustomAllreduce { template <typename T> void allreduce(T* out) { // fixture, the function opened on line 1
#define KL(ngpus, name) name<T, ngpus><<<blocks, threads, 0, stream>>>(out);
#define REDUCE_CASE(ngpus)              \
  case ngpus: {                         \
    if (world_size_ == 2) {             \
      KL(ngpus, one_stage);             \
    } else if (full_nvlink_) {          \
      KL(ngpus, two_stage);             \
    }                                   \
    break;                              \
  }
    switch (world_size_) {
      REDUCE_CASE(2)
      REDUCE_CASE(4)
      REDUCE_CASE(8)
      default:
        throw std::runtime_error("ws");
    }
  }
};
`
	gatePy = "def can_use(world_size, full_nvlink):\n    if world_size > 2 and not full_nvlink:\n        return None\n    return full_nvlink\n"
)

func cuhPatch(from, to string) string {
	return "Description: d\nAuthor: t\nUpstream-Status: Pending\nApplies-To: fixture\n\n--- a/" + cuhPath + "\n+++ b/" + cuhPath + "\n@@ -6,3 +6,3 @@\n       KL(ngpus, one_stage);             \\\n-" + from + "\n+" + to + "\n       KL(ngpus, two_stage);             \\\n"
}

const gateOpen = "--- a/" + gatePath + "\n+++ b/" + gatePath + "\n@@ -1,4 +1,4 @@\n def can_use(world_size, full_nvlink):\n-    if world_size > 2 and not full_nvlink:\n+    if world_size > 2 and not full_nvlink and not forced:\n         return None\n     return full_nvlink\n"

func TestCheckResultJudgesEffects(t *testing.T) {
	tree := memTree{cuhPath: cuh, gatePath: gatePy}
	fixed := mustPatch(t, "0001-d.patch", cuhPatch("    } else if (full_nvlink_) {          \\", "    } else {                            \\"))
	fixed.Provides = []string{TagDispatchBranch}
	// Issue 11, input 5: one space inside the test, tagged as the fix.
	tamper := mustPatch(t, "0001-d.patch", cuhPatch("    } else if (full_nvlink_) {          \\", "    } else if (full_nvlink_ ) {         \\"))
	tamper.Provides = []string{TagDispatchBranch}
	gate := mustPatch(t, "0002-g.patch", gateOpen)
	gate.Provides = []string{TagGateBypass}
	untaggedGate := mustPatch(t, "0001-g.patch", gateOpen)

	for _, tc := range []struct {
		name string
		ps   []*Patch
		want string // "" = accepted
	}{
		{"dispatch fixed, gate opened", []*Patch{fixed, gate}, ""},
		{"dispatch fixed alone", []*Patch{fixed}, ""},
		{"one-space tamper with the gate", []*Patch{tamper, gate}, "at world size 4 without full NVLink reaches `break` at line 10"},
		{"one-space tamper alone, tagged", []*Patch{tamper}, "reaches `break`"},
		{"untagged gate patch on upstream's dispatch", []*Patch{untaggedGate}, "in " + cuhPath + " as patched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := ApplyChecked(tree, tc.ps)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Files) == 0 {
					t.Error("no files changed")
				}
				return
			}
			var de *gaterule.DispatchError
			if !errors.As(err, &de) || !IsRuleError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a DispatchError with %q", err, tc.want)
			}
		})
	}
	// A series that does not touch the gates is not judged.
	other := mustPatch(t, "0001-o.patch", "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-a\n+b\n")
	if _, err := ApplyChecked(memTree{"README.md": "a\n"}, []*Patch{other}); err != nil {
		t.Errorf("unrelated series: %v", err)
	}
}

// TestShippedSeriesOnRealUpstream applies every shipped series to the
// upstream commits it is tested on, read from a local SGLang mirror
// (ARPATCH_SGLANG_MIRROR, e.g. a clone of flytiger-eco/sglang-for-sail),
// and judges the real patched dispatch; it also judges upstream's own
// dispatch at those commits and at the era C head, which must be refused.
// Without the mirror it skips: CI has none.
func TestShippedSeriesOnRealUpstream(t *testing.T) {
	cat, show, mirror := realUpstream(t)
	for _, s := range cat.Series {
		ps, err := s.Load(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.TestedOn {
			tree := gitTree{show: show, commit: c, mirror: mirror}
			if _, err := ApplyChecked(tree, ps); err != nil {
				t.Errorf("%s at %s: %v", s.Name, c[:12], err)
			} else {
				t.Logf("%s at %s: patched dispatch launches or throws at world sizes 4, 6, 8", s.Name, c[:12])
			}
			err := CheckResult(tree, &Result{}, ps)
			if err == nil || !IsRuleError(err) {
				t.Errorf("upstream's dispatch at %s was not refused: %v", c[:12], err)
			} else {
				t.Logf("upstream at %s refused: %v", c[:12], textfmt.FirstLine(err.Error()))
			}
		}
	}
	const eraC = "0bda0b168ad5bf7311ae639904489a4698a05546"
	gate := &Patch{Name: "g", Provides: []string{TagGateBypass}, Diff: &Diff{}}
	if err := CheckResult(gitTree{show: show, commit: eraC, mirror: mirror}, &Result{}, []*Patch{gate}); err == nil || !strings.Contains(err.Error(), "python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh") {
		t.Errorf("era C upstream dispatch: %v", err)
	}
}

// realUpstream starts a real-upstream test: it skips without the
// SGLang mirror (ARPATCH_SGLANG_MIRROR) or git, and returns the embedded
// catalog, a reader of a file at a commit of the mirror, and the mirror.
func realUpstream(t *testing.T) (*Catalog, func(commit, path string) ([]byte, error), string) {
	t.Helper()
	mirror := os.Getenv("ARPATCH_SGLANG_MIRROR")
	if mirror == "" {
		t.Skip("ARPATCH_SGLANG_MIRROR is not set (a local SGLang clone with the pinned commits); skipping the real-upstream check")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	cat, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	// A blob only: git show of a directory prints its listing, which the
	// engine would take for a file in the directory's place.
	show := func(commit, path string) ([]byte, error) {
		return exec.Command("git", "-C", mirror, "cat-file", "blob", commit+":"+path).Output()
	}
	return cat, show, mirror
}

type gitTree struct {
	show   func(commit, path string) ([]byte, error)
	commit string
	mirror string
}

// Named lists the commit's files of that name, so the rule searches the
// whole tree (and must pass over the JIT kernel's custom_all_reduce.cuh).
func (g gitTree) Named(base string) ([]string, error) {
	out, err := exec.Command("git", "-C", g.mirror, "ls-tree", "-r", "--name-only", g.commit).Output()
	var named []string
	for _, p := range strings.Fields(string(out)) {
		if path.Base(p) == base {
			named = append(named, p)
		}
	}
	return named, err
}

func (g gitTree) ReadFile(p string) ([]byte, error) {
	b, err := g.show(g.commit, p)
	if err != nil {
		return nil, os.ErrNotExist
	}
	return b, nil
}

// TestWholeAllreduceOnRealUpstream is finding F1 on the real tree: each
// shipped series, at the commits it is tested on (eras A, B and C), plus
// one more patch that puts an early exit before `switch (world_size_)`
// in CustomAllreduce::allreduce, must be refused by ApplyChecked, as must
// the patched file edited in the sibling ways (a goto over the switch, a
// return in a macro, a condition on full_nvlink_ around the switch, an
// #ifdef that leaves it out of the host pass). It reads a local SGLang
// mirror (ARPATCH_SGLANG_MIRROR) and skips without one.
func TestWholeAllreduceOnRealUpstream(t *testing.T) {
	cat, show, mirror := realUpstream(t)
	const sw = "    switch (world_size_) {\n"
	const early = "    if (!full_nvlink_ && world_size_ > 2) return;\n"
	for _, s := range cat.Series {
		ps, err := s.Load(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.TestedOn {
			tree := gitTree{show: show, commit: c, mirror: mirror}
			res, err := Apply(tree, ps)
			if err != nil {
				t.Fatalf("%s at %s: %v", s.Name, c[:12], err)
			}
			var path string
			var after []byte
			for _, f := range res.Files {
				if gaterule.IsDispatchFile(f.Path) {
					path, after = f.Path, f.After
				}
			}
			lines := strings.SplitAfter(string(after), "\n")
			at := slices.Index(lines, sw)
			if at < 3 {
				t.Fatalf("%s at %s: no %q in the patched %s", s.Name, c[:12], sw, path)
			}
			// The F1 input: one more patch, the early exit just before the
			// switch (line at+1 of the patched file).
			hunk := fmt.Sprintf("--- a/%s\n+++ b/%s\n@@ -%d,6 +%d,7 @@\n", path, path, at-2, at-2)
			for _, l := range lines[at-3 : at] {
				hunk += " " + l
			}
			hunk += "+" + early
			for _, l := range lines[at : at+3] {
				hunk += " " + l
			}
			extra := mustPatch(t, "0003-early-exit.patch", hunk)
			_, err = ApplyChecked(tree, append(append([]*Patch(nil), ps...), extra))
			want := fmt.Sprintf("at world size 4 without full NVLink reaches `return` at line %d without launching a kernel or throwing", at+1)
			if !IsRuleError(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s at %s plus an early exit: err = %v\nwant a rule refusal holding %q", s.Name, c[:12], err, want)
			}
			// The siblings, as edits of the patched file.
			patched := string(after)
			closeSw := "    }\n#undef REDUCE_CASE\n"
			if !strings.Contains(patched, closeSw) {
				t.Fatalf("%s at %s: no %q after the switch", s.Name, c[:12], closeSw)
			}
			around := func(open, shut string) string {
				x := strings.Replace(patched, sw, open+sw, 1)
				return strings.Replace(x, closeSw, "    }\n"+shut+"#undef REDUCE_CASE\n", 1)
			}
			for _, e := range []struct{ name, src, want string }{
				{"as shipped", patched, ""},
				{"goto over the switch", around("    if (!full_nvlink_) goto done;\n", "  done:;\n"), "meets `goto done`"},
				{"return in a macro", strings.Replace(patched, sw, "#define ARPATCH_SKIP() if (!full_nvlink_) return\n    ARPATCH_SKIP();\n"+sw, 1), "reaches `return`"},
				{"full_nvlink_ around the switch", around("    if (full_nvlink_) {\n", "    }\n"), "reaches the end of allreduce"},
				{"#ifdef around the switch", around("#ifdef __CUDA_ARCH__\n", "#endif\n"), "reaches the end of allreduce"},
			} {
				read := func(p string) ([]byte, error) {
					if p == path {
						return []byte(e.src), nil
					}
					return tree.ReadFile(p)
				}
				err := gaterule.Check(read, []string{path})
				switch {
				case e.want == "" && err != nil:
					t.Errorf("%s at %s, %s: %v", s.Name, c[:12], e.name, err)
				case e.want != "" && (err == nil || !strings.Contains(err.Error(), e.want)):
					t.Errorf("%s at %s, %s: err = %v, want %q", s.Name, c[:12], e.name, err, e.want)
				}
			}
		}
	}
}

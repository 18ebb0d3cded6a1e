package patches

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/patches/gaterule"
)

// A fixture tree shaped like upstream, from gaterule's test fixtures (our
// own small code, not upstream's): the dispatch header with upstream's
// branches, and the Python gates closed on PCIe above 2 GPUs.
const (
	cuhPath   = "sgl-kernel/csrc/allreduce/custom_all_reduce.cuh"
	gatesDir  = "python/sglang/srt/distributed/device_communicators/"
	utilsPath = gatesDir + "custom_all_reduce_utils.py"
	gatePath  = gatesDir + "custom_all_reduce.py"
)

// fixtureBranch is the header with the code after `world_size_ == 2`.
func fixtureBranch(t *testing.T, branch ...string) string {
	t.Helper()
	b, err := os.ReadFile("gaterule/testdata/dispatch.cuh.in")
	if err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	for _, l := range branch {
		lines.WriteString("      " + l + " \\\n")
	}
	s := strings.Replace(string(b), "BRANCH\n", lines.String(), 1)
	return strings.NewReplacer("TOP\n", "", "SWITCH\n", "").Replace(s)
}

var (
	nvlinkBranch = []string{"} else if (full_nvlink_) {", "  KL(ngpus, cross_device_reduce_2stage);"}
	fixedBranch  = []string{"} else {", "  KL(ngpus, cross_device_reduce_2stage);"}
	// Issue 11, input 5: one space inside the test.
	tamperBranch = []string{"} else if (full_nvlink_ ) {", "  KL(ngpus, cross_device_reduce_2stage);"}
)

func fixtureTree(t *testing.T) memTree {
	t.Helper()
	tree := memTree{cuhPath: fixtureBranch(t, nvlinkBranch...),
		"python/sglang/srt/distributed/parallel_state.py": "# fixture\n"}
	for _, p := range []string{"python/sglang/", "python/sglang/srt/", "python/sglang/srt/distributed/", gatesDir} {
		tree[p+"__init__.py"] = ""
	}
	for p, f := range map[string]string{utilsPath: "custom_all_reduce_utils.py", gatePath: "custom_all_reduce.py"} {
		b, err := os.ReadFile("gaterule/testdata/gates/" + f)
		if err != nil {
			t.Fatal(err)
		}
		tree[p] = string(b)
	}
	return tree
}

// wholePatch replaces path's old text by new in one hunk.
func wholePatch(t *testing.T, name, path, old, new string, provides ...string) *Patch {
	t.Helper()
	ol, nl := strings.SplitAfter(old, "\n"), strings.SplitAfter(new, "\n")
	ol, nl = ol[:len(ol)-1], nl[:len(nl)-1] // both end in a newline
	var b strings.Builder
	fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n@@ -1,%d +1,%d @@\n", path, path, len(ol), len(nl))
	for _, l := range ol {
		b.WriteString("-" + l)
	}
	for _, l := range nl {
		b.WriteString("+" + l)
	}
	p := mustPatch(t, name, b.String())
	p.Provides = provides
	return p
}

// gateOpen opens both Python gates under SGLANG_FORCE_CUSTOM_AR_PCIE=1.
func gateOpen(t *testing.T, tree memTree, provides ...string) []*Patch {
	u := strings.Replace(tree[utilsPath], "if world_size > 2 and not full_nvlink:  # GATE1",
		`if world_size > 2 and not full_nvlink and os.getenv("SGLANG_FORCE_CUSTOM_AR_PCIE") != "1":  # GATE1`, 1)
	g := strings.Replace(tree[gatePath], "if self.world_size == 2 or self.full_nvlink:  # GATE2",
		`if self.world_size == 2 or self.full_nvlink or __import__("os").getenv("SGLANG_FORCE_CUSTOM_AR_PCIE") == "1":  # GATE2`, 1)
	return []*Patch{wholePatch(t, "0002-u.patch", utilsPath, tree[utilsPath], u, provides...),
		wholePatch(t, "0003-g.patch", gatePath, tree[gatePath], g, provides...)}
}

func needJudge(t *testing.T) {
	t.Helper()
	if _, err := gaterule.Clang(); err != nil {
		t.Skipf("%v: the gate rule's C++ judge is not run here", err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the gate rule's Python judge is not run here")
	}
}

func TestCheckResultJudgesEffects(t *testing.T) {
	needJudge(t)
	tree := fixtureTree(t)
	fixed := wholePatch(t, "0001-d.patch", cuhPath, tree[cuhPath], fixtureBranch(t, fixedBranch...), TagDispatchBranch)
	tamper := wholePatch(t, "0001-d.patch", cuhPath, tree[cuhPath], fixtureBranch(t, tamperBranch...), TagDispatchBranch)
	for _, tc := range []struct {
		name string
		ps   []*Patch
		want string // "" = accepted
	}{
		{"dispatch fixed, gates opened", append([]*Patch{fixed}, gateOpen(t, tree, TagGateBypass)...), ""},
		{"dispatch fixed alone", []*Patch{fixed}, ""},
		{"one-space tamper with the gates", append([]*Patch{tamper}, gateOpen(t, tree, TagGateBypass)...),
			"at world size 4, SGLANG_FORCE_CUSTOM_AR_PCIE=1 (rank 0, without full NVLink; the Python gates admit it up to 8388608 bytes), eager float32 allreduce of 16-8388608 bytes launches no kernel"},
		{"untagged gate patches on upstream's dispatch", gateOpen(t, tree), "in " + cuhPath + " as patched"},
		{"the one-space tamper alone: the gates stay closed", []*Patch{tamper}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := ApplyChecked(tree, tc.ps)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Files) == 0 || len(res.Notes) != 0 {
					t.Errorf("files %d, notes %q", len(res.Files), res.Notes)
				}
				return
			}
			if !IsRuleError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a rule refusal with %q", err, tc.want)
			}
		})
	}
	// A tree without SGLang's Python side is not judged.
	other := mustPatch(t, "0001-o.patch", "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-a\n+b\n")
	if res, err := ApplyChecked(memTree{"README.md": "a\n"}, []*Patch{other}); err != nil || len(res.Notes) != 0 {
		t.Errorf("unrelated tree: %v, notes %q", err, res.Notes)
	}
	// Without a compiler, what was not checked is said in the notes.
	t.Setenv("ARPATCH_CLANG", "/nonexistent/clang++")
	res, err := ApplyChecked(tree, gateOpen(t, tree))
	if err != nil || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "so "+cuhPath+" was not compiled") {
		t.Errorf("without clang: %v, notes %q", err, res.Notes)
	}
}

// TestShippedSeriesOnRealUpstream applies every shipped series to the
// upstream commits it is tested on, read from a local SGLang mirror
// (ARPATCH_SGLANG_MIRROR, e.g. a clone of flytiger-eco/sglang-for-sail),
// and judges the real patched tree; upstream's own tree passes too (its
// gates stay closed on PCIe above 2 GPUs), and the core bug is refused:
// the series' gate bypass on upstream's dispatch. Without the mirror it
// skips: CI has none.
func TestShippedSeriesOnRealUpstream(t *testing.T) {
	cat, mirror := realUpstream(t)
	for _, s := range cat.Series {
		ps, err := s.Load(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.TestedOn {
			tree := treeAt(t, mirror, c)
			if res, err := ApplyChecked(tree, ps); err != nil || len(res.Notes) != 0 {
				t.Errorf("%s at %s: %v %q", s.Name, c[:12], err, res.Notes)
			} else {
				t.Logf("%s at %s: every call the gates admit launches one kernel or throws", s.Name, c[:12])
			}
			if err := CheckResult(tree, &Result{}, nil); err != nil {
				t.Errorf("upstream at %s: %v", c[:12], err)
			}
			gates := ps[len(ps)-1:]
			res, err := Apply(tree, gates)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckResult(tree, res, gates); !IsRuleError(err) || !strings.Contains(err.Error(), "SGLANG_FORCE_CUSTOM_AR_PCIE=1") {
				t.Errorf("%s's gate bypass alone at %s: %v", s.Name, c[:12], err)
			} else {
				t.Logf("the gate bypass alone at %s refused: %.400s", c[:12], textfmt.FirstLine(err.Error()))
			}
		}
	}
}

// realUpstream starts a real-upstream test: it skips without the SGLang
// mirror (ARPATCH_SGLANG_MIRROR) or the gate rule's compiler and Python,
// and returns the embedded catalog and the mirror.
func realUpstream(t *testing.T) (*Catalog, string) {
	t.Helper()
	mirror := os.Getenv("ARPATCH_SGLANG_MIRROR")
	if mirror == "" {
		t.Skip("ARPATCH_SGLANG_MIRROR is not set (a local SGLang clone with the pinned commits); skipping the real-upstream check")
	}
	needJudge(t)
	cat, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return cat, mirror
}

// gitTree is a commit of the mirror, as patches check reads one: it
// lists the files of a name (Lister) and tells directories (DirTree).
type gitTree struct{ *gitsrc.CommitTree }

func treeAt(t *testing.T, mirror, commit string) gitTree {
	t.Helper()
	r, err := gitsrc.OpenAny(mirror)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := r.TreeAt(commit)
	if err != nil {
		t.Fatal(err)
	}
	return gitTree{ct}
}

// TestWholeAllreduceOnRealUpstream is the kinds on the real tree:
// each shipped series, at the commits it is tested on (eras A, B and C),
// plus one more patch that puts an early exit before `switch
// (world_size_)`, must be refused, as must the patched file edited in the
// sibling ways: every launch made nothing under -DNDEBUG (`#ifdef NDEBUG`
// / `#define KL(ngpus, name)` / `#else`), a goto over the switch, a return
// in a macro, a condition on full_nvlink_ around the switch, an #ifdef
// that leaves it out of the host pass. It reads a local SGLang mirror
// (ARPATCH_SGLANG_MIRROR) and skips without one.
func TestWholeAllreduceOnRealUpstream(t *testing.T) {
	cat, mirror := realUpstream(t)
	const sw = "    switch (world_size_) {\n"
	const early = "    if (!full_nvlink_ && world_size_ > 2) return;\n"
	for _, s := range cat.Series {
		ps, err := s.Load(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.TestedOn {
			tree := treeAt(t, mirror, c)
			res, err := Apply(tree, ps)
			if err != nil {
				t.Fatalf("%s at %s: %v", s.Name, c[:12], err)
			}
			p, after := dispatchOf(res)
			lines := strings.SplitAfter(string(after), "\n")
			at := slices.Index(lines, sw)
			if at < 3 {
				t.Fatalf("%s at %s: no %q in the patched %s", s.Name, c[:12], sw, p)
			}
			hunk := fmt.Sprintf("--- a/%s\n+++ b/%s\n@@ -%d,6 +%d,7 @@\n", p, p, at-2, at-2)
			for _, l := range lines[at-3 : at] {
				hunk += " " + l
			}
			hunk += "+" + early
			for _, l := range lines[at : at+3] {
				hunk += " " + l
			}
			extra := mustPatch(t, "0003-early-exit.patch", hunk)
			_, err = ApplyChecked(tree, append(slices.Clone(ps), extra))
			if want := "at world size 4, SGLANG_FORCE_CUSTOM_AR_PCIE=1 (rank 0, without full NVLink"; !IsRuleError(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s at %s plus an early exit: err = %v\nwant a rule refusal holding %q", s.Name, c[:12], err, want)
			}
			judgeEdits(t, s.Name+" at "+c[:12], tree, res, ps, p, string(after))
		}
	}
}

// dispatchOf returns the patched dispatch header of res.
func dispatchOf(res *Result) (string, []byte) {
	for _, f := range res.Files {
		if gaterule.IsDispatchFile(f.Path) {
			return f.Path, f.After
		}
	}
	return "", nil
}

// judgeEdits judges the patched tree with its dispatch header edited in
// the sibling ways of an early exit.
func judgeEdits(t *testing.T, name string, tree gitTree, res *Result, ps []*Patch, p, patched string) {
	const sw = "    switch (world_size_) {\n"
	closeSw := "    }\n#undef REDUCE_CASE\n"
	if !strings.Contains(patched, closeSw) {
		t.Fatalf("%s: no %q after the switch", name, closeSw)
	}
	around := func(open, shut string) string {
		x := strings.Replace(patched, sw, open+sw, 1)
		return strings.Replace(x, closeSw, "    }\n"+shut+"#undef REDUCE_CASE\n", 1)
	}
	// The input: KL defined as nothing under -DNDEBUG, and the
	// series' other launch macros with it.
	kl := regexpLine(patched, "#define KL(ngpus, name) ")
	noLaunch := strings.Replace(patched, kl, "#ifdef NDEBUG\n#define KL(ngpus, name)\n#else\n"+kl+"#endif\n", 1)
	noLaunch = strings.Replace(noLaunch, sw, "#ifdef NDEBUG\n#undef KLP\n#define KLP(ngpus, name)\n#undef KLI\n#define KLI(ngpus)\n#endif\n"+sw, 1)
	after := map[string][]byte{}
	var changed []string
	for _, f := range res.Files {
		after[f.Path] = f.After
		changed = append(changed, f.Path)
	}
	for _, e := range []struct{ name, src, want string }{
		{"as shipped", patched, ""},
		{"every launch gone under NDEBUG", noLaunch, "launches no kernel"},
		{"goto over the switch", around("    if (!full_nvlink_) goto done;\n", "  done:;\n"), "CustomAllreduce::allreduce"},
		{"return in a macro", strings.Replace(patched, sw, "#define ARPATCH_SKIP() if (!full_nvlink_) return\n    ARPATCH_SKIP();\n"+sw, 1), "launches no kernel"},
		{"full_nvlink_ around the switch", around("    if (full_nvlink_) {\n", "    }\n"), "launches no kernel"},
		{"#ifdef around the switch", around("#ifdef __CUDA_ARCH__\n", "#endif\n"), "launches no kernel"},
		// Returns at sizes and calls the sampling judge never makes: the
		// path proof's.
		{"a return at a hashed size", strings.Replace(patched, sw, "    if (!full_nvlink_ && ((unsigned long long)bytes * 0x9E3779B97F4A7C15ull) >> 40 == 0x123456ull) return;\n"+sw, 1),
			"can return without a launch or a throw at some size"},
		{"a return every 100,000,000th call", strings.Replace(patched, sw, "    static unsigned long long calls = 0;\n    if (!full_nvlink_ && ++calls % 100000000ull == 0) return;\n"+sw, 1),
			"can return without a launch or a throw at some size"},
		{"a return when input is output", strings.Replace(patched, sw, "    if (!full_nvlink_ && static_cast<void*>(input) == static_cast<void*>(output)) return;\n"+sw, 1),
			"can return without a launch or a throw at some size"},
	} {
		in := gaterule.Input{Read: func(q string) ([]byte, error) {
			if q == p {
				return []byte(e.src), nil
			}
			if b, ok := after[q]; ok {
				return b, nil
			}
			return tree.ReadFile(q)
		}, IsDir: tree.IsDir, Paths: []string{p}, Changed: changed, Declared: true}
		_, err := gaterule.Judge(context.Background(), in)
		switch {
		case e.want == "" && err != nil:
			t.Errorf("%s, %s: %v", name, e.name, err)
		case e.want != "" && (err == nil || !strings.Contains(err.Error(), e.want)):
			t.Errorf("%s, %s: err = %v, want %q", name, e.name, err, e.want)
		}
	}
}

// regexpLine returns the whole line of s that starts with prefix (after
// indentation), with its newline.
func regexpLine(s, prefix string) string {
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " "), prefix) {
			return l
		}
	}
	return "\x00no such line"
}

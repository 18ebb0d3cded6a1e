package gaterule

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// dispatchFixture is a small header written for these tests in the shape
// of upstream's CustomAllreduce::allreduce (a REDUCE_CASE macro with
// continuation lines, a KL launch macro, a forced-algorithm branch, a
// world size 2 branch, the full NVLink branch, a throwing default, and
// the USE_MUSA split of era B). BRANCH is replaced by each case's code for
// the branch after `world_size_ == 2`.
const dispatchFixture = `// test fixture shaped like sgl-kernel's allreduce header
#pragma once
#include <stdexcept>
constexpr int kGPUSmall = 4;
constexpr int kGPULarge = 8;
constexpr long kSmall = 512 * 1024;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
#define FENCE() device_fence()
#else
#define FENCE() host_fence()
#endif
template <typename T, int ngpus> __global__ void one_stage(T* p) {}
template <typename T, int ngpus> __global__ void two_stage(T* p) {}
class CustomAllreduce {
  int world_size_;
  bool full_nvlink_;
 public:
  template <typename T>
  void allreduce(T* out, long bytes, bool force_1stage, bool force_2stage) {
    if (bytes % 16 != 0) throw std::runtime_error("size");
#define KL(ngpus, name) name<T, ngpus><<<blocks, threads, 0, stream>>>(out);
#ifndef USE_MUSA
#define REDUCE_CASE(ngpus)                    \
  case ngpus: {                               \
    if (force_1stage) {                       \
      KL(ngpus, one_stage);                   \
    } else if (force_2stage) {                \
      KL(ngpus, two_stage);                   \
    } else {                                  \
      if (world_size_ == 2) {                 \
        KL(ngpus, one_stage);                 \
BRANCH
      }                                       \
    }                                         \
    break;                                    \
  }
#else
#define REDUCE_CASE(ngpus) \
  case ngpus: {            \
    KL(ngpus, two_stage);  \
    break;                 \
  }
#endif
    switch (world_size_) {
      REDUCE_CASE(2)
      REDUCE_CASE(4)
      REDUCE_CASE(6)
      REDUCE_CASE(8)
      default:
        throw std::runtime_error("world size");
    }
#undef REDUCE_CASE
#undef KL
  }
};
`

// branches: the code after `world_size_ == 2`, one line per macro line.
var (
	upstream = []string{
		"} else if (full_nvlink_) {",
		"  if ((world_size_ <= kGPUSmall && bytes < kSmall) || (world_size_ <= kGPULarge && bytes < kSmall / 2)) {",
		"    KL(ngpus, one_stage);",
		"  } else {",
		"    KL(ngpus, two_stage);",
		"  }",
	}
	patchedElse = []string{
		"} else { /* full NVLink, or PCIe-only above 2 GPUs */",
		"  if ((world_size_ <= kGPUSmall && bytes < kSmall) || (world_size_ <= kGPULarge && bytes < kSmall / 2)) {",
		"    KL(ngpus, one_stage);",
		"  } else {",
		"    KL(ngpus, two_stage);",
		"  }",
	}
)

func fixture(branch []string) []byte {
	var b strings.Builder
	for _, l := range branch {
		b.WriteString("      " + l + " \\\n")
	}
	return []byte(strings.Replace(dispatchFixture, "BRANCH\n", b.String(), 1))
}

func with(lines []string, from, to string) []string {
	out := append([]string(nil), lines...)
	for i, l := range out {
		out[i] = strings.Replace(l, from, to, 1)
	}
	return out
}

func TestJudgeDispatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		branch []string
		miss   string // "" = every world size launches or throws
	}{
		{"upstream: PCIe above 2 GPUs launches nothing", upstream, "at world size 4 without full NVLink reaches `break`"},
		{"patched: else takes the size rule", patchedElse, ""},
		// Issue 11, input 5: one space inside the test, sealed as the
		// dispatch branch: the label says fixed, the effect is upstream's.
		{"one-space tamper", with(upstream, "(full_nvlink_)", "(full_nvlink_ )"), "reaches `break`"},
		{"explicit PCIe branch", append(append([]string(nil), upstream...),
			"} else if (!full_nvlink_ && world_size_ > 2) {",
			"  if (bytes < pcie_threshold_) { KL(ngpus, one_stage); } else { KL(ngpus, two_stage); }"), ""},
		{"explicit PCIe branch for world size 4 only", append(append([]string(nil), upstream...),
			"} else if (!full_nvlink_ && world_size_ == 4) {",
			"  KL(ngpus, two_stage);"), "at world size 6 without full NVLink"},
		{"thresholds read from variables, both sides launch", with(patchedElse, "bytes < kSmall) ||", "bytes < small_thr_) ||"), ""},
		{"a threshold with no launch below it", []string{
			"} else {",
			"  if (bytes >= pcie_threshold_) {",
			"    KL(ngpus, two_stage);",
			"  }"}, "reaches `break`"},
		{"env-forced algorithm in the PCIe branch, bad values throw", []string{
			"} else if (!full_nvlink_) {",
			"  const char* a = std::getenv(\"SGLANG_PCIE_AR_ALGO\");",
			"  if (a == nullptr) { KL(ngpus, one_stage); }",
			"  else if (std::strcmp(a, \"2stage\") == 0) { KL(ngpus, two_stage); }",
			"  else { throw std::runtime_error(\"bad SGLANG_PCIE_AR_ALGO\"); }",
			"} else {",
			"  KL(ngpus, one_stage);"}, ""},
		{"TORCH_CHECK(false) counts as a throw", []string{
			"} else if (!full_nvlink_) {",
			"  TORCH_CHECK(false, \"PCIe custom allreduce is not built\");",
			"} else {",
			"  KL(ngpus, one_stage);"}, ""},
		{"a return before the launch", []string{
			"} else if (!full_nvlink_) {",
			"  return;",
			"  KL(ngpus, one_stage);"}, "reaches `return`"},
		{"a comment that looks like a fix", with(upstream, "} else if (full_nvlink_) {", "} else if (full_nvlink_) { /* } else { */"), "reaches `break`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := judgeDispatch(fixture(tc.branch))
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Cases) != 3 {
				t.Fatalf("cases = %d, want world sizes 4, 6, 8", len(d.Cases))
			}
			var miss []string
			for _, c := range d.Cases {
				if !c.OK {
					miss = append(miss, fmt.Sprintf("at world size %d without full NVLink %s", c.WorldSize, c.Miss))
				}
			}
			if tc.miss == "" && len(miss) > 0 {
				t.Errorf("refused: %v", miss)
			}
			if tc.miss != "" && (len(miss) == 0 || !strings.Contains(strings.Join(miss, "; "), tc.miss)) {
				t.Errorf("misses = %v, want one containing %q", miss, tc.miss)
			}
		})
	}
}

// The line of the path's end is the physical line, inside the macro.
func TestMissNamesTheLine(t *testing.T) {
	src := fixture(upstream)
	d, err := judgeDispatch(src)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, "break;") && want == 0 {
			want = i + 1
		}
	}
	if d.Cases[0].Miss != fmt.Sprintf("reaches `break` at line %d without launching a kernel or throwing", want) {
		t.Errorf("miss = %q, want the break at line %d", d.Cases[0].Miss, want)
	}
}

func TestJudgeRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no allreduce", "void f() { switch (world_size_) { default: throw 1; } }\n", "no definition of CustomAllreduce::allreduce"},
		{"only a declaration", "class CustomAllreduce { void allreduce(int* p); };\n", "no definition of CustomAllreduce::allreduce"},
		{"unclosed #if", "#if 1\nint x;\n", "not closed"},
	} {
		_, err := judgeDispatch([]byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct{ name, src, miss string }{
		// No case for the world size and no default: the switch does nothing.
		{"no case", "class CustomAllreduce { void allreduce() { switch (world_size_) { case 2: k<<<1,1>>>(); break; } } };\n", "no case for world size 4 and no default"},
		// No switch at all: a launch only with full NVLink.
		{"no switch", "class CustomAllreduce {\n void allreduce() { if (full_nvlink_) launch<<<1,1>>>(); }\n};\n", "reaches the end of allreduce (line 2)"},
		// Two switches are both followed: the second misses world size 8.
		{"two switches", "class CustomAllreduce { void allreduce() {\n switch (world_size_) { case 4: k<<<1,1>>>(); return; default: break; }\n switch (world_size_) { case 6: k<<<1,1>>>(); return; default: break; }\n} };\n", "at world size 8: reaches `break` at line 3"},
		// Defined out of line.
		{"out of line", "class CustomAllreduce { void allreduce(); };\nvoid CustomAllreduce::allreduce() {\n  if (!full_nvlink_) return;\n  k<<<1,1>>>();\n}\n", "at world size 4: reaches `return` at line 3"},
	} {
		d, err := judgeDispatch([]byte(tc.src))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := misses(d); !strings.Contains(got, tc.miss) {
			t.Errorf("%s: misses %q, want %q", tc.name, got, tc.miss)
		}
	}
}

// misses joins what a judged file misses, "at world size N: ...".
func misses(d *judged) string {
	var out []string
	for _, c := range d.Cases {
		if !c.OK {
			out = append(out, fmt.Sprintf("at world size %d: %s", c.WorldSize, c.Miss))
		}
	}
	return strings.Join(out, "; ")
}

// lineOf returns the 1-based line of the first line of src containing s.
func lineOf(src []byte, s string) int {
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	return 0
}

// Finding F1: the rule judges every path through the whole of allreduce,
// from its entry, not only the paths inside the dispatch switch. Each
// case edits the patched fixture (which passes) the way a series could.
func TestJudgeWholeAllreduce(t *testing.T) {
	const sw = "    switch (world_size_) {\n"
	const after = "    }\n#undef REDUCE_CASE\n"
	before := func(src []byte, add string) []byte {
		return []byte(strings.Replace(string(src), sw, add+sw, 1))
	}
	around := func(src []byte, open, shut string) []byte {
		s := strings.Replace(string(src), sw, open+sw, 1)
		return []byte(strings.Replace(s, after, "    }\n"+shut+"#undef REDUCE_CASE\n", 1))
	}
	top := func(src []byte, add string) []byte {
		return []byte(strings.Replace(string(src), "class CustomAllreduce {\n", add+"class CustomAllreduce {\n", 1))
	}
	good := fixture(patchedElse)
	if d, err := judgeDispatch(good); err != nil || misses(d) != "" {
		t.Fatalf("the patched fixture: %v %v", err, d)
	}
	pcie := func(lines ...string) []byte {
		return fixture(append(append([]string(nil), upstream...), append([]string{"} else if (!full_nvlink_) {"}, lines...)...))
	}
	for _, tc := range []struct {
		name string
		src  []byte
		miss string // "" = accepted; else a refusal holding this, with %d the line of `at`
		at   string
	}{
		{"the F1 input: an early exit before the switch", before(good, "    if (!full_nvlink_ && world_size_ > 2) return;\n"),
			"at world size 4: reaches `return` at line %d without launching a kernel or throwing", "if (!full_nvlink_ && world_size_ > 2) return;"},
		{"an early exit in a block, after other work", before(good, "    if (!full_nvlink_) {\n      std::fprintf(stderr, \"pcie\\n\");\n      return;\n    }\n"),
			"reaches `return` at line %d", "      return;"},
		{"an early exit for world size 8 only", before(good, "    if (world_size_ == 8 && !this->full_nvlink_) return;\n"),
			"at world size 8: reaches `return` at line %d", "if (world_size_ == 8"},
		{"a goto over the switch", around(good, "    if (!full_nvlink_) goto done;\n", "  done:\n    ;\n"),
			"meets `goto done` at line %d; arpatch does not follow jumps", "goto done"},
		{"a return hidden in a macro defined elsewhere in the file", before(top(good, "#define SKIP_PCIE() if (!full_nvlink_ && world_size_ > 2) return\n"), "    SKIP_PCIE();\n"),
			"reaches `return` at line %d", "#define SKIP_PCIE"}, // the line where the macro writes it
		{"a macro the file does not define (yet)", before(good, "    SKIP_PCIE();\n"),
			"meets `SKIP_PCIE` at line %d, a macro this file does not define", "SKIP_PCIE();"},
		{"a condition on full_nvlink_ around the whole switch", around(good, "    if (full_nvlink_) {\n", "    }\n"),
			"reaches the end of allreduce", ""},
		{"an #ifdef that leaves the switch out of the host pass", around(good, "#ifdef __CUDA_ARCH__\n", "#endif\n"),
			"reaches the end of allreduce", ""},
		{"an #if USE_ROCM that leaves the switch to ROCm builds", around(good, "#if defined(USE_ROCM)\n", "#endif\n"),
			"reaches the end of allreduce", ""},
		{"full_nvlink_ set true before a PCIe-only branch", before(pcie("  KL(ngpus, two_stage);"), "    full_nvlink_ = true;\n"),
			"reaches `break`", ""},
		{"a local full_nvlink_ that says NVLink", before(pcie("  KL(ngpus, two_stage);"), "    bool full_nvlink_{true};\n"),
			"reaches `break`", ""},
		{"a launch in a helper function", top(pcie("  pcie_dispatch(out);"), "template <typename T> void pcie_dispatch(T* out) { two_stage<T, 4><<<1, 1>>>(out); }\n"),
			"it calls `pcie_dispatch` at line %d, and arpatch does not follow calls", "pcie_dispatch(out);"},
		{"a launch in a loop", pcie("  for (int i = 0; i < n_; i++) { KL(ngpus, two_stage); }"),
			"meets a `for` loop at line %d that holds a kernel launch", "for (int i = 0"},
		{"a loop before the switch that cannot leave", before(good, "    long sum = 0;\n    for (int i = 0; i < 4; i++) sum += i;\n"), "", ""},
		{"a return in a loop before the switch", before(good, "    while (pending_) { if (!full_nvlink_) return; }\n"),
			"meets a `while` loop at line %d", "while (pending_)"},
		{"a launch in a lambda", pcie("  auto go = [&] { KL(ngpus, two_stage); };"),
			"a kernel launch inside braces (a lambda, which may never be called) at line %d", "auto go"},
		{"a launch under &&", pcie("  bytes > 0 && (two_stage<T, ngpus><<<1, 1>>>(out), true);"),
			"a kernel launch under `&&`, `||` or `?:`", ""},
		{"try/catch before the switch", before(good, "    try { check(); } catch (...) { return; }\n"),
			"meets `try` at line %d", "try {"},
		{"a return after the launch", pcie("  KL(ngpus, two_stage);", "  return;"), "", ""},
		{"a throw before the switch for PCIe", before(fixture(upstream), "    if (!full_nvlink_ && world_size_ > 2) throw std::runtime_error(\"PCIe\");\n"), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := judgeDispatch(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got := misses(d)
			if tc.miss == "" {
				if got != "" {
					t.Errorf("refused: %s", got)
				}
				return
			}
			want := tc.miss
			if strings.Contains(want, "%d") {
				want = fmt.Sprintf(want, lineOf(tc.src, tc.at))
			}
			if !strings.Contains(got, want) {
				t.Errorf("misses = %q\nwant one holding %q", got, want)
			}
		})
	}
}

func TestCheckFindsTheDispatchWhereTheTreeKeepsIt(t *testing.T) {
	tree := func(files map[string][]byte) Reader {
		return func(p string) ([]byte, error) {
			if b, ok := files[p]; ok {
				return b, nil
			}
			return nil, fs.ErrNotExist
		}
	}
	eraC := "python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh"
	if err := Check(tree(map[string][]byte{eraC: fixture(patchedElse)}), nil); err != nil {
		t.Errorf("era C layout, patched: %v", err)
	}
	err := Check(tree(map[string][]byte{eraC: fixture(upstream)}), nil)
	var de *DispatchError
	if !errors.As(err, &de) || de.Path != eraC || !strings.Contains(err.Error(), "at world size 4 without full NVLink reaches `break`") {
		t.Errorf("era C layout, upstream: %v", err)
	}
	// A series that keeps it elsewhere names it by changing it.
	other := "csrc/custom/custom_all_reduce.cuh"
	if err := Check(tree(map[string][]byte{other: fixture(upstream)}), []string{other, "README.md"}); err == nil {
		t.Error("a changed dispatch file elsewhere was not judged")
	}
	// Listed files named like it that are another kernel's (the JIT
	// custom allreduce v2 keeps one) are not the dispatch.
	jit := "python/sglang/kernels/jit/csrc/distributed/custom_all_reduce.cuh"
	moved := "csrc/elsewhere/allreduce/custom_all_reduce.cuh"
	files := map[string][]byte{jit: []byte("struct AllReducePushImpl {};\n"), moved: fixture(patchedElse)}
	if err := Check(tree(files), []string{jit, moved, "README.md"}); err != nil {
		t.Errorf("dispatch found by listing, JIT header beside it: %v", err)
	}
	files[moved] = fixture(upstream)
	if err := Check(tree(files), []string{jit, moved}); !errors.As(err, &de) || de.Path != moved {
		t.Errorf("upstream dispatch found by listing: %v", err)
	}
	if err := Check(tree(map[string][]byte{jit: files[jit]}), []string{jit}); !errors.As(err, &de) || de.Path != "" {
		t.Errorf("only the JIT header: %v", err)
	}
	err = Check(tree(nil), []string{"README.md"})
	if !errors.As(err, &de) || de.Path != "" || !strings.Contains(err.Error(), "sgl-kernel/csrc/allreduce/custom_all_reduce.cuh") {
		t.Errorf("no dispatch anywhere: %v", err)
	}
}

// FuzzJudgeDispatch: the analyzer reads any bytes without panicking.
func FuzzJudgeDispatch(f *testing.F) {
	f.Add(fixture(upstream))
	f.Add(fixture(patchedElse))
	f.Add([]byte("class CustomAllreduce { void allreduce() { switch (world_size_) { case 4: { if (x) goto a; } } } };"))
	f.Fuzz(func(t *testing.T, src []byte) {
		_, _ = judgeDispatch(src) // any verdict will do: the fuzz looks for panics
	})
}

// TestWorldSizes pins the world sizes above 2 that the dispatch check
// walks, derived from bounds.WorldSizes.
func TestWorldSizes(t *testing.T) {
	if !slices.Equal(WorldSizes, []int{4, 6, 8}) {
		t.Errorf("WorldSizes = %v, want [4 6 8]", WorldSizes)
	}
}

package gaterule

import (
	"errors"
	"fmt"
	"io/fs"
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
		{"no switch", "void f() { if (full_nvlink_) launch<<<1,1>>>(); }\n", "no `switch (world_size_)`"},
		{"two switches", "void f() { switch (world_size_) { default: throw 1; } }\nvoid g() { switch (world_size_) { default: throw 1; } }\n", "two `switch (world_size_)`"},
		{"unclosed #if", "#if 1\nint x;\n", "not closed"},
	} {
		_, err := judgeDispatch([]byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	// No case for the world size and no default: the switch does nothing.
	d, err := judgeDispatch([]byte("void f() { switch (world_size_) { case 2: k<<<1,1>>>(); break; } }\n"))
	if err != nil || d.Cases[0].OK || !strings.Contains(d.Cases[0].Miss, "no case for world size 4 and no default") {
		t.Errorf("no case: %+v %v", d, err)
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

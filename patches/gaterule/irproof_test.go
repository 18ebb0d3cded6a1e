package gaterule

import (
	"slices"
	"strings"
	"testing"
)

// hashed is a condition on the size that no size the sampling judge calls
// at meets (one size in 2^24 does), so that only the path proof sees the
// branch it guards.
const hashed = "((unsigned long long)bytes * 0x9E3779B97F4A7C15ull) >> 40 == 0x123456ull"

const proofWants = "can return without a launch or a throw at some size, whatever the sizes the judge called at: the path through " + cuhPath + ":"

// The sampling judge's limit, each kind closed by the path proof: a
// return the judge's calls never take, refused wherever the gates admit
// a call, naming the tree's lines of the path; the same code with a
// throw, or a launch, in place of the return is accepted.
func TestJudgeProvesEveryPath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		top, sw string
		want    string
	}{
		{"a return at a hashed size", "", "    if (!full_nvlink_ && " + hashed + ") return;\n", proofWants},
		{"a throw at a hashed size", "", "    if (!full_nvlink_ && " + hashed + ") throw std::runtime_error(\"odd size\");\n", ""},
		{"a return at a size modulo a prime", "", "    if (!full_nvlink_ && bytes % 999983 == 999000) return;\n", proofWants},
		{"a return every 100,000,000th call", "", "    static unsigned long long n = 0;\n    if (!full_nvlink_ && ++n % 100000000ull == 0) return;\n", proofWants},
		{"a return when input is output", "", "    if (!full_nvlink_ && static_cast<void*>(input) == static_cast<void*>(output)) return;\n", proofWants},
		{"a return on bits of the output's address", "", "    if (!full_nvlink_ && (reinterpret_cast<unsigned long>(output) & 0xfff000ul) == 0x123000ul) return;\n", proofWants},
		{"a return on a variable's value the judge does not try", "", "    const char* skip = std::getenv(\"MY_SKIP\");\n    if (!full_nvlink_ && skip != nullptr && std::strcmp(skip, \"yes\") == 0) return;\n", proofWants},
		{"a return after a date", "#include <ctime>\n", "    if (!full_nvlink_ && std::time(nullptr) > 1900000000) return;\n", proofWants},
		{"a throw caught at a hashed size, then a return", "", "    try { if (!full_nvlink_ && " + hashed + ") throw 1; } catch (int) { return; }\n", proofWants},
		{"a helper that returns early at a hashed size", "inline bool skip(long bytes) { return " + hashed + "; }\n",
			"    if (!full_nvlink_ && skip(bytes)) return;\n", proofWants},
		{"a world size changed at a hashed size", "", "    if (!full_nvlink_ && " + hashed + ") world_size_ = 3;\n",
			"changes CustomAllreduce's world_size_ or full_nvlink_, or hands its address on, after the constructor set it"},
		{"full_nvlink_ handed out by reference", "__attribute__((noinline)) inline void touch(bool& b, long bytes) { b = " + hashed + "; }\n", "    touch(full_nvlink_, bytes);\n",
			"changes CustomAllreduce's world_size_ or full_nvlink_"},
		// The adversary's a1 and a2b: the address kept by the constructor,
		// and a write through a cast of this at a run-time offset.
		{"the member's address kept by the constructor", "", "",
			"hands the address of world_size_ or full_nvlink_ on in the constructor"},
		{"a write through a cast of this", "", "    static volatile size_t off = sizeof(int);\n    if (!full_nvlink_ && " + hashed + ") *reinterpret_cast<int*>(reinterpret_cast<char*>(this) + off) = 3;\n",
			"writes CustomAllreduce through a cast of its own address"},
		{"full_nvlink_ written by an inlined helper", "inline void touch(bool& b, long bytes) { if (" + hashed + ") b = true; }\n", "    touch(full_nvlink_, bytes);\n",
			"changes CustomAllreduce's world_size_ or full_nvlink_"},
		{"the world size tested again, launching", "", "    if (!full_nvlink_ && world_size_ > 8) return;\n", ""},
		// The kernel's sum overwritten: a copy or a memset in the dispatch.
		{"the input copied over the output after the launch", "", "    struct Copy { T* o; T* i; size_t n; cudaStream_t s; ~Copy() { if (o) CHECK_CUDA_SUCCESS(cudaMemcpyAsync(o, i, n, cudaMemcpyDeviceToDevice, s)); } } copy{full_nvlink_ ? nullptr : output, input, size_t(size) * 16, stream};\n",
			"calls cudaMemcpyAsync: it writes device memory besides the kernel"},
		{"a copy through a function pointer", "", "    static auto volatile cp = &cudaMemcpyAsync;\n    if (!full_nvlink_ && " + hashed + ") cp(output, input, 16, cudaMemcpyDeviceToDevice, stream);\n",
			"calls cudaMemcpyAsync: it writes device memory besides the kernel"},
		{"the output zeroed at a hashed size", "", "    if (!full_nvlink_ && " + hashed + ") CHECK_CUDA_SUCCESS(cudaMemsetAsync(output, 0, 16, stream));\n",
			"calls cudaMemsetAsync: it writes device memory besides the kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "the member's address kept") {
				src := strings.Replace(string(fixture(patchedElse)), "  RankData* d_rank_data_base_;\n", "  RankData* d_rank_data_base_;\n  int* alias_ = &world_size_;\n", 1)
				_, err := judge(t, pyTree([]byte(src), open...).input(gatePy))
				refused(t, err, tc.want)
				return
			}
			refused(t, judgeBranch(t, patchedElse, tc.top, tc.sw), tc.want)
		})
	}
}

// wsBranch launches only above world size 2.
const wsBranch = `  %3 = getelementptr inbounds %class.C, %class.C* %0, i64 0, i32 1
  %4 = load i32, i32* %3, align 4
  %5 = icmp sgt i32 %4, 2
  br i1 %5, label %6, label %7
6:
  call void @launch()
  br label %7
7:
  ret void
`

// TestProveIR holds the proof to hand-written IR of the shapes clang
// prints: the entry block unlabelled or labelled, folded members, a
// phi over a loop, a switch, an invoke of a launching helper whose
// unwind edge returns.
func TestProveIR(t *testing.T) {
	const probes = `
define i32 @arpatch_field_world_size(%class.C* %0) {
  %2 = getelementptr inbounds %class.C, %class.C* %0, i64 0, i32 1
  %3 = load i32, i32* %2, align 4
  ret i32 %3
}
define i32 @arpatch_field_full_nvlink(%class.C* %0) {
  %2 = getelementptr inbounds %class.C, %class.C* %0, i64 0, i32 2
  %3 = load i8, i8* %2, align 4
  %4 = zext i8 %3 to i32
  ret i32 %4
}
define void @launch() {
  %1 = call i32 @cudaLaunch(i8* null)
  ret void
}
`
	entry := func(body string) string {
		var b strings.Builder
		for _, e := range proofEntries {
			b.WriteString("define void @" + e.Func + "(%class.C* %0, i32 %1) {\n" + body + "}\n")
		}
		return probes + b.String()
	}
	for _, tc := range []struct {
		name      string
		ir        string
		ws, nvl   int
		want      bool // returns without a launch
		wantBlock string
	}{
		{"a launch on the only path", entry("  call void @launch()\n  ret void\n"), 4, 0, false, ""},
		{"no launch", entry("  ret void\n"), 4, 0, true, "%2"},
		{"a branch on the world size, folded", entry(wsBranch), 4, 0, false, ""},
		{"the same at world size 2", entry(wsBranch), 2, 0, true, "%7"},
		{"a branch on the size, both ways", entry(`  %3 = icmp ult i32 %1, 77
  br i1 %3, label %4, label %5
4:
  ret void
5:
  call void @launch()
  ret void
`), 4, 0, true, "%4"},
		{"a switch on full_nvlink_, folded", entry(`  %3 = getelementptr inbounds %class.C, %class.C* %0, i64 0, i32 2
  %4 = load i8, i8* %3, align 4
  switch i8 %4, label %5 [
    i8 1, label %6
  ], !dbg !9
5:
  call void @launch()
  ret void
6:
  ret void
`), 4, 0, false, ""},
		{"a loop whose phi is not a constant", entry(`  br label %3
3:
  %4 = phi i32 [ 0, %2 ], [ %5, %3 ]
  %5 = add i32 %4, 1
  %6 = icmp eq i32 %5, 1000
  br i1 %6, label %7, label %3
7:
  %8 = icmp eq i32 %4, 5
  br i1 %8, label %9, label %10
9:
  ret void
10:
  call void @launch()
  ret void
`), 4, 0, true, "%9"},
		{"an invoke of a launching helper, its unwind edge returning", entry(`  invoke void @launch()
          to label %3 unwind label %4
3:
  ret void
4:
  %5 = landingpad { i8*, i32 }
          catch i8* null
  ret void
`), 4, 0, true, "%4"},
		{"a call that does not return", entry("  call void @abort()\n  unreachable\n"), 4, 0, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := parseIR(tc.ir)
			got, err := m.prove(tc.ws, tc.nvl, treeRel)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range proofEntries {
				p := got[e.DType]
				if p.Returns != tc.want {
					t.Fatalf("%s: returns without a launch = %v, want %v (path %v)", e.DType, p.Returns, tc.want, p.Path)
				}
				if tc.want && (len(p.Path) == 0 || p.Path[len(p.Path)-1] != tc.wantBlock) {
					t.Errorf("%s: path %v, want one ending in %s", e.DType, p.Path, tc.wantBlock)
				}
			}
		})
	}
}

// The members as the compiled code addresses them, and the writes the
// proof refuses.
func TestProofFields(t *testing.T) {
	m := parseIR(`
define i32 @arpatch_field_world_size(%"class.sglang::CustomAllreduce"* %0) {
  %2 = getelementptr inbounds %"class.sglang::CustomAllreduce", %"class.sglang::CustomAllreduce"* %0, i64 0, i32 1, !dbg !5
  %3 = load i32, i32* %2, align 4, !dbg !5, !tbaa !7
  ret i32 %3
}
define void @f(%"class.sglang::CustomAllreduce"* %0) {
  %2 = getelementptr inbounds %"class.sglang::CustomAllreduce", %"class.sglang::CustomAllreduce"* %0, i64 0, i32 1
  store i32 2, i32* %2, align 4, !dbg !6
  ret void
}
define void @_ZN6sglang15CustomAllreduce1gEv(%"class.sglang::CustomAllreduce"* %0) {
  call void @f(%"class.sglang::CustomAllreduce"* %0)
  ret void
}
define void @main(%"class.sglang::CustomAllreduce"* %0) {
  %2 = getelementptr inbounds %"class.sglang::CustomAllreduce", %"class.sglang::CustomAllreduce"* %0, i64 0, i32 1
  store i32 2, i32* %2, align 4
  ret void
}
define void @_ZN6sglang15CustomAllreduceC2Ev(%"class.sglang::CustomAllreduce"* %0) {
  %2 = getelementptr inbounds %"class.sglang::CustomAllreduce", %"class.sglang::CustomAllreduce"* %0, i64 0, i32 1
  store i32 2, i32* %2, align 4
  ret void
}
!4 = !DIFile(filename: "/x/.build-1/tree/sgl-kernel/a.cuh", directory: "/")
!3 = distinct !DISubprogram(name: "f", scope: !4, file: !4, line: 1)
!5 = !DILocation(line: 3, column: 1, scope: !3)
!6 = !DILocation(line: 9, column: 2, scope: !3)
`)
	if k := m.probeKey(probeWorld); k != `%"class.sglang::CustomAllreduce"|i32 1` {
		t.Errorf("probeKey = %q", k)
	}
	if k := m.probeKey(probeNVLink); k != "" {
		t.Errorf("probeKey of a missing probe = %q, want none", k)
	}
	fn, at, _ := m.fieldWrite(treeRel)
	if fn != "f" || at != "sgl-kernel/a.cuh:9" {
		t.Errorf("fieldWrite = %q at %q, want f (called by a member) at sgl-kernel/a.cuh:9 (the constructor's store, and main's, allowed)", fn, at)
	}
	if got := demangled("_ZN6sglang15CustomAllreduce9allreduceIfEEvP11CUstream_stPT_S5_iii"); got != "void sglang::CustomAllreduce::allreduce<float>" && got != "sglang::CustomAllreduce::allreduce<float>" {
		t.Errorf("demangled = %q", got)
	}
	if !slices.Contains(launchFuncs, "cudaLaunch") {
		t.Error("cudaLaunch is not a launch")
	}
}

// The binding calls allreduce with out.numel(), an int64_t; the driver
// does too, so an overload for sizes that are not int (the third round's
// o1), which the real binding picks, is the one judged.
func TestJudgeCallsAsTheBindingDoes(t *testing.T) {
	const at = "  template <typename T>\n  void allreduce(cudaStream_t stream, T* input, T* output, int size,"
	overload := "  template <typename T, typename S, typename = std::enable_if_t<!std::is_same_v<S, int>>>\n" +
		"  void allreduce(cudaStream_t stream, T* input, T* output, S size) {\n" +
		"    if (!full_nvlink_ && world_size_ > 2) return;\n    allreduce<T>(stream, input, output, int(size));\n  }\n"
	src := string(fixture(patchedElse))
	if !strings.Contains(src, at) {
		t.Fatal("the fixture's allreduce moved")
	}
	src = strings.Replace(src, at, overload+at, 1)
	_, err := judge(t, pyTree([]byte(src), open...).input(gatePy))
	refused(t, err, "at world size 4, no variable set (rank 0, without full NVLink|launches no kernel")
}

package gaterule

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// open is both Python gates opened unconditionally: the dispatch must
// then launch at every world size, without full NVLink.
var open = [][2]string{openGate1, openGate2}

// judgeBranch judges the fixture with branch after `world_size_ == 2`,
// top before the class and sw before the switch, both gates open.
func judgeBranch(t *testing.T, branch []string, top, sw string) error {
	t.Helper()
	_, err := judge(t, pyTree(header(branch, top, sw), open...).input(gatePy, utilsPy))
	return err
}

// pcie is upstream's branches plus a PCIe-only one holding lines.
func pcie(lines ...string) []string {
	return append(append(slices.Clone(upstream), "} else if (!full_nvlink_) {"), lines...)
}

// The old static reader's cases, now judged by compiling: each either
// launches a kernel (or throws) on every call or is refused by what it
// does, naming the world size, the call and the sizes.
func TestJudgeDispatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		branch []string
		top    string
		want   string // "" = accepted; else parts of the refusal, "|" between them
	}{
		{"upstream: PCIe above 2 GPUs launches nothing", upstream, "",
			"in " + cuhPath + " as patched|at world size 4, no variable set (rank 0, without full NVLink; the Python gates admit it up to 8388608 bytes), eager float32 allreduce of 16-8388608 bytes launches no kernel"},
		{"patched: else takes the size rule", patchedElse, "", ""},
		// Issue 11, input 5: one space inside the test.
		{"one-space tamper", with(upstream, "(full_nvlink_)", "(full_nvlink_ )"), "", "launches no kernel"},
		{"explicit PCIe branch", pcie("  if (bytes < 4096) { KL(ngpus, cross_device_reduce_1stage); } else { KL(ngpus, cross_device_reduce_2stage); }"), "", ""},
		{"explicit PCIe branch for world size 4 only", append(slices.Clone(upstream), "} else if (!full_nvlink_ && world_size_ == 4) {", "  KL(ngpus, cross_device_reduce_2stage);"), "",
			"at world size 6, no variable set|launches no kernel"},
		{"thresholds from constants, both sides launch", with(patchedElse, "bytes < kSmall) ||", "bytes < pcie::small) ||"),
			"namespace pcie { constexpr long small = 1 << 16; }\n", ""},
		{"a threshold with no launch below it", []string{"} else {", "  if (bytes >= 4096) {", "    KL(ngpus, cross_device_reduce_2stage);", "  }"}, "",
			"eager float32 allreduce of 16-4080 bytes launches no kernel"},
		{"a variable forces the algorithm, bad values throw", []string{
			"} else if (!full_nvlink_) {",
			"  const char* a = std::getenv(\"SGLANG_PCIE_AR_ALGO\");",
			"  if (a == nullptr) { KL(ngpus, cross_device_reduce_1stage); }",
			"  else if (std::strcmp(a, \"2stage\") == 0) { KL(ngpus, cross_device_reduce_2stage); }",
			"  else { throw std::runtime_error(\"bad SGLANG_PCIE_AR_ALGO\"); }",
			"} else {",
			"  KL(ngpus, cross_device_reduce_1stage);"}, "", ""},
		{"a variable that turns the PCIe branch off", pcie("  if (std::getenv(\"ARPATCH_OFF\") == nullptr) { KL(ngpus, cross_device_reduce_2stage); }"), "",
			"ARPATCH_OFF=1|launches no kernel"},
		{"TORCH_CHECK(false) counts as a throw", []string{"} else if (!full_nvlink_) {", "  TORCH_CHECK(false, \"PCIe custom allreduce is not built\");", "} else {", "  KL(ngpus, cross_device_reduce_1stage);"}, "", ""},
		{"a return before the launch", pcie("  return;", "  KL(ngpus, cross_device_reduce_1stage);"), "", "launches no kernel"},
		{"a comment that looks like a fix", with(upstream, "} else if (full_nvlink_) {", "} else if (full_nvlink_) { /* } else { */"), "", "launches no kernel"},
		{"a return after the launch", pcie("  KL(ngpus, cross_device_reduce_2stage);", "  return;"), "", ""},
		{"an explicit cudaLaunchKernel", pcie("  void* args[] = {&ptrs, &sg_, &self_sg_, &output, &rank_, &size};", "  CHECK_CUDA_SUCCESS(cudaLaunchKernel(cross_device_reduce_2stage<T, ngpus>, dim3(blocks), dim3(threads), args, 0, stream));"), "", ""},
		// The third round's e1: its arguments are checked as a <<<...>>>
		// launch's are.
		{"a known kernel launched by its address alone", pcie("  void* args[] = {&ptrs, &sg_, &self_sg_, &output, &rank_, &size};", "  CHECK_CUDA_SUCCESS(cudaLaunchKernel(reinterpret_cast<const void*>(cross_device_reduce_2stage<T, ngpus>), dim3(blocks), dim3(threads), args, 0, stream));"), "",
			"launches sglang::cross_device_reduce_2stage<float, 4> by its address alone, so that its arguments cannot be checked"},
		{"cudaLaunchKernelEx", pcie("  cudaLaunchConfig_t cfg{dim3(blocks), dim3(threads), 0, stream, nullptr, 0};", "  CHECK_CUDA_SUCCESS(cudaLaunchKernelEx(&cfg, cross_device_reduce_2stage<T, ngpus>, ptrs, sg_, self_sg_, output, rank_, size));"), "", ""},
		{"cudaLaunchKernelEx with half the size", pcie("  cudaLaunchConfig_t cfg{dim3(blocks), dim3(threads), 0, stream, nullptr, 0};", "  CHECK_CUDA_SUCCESS(cudaLaunchKernelEx(&cfg, cross_device_reduce_2stage<T, ngpus>, ptrs, sg_, self_sg_, output, rank_, size / 2));"), "",
			"launches sglang::cross_device_reduce_2stage<float, 4> with a size of 0 packed elements where the call has 1"},
		{"an explicit cudaLaunchKernel with a size of 0", pcie("  int zero = 0;", "  void* args[] = {&ptrs, &sg_, &self_sg_, &output, &rank_, &zero};", "  CHECK_CUDA_SUCCESS(cudaLaunchKernel(cross_device_reduce_2stage<T, ngpus>, dim3(blocks), dim3(threads), args, 0, stream));"), "",
			"launches sglang::cross_device_reduce_2stage<float, 4> with a size of 0 packed elements where the call has 1"},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, judgeBranch(t, tc.branch, tc.top, ""), tc.want) })
	}
}

// launchAll launches 2-stage at the world size, as REDUCE_CASE would.
const launchAll = "      switch (world_size_) { case 4: KL(4, cross_device_reduce_2stage); break; case 6: KL(6, cross_device_reduce_2stage); break; case 8: KL(8, cross_device_reduce_2stage); break; }"

// pcieSW is a PCIe-only early branch before the switch, holding lines
// and then returning.
func pcieSW(lines ...string) string {
	return "    if (!full_nvlink_ && world_size_ > 2) {\n" + strings.Join(lines, "\n") + "\n      return;\n    }\n"
}

// klArgs launches with the output and size given.
const klArgs = "#define KL_ARGS(ngpus, name, out, n) name<T, ngpus><<<blocks, threads, 0, stream>>>(ptrs, sg_, self_sg_, out, rank_, n);\n"

// The kinds, and their relatives: what a hand-written reader
// misses and the compiler does not.
func TestJudgeSeesWhatTheCompilerSees(t *testing.T) {
	for _, tc := range []struct {
		name    string
		branch  []string
		top, sw string
		want    string
	}{
		{"a PCIe branch under #ifndef NDEBUG (the build passes -DNDEBUG)", upstream, "", pcieSW("#ifndef NDEBUG", launchAll, "#endif"),
			"launches no kernel"},
		{"a PCIe branch under #ifndef __CUDACC__ (nvcc defines it)", upstream, "", pcieSW("#ifndef __CUDACC__", launchAll, "#endif"),
			"launches no kernel"},
		{"a PCIe branch under #ifdef __CUDACC__ launches", upstream, "", pcieSW("#ifdef __CUDACC__", launchAll, "#endif"), ""},
		{"every launch gone under NDEBUG", patchedElse, "", "#ifdef NDEBUG\n#undef KL\n#define KL(ngpus, name)\n#else\n#endif\n",
			"launches no kernel"},
		{"a // comment whose backslash swallows the launch", upstream, "", pcieSW("      // PCIe-only: the launch below \\", launchAll),
			"launches no kernel"},
		{"a constexpr of the member's name in another namespace", with(patchedElse, "} else { /* full NVLink, or PCIe-only above 2 GPUs */", "} else if (!cfg::full_nvlink_) {"),
			"namespace cfg { constexpr bool full_nvlink_ = true; }\n", "", "launches no kernel"},
		{"a grid of 0 below 4 KiB", pcie("  KL_GRID(ngpus, cross_device_reduce_2stage, bytes < 4096 ? 0 : blocks);"),
			"", "#define KL_GRID(ngpus, name, g) name<T, ngpus><<<g, threads, 0, stream>>>(ptrs, sg_, self_sg_, output, rank_, size);\n",
			"eager float32 allreduce of 16-4080 bytes launches sglang::cross_device_reduce_2stage<float, 4> with grid (0,1,1) and block (512,1,1), which runs nothing"},
		{"a launch on another stream than the call's", pcie("  cross_device_reduce_2stage<T, ngpus><<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(0x2000)>>>(ptrs, sg_, self_sg_, output, rank_, size);"), "", "",
			"launches sglang::cross_device_reduce_2stage<float, 4> on another stream than the call's"},
		{"more dynamic shared memory than a block may have", pcie("  cross_device_reduce_2stage<T, ngpus><<<blocks, threads, 1 << 20, stream>>>(ptrs, sg_, self_sg_, output, rank_, size);"), "", "",
			"with 1048576 bytes of dynamic shared memory, over the 232448 a block may have"},
		{"a block of 0", pcie("  cross_device_reduce_2stage<T, ngpus><<<blocks, 0, 0, stream>>>(ptrs, sg_, self_sg_, output, rank_, size);"), "", "",
			"with grid (1,1,1) and block (0,1,1)"},
		{"a macro that renames the kernel to nothing", pcie("  KL(ngpus, cross_device_reduce_2stage);"), "", "#undef KL\n#define KL(ngpus, name) (void)0;\n",
			"launches no kernel"},
		{"if constexpr leaves out half and bfloat16", pcie("  if constexpr (sizeof(T) == 4) { KL(ngpus, cross_device_reduce_2stage); }"), "", "",
			"eager float16 allreduce of 16-8388608 bytes launches no kernel"},
		{"an early return above a size", patchedElse, "", "    if (!full_nvlink_ && bytes > 65536) return;\n",
			"allreduce of 65552-8388608 bytes launches no kernel"},
		{"a launch in a lambda never called", pcie("  auto go = [&] { KL(ngpus, cross_device_reduce_2stage); };"), "", "", "launches no kernel"},
		{"a launch in a lambda that is called", pcie("  auto go = [&] { KL(ngpus, cross_device_reduce_2stage); };", "  go();"), "", "", ""},
		{"a throw swallowed by try/catch", pcie("  try { throw std::runtime_error(\"pcie\"); } catch (...) {}"), "", "", "launches no kernel"},
		{"two launches", pcie("  KL(ngpus, cross_device_reduce_1stage);", "  KL(ngpus, cross_device_reduce_2stage);"), "", "",
			"launches 2 kernels (sglang::cross_device_reduce_1stage<float, 4>, then sglang::cross_device_reduce_2stage<float, 4>)"},
		{"one rank skips", patchedElse, "", "    if (!full_nvlink_ && rank_ == 3) return;\n", "(rank 3, without full NVLink"},
		{"graphs skip", patchedElse, "", "    cudaStreamCaptureStatus st;\n    cudaStreamIsCapturing(stream, &st);\n    if (!full_nvlink_ && st == cudaStreamCaptureStatusActive) return;\n",
			"graph float32 allreduce of 16-8388608 bytes launches no kernel"},
		{"stops after a hundred calls", patchedElse, "", "    static int calls = 0;\n    if (!full_nvlink_ && ++calls > 100) return;\n", "launches no kernel"},
		{"host code reads device memory", patchedElse, "", "    if (!full_nvlink_) { volatile char c = *reinterpret_cast<char*>(input); (void)c; }\n",
			"stopped the judge (crash) in scenario"},
		{"a test of the compiler", upstream, "", pcieSW("#ifdef __clang__", launchAll, "#endif"),
			cuhPath + ":86 preprocesses otherwise under another host compiler (g++ under nvcc"},
		{"does not compile", pcie("  KL(ngpus, no_such_kernel);"), "", "", "does not compile " + cuhPath + "|no_such_kernel"},
		{"a known kernel for another world size", pcie("  KL(8, cross_device_reduce_2stage);"), "", "",
			"at world size 4, no variable set (rank 0, without full NVLink; the Python gates admit it up to 8388608 bytes), eager float32 allreduce of 16-8388608 bytes launches sglang::cross_device_reduce_2stage<float, 8> instantiated for <float, 8> where the call is <float, 4>"},
		{"a known kernel for half the size", pcie("  KL_ARGS(ngpus, cross_device_reduce_2stage, output, size / 2);"), "", klArgs,
			"eager float32 allreduce of 16-8388608 bytes launches sglang::cross_device_reduce_2stage<float, 4> with a size of 0 packed elements where the call has 1"},
		{"a known kernel into another buffer", pcie("  KL_ARGS(ngpus, cross_device_reduce_2stage, input, size);"), "", klArgs,
			"launches sglang::cross_device_reduce_2stage<float, 4> with another output than the call's"},
		{"a test of the toolkit's version", upstream, "", pcieSW("#if CUDART_VERSION >= 13000", launchAll, "#endif"),
			"preprocesses otherwise under another CUDA toolkit (CUDA 13.0|the judge compiles one build (clang's CUDA host pass, CUDA 12.8's macros"},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, judgeBranch(t, tc.branch, tc.top, tc.sw), tc.want) })
	}
}

// The gates as upstream has them: closed on PCIe above 2 GPUs, so
// upstream's dispatch passes (a PCIe pair launches 1-stage); opened by a
// variable, the same dispatch is refused under it.
func TestJudgeByWhatTheGatesAdmit(t *testing.T) {
	rep, err := judge(t, pyTree(fixture(upstream)).input())
	refused(t, err, "")
	if len(rep.Admitted) == 0 || !strings.HasPrefix(rep.Admitted[0], "world size 2, no variable set: up to 8388608 bytes") {
		t.Errorf("admitted = %q, want world size 2 first", rep.Admitted)
	}
	for _, a := range rep.Admitted {
		if !strings.HasPrefix(a, "world size 2,") {
			t.Errorf("upstream's gates admit %q", a)
		}
	}
	_, err = judge(t, pyTree(fixture(upstream), forced1, forced2).input(gatePy, utilsPy))
	refused(t, err, "at world size 4, SGLANG_FORCE_CUSTOM_AR_PCIE=1 (rank 0, without full NVLink; the Python gates admit it up to 8388608 bytes)|launches no kernel")
	_, err = judge(t, pyTree(fixture(patchedElse), forced1, forced2).input(gatePy, utilsPy))
	refused(t, err, "")
	// One gate alone opens nothing: should_custom_ar still refuses.
	_, err = judge(t, pyTree(fixture(upstream), forced1).input(utilsPy))
	refused(t, err, "")
}

func TestJudgeRefusesWhatItCannotBuild(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no allreduce", "namespace sglang { struct Signal {}; class CustomAllreduce {}; }\n", "does not compile"},
		{"only a declaration", "#include <cuda_runtime.h>\nnamespace sglang {\nstruct Signal {};\nclass CustomAllreduce {\n public:\n  CustomAllreduce(Signal**, void*, size_t, int, int, bool = true);\n  void register_buffer(void**);\n  template <typename T>\n  void allreduce(cudaStream_t, T*, T*, int, int = 512, int = 36);\n};\n}  // namespace sglang\n", "does not compile"},
		{"unclosed #if", "#if 1\nclass CustomAllreduce {};\n", "does not compile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := judge(t, pyTree([]byte(tc.src), open...).input(gatePy))
			refused(t, err, tc.want)
		})
	}
}

// A series that changes a CMake file changes the build's definitions,
// which the judge takes from upstream: refused, naming the file, wherever
// the gates admit custom allreduce (upstream's admit a PCIe pair), passed
// over on a tree without SGLang's Python side.
func TestJudgeRefusesAChangedBuild(t *testing.T) {
	const cmake = "sgl-kernel/CMakeLists.txt"
	const want = "in " + cmake + " as patched, the series changes a CMake file, which sets the build's compiler definitions"
	tr := pyTree(fixture(patchedElse), open...).with(cmake, "add_compile_definitions(ARPATCH_X)\n")
	_, err := judge(t, tr.input(gatePy, cmake))
	refused(t, err, want)
	tr = pyTree(fixture(upstream)).with(cmake, "add_compile_definitions(ARPATCH_X)\n")
	_, err = judge(t, tr.input(cmake))
	refused(t, err, want)
	bare := tree{cuhPath: fixture(upstream), cmake: []byte("add_compile_definitions(ARPATCH_X)\n")}
	_, err = judge(t, bare.input(cmake))
	refused(t, err, "")
}

// The other files the allreduce path goes through that the judge does
// not compile or run, each refused by name where the gates admit a call,
// another C++ source of the library among them (it links with the
// dispatch: a strong definition replaces a weak one); a file outside the
// library passes.
func TestJudgeRefusesWhatItCannotFollow(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"sgl-kernel/pyproject.toml", "the series changes pyproject.toml, which sets how sgl-kernel is built"},
		{"sgl-kernel/setup.py", "the series changes setup.py, which sets how sgl-kernel is built"},
		{"sgl-kernel/cmake/utils.cmake", "the series changes a CMake file"},
		{"sgl-kernel/include/utils.h", "the series changes include/utils.h, which the dispatch's translation unit includes; the gate judge compiles with its own restatement of it"},
		{"sgl-kernel/include/sgl_kernel_ops.h", "the series changes include/sgl_kernel_ops.h"},
		{"sgl-kernel/csrc/allreduce/custom_all_reduce.cu", "the series changes sgl-kernel/csrc/allreduce/custom_all_reduce.cu, on the way from SGLang's all_reduce to CustomAllreduce::allreduce"},
		{"sgl-kernel/csrc/common_extension.cc", "the series changes sgl-kernel/csrc/common_extension.cc, on the way"},
		{"sgl-kernel/python/sgl_kernel/allreduce.py", "the series changes sgl-kernel/python/sgl_kernel/allreduce.py, on the way"},
		{"sgl-kernel/csrc/moe/moe_align_kernel.cu", "the series changes sgl-kernel/csrc/moe/moe_align_kernel.cu, a source of the library the dispatch links into, which the gate judge does not compile"},
		{"sgl-kernel/csrc/elementwise/activation.cu", "the series changes sgl-kernel/csrc/elementwise/activation.cu, a source of the library the dispatch links into"},
		{"sgl-kernel/benchmark/bench_allreduce.py", ""},
		{"sgl-kernel/README.md", ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			tr := pyTree(fixture(patchedElse), open...).with(tc.path, "// changed\n")
			_, err := judge(t, tr.input(gatePy, tc.path))
			want := tc.want
			if want != "" {
				want = "in " + tc.path + " as patched, " + want + "|or put them in a series of their own"
			}
			refused(t, err, want)
		})
	}
}

func TestCheckFindsTheDispatchWhereTheTreeKeepsIt(t *testing.T) {
	eraC := "python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh"
	move := func(tr tree, to string) tree {
		tr[to] = tr[cuhPath]
		delete(tr, cuhPath)
		return tr
	}
	in := move(pyTree(fixture(patchedElse), open...), eraC).input(gatePy)
	in.Paths = nil
	_, err := judge(t, in)
	refused(t, err, "")
	in = move(pyTree(fixture(upstream), open...), eraC).input(gatePy)
	in.Paths = nil
	_, err = judge(t, in)
	refused(t, err, "in "+eraC+" as patched")
	// Elsewhere, found by listing; the JIT kernel's header of the same
	// name beside it is not the dispatch.
	jit := "python/sglang/kernels/jit/csrc/distributed/custom_all_reduce.cuh"
	moved := "csrc/elsewhere/allreduce/custom_all_reduce.cuh"
	tr := move(pyTree(fixture(upstream), open...), moved).with(jit, "struct AllReducePushImpl {};\n")
	in = tr.input(gatePy)
	in.Paths = []string{jit, moved}
	_, err = judge(t, in)
	refused(t, err, "in "+moved+" as patched")
	delete(tr, moved)
	in = tr.input(gatePy)
	in.Paths = []string{jit}
	_, err = judge(t, in)
	var de *DispatchError
	if !errors.As(err, &de) || de.Path != "" || !strings.Contains(err.Error(), "has no custom_all_reduce.cuh holding CustomAllreduce::allreduce (looked at "+eraC+", "+jit+", sgl-kernel/csrc/allreduce/custom_all_reduce.cuh)") {
		t.Errorf("only the JIT header: %v", err)
	}
}

// TestWorldSizes pins the world sizes the judge runs: every one from 2 to
// 8, beyond those upstream supports (bounds.WorldSizes).
func TestWorldSizes(t *testing.T) {
	if !slices.Equal(WorldSizes, []int{2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("WorldSizes = %v, want [2 3 4 5 6 7 8]", WorldSizes)
	}
}

// FuzzJudgeDispatch: what the judge reads of a header without compiling
// it (its includes, literals, whether it holds the dispatch), of the
// driver's report, of LLVM IR and of preprocessor output takes any bytes
// without panicking.
func FuzzJudgeDispatch(f *testing.F) {
	f.Add(fixture(upstream))
	f.Add(fixture(patchedElse))
	f.Add([]byte("{\"scenario\":0,\"mode\":\"eager\",\"dtype\":\"float32\",\"runs\":[[16,32,\"empty\",\"k\",0,1,1,0]]}\n{\"done\":true}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		read := func(p string) ([]byte, error) {
			if p == cuhPath {
				return src, nil
			}
			return src, nil // every include resolves to the same bytes
		}
		s, err := gather(read, cuhPath, projectDirs(cuhPath))
		if err != nil {
			t.Fatal(err)
		}
		headerLiterals(s)
		parseIR(string(src))
		treeLines(src, "/w")
		holdsDispatch(src)
		_, _ = parseReport(src, []cxxScenario{{WS: 4}}) // any verdict: the fuzz looks for panics
	})
}

// A kernel arpatch does not know is launched, and noted: what it computes
// is not checked.
func TestJudgeNotesAnUnknownKernel(t *testing.T) {
	top := "template <typename T, int ngpus>\n__global__ void noop(RankData*, RankSignals, Signal*, T*, int, int) {}\n"
	rep, err := judge(t, pyTree(header(pcie("  KL(ngpus, noop);"), top, ""), open...).input(gatePy))
	refused(t, err, "")
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], cuhPath+" launches sglang::noop<__half, 4>, sglang::noop<__half, 6>") ||
		!strings.Contains(rep.Notes[0], "arpatch knows them neither from upstream") {
		t.Errorf("notes = %q", rep.Notes)
	}
}

// Builds the judge's one compile is not: each test of the compiler, the
// toolkit or a build option that makes the tree another program under
// some real build is refused by what it preprocesses to, however it is
// spelt; one that changes nothing passes.
func TestJudgeComparesBuildVariants(t *testing.T) {
	const compiler = "preprocesses otherwise under another host compiler"
	const toolkit = "preprocesses otherwise under another CUDA toolkit"
	const options = "preprocesses otherwise under sgl-kernel's build options"
	const unreadable = "tests the value of a macro made unreadable under the compiler and toolkit versions the judge does not try"
	for _, tc := range []struct {
		name, top, sw, want string
	}{
		{"__clang__ spelt by a token paste", "#define ARP_CAT(a, b) a##b\n",
			"#if !ARP_CAT(__cl, ang__)\n    if (!full_nvlink_) return;\n#endif\n", compiler},
		{"a clang builtin tested", "", "#if __has_builtin(__builtin_readcyclecounter)\n    if (!full_nvlink_) return;\n#endif\n", compiler},
		{"__GNUC__'s version tested", "", "#if __GNUC__ >= 13\n    if (!full_nvlink_) return;\n#endif\n", compiler},
		{"a toolkit header that the stubs lack", "", "#if __has_include(<cuda_fp8.h>)\n    if (!full_nvlink_) return;\n#endif\n", toolkit},
		{"nvcc's version", "", "#if __CUDACC_VER_MAJOR__ >= 13\n    if (!full_nvlink_) return;\n#endif\n", toolkit},
		// Versions the variants do not set: the adversary's g++ 12 and CUDA
		// 12.9.
		{"one g++ version", "", "#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13\n    if (!full_nvlink_) return;\n#endif\n", unreadable},
		{"one CUDA minor version", "", "#if __CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ == 9\n    if (!full_nvlink_) return;\n#endif\n", unreadable},
		{"a definition sgl-kernel's CMake adds by option", "", "#ifdef FLASHINFER_ENABLE_BF16\n    if (!full_nvlink_) return;\n#endif\n", options},
		{"the C++ ABI", "", "#if _GLIBCXX_USE_CXX11_ABI == 0\n    if (!full_nvlink_) return;\n#endif\n", options},
		// The judge's path has a dot in ".build-" and the header's name; a
		// checkout such as ~/sglang has only the latter.
		{"the path the judge compiles the tree from", "constexpr int dots(const char* s) { return *s ? (*s == '.') + dots(s + 1) : 0; }\n",
			"    if constexpr (dots(__FILE__) == 1) { if (!full_nvlink_) return; }\n", "compiles otherwise from another checkout path (its code depends on __FILE__ or __BASE_FILE__)"},
		{"the date of the build", "", "    if (!full_nvlink_ && __DATE__[9] == '3') return;\n", "preprocesses otherwise under another time of the build"},
		// The third round's g1 and t1: g++'s ABI version, and torch's
		// macros, defined before the dispatch in the real translation unit.
		{"g++'s ABI version", "", "#if __GXX_ABI_VERSION >= 1011\n    if (!full_nvlink_) return;\n#endif\n", compiler},
		{"a macro of torch's headers", "", "#if defined(C10_LIKELY)\n    if (!full_nvlink_) return;\n#endif\n", options},
		// f1: a path component's length; the other compile's path has
		// one component.
		{"the length of the path's first component", "constexpr int first(const char* s, int n = 0) { return s[n + 1] == '/' || s[n + 1] == 0 ? n : first(s, n + 1); }\n",
			"    if constexpr (first(__FILE__) < 40) { if (!full_nvlink_) return; }\n", "compiles otherwise from another checkout path"},
		{"a test of the compiler with the same code on both sides", "", "#ifdef __clang__\n    (void)0;\n#else\n    (void)0;\n#endif\n", ""},
		{"a definition no build makes", "", "#ifdef ARPATCH_NEVER_DEFINED\n    if (!full_nvlink_) return;\n#endif\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, judgeBranch(t, patchedElse, tc.top, tc.sw), tc.want) })
	}
}

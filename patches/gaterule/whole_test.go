package gaterule

import (
	"strings"
	"testing"
)

// The old rule's finding F1 cases, and what it could not follow, kept as
// tests of the new judge: each edits the patched fixture (which passes)
// the way a series could, and is judged by what it compiles to. Where the
// old reader refused what it could not decide (a loop, a goto, a helper
// call, a lambda, try/catch), the judge runs it: refused where a call then
// launches nothing, two kernels or throws nothing, accepted where every
// call launches one kernel or throws.
func TestJudgeWholeAllreduce(t *testing.T) {
	good := fixture(patchedElse)
	sw := "    switch (world_size_) {\n"
	after := "    }\n#undef REDUCE_CASE\n"
	before := func(add string) []byte { return []byte(strings.Replace(string(good), sw, add+sw, 1)) }
	around := func(open, shut string) []byte {
		s := strings.Replace(string(good), sw, open+sw, 1)
		return []byte(strings.Replace(s, after, "    }\n"+shut+"#undef REDUCE_CASE\n", 1))
	}
	withTop := func(src []byte, top string) []byte {
		return []byte(strings.Replace(string(src), "class CustomAllreduce {\n", top+"class CustomAllreduce {\n", 1))
	}
	pcieBranch := func(lines ...string) []byte { return fixture(pcie(lines...)) }
	for _, tc := range []struct {
		name string
		src  []byte
		want string
	}{
		{"an early exit before the switch", before("    if (!full_nvlink_ && world_size_ > 2) return;\n"), "at world size 4, no variable set|launches no kernel"},
		{"an early exit in a block, after other work", before("    if (!full_nvlink_) {\n      std::fprintf(stderr, \"pcie\\n\");\n      return;\n    }\n"), "at world size 2, no variable set|launches no kernel"},
		{"an early exit for world size 8 only", before("    if (world_size_ == 8 && !this->full_nvlink_) return;\n"), "at world size 8, no variable set|launches no kernel"},
		{"a goto over the switch", around("    if (!full_nvlink_) goto done;\n", "  done:\n    ;\n"), "launches no kernel"},
		{"a return hidden in a macro defined elsewhere in the file", before("    SKIP_PCIE();\n"), "launches no kernel"},
		{"a macro the file does not define", before("    SKIP_PCIE();\n"), "does not compile|SKIP_PCIE"},
		{"a condition on full_nvlink_ around the whole switch", around("    if (full_nvlink_) {\n", "    }\n"), "launches no kernel"},
		{"an #ifdef that leaves the switch out of the host pass", around("#ifdef __CUDA_ARCH__\n", "#endif\n"), "launches no kernel"},
		{"an #if USE_ROCM that leaves the switch to ROCm builds", around("#if defined(USE_ROCM)\n", "#endif\n"), "launches no kernel"},
		{"full_nvlink_ set true before a PCIe-only branch", []byte(strings.Replace(string(pcieBranch("  KL(ngpus, cross_device_reduce_2stage);")), sw, "    full_nvlink_ = true;\n"+sw, 1)),
			"changes CustomAllreduce's world_size_ or full_nvlink_, or hands its address on, after the constructor set it"},
		{"a local full_nvlink_ that says NVLink", []byte(strings.Replace(string(fixture(upstream)), sw, "    bool full_nvlink_{true};\n"+sw, 1)), ""},
		{"a launch in a helper function", withTop(pcieBranch("  pcie_dispatch<T, ngpus>(blocks, threads, stream, ptrs, sg_, self_sg_, output, rank_, size);"),
			"template <typename T, int ngpus>\nvoid pcie_dispatch(int b, int th, cudaStream_t st, RankData* p, RankSignals sg, Signal* self, T* out, int rank, int n) {\n  cross_device_reduce_2stage<T, ngpus><<<b, th, 0, st>>>(p, sg, self, out, rank, n);\n}\n"), ""},
		{"a helper function that launches nothing", withTop(pcieBranch("  pcie_dispatch();"), "inline void pcie_dispatch() {}\n"), "launches no kernel"},
		{"a launch in a loop that runs once", pcieBranch("  for (int i = 0; i < 1; i++) { KL(ngpus, cross_device_reduce_2stage); }"), ""},
		{"a launch in a loop that runs twice", pcieBranch("  for (int i = 0; i < 2; i++) { KL(ngpus, cross_device_reduce_2stage); }"), "launches 2 kernels"},
		{"a loop before the switch that cannot leave", before("    long sum = 0;\n    for (int i = 0; i < 4; i++) sum += i;\n"), ""},
		{"a return in a loop before the switch", before("    for (int i = 0; i < 1; i++) { if (!full_nvlink_) return; }\n"), "launches no kernel"},
		{"a launch under &&, for some sizes", pcieBranch("  bytes > 4096 && (cross_device_reduce_2stage<T, ngpus><<<blocks, threads, 0, stream>>>(ptrs, sg_, self_sg_, output, rank_, size), true);"),
			"eager float32 allreduce of 16-4096 bytes launches no kernel"},
		{"try/catch that returns before the switch", before("    try { CHECK_CUDA_SUCCESS(cudaIpcCloseMemHandle(nullptr)); if (!full_nvlink_) throw 1; } catch (...) { return; }\n"), "launches no kernel"},
		{"a throw before the switch for PCIe", []byte(strings.Replace(string(fixture(upstream)), sw, "    if (!full_nvlink_ && world_size_ > 2) throw std::runtime_error(\"PCIe\");\n"+sw, 1)), ""},
		{"no case for the world size and no default", []byte(strings.Replace(strings.Replace(string(good), "      REDUCE_CASE(6)\n      REDUCE_CASE(8)\n", "", 1), "      default:\n        throw std::runtime_error(\"world size \" + std::to_string(world_size_));\n", "", 1)),
			"at world size 6, no variable set|launches no kernel"},
		{"an algorithm variable whose unknown values launch nothing", pcieBranch(
			`  { const char* e = std::getenv("SGLANG_PCIE_CUSTOM_AR_ALGO"); std::string a = e ? e : "";`,
			`    if (a == "" || a == "pull2" || a == "push2" || a == "island" || a.find(",") != std::string::npos) { KL(ngpus, cross_device_reduce_2stage); }`,
			`    else if (a == "pull1" || a == "push1") { KL(ngpus, cross_device_reduce_1stage); } }`),
			"SGLANG_PCIE_CUSTOM_AR_ALGO=bogus|launches no kernel"},
		{"an algorithm variable whose unknown values throw", pcieBranch(
			`  { const char* e = std::getenv("SGLANG_PCIE_CUSTOM_AR_ALGO"); std::string a = e ? e : "";`,
			`    if (a == "" || a == "pull2" || a == "push2" || a == "island" || a.find(",") != std::string::npos) { KL(ngpus, cross_device_reduce_2stage); }`,
			`    else if (a == "pull1" || a == "push1") { KL(ngpus, cross_device_reduce_1stage); }`,
			`    else throw std::invalid_argument("SGLANG_PCIE_CUSTOM_AR_ALGO: " + a); }`), ""},
		{"a launch skipped at one computed size", pcieBranch("  if (bytes != 6251 * 16) { KL(ngpus, cross_device_reduce_2stage); }"),
			"allreduce of 100016 bytes launches no kernel"},
		{"a launch skipped at one computed count of 16-byte packs", pcieBranch("  if (size != 6253 * 4) { KL(ngpus, cross_device_reduce_2stage); }"),
			"allreduce of 400192 bytes launches no kernel"},
		{"an early exit through a helper", withTop([]byte(strings.Replace(string(good), sw, "    if (!full_nvlink_ && early_out()) return;\n"+sw, 1)), "inline bool early_out() { return true; }\n"),
			"launches no kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			if strings.HasPrefix(tc.name, "a return hidden in a macro") {
				src = withTop(src, "#define SKIP_PCIE() if (!full_nvlink_ && world_size_ > 2) return\n")
			}
			_, err := judge(t, pyTree(src, open...).input(gatePy))
			refused(t, err, tc.want)
		})
	}
}

package patches

import (
	"context"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/patches/gaterule"
	"github.com/arpatch/arpatch/patches/kernelsim"
)

// pushDispatch is our own allreduce for a fixture header made of the pcie
// series' added blocks on kernelsim's upstream.h (kernelsim.BlocksHeader):
// register_buffer, and the PCIe-only dispatch in the shape of the series'
// (pcie_algo_for's choice, the push kernels launched as 0001 launches
// them). It has no pull or NVLink kernels, and throws where it would take
// one. BYTES_OK is the condition a case may narrow to launch at some sizes
// only.
const pushDispatch = `
  void register_buffer(void**) {}
#define PCIE_CASE(ngpus)                                                                                     \
  case ngpus:                                                                                                \
    if (full_nvlink_) throw std::runtime_error("this fixture has no NVLink kernels");                       \
    if (!(BYTES_OK)) break;                                                                                  \
    switch (pcie_algo_for(bytes)) {                                                                          \
      case PcieAlgo::kPush1:                                                                                 \
        pcie_push_1shot<T, ngpus><<<blocks, threads, 0, stream>>>(input, output, sg_, self_sg_, rank_, size);  \
        break;                                                                                               \
      case PcieAlgo::kPush2:                                                                                 \
        pcie_push_2shot<T, ngpus><<<blocks, threads, 0, stream>>>(input, output, sg_, self_sg_, rank_, size);  \
        break;                                                                                               \
      case PcieAlgo::kIsland:                                                                                \
        pcie_push_island<T, ngpus><<<blocks, threads, 0, stream>>>(                                          \
            input, output, sg_, self_sg_, rank_, size, pcie_islands_);                                       \
        break;                                                                                               \
      default:                                                                                               \
        throw std::runtime_error("this fixture has no pull kernels");                                       \
    }                                                                                                        \
    break;
  template <typename T>
  void allreduce(cudaStream_t stream, T* input, T* output, int size, int threads = 512, int block_limit = 36) {
    constexpr int d = 16 / sizeof(T);
    if (size % d != 0) throw std::runtime_error("size");
    size /= d;
    const size_t bytes = static_cast<size_t>(size) * 16;
    const int blocks = std::min(block_limit, (size + threads - 1) / threads);
    switch (world_size_) {
      PCIE_CASE(2)
      PCIE_CASE(4)
      PCIE_CASE(6)
      PCIE_CASE(8)
      default:
        throw std::runtime_error("world size");
    }
  }
#undef PCIE_CASE
`

// pushTree is a tree whose dispatch header is the series' blocks with
// pushDispatch (bytesOK its size condition), kernelsim's upstream.h beside
// it, and gaterule's fixture gates, both opened.
func pushTree(t *testing.T, src kernelsim.Source, bytesOK string) (memTree, string) {
	t.Helper()
	tree := fixtureTree(t)
	src.Dispatch = strings.Replace(pushDispatch, "BYTES_OK", bytesOK, 1)
	tree[cuhPath] = kernelsim.BlocksHeader(src)
	tree["sgl-kernel/csrc/allreduce/upstream.h"] = string(kernelsim.UpstreamH())
	tree[utilsPath] = strings.Replace(tree[utilsPath], "if world_size > 2 and not full_nvlink:  # GATE1", "if False:  # GATE1", 1)
	tree[gatePath] = strings.Replace(tree[gatePath], "if self.world_size == 2 or self.full_nvlink:  # GATE2", "if True:  # GATE2", 1)
	return tree, cuhPath
}

func judgeMem(t *testing.T, tree memTree) (*gaterule.Report, error) {
	t.Helper()
	in := gaterule.Input{Read: tree.ReadFile, IsDir: func(p string) bool {
		for k := range tree {
			if strings.HasPrefix(k, p+"/") {
				return true
			}
		}
		return false
	}, Paths: []string{cuhPath}, Changed: []string{cuhPath, gatePath, utilsPath}, Declared: true}
	return gaterule.Judge(context.Background(), in)
}

// TestGateRuleRunsThePushKernels is issue 24's acceptance line: the gate
// rule refuses a push branch that skips the reduce, writes only some of
// the slots, or launches for some sizes only. The dispatch launches the
// series' push kernels where the gates admit custom allreduce; the judge
// runs them on the CPU (package kernelsim) at the sizes they are launched
// for and checks every rank's sum.
func TestGateRuleRunsThePushKernels(t *testing.T) {
	const sumLine = "    ((P*)result)[idx] = downcast<P>(acc);\n"
	needJudge(t)
	if _, err := kernelsim.Compiler(); err != nil {
		t.Skipf("%v: the push kernels are not run here", err)
	}
	_, loaded := pcieSeries(t)
	src := seriesSource(t, loaded[len(loaded)-1])
	for _, m := range []struct {
		name, old, new, bytesOK, want string
	}{
		{"as shipped", "", "", "true", ""},
		{"push1 skips the reduce", "    ((P*)result)[idx] = downcast<P>(acc);\n", "    ((P*)result)[idx] = in[idx];\n", "true",
			"the push kernel sglang::pcie_push_1shot<float, 4>, which CustomAllreduce::allreduce launches at world size 4, no variable set, eager float32 allreduce of 16-5824 bytes, run on the CPU as the device pass for sm_80 (and 15 more archs that preprocess alike) on 4 emulated ranks (package kernelsim)|leaves a wrong sum: call 0 (push1, 1 packed elements, 1 blocks): rank 0 element 0 is 1, want 10"},
		{"push1 writes only some of the slots", "(rank + k) % ngpus]) + (size_t)rank * size;\n", "(rank + k) % ngpus]) + (size_t)rank * size;\n    if (k == ngpus - 1) break;\n", "true",
			"the push kernel sglang::pcie_push_1shot<float, 4>|leaves a wrong sum"},
		{"island reduces small sizes only", "  P* mine = get_tmp_buf<P>(self_sg);\n  pcie_barrier<ngpus, true>", "  P* mine = get_tmp_buf<P>(self_sg);\n  if (size > 64) return;\n  pcie_barrier<ngpus, true>", "true",
			"the push kernel sglang::pcie_push_island<__nv_bfloat16, 4>, which CustomAllreduce::allreduce launches at world size 4, SGLANG_PCIE_CUSTOM_AR_ISLANDS=0,1/2,3|leaves a wrong sum: call 11 (island, 65 packed elements"},
		{"the dispatch launches for small sizes only", "", "", "bytes <= 4096",
			"eager float32 allreduce of 4112-8388608 bytes launches no kernel"},
		// Issue 26: the GPU runs the kernels' device pass, which the host
		// pass does not show. Each of these computes the sum in the host
		// pass and not on some or every GPU.
		{"push1 skips the reduce in the device pass", sumLine, "#ifdef __CUDA_ARCH__\n    ((P*)result)[idx] = in[idx];\n#else\n" + sumLine + "#endif\n", "true",
			"the push kernel sglang::pcie_push_1shot<float, 4>|as the device pass for sm_80 (and 15 more archs that preprocess alike)|leaves a wrong sum"},
		{"push1 skips the reduce on sm_120a alone", sumLine, "#ifdef __CUDA_ARCH_FEAT_SM120_ALL\n    ((P*)result)[idx] = in[idx];\n#else\n" + sumLine + "#endif\n", "true",
			"as the device pass for sm_120a on 4 emulated ranks|leaves a wrong sum"},
		{"push1 skips the reduce on compute capability 9.0", sumLine, "#if __CUDA_ARCH__ == 900\n    ((P*)result)[idx] = in[idx];\n#else\n" + sumLine + "#endif\n", "true",
			"as the device pass for sm_90 (and sm_90a, which preprocesses alike) on|leaves a wrong sum"},
		{"push1 skips the reduce under the build's -DNDEBUG", sumLine, "#ifdef NDEBUG\n    ((P*)result)[idx] = in[idx];\n#else\n" + sumLine + "#endif\n", "true",
			"the push kernel sglang::pcie_push_1shot<float, 4>|leaves a wrong sum"},
		{"push1 leaves the later blocks out through a macro", "  P* mine = get_tmp_buf<P>(self_sg);\n  pcie_barrier<ngpus, true>",
			"  P* mine = get_tmp_buf<P>(self_sg);\n  if (PCIE_ON_GPU && blockIdx.x > 0) return;\n  pcie_barrier<ngpus, true>", "true",
			"the push kernel sglang::pcie_push_island|leaves a wrong sum"},
		{"push2 exits in PTX on the GPU", "  const int part = pcie_slot(size, ngpus);\n", "  const int part = pcie_slot(size, ngpus);\n#ifdef __CUDA_ARCH__\n  asm volatile(\"exit;\");\n#endif\n", "true",
			`cannot be run as the GPU would run them|inline assembly "exit;" in the device pass: not one of upstream's PTX templates`},
		{"the islands' layout differs in the device pass", "struct PcieIslands {\n  int count;\n", "struct PcieIslands {\n#ifdef __CUDA_ARCH__\n  int pad;\n#endif\n  int count;\n", "true",
			"CustomAllreduce's host pass and the device pass for sm_80 (and 15 more archs that preprocess alike) disagree|PcieIslands=328|PcieIslands=332"},
	} {
		t.Run(m.name, func(t *testing.T) {
			s := src
			if m.old != "" {
				if strings.Count(s.Kernels, m.old) != 1 {
					t.Fatalf("the mutation's anchor %q is not in 0001's kernels once", m.old)
				}
				s.Kernels = strings.Replace(s.Kernels, m.old, m.new, 1)
				if strings.Contains(m.new, "PCIE_ON_GPU") {
					s.Kernels = "#ifdef __CUDA_ARCH__\n#define PCIE_ON_GPU 1\n#else\n#define PCIE_ON_GPU 0\n#endif\n" + s.Kernels
				}
			}
			tree, _ := pushTree(t, s, m.bytesOK)
			rep, err := judgeMem(t, tree)
			if m.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if rep.Pushed < 9 || len(rep.Notes) != 0 {
					t.Errorf("push kernels run: %d (want push1, push2 and island at every world size), notes %q", rep.Pushed, rep.Notes)
				}
				return
			}
			if !IsRuleError(err) {
				t.Fatalf("err = %v, want a rule refusal", err)
			}
			for _, part := range strings.Split(m.want, "|") {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("refusal %q\ndoes not hold %q", err, part)
				}
			}
		})
	}
}

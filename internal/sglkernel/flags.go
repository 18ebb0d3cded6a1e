package sglkernel

// CUDAFlags are the nvcc flags sgl-kernel's CMakeLists.txt passes to its
// CUDA sources in every era (SGL_KERNEL_CUDA_FLAGS, less the gencode list
// and the flags that depend on the CUDA version or the archs), and the
// ones that matter for the allreduce translation unit: the C++ standard,
// -DNDEBUG and the other definitions, position-independent code, and
// nvcc's relaxed-constexpr and extended-lambda modes. `build --check`
// compiles with them, and the gate rule's C++ judge takes the standard and
// every definition from here (package gaterule).
// Upstream: sgl-kernel/CMakeLists.txt@84118acf50b3 (SGL_KERNEL_CUDA_FLAGS),
// also at 8905cbd42f4a.
// Upstream: python/sglang/kernels/aot/CMakeLists.txt@0bda0b168ad5 (SGL_KERNEL_CUDA_FLAGS).
var CUDAFlags = []string{
	"-std=c++17", "-O3", "-DNDEBUG", "-DOPERATOR_NAMESPACE=sgl-kernel",
	"-DFLASHINFER_ENABLE_F16", "-DCUTE_USE_PACKED_TUPLE=1", "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1",
	"-DCUTLASS_VERSIONS_GENERATED", "-DCUTLASS_TEST_LEVEL=0", "-DCUTLASS_TEST_ENABLE_CACHED_RESULTS=1",
	"-DCUTLASS_DEBUG_TRACE_LEVEL=0",
	"-Xcompiler", "-fPIC", "--expt-relaxed-constexpr", "--expt-extended-lambda",
}

// Defines are CUDAFlags' definitions (-DNDEBUG and the rest), as -D flags:
// what the gate rule's judges compile the dispatch and kernels with.
func Defines() []string {
	var out []string
	for _, f := range CUDAFlags {
		if len(f) > 2 && f[:2] == "-D" {
			out = append(out, f)
		}
	}
	return out
}

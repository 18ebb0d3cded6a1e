// Package kernels builds sgl-kernel from an arpatch-patched SGLang tree:
// it probes the CUDA toolchain, plans the upstream wheel build restricted
// to the requested archs, runs it with a log and a progress bar, caches the
// result under a content-addressed key with a manifest, compiles the
// allreduce translation unit alone as a fast check, and builds a small
// torch extension of the patched allreduce for the micro-benchmark.
//
// Upstream facts it relies on (the sgl-kernel project's CMake files;
// internal/sglkernel finds which): the wheel is built by scikit-build-core
// (`uv build --wheel --no-build-isolation`), cmake/utils.cmake
// clear_cuda_arches strips torch's gencode flags so TORCH_CUDA_ARCH_LIST
// has no effect, the gencode list is hard-coded in SGL_KERNEL_CUDA_FLAGS,
// SGL_KERNEL_COMPILE_THREADS sets nvcc --threads, and third-party sources
// come from FetchContent at configure time. It does not patch or bench.
//
// Upstream: sgl-kernel/CMakeLists.txt@84118acf50b3 (SGL_KERNEL_CUDA_FLAGS,
// SGL_KERNEL_COMPILE_THREADS, FetchContent_Declare), also at 8905cbd42f4a.
// Upstream: python/sglang/kernels/aot/CMakeLists.txt@c32c4ef79cf5 (the
// same), also at 0bda0b168ad5.
package kernels

import (
	"strconv"
	"strings"
)

// Version is a dotted version, e.g. 13.0.88.
type Version []int

// ParseVersion reads the leading dotted number of s ("13.0.88",
// "2.11.0+cu130" gives 2.11.0). It returns nil when s has none.
func ParseVersion(s string) Version {
	var v Version
	for _, part := range strings.Split(s, ".") {
		n := 0
		digits := 0
		for _, c := range part {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
			digits++
		}
		if digits == 0 {
			break
		}
		v = append(v, n)
		if digits < len(part) {
			break
		}
	}
	return v
}

func (v Version) String() string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ".")
}

// Major returns the first component, or -1.
func (v Version) Major() int {
	if len(v) == 0 {
		return -1
	}
	return v[0]
}

// Minor returns the second component, or 0 when v has none.
func (v Version) Minor() int {
	if len(v) < 2 {
		return 0
	}
	return v[1]
}

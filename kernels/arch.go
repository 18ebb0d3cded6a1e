// Package kernels builds sgl-kernel from an arpatch-patched SGLang tree:
// it probes the CUDA toolchain, plans the upstream wheel build restricted
// to the requested archs, runs it with a log and a progress bar, caches the
// result under a content-addressed key with a manifest, compiles the
// allreduce translation unit alone as a fast check, and builds a small
// torch extension of the patched allreduce for the micro-benchmark.
//
// Upstream facts it relies on (the sgl-kernel project's CMakeLists.txt:
// sgl-kernel/CMakeLists.txt@84118acf50b3 and @8905cbd42f4a,
// python/sglang/kernels/aot/CMakeLists.txt@c32c4ef79cf5 and @0bda0b168ad5;
// internal/sglkernel finds which): the wheel is built by scikit-build-core (`uv build --wheel
// --no-build-isolation`), cmake/utils.cmake clear_cuda_arches strips
// torch's gencode flags so TORCH_CUDA_ARCH_LIST has no effect, the gencode
// list is hard-coded in SGL_KERNEL_CUDA_FLAGS, SGL_KERNEL_COMPILE_THREADS
// sets nvcc --threads, and third-party sources come from FetchContent at
// configure time. It does not patch or bench.
package kernels

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Arch is a CUDA architecture name without "sm_": "120a", "90a", "80".
type Arch string

// Gencode returns nvcc's flag for the arch, e.g.
// "-gencode=arch=compute_120a,code=sm_120a".
func (a Arch) Gencode() string {
	return fmt.Sprintf("-gencode=arch=compute_%s,code=sm_%s", a, a)
}

// SM returns "sm_120a".
func (a Arch) SM() string { return "sm_" + string(a) }

// minNVCC gives the oldest nvcc (major*10+minor) that compiles each arch,
// from NVIDIA's CUDA release notes: sm_90a since 12.0, sm_100a and sm_120a
// since 12.8, sm_103a and sm_121a since 12.9, sm_110a since 13.0.
var minNVCC = map[Arch]int{
	"75": 100, "80": 110, "86": 111, "87": 114, "89": 118, "90": 118, "90a": 120,
	"100": 128, "100a": 128, "100f": 129, "101a": 128, "103a": 129, "110a": 130,
	"120": 128, "120a": 128, "120f": 129, "121a": 129,
}

// ParseArchs splits "120a,90a" (or a list of such) into sorted, unique
// archs. It returns an error naming an arch arpatch does not know; "sm_"
// prefixes are accepted and dropped.
func ParseArchs(list []string) ([]Arch, error) {
	seen := map[Arch]bool{}
	var out []Arch
	for _, item := range list {
		for _, s := range strings.Split(item, ",") {
			s = strings.TrimPrefix(strings.TrimSpace(s), "sm_")
			if s == "" {
				continue
			}
			a := Arch(s)
			if _, ok := minNVCC[a]; !ok {
				return nil, fmt.Errorf("unknown CUDA arch %q; use names like 120a (sm_120a, RTX PRO 6000 Blackwell) or 90a (sm_90a, H100/H200)", s)
			}
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CUDA arch given; pass --arch, e.g. --arch 120a")
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// ArchStrings returns the archs as strings.
func ArchStrings(as []Arch) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a)
	}
	return out
}

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

// majorMinor returns major*10+minor for comparisons with minNVCC.
func (v Version) majorMinor() int {
	if len(v) < 2 {
		return v.Major() * 10
	}
	return v[0]*10 + v[1]
}

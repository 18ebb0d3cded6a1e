// Package cudaarch is arpatch's one table of CUDA architectures: each
// arch's name ("120a", written "sm_120a" by nvcc and cuobjdump), its
// -gencode flag, its TORCH_CUDA_ARCH_LIST spelling, the compute
// capability of the GPUs that run it, and the oldest nvcc that compiles
// it. Recipe validation, `arpatch build` (flags, gencode filter, toolchain
// check), `doctor` and the nightly's arch check all read it; nothing else
// lists archs. It does not probe GPUs or toolchains.
//
// Source of the nvcc minimums: NVIDIA's CUDA Toolkit release notes (sm_90a
// since 12.0, sm_100a and sm_120a since 12.8, the f family, sm_103a and
// sm_121a since 12.9, sm_110a since 13.0).
package cudaarch

import (
	"fmt"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/internal/lazyre"
)

// Arch is a CUDA architecture name without "sm_": "120a", "90a", "80".
type Arch string

// info is one row of the table.
type info struct {
	arch    Arch
	minNVCC [2]int // oldest nvcc (major, minor) that compiles the arch
}

// table lists every arch arpatch accepts, by compute capability, then
// plain, "a" (arch-specific) and "f" (family) variants.
var table = []info{
	{"75", [2]int{10, 0}}, {"80", [2]int{11, 0}}, {"86", [2]int{11, 1}}, {"87", [2]int{11, 4}},
	{"89", [2]int{11, 8}}, {"90", [2]int{11, 8}}, {"90a", [2]int{12, 0}},
	{"100", [2]int{12, 8}}, {"100a", [2]int{12, 8}}, {"100f", [2]int{12, 9}}, {"101a", [2]int{12, 8}},
	{"103a", [2]int{12, 9}}, {"110a", [2]int{13, 0}},
	{"120", [2]int{12, 8}}, {"120a", [2]int{12, 8}}, {"120f", [2]int{12, 9}}, {"121a", [2]int{12, 9}},
}

func lookup(a Arch) (info, bool) {
	i := slices.IndexFunc(table, func(r info) bool { return r.arch == a })
	if i < 0 {
		return info{}, false
	}
	return table[i], true
}

// Known returns every arch arpatch accepts, in table order.
func Known() []Arch {
	out := make([]Arch, len(table))
	for i, r := range table {
		out[i] = r.arch
	}
	return out
}

// Known reports whether a is in the table (without "sm_").
func (a Arch) Known() bool {
	_, ok := lookup(a)
	return ok
}

// Canonical turns an accepted spelling ("120a", "sm_120a", " sm_120a ")
// into the table's name and reports whether it is known.
func Canonical(s string) (Arch, bool) {
	a := Arch(strings.TrimPrefix(strings.TrimSpace(s), "sm_"))
	return a, a.Known()
}

// UnknownError is the refusal of an arch name the table does not hold.
func UnknownError(s string) error {
	return fmt.Errorf("unknown CUDA arch %q; use names like 120a (sm_120a, RTX PRO 6000 Blackwell) or 90a (sm_90a, H100/H200); known: %s", s, strings.Join(Strings(Known()), ", "))
}

// Parse splits "120a,90a" (or a list of such) into sorted, unique archs;
// "sm_" prefixes are accepted and dropped. The order is by name, so that
// a build key does not depend on how the list was written. It returns
// UnknownError for an arch the table does not hold, an error for an empty
// name beside others ("120a,,90a": a doubled, leading or trailing comma),
// as a recipe's archs refuses "", and an error asking for --arch when the
// list is empty.
func Parse(list []string) ([]Arch, error) {
	// A flag's list comes split at its commas already (["120a", "",
	// "90a"]), a recipe's or an environment variable's whole.
	parts := strings.Split(strings.Join(list, ","), ",")
	var named []string
	for _, s := range parts {
		if s = strings.TrimSpace(s); s != "" {
			named = append(named, s)
		}
	}
	if len(named) > 0 && len(named) < len(parts) {
		return nil, fmt.Errorf("%q has an empty arch name (a doubled, leading or trailing comma); write %s", strings.Join(list, ","), strings.Join(named, ","))
	}
	var out []Arch
	for _, s := range named {
		a, ok := Canonical(s)
		if !ok {
			return nil, UnknownError(s)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CUDA arch given; pass --arch, e.g. --arch 120a")
	}
	slices.Sort(out)
	return out, nil
}

// Strings returns the archs as strings.
func Strings(as []Arch) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a)
	}
	return out
}

// SM returns nvcc's name of the arch: "sm_120a".
func (a Arch) SM() string { return "sm_" + string(a) }

// Gencode returns nvcc's flag for the arch:
// "-gencode=arch=compute_120a,code=sm_120a".
func (a Arch) Gencode() string {
	return fmt.Sprintf("-gencode=arch=compute_%s,code=sm_%s", a, a)
}

// CC returns the compute capability digits of the arch, its variant
// suffix dropped: "120a" and "120f" give "120", "90" gives "90".
func (a Arch) CC() string { return strings.TrimRight(string(a), "af") }

// Torch returns TORCH_CUDA_ARCH_LIST's spelling: "120a" is "12.0a", "90a"
// "9.0a", "80" "8.0".
func (a Arch) Torch() string {
	cc := a.CC()
	if len(cc) < 2 {
		return string(a)
	}
	return cc[:len(cc)-1] + "." + cc[len(cc)-1:] + string(a)[len(cc):]
}

// MinNVCC returns the oldest nvcc (major, minor) that compiles the arch,
// and false for an arch the table does not hold.
func (a Arch) MinNVCC() (major, minor int, ok bool) {
	r, ok := lookup(a)
	return r.minNVCC[0], r.minNVCC[1], ok
}

// NVCCSupports reports whether nvcc major.minor compiles a known arch.
func (a Arch) NVCCSupports(major, minor int) bool {
	r, ok := lookup(a)
	return ok && (major > r.minNVCC[0] || major == r.minNVCC[0] && minor >= r.minNVCC[1])
}

// CCDigits turns a compute capability as nvidia-smi prints it ("12.0")
// into the digits arch names start with ("120").
func CCDigits(cc string) string { return strings.ReplaceAll(cc, ".", "") }

// ForComputeCap returns the arch to build for GPUs of compute capability
// cc as nvidia-smi prints it ("12.0", "9.0"): the arch-specific "a"
// variant when the table holds one (sm_120a: custom allreduce and
// sgl-kernel's Blackwell kernels need it), else the plain arch, and false
// when the table holds neither.
func ForComputeCap(cc string) (Arch, bool) {
	digits := Arch(CCDigits(cc))
	if (digits + "a").Known() {
		return digits + "a", true
	}
	return digits, digits.Known()
}

// Pattern is the regular expression of an arch name as tools print it
// after "sm_" or "compute_": digits, then an optional "a" or "f".
const Pattern = `[0-9]+[af]?`

// gencodeRe reads the arch out of a -gencode value: "arch=compute_90a,
// code=sm_90a" or "arch=compute_120a,code=[sm_120a,compute_120a]".
var gencodeRe = lazyre.New(`arch=compute_(` + Pattern + `)`)

// FromGencode returns the arch of a -gencode value (the text after
// "-gencode=" or "--generate-code "), known or not, or "" when v names
// none.
func FromGencode(v string) Arch {
	if m := gencodeRe().FindStringSubmatch(v); m != nil {
		return Arch(m[1])
	}
	return ""
}

// NVCCDefines are macros nvcc defines in both passes of a .cu file that a
// plain host compiler (and clang's CUDA mode) does not: __CUDACC__ and
// __NVCC__, the toolkit version (12.8, the oldest that builds sm_120a),
// and the macros of --expt-relaxed-constexpr and --expt-extended-lambda,
// which sgl-kernel passes (sglkernel.CUDAFlags), each as NAME or
// NAME=VALUE. The gate rule's judges compile with them so that a dispatch
// or a kernel that tests one sees what the real build sees.
// Source: NVIDIA's nvcc documentation (Predefined macros).
var NVCCDefines = []string{
	"__CUDACC__", "__NVCC__", "__CUDACC_VER_MAJOR__=12", "__CUDACC_VER_MINOR__=8", "__CUDACC_VER_BUILD__=93",
	"__CUDACC_RELAXED_CONSTEXPR__", "__CUDACC_EXTENDED_LAMBDA__", "_GLIBCXX_USE_CXX11_ABI=1",
}

// DeviceDefines returns the macros nvcc defines, beside NVCCDefines, in
// the device pass for a, as NAME=VALUE: __CUDA_ARCH__ (the compute
// capability times ten: 1200 for sm_120, sm_120a and sm_120f); for an
// arch-specific "a" target __CUDA_ARCH_FEAT_SM<cc>_ALL and
// __CUDA_ARCH_SPECIFIC__; for "a" and family "f" targets
// __CUDA_ARCH_FAMILY_SPECIFIC__ (nvcc 12.9 and later).
// Source: NVIDIA's nvcc documentation (Predefined macros; GPU feature list).
func (a Arch) DeviceDefines() []string {
	cc := a.CC()
	arch := cc + "0"
	out := []string{"__CUDA_ARCH__=" + arch}
	switch strings.TrimPrefix(string(a), cc) {
	case "a":
		out = append(out, "__CUDA_ARCH_FEAT_SM"+cc+"_ALL=1", "__CUDA_ARCH_SPECIFIC__="+arch, "__CUDA_ARCH_FAMILY_SPECIFIC__="+arch)
	case "f":
		out = append(out, "__CUDA_ARCH_FAMILY_SPECIFIC__="+arch)
	}
	return out
}

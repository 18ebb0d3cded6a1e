package kernels

import (
	"strings"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/lazyre"
)

// GencodeEnv names the environment variable that tells the gencode filter
// which archs to keep, e.g. ARPATCH_GENCODE_ARCHS=120a,90a.
const GencodeEnv = "ARPATCH_GENCODE_ARCHS"

// GencodeLogEnv names the file the gencode filter appends each kept arch
// to, one line per nvcc command and arch: after the build it shows which
// requested archs some translation unit was really compiled for.
const GencodeLogEnv = "ARPATCH_GENCODE_LOG"

// KeptArchs returns the archs of args' -gencode options that are in keep:
// what an nvcc command after FilterGencode compiles of the requested ones.
func KeptArchs(args []string, keep []cudaarch.Arch) []cudaarch.Arch {
	want := map[string]bool{}
	for _, a := range keep {
		want[string(a)] = true
	}
	var out []cudaarch.Arch
	for i, a := range args {
		var v string
		for _, flag := range []string{"-gencode", "--generate-code"} {
			switch {
			case strings.HasPrefix(a, flag+"="):
				v = strings.TrimPrefix(a, flag+"=")
			case a == flag && i+1 < len(args):
				v = args[i+1]
			}
		}
		if arch := string(cudaarch.FromGencode(v)); arch != "" && want[arch] {
			out = append(out, cudaarch.Arch(arch))
		}
	}
	return out
}

// FilterGencode drops nvcc -gencode options whose arch is not in keep. It
// understands "-gencode=V", "-gencode V", "--generate-code=V" and
// "--generate-code V". When a command line names none of the kept archs
// (a translation unit upstream builds for one other arch only, e.g. an
// sm_90a-only kernel), it is returned unchanged, since removing every
// -gencode would silently compile for nvcc's default arch. It returns the
// new arguments and the archs dropped.
//
// This is how arpatch restricts upstream's hard-coded gencode list
// (SGL_KERNEL_CUDA_FLAGS in the sgl-kernel project's CMakeLists.txt) without patching the
// tree: the build runs nvcc through `arpatch gencode-filter`, set as
// CMAKE_CUDA_COMPILER_LAUNCHER, the same for every arm of an A/B build.
func FilterGencode(args []string, keep []cudaarch.Arch) (out []string, dropped []string) {
	want := map[string]bool{}
	for _, a := range keep {
		want[string(a)] = true
	}
	type opt struct {
		start, n int // position and number of args
		arch     string
	}
	var opts []opt
	for i := 0; i < len(args); i++ {
		a := args[i]
		for _, flag := range []string{"-gencode", "--generate-code"} {
			switch {
			case strings.HasPrefix(a, flag+"="):
				opts = append(opts, opt{i, 1, string(cudaarch.FromGencode(strings.TrimPrefix(a, flag+"=")))})
			case a == flag && i+1 < len(args):
				opts = append(opts, opt{i, 2, string(cudaarch.FromGencode(args[i+1]))})
				i++
			}
		}
	}
	anyKept := false
	for _, o := range opts {
		if want[o.arch] {
			anyKept = true
		}
	}
	if !anyKept {
		return args, nil
	}
	skip := map[int]bool{}
	for _, o := range opts {
		if !want[o.arch] {
			dropped = append(dropped, o.arch)
			for k := 0; k < o.n; k++ {
				skip[o.start+k] = true
			}
		}
	}
	for i, a := range args {
		if !skip[i] {
			out = append(out, a)
		}
	}
	return out, dropped
}

// upstreamGencodeRe matches a -gencode flag as upstream's CMake files
// write them.
var upstreamGencodeRe = lazyre.New(`-gencode=arch=compute_(` + cudaarch.Pattern + `),code=sm_`)

// UpstreamArchs lists the archs named by -gencode strings in a CMake file's
// text, in order of first appearance: what upstream would compile.
func UpstreamArchs(cmake string) []cudaarch.Arch {
	seen := map[string]bool{}
	var out []cudaarch.Arch
	for _, m := range upstreamGencodeRe().FindAllStringSubmatch(cmake, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, cudaarch.Arch(m[1]))
		}
	}
	return out
}

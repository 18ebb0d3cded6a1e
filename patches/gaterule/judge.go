package gaterule

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Report is what the judge found on a tree it accepted.
type Report struct {
	// Notes say what the judge could not check on this machine, and why
	// (no clang++, no python3, a Python side it could not import).
	Notes []string
	// Admitted lists where the gates admit custom allreduce on PCIe-only
	// GPUs, one line per world size and environment.
	Admitted []string
	// Constructions counts the CustomAllreduce objects the C++ judge
	// built and called; Calls the allreduce calls it made; Pushed the
	// push kernels it ran on the CPU (push.go).
	Constructions, Calls, Pushed int
}

// requirement is one place where the Python gates admit custom allreduce
// on PCIe-only GPUs: there the dispatch must launch one kernel of a
// non-empty grid, or throw, at every size up to UpTo.
type requirement struct {
	Env       map[string]string // the environment the gates ran under
	WS        int
	KernelEnv map[string]string // what sgl-kernel's constructor reads
	NVL       bool              // the full_nvlink the gates hand to sgl-kernel
	UpTo, Cap uint64
	AllRanks  bool   // check every rank, not only rank 0
	Why       string // how the gates were judged
}

func (r requirement) where() string {
	env := "no variable set"
	if len(r.Env) > 0 {
		var kv []string
		for _, k := range sortedKeys(r.Env) {
			kv = append(kv, k+"="+expandValue(r.Env[k], r.WS))
		}
		env = strings.Join(kv, " ")
	}
	return fmt.Sprintf("world size %d, %s", r.WS, env)
}

// defaultCap is SGLang's custom allreduce buffer, in bytes, where the
// gates do not say: CustomAllreduce._MAX_CAR_SIZE.
// Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3 (CustomAllreduce._MAX_CAR_SIZE)
const defaultCap = 8192 * 1024

// Judge applies the rule to a patched tree: where SGLang's Python gates,
// imported from the tree and run on an emulated PCIe-only host, admit
// custom allreduce, CustomAllreduce::allreduce as the real build compiles
// it must launch exactly one kernel of a non-empty grid, or throw, on
// every call (see the package doc). It returns a *DispatchError when the
// tree fails, an error when the tree cannot be read, else what it found.
func Judge(ctx context.Context, in Input) (*Report, error) {
	rep := &Report{}
	disps, looked, err := findDispatches(in)
	if err != nil {
		return nil, err
	}
	var cxs []*cxxJudge
	var names []string
	for _, d := range disps {
		cx, err := prepareCxx(ctx, in, d, rep)
		if err != nil {
			return nil, err
		}
		if cx == nil {
			continue
		}
		n, err := cx.probeNames(ctx)
		if err != nil {
			return nil, err
		}
		names = union(names, n)
		cxs = append(cxs, cx)
	}
	reqs, err := requirements(ctx, in, names, rep)
	if err != nil || len(reqs) == 0 {
		return rep, err
	}
	if len(disps) == 0 {
		return nil, &DispatchError{Problem: reqs[0].Why + " at " + reqs[0].where(), Looked: looked}
	}
	for _, r := range reqs {
		rep.Admitted = append(rep.Admitted, fmt.Sprintf("%s: up to %d bytes (%s)", r.where(), r.UpTo, r.Why))
	}
	for _, cx := range cxs {
		if err := cx.check(ctx, reqs, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func union(a, b []string) []string {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}

// findDispatches returns the dispatch headers the rule judges (every
// candidate that holds CustomAllreduce's), and where it looked.
func findDispatches(in Input) ([]string, []string, error) {
	looked := in.dispatchCandidates()
	var out []string
	for _, p := range looked {
		src, err := in.Read(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if holdsDispatch(src) {
			out = append(out, p)
		}
	}
	return out, looked, nil
}

// projectDirs are the include directories the build passes for the
// project that holds header: <project>/include and <project>/csrc, the
// project being the directory above csrc/.
func projectDirs(header string) []string {
	dir := path.Dir(header)
	for d := dir; d != "." && d != "/"; d = path.Dir(d) {
		if path.Base(d) == "csrc" {
			proj := path.Dir(d)
			return []string{path.Join(proj, "include"), d}
		}
	}
	return nil
}

// hasSGLang reports whether the tree holds SGLang's Python package.
func hasSGLang(in Input) bool {
	if _, err := in.Read("python/sglang/__init__.py"); err == nil {
		return true
	}
	if in.IsDir != nil && in.IsDir("python/sglang") {
		return true
	}
	for _, p := range in.Changed {
		if strings.HasPrefix(p, "python/sglang/") {
			return true
		}
	}
	return false
}

// blindFile is a file of the series that shapes what the real build
// runs where the gate judge cannot follow it, and why.
type blindFile struct {
	Path, Why string
}

// blindChanged returns the first file of the series (in.Changed) that
// the gate judge does not compile or run although the allreduce path
// goes through it, if any:
//   - a CMake file anywhere, or the dispatch project's pyproject, setup
//     or build script: they set the build's definitions, flags and
//     sources, which the judge takes from upstream (sglkernel.CUDAFlags);
//   - the project's include/utils.h and include/sgl_kernel_ops.h, which
//     the judge restates (cxx/utils.h) instead of compiling the tree's;
//   - the dispatch's torch binding (custom_all_reduce.cu beside it, with
//     init_custom_ar and all_reduce), the op registration
//     (csrc/common_extension*.cc) and sgl-kernel's Python wrapper
//     (sgl_kernel/allreduce.py, sgl_kernel/__init__.py): the judge calls
//     allreduce as upstream's all_reduce does, and stubs the binding;
//   - any other C, C++ or CUDA file of the project that the judge did not
//     compile (compiled: the files gather read): it links into the same
//     library, where its definitions can replace the dispatch's weak ones
//     and its static initializers run before any call.
//
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cu@84118acf50b3 (init_custom_ar, all_reduce)
// Upstream: sgl-kernel/csrc/common_extension.cc@84118acf50b3 (TORCH_LIBRARY_FRAGMENT: all_reduce)
// Upstream: sgl-kernel/python/sgl_kernel/allreduce.py@84118acf50b3 (all_reduce)
func blindChanged(in Input, header string, compiled map[string][]byte) *blindFile {
	proj := ""
	if dirs := projectDirs(header); len(dirs) > 0 {
		proj = path.Dir(dirs[0])
	}
	under := func(p string) (string, bool) {
		if proj == "" {
			return "", false
		}
		return strings.CutPrefix(p, proj+"/")
	}
	for _, p := range in.Changed {
		b := path.Base(p)
		rel, inProj := under(p)
		switch {
		case b == "CMakeLists.txt" || strings.HasSuffix(b, ".cmake"):
			return &blindFile{p, "the series changes a CMake file, which sets the build's compiler definitions; the gate judge compiles CustomAllreduce::allreduce with upstream's (sglkernel.CUDAFlags: -DNDEBUG and the rest) and cannot follow a changed build"}
		case inProj && !strings.Contains(rel, "/") && (strings.HasPrefix(b, "pyproject") && strings.HasSuffix(b, ".toml") || b == "setup.py" || b == "setup.cfg" || b == "build.sh" || b == "Makefile"):
			return &blindFile{p, "the series changes " + b + ", which sets how sgl-kernel is built (its CMake definitions and flags); the gate judge compiles CustomAllreduce::allreduce with upstream's (sglkernel.CUDAFlags) and cannot follow a changed build"}
		case inProj && (rel == "include/utils.h" || rel == "include/sgl_kernel_ops.h"):
			return &blindFile{p, "the series changes " + rel + ", which the dispatch's translation unit includes; the gate judge compiles with its own restatement of it (patches/gaterule/cxx/utils.h), not the tree's, so it cannot follow the change"}
		case p == path.Join(path.Dir(header), "custom_all_reduce.cu") || inProj && strings.HasPrefix(rel, "csrc/common_extension") && strings.HasSuffix(b, ".cc"),
			strings.HasSuffix(p, "/sgl_kernel/allreduce.py") || strings.HasSuffix(p, "/sgl_kernel/__init__.py"):
			return &blindFile{p, "the series changes " + p + ", on the way from SGLang's all_reduce to CustomAllreduce::allreduce (its torch binding, its op registration or sgl-kernel's Python wrapper); the gate judge calls allreduce as upstream's all_reduce does and stubs the binding, so it cannot follow the change"}
		case inProj && cSource(b) && compiled[p] == nil:
			return &blindFile{p, "the series changes " + p + ", a source of the library the dispatch links into, which the gate judge does not compile: its definitions can replace the dispatch's weak ones and its static initializers run before any call"}
		}
	}
	return nil
}

// cSource reports whether a file name is C, C++ or CUDA source or a
// header of one.
func cSource(name string) bool {
	switch path.Ext(name) {
	case ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl", ".hip":
		return true
	}
	return false
}

// summarize joins the first few problems, in the order found, and
// counts the rest.
func summarize(problems []string, max int) string {
	if len(problems) <= max {
		return strings.Join(problems, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(problems[:max], "; "), len(problems)-max)
}

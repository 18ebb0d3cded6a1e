package kernels

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/sglkernel"
	"github.com/arpatch/arpatch/internal/shellq"
)

// CheckResult is the compile of the allreduce translation unit for one arch.
type CheckResult struct {
	// TU is the translation unit compiled, relative to the tree:
	// <project>/csrc/allreduce/custom_all_reduce.cu.
	TU      string
	Arch    cudaarch.Arch
	OK      bool
	Seconds float64
	Errors  []string // nvcc's error lines, at most 20
	Command []string
	Log     string // nvcc's whole output
}

// CheckOptions holds the inputs of Check.
type CheckOptions struct {
	Src    string
	Archs  []cudaarch.Arch
	Python string
	Env    []string
	// Parallel is how many archs compile at once; 0 means all.
	Parallel int
}

// nvccFlags are those sgl-kernel's CMakeLists.txt passes for its CUDA
// sources (SGL_KERNEL_CUDA_FLAGS) that matter for this translation unit
// (sglkernel.CUDAFlags, which the gate rule's judge compiles with too).
var nvccFlags = sglkernel.CUDAFlags

// Check compiles the allreduce translation unit of the tree's sgl-kernel
// project (sglkernel.InCheckout: sgl-kernel/ or python/sglang/kernels/aot/)
// compile-only (nvcc -c), with the project's include/ and csrc/ and
// torch's include paths and C++ ABI, once per arch, and reports time and
// errors for each. It is the minute-scale test that a patch compiles
// before an hour-long build. It returns an error only when it cannot run
// nvcc at all (toolchain problems, no single sgl-kernel project, missing
// file); compile errors are in the results.
func Check(ctx context.Context, opts CheckOptions) ([]CheckResult, *Toolchain, error) {
	proj, err := sglkernel.InCheckout(opts.Src)
	if err != nil {
		return nil, nil, err
	}
	kdir := filepath.Join(opts.Src, filepath.FromSlash(proj.Dir))
	tu := filepath.Join(opts.Src, filepath.FromSlash(proj.AllreduceTU()))
	if _, err := os.Stat(tu); err != nil {
		return nil, nil, fmt.Errorf("%s: %v; restore it (`%s`)", tu, err, shellq.Join([]string{"git", "-C", opts.Src, "checkout", "--", proj.AllreduceTU()}))
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	tc, err := Probe(ctx, ProbeOptions{Python: opts.Python, Env: env})
	if err != nil {
		return nil, nil, err
	}
	if err := tc.Validate(Needs{Archs: opts.Archs, Torch: true}); err != nil {
		return nil, tc, fmt.Errorf("--check of %s: %w", proj.AllreduceTU(), err)
	}
	tmp, err := os.MkdirTemp("", "arpatch-check-")
	if err != nil {
		return nil, tc, err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // scratch in the system temp dir
	base := append([]string{}, nvccFlags...)
	abi := "0"
	if tc.Torch.CXX11ABI {
		abi = "1"
	}
	base = append(base, "-D_GLIBCXX_USE_CXX11_ABI="+abi,
		"-I"+filepath.Join(kdir, "include"), "-I"+filepath.Join(kdir, "csrc"))
	for _, p := range tc.Torch.IncludePaths {
		base = append(base, "-I"+p)
	}
	results := make([]CheckResult, len(opts.Archs))
	par := opts.Parallel
	if par <= 0 {
		par = len(opts.Archs)
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, a := range opts.Archs {
		wg.Add(1)
		goroutine.Go(func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			argv := append([]string{tc.NVCC.Path, "-c", "-o", filepath.Join(tmp, string(a)+".o"), a.Gencode()}, base...)
			argv = append(argv, tu)
			t0 := time.Now()
			out, err := runTool(ctx, env, argv[0], argv[1:]...)
			r := CheckResult{TU: proj.AllreduceTU(), Arch: a, OK: err == nil, Seconds: time.Since(t0).Seconds(), Command: argv, Log: out}
			if err != nil {
				r.Errors = errorLines(out, 20)
				if len(r.Errors) == 0 {
					r.Errors = []string{err.Error()}
				}
			}
			results[i] = r
		})
	}
	wg.Wait()
	return results, tc, ctx.Err()
}

// errorLines keeps nvcc's lines that report errors.
func errorLines(out string, max int) []string {
	var e []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "error") || strings.Contains(l, "Error") {
			e = append(e, strings.TrimSpace(l))
			if len(e) == max {
				break
			}
		}
	}
	return e
}

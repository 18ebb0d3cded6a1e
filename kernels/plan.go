package kernels

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/sglkernel"
	"github.com/arpatch/arpatch/recipes"
)

// BuildOptions holds every input of PlanBuild and Build.
type BuildOptions struct {
	Src     string // patched SGLang checkout (arpatch apply)
	Archs   []cudaarch.Arch
	Jobs    int          // 0: one per CPU core
	Tool    recipes.Tool // recipes.ToolAuto, ToolUV or ToolPip
	Offline bool
	DepsDir string
	Python  string // interpreter of the serving environment
	// PythonFlag is the option that named Python, for the refusals
	// ("": --python).
	PythonFlag string
	Cache      Cache
	Out        string // also copy the wheel here, when set
	// Env is the environment the build starts from; nil means os.Environ().
	Env []string
	// Launcher is the argv prefix that runs nvcc through the gencode
	// filter, e.g. ["/usr/local/bin/arpatch", "gencode-filter"].
	Launcher []string
	Version  string // arpatch version, for the manifest
	// LockWait is how long a build waits for another one to leave the
	// fixed build path they share (its lock); 0 refuses at once.
	// FromRecipe sets DefaultLockWait unless told otherwise.
	LockWait time.Duration
	// Log gets the notes a build prints while it waits (the lock); nil:
	// none.
	Log io.Writer
}

// DefaultLockWait is LockWait when the caller does not choose: longer
// than a full sgl-kernel build on a small host, so that a second build
// started beside the first waits for it, as cargo waits for its build
// directory's lock.
const DefaultLockWait = 3 * time.Hour

// passthroughEnv lists the caller's variables that change what CMake,
// nvcc, the host compiler or the linker produce; their values go into the
// key. (CMake reads CC, CXX, CUDACXX, CUDAHOSTCXX, *FLAGS, CUDAARCHS,
// CMAKE_BUILD_TYPE and CMAKE_GENERATOR from the environment; nvcc reads
// NVCC_*_FLAGS; scikit-build-core reads SKBUILD_* and CMAKE_ARGS.)
var passthroughEnv = []string{
	"CMAKE_ARGS", "CMAKE_BUILD_TYPE", "CMAKE_GENERATOR", "CMAKE_TOOLCHAIN_FILE",
	"CC", "CXX", "CUDACXX", "CUDAHOSTCXX", "CUDAARCHS",
	"CFLAGS", "CXXFLAGS", "CPPFLAGS", "CUDAFLAGS", "LDFLAGS",
	"NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "TORCH_CUDA_ARCH_LIST",
}

// passthroughPrefixes are variable families that go into the key whole.
var passthroughPrefixes = []string{"SKBUILD_"}

// outputEnv returns the output-relevant variables set in env, less skip.
func outputEnv(env []string, skip ...string) map[string]string {
	out := map[string]string{}
	for _, k := range passthroughEnv {
		if v := getenv(env, k); v != "" {
			out[k] = v
		}
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range passthroughPrefixes {
			if strings.HasPrefix(k, p) && v != "" {
				out[k] = getenv(env, k)
			}
		}
	}
	for _, k := range skip {
		delete(out, k)
	}
	return out
}

// Plan is a build, decided but not run.
type Plan struct {
	Src string
	// Project is the tree's sgl-kernel project (sglkernel.InCheckout):
	// its Dir is "sgl-kernel" or "python/sglang/kernels/aot".
	Project   sglkernel.Project
	Dir       string   // where the command runs: <src>/<Project.Dir> for the wheel
	Argv      []string // with "@TMP@" where the temp output dir goes
	Env       map[string]string
	Archs     []cudaarch.Arch
	Upstream  []cudaarch.Arch // what upstream's CMakeLists would compile
	Deps      []Dep
	Toolchain *Toolchain
	Builder   string
	Jobs      int
	Inputs    Inputs
	Key       string
	State     *checkout.State
	// Problems lists why the toolchain cannot run this build; a --plan
	// prints them, a build refuses.
	Problems     error
	ProbeSeconds float64
	// Output is the glob, relative to the temp dir, of the one file the
	// build must produce: "out/*.whl" for the wheel.
	Output string
	// BuildPath is the fixed directory the compilers work in
	// (<build root>/<Inputs.BuildID()>, see makeReproducible); Stage
	// lists the tree's directories copied into BuildPath/sglang first.
	BuildPath string
	Stage     []string
	// Notes are what the plan changes in the user's environment and says
	// so, e.g. a SOURCE_DATE_EPOCH replaced by the commit's time; --plan
	// prints them.
	Notes []string
}

// startPlan begins every plan: the tree as an absolute path (set in
// opts), its apply state (refused as appliedState says), its sgl-kernel
// project (a tree with none, or more than one, is refused naming what was
// looked for), then pre (nil: none), which checks what the flags ask of
// the tree before anything is probed (an arch upstream does not compile
// is refused with its hint whatever the toolchain), the environment the
// build starts from, and the probed toolchain.
func startPlan(ctx context.Context, opts *BuildOptions, pre func(p *Plan) error) (*Plan, []string, error) {
	src, err := filepath.Abs(opts.Src)
	if err != nil {
		return nil, nil, err
	}
	opts.Src = src
	rep, err := appliedState(src)
	if err != nil {
		return nil, nil, err
	}
	if rep.KernelErr != nil {
		return nil, nil, rep.KernelErr
	}
	p := &Plan{Src: src, Project: *rep.Kernel, Archs: opts.Archs, State: rep.State}
	if pre != nil {
		if err := pre(p); err != nil {
			return nil, nil, err
		}
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	t0 := time.Now()
	tc, err := Probe(ctx, ProbeOptions{Python: opts.Python, Flag: opts.PythonFlag, Env: env, CacheFile: filepath.Join(opts.Cache.Dir, probeCacheName)})
	if err != nil {
		return nil, nil, err
	}
	p.Toolchain, p.ProbeSeconds = tc, time.Since(t0).Seconds()
	return p, env, nil
}

// probeCacheName is the file in a build cache's directory where PlanBuild
// keeps the last toolchain probe (ProbeOptions.CacheFile).
const probeCacheName = "toolchain-probe.json"

// TmpMarker stands for the per-build temp directory in Plan.Argv.
const TmpMarker = "@TMP@"

// PlanBuild decides the build of opts.Src: it reads the apply state
// (refusing a tree arpatch did not apply, or one that drifted since),
// locates the sgl-kernel project (sgl-kernel/ or python/sglang/kernels/aot/,
// read from the tree), refuses an arch upstream's CMake files do not
// compile (CheckUpstreamArchs, before the toolchain is probed, so that its
// hint shows whatever the toolchain lacks), scans its FetchContent
// dependencies, probes the toolchain and computes the cache key. Toolchain
// problems are returned in Plan.Problems, not as an error, so that --plan
// can show them.
func PlanBuild(ctx context.Context, opts BuildOptions) (*Plan, error) {
	var kdir string
	p, env, err := startPlan(ctx, &opts, func(p *Plan) error {
		kdir = filepath.Join(p.Src, filepath.FromSlash(p.Project.Dir))
		cm, err := os.ReadFile(filepath.Join(kdir, "CMakeLists.txt"))
		if err != nil {
			return fmt.Errorf("%s: %v", p.Project.Path("CMakeLists.txt"), err)
		}
		p.Upstream = UpstreamArchs(string(cm))
		return CheckUpstreamArchs(opts.Archs, p.Upstream)
	})
	if err != nil {
		return nil, err
	}
	st, tc := p.State, p.Toolchain
	deps, err := ScanDeps(kdir, p.Project.Dir)
	if err != nil {
		return nil, err
	}
	if deps, err = MapDeps(deps, opts.DepsDir, opts.Offline); err != nil {
		return nil, err
	}
	p.Dir, p.Deps, p.Output = kdir, deps, "out/*.whl"
	p.Builder, err = tc.PickBuilder(opts.Tool)
	if err != nil {
		p.Problems = err
		p.Builder = string(opts.Tool)
	}
	if verr := tc.Validate(Needs{Archs: opts.Archs, Builder: p.Builder, CMake: true, Torch: true}); verr != nil && p.Problems == nil {
		p.Problems = verr
	}
	p.Jobs = opts.Jobs
	if p.Jobs <= 0 {
		p.Jobs = runtime.NumCPU()
	}
	buildEnv := outputEnv(env)
	cmakeArgs, keyArgs := wheelCMakeArgs(opts, deps, buildEnv["CMAKE_ARGS"], compileThreads(len(opts.Archs), p.Jobs))
	buildEnv["CMAKE_ARGS"] = strings.Join(keyArgs, " ")
	p.Env = map[string]string{
		"MAX_JOBS":                   strconv.Itoa(p.Jobs),
		"CMAKE_BUILD_PARALLEL_LEVEL": strconv.Itoa(p.Jobs),
		"CMAKE_ARGS":                 strings.Join(cmakeArgs, " "),
		GencodeEnv:                   strings.Join(cudaarch.Strings(opts.Archs), ","),
	}
	if home := tc.CUDAHome(); home != "" {
		p.Env["CUDA_HOME"] = home
	}
	p.Argv = wheelArgv(recipes.Tool(p.Builder), tc)
	var depIn []DepInput
	for _, d := range deps {
		depIn = append(depIn, DepInput{Name: d.Name, Repo: d.Repo, Tag: d.Tag, URLHash: d.URLHash, Commit: d.Commit})
	}
	p.Inputs = Inputs{
		Schema: KeySchema, Kind: KindWheel, Commit: st.Commit, Series: st.Series, Project: p.Project.Dir,
		Patches: patchInputs(st), Archs: cudaarch.Strings(opts.Archs), Builder: p.Builder, Offline: opts.Offline,
		Deps: depIn, BuildEnv: buildEnv, Toolchain: tc.Versions(p.Builder),
	}
	p.Key = p.Inputs.Key()
	if err := makeReproducible(p, env, opts.Launcher); err != nil {
		return nil, err
	}
	return p, nil
}

// compileThreads is SGL_KERNEL_COMPILE_THREADS: one nvcc thread per arch,
// as many as the CPUs left to each of the jobs allow, at least 1.
func compileThreads(archs, jobs int) int {
	threads := archs
	if max := runtime.NumCPU() / jobs; threads > max {
		threads = max
	}
	if threads < 1 {
		threads = 1
	}
	return threads
}

// wheelCMakeArgs returns the wheel's CMAKE_ARGS (cmake) and the part of
// them that enters the cache key (key): the compile threads, ccache off,
// the gencode filter as CUDA compiler launcher, each dependency's
// FETCHCONTENT_SOURCE_DIR, offline's FETCHCONTENT_FULLY_DISCONNECTED, and
// last the user's own CMAKE_ARGS (user), so that theirs win.
func wheelCMakeArgs(opts BuildOptions, deps []Dep, user string, threads int) (cmake, key []string) {
	cmake = []string{
		"-DSGL_KERNEL_COMPILE_THREADS=" + strconv.Itoa(threads),
		"-DENABLE_CCACHE=OFF",
		cmakeArg("-DCMAKE_CUDA_COMPILER_LAUNCHER=" + strings.Join(opts.Launcher, ";")),
	}
	key = []string{"-DENABLE_CCACHE=OFF"}
	for _, d := range deps {
		switch {
		case d.Archive != "":
			// Unpacked into the build's temp dir, whose path may need
			// the quotes once the marker is replaced.
			cmake = append(cmake, "'-D"+d.Var()+"="+d.Dir+"'")
		case d.Dir != "":
			cmake = append(cmake, cmakeArg("-D"+d.Var()+"="+d.Dir))
		}
	}
	if opts.Offline {
		cmake = append(cmake, "-DFETCHCONTENT_FULLY_DISCONNECTED=ON")
		key = append(key, "-DFETCHCONTENT_FULLY_DISCONNECTED=ON")
	}
	if user != "" {
		cmake = append(cmake, user)
		key = append(key, user)
	}
	return cmake, key
}

// wheelArgv is the command that builds the wheel with builder (uv build
// unless pip), into TmpMarker/out with its build dir TmpMarker/build.
func wheelArgv(builder recipes.Tool, tc *Toolchain) []string {
	switch builder {
	case recipes.ToolPip:
		return []string{tc.Python.Path, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v",
			"--wheel-dir", TmpMarker + "/out", "-Cbuild-dir=" + TmpMarker + "/build", "."}
	default:
		return []string{orName(tc.UV.Path, "uv"), "build", "--wheel", "--no-build-isolation", "--verbose",
			"--python", tc.Python.Path, "-Cbuild-dir=" + TmpMarker + "/build", "--out-dir", TmpMarker + "/out", "."}
	}
}

// CheckUpstreamArchs refuses archs upstream's CMake files (UpstreamArchs
// of the project's CMakeLists.txt) do not name: the gencode filter only drops
// -gencode options, it cannot add one, so such an arch would silently
// build upstream's whole list. The error names the arch, the nearest one
// upstream has, and the list.
func CheckUpstreamArchs(want, upstream []cudaarch.Arch) error {
	if len(upstream) == 0 {
		return nil // CMake files we cannot read for archs: nothing to check
	}
	for _, a := range want {
		if slices.Contains(upstream, a) {
			continue
		}
		hint := ""
		for _, u := range upstream {
			if u.CC() == a.CC() {
				hint = fmt.Sprintf(" (did you mean %s?)", u)
			}
		}
		return fmt.Errorf("--arch %s: upstream's CMake files do not compile %s%s; the gencode filter can only drop archs, so pick from: %s",
			a, a.SM(), hint, strings.Join(cudaarch.Strings(upstream), " "))
	}
	return nil
}

func orName(path, name string) string {
	if path == "" {
		return name
	}
	return path
}

// Command returns the argv with the temp marker replaced.
func (p *Plan) Command(tmp string) []string {
	out := make([]string, len(p.Argv))
	for i, a := range p.Argv {
		out[i] = strings.ReplaceAll(a, TmpMarker, tmp)
	}
	return out
}

// EnvList returns the plan's variables as sorted KEY=VALUE strings, with
// TmpMarker where the temp dir goes.
func (p *Plan) EnvList() []string { return p.EnvIn(TmpMarker) }

// EnvIn returns the plan's variables as sorted KEY=VALUE strings, with the
// temp marker replaced by tmp.
func (p *Plan) EnvIn(tmp string) []string {
	var out []string
	for k, v := range p.Env {
		out = append(out, k+"="+strings.ReplaceAll(v, TmpMarker, tmp))
	}
	sort.Strings(out)
	return out
}

// appliedState returns the status of src, refusing what checkout's
// BuildProblem names: a tree arpatch did not apply, one that drifted
// since, and anything that would go into the build unrecorded.
func appliedState(src string) (*checkout.StatusReport, error) {
	rep, err := checkout.Status(src, nil)
	if err != nil {
		return nil, err
	}
	if err := rep.BuildProblem(); err != nil {
		return nil, err
	}
	return rep, nil
}

func patchInputs(st *checkout.State) []PatchInput {
	out := []PatchInput{}
	for _, x := range st.Patches {
		out = append(out, PatchInput{Name: x.Name, SHA256: x.SHA256})
	}
	return out
}

// cmakeArg quotes one argument for CMAKE_ARGS, which scikit-build-core
// splits like a shell (Python's shlex): an argument with spaces or quotes
// stays one, and a plain one (most: -DVAR=/path) is left as it is, so the
// plan and the cache key read as the build sees them. Commands printed for
// a person to paste are quoted by internal/shellq instead: shlex and sh
// differ inside double quotes, which shellq uses for a word holding a
// single quote (shlex keeps the backslash of "\$", sh drops it), so
// shellq's words are not shlex's (TestCMakeArgIsShlexs).
func cmakeArg(s string) string {
	if !strings.ContainsAny(s, " \t\r\n\"'\\$`") { // shlex.whitespace, quotes, escape
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

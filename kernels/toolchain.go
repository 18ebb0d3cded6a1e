package kernels

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/internal/torchrun"
	"github.com/arpatch/arpatch/recipes"
)

// Tool is one program of the toolchain.
type Tool struct {
	Path    string `json:"path,omitempty"`    // resolved absolute path; empty when not found
	Version string `json:"version,omitempty"` // parsed version, e.g. "13.0.88"
	Raw     string `json:"raw,omitempty"`     // first line of its version output
}

// Found reports whether the tool was found and answered.
func (t Tool) Found() bool { return t.Path != "" && t.Version != "" }

// Torch describes the torch that the build's Python imports.
type Torch struct {
	Version      string   `json:"version,omitempty"` // "2.11.0+cu130"
	CUDA         string   `json:"cuda,omitempty"`    // torch.version.cuda, "13.0"
	CXX11ABI     bool     `json:"cxx11_abi"`
	IncludePaths []string `json:"include_paths,omitempty"` // torch.utils.cpp_extension.include_paths()
	Origin       string   `json:"origin,omitempty"`        // torch/__init__.py
	NCCL         string   `json:"nccl,omitempty"`          // torch.cuda.nccl.version(), when built with NCCL
	Error        string   `json:"error,omitempty"`         // why it could not be imported
}

// Toolchain is what a build depends on outside the tree. Every field goes
// into the build cache key.
type Toolchain struct {
	NVCC    Tool  `json:"nvcc"`
	Python  Tool  `json:"python"`
	Torch   Torch `json:"torch"`
	CMake   Tool  `json:"cmake"`
	Ninja   Tool  `json:"ninja"`
	UV      Tool  `json:"uv"`
	Pip     Tool  `json:"pip"`
	HostCXX Tool  `json:"host_cxx"`
	// Scripts is the interpreter's scripts directory (sysconfig's
	// "scripts" path: where `python -m pip install cmake` puts cmake),
	// named by the remedies; not part of the key.
	Scripts string `json:"scripts,omitempty"`
	// Toolkits are CUDA toolkits found in the usual places (toolkitGlobs)
	// when nvcc is not found, for the remedy; not part of the key.
	Toolkits []string `json:"-"`
	// flag names the option that chose Python, for remedies
	// (ProbeOptions.Flag); not part of the key.
	flag string
}

// pythonFlag is the option a remedy names for the interpreter.
func (tc *Toolchain) pythonFlag() string { return cmp.Or(tc.flag, "--python") }

// ProbeOptions holds the inputs of Probe.
type ProbeOptions struct {
	// Python is the interpreter of the serving environment ("": pyenv.Default).
	Python string
	// Env is the environment tools run with; nil means os.Environ().
	Env []string
	// CacheFile, when set, remembers the last probe keyed by the tools'
	// paths, sizes and modification times, so a repeat probe costs one
	// short Python start instead of a torch import.
	CacheFile string
	// Flag is the option that named Python, for the refusals: --python
	// unless told (ab build's --python-a and --python-b).
	Flag string
}

// probeScript prints the Python side of the toolchain as JSON.
const probeScript = `import json, sys
import sysconfig
out = {"python": sys.version.split()[0], "executable": sys.executable, "scripts": sysconfig.get_path("scripts")}
try:
    import pip
    out["pip"] = pip.__version__
except Exception:
    pass
try:
    import torch
    from torch.utils.cpp_extension import include_paths
    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda or "",
                    "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
                    "include_paths": include_paths(), "origin": torch.__file__}
    try:
        out["torch"]["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:
        pass
except Exception as e:
    out["torch"] = {"error": "%s: %s" % (type(e).__name__, e)}
print(json.dumps(out))
`

// fingerprintScript prints where torch would be imported from, without
// importing it.
const fingerprintScript = `import importlib.util, sys
s = importlib.util.find_spec("torch")
print(sys.executable); print(s.origin if s else "")
`

// Probe reads the versions of nvcc, Python, torch (and its CUDA and C++
// ABI), CMake, ninja, uv, pip and the host C++ compiler. A tool that is
// missing is left empty, not an error: Validate decides what a job needs.
// It returns an error only when the Python interpreter cannot run at all.
func Probe(ctx context.Context, opts ProbeOptions) (*Toolchain, error) {
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	python := pyenv.Or(opts.Python)
	flag := cmp.Or(opts.Flag, "--python")
	pyPath, err := lookPath(python, env)
	if err != nil {
		return nil, fmt.Errorf("python interpreter %q not found on PATH; pass %s with the interpreter of your serving environment", python, flag)
	}
	tools := map[string]string{"python": pyPath}
	nvccName := "nvcc"
	if home := getenv(env, "CUDA_HOME"); home != "" {
		nvccName = filepath.Join(home, "bin", "nvcc")
	}
	cxx := getenv(env, "CUDAHOSTCXX")
	if cxx == "" {
		cxx = "c++"
	}
	for name, prog := range map[string]string{"nvcc": nvccName, "cmake": "cmake", "ninja": "ninja", "uv": "uv", "cxx": cxx} {
		if p, err := lookPath(prog, env); err == nil {
			tools[name] = p
		}
	}
	var fp string
	if opts.CacheFile != "" {
		out, err := runTool(ctx, env, pyPath, "-c", fingerprintScript)
		if err == nil {
			fp = fingerprint(tools, strings.Fields(out))
			if tc := readProbeCache(opts.CacheFile, fp); tc != nil {
				tc.flag = opts.Flag
				if tools["nvcc"] == "" {
					tc.Toolkits = findToolkits()
				}
				return tc, nil
			}
		}
	}
	tc := &Toolchain{flag: opts.Flag}
	if tools["nvcc"] == "" {
		tc.Toolkits = findToolkits()
	}
	if p := tools["nvcc"]; p != "" {
		out, _ := runTool(ctx, env, p, "--version")
		tc.NVCC = Tool{Path: p, Version: ParseNVCCVersion(out), Raw: textfmt.LastLine(out)}
	}
	for name, dst := range map[string]*Tool{"cmake": &tc.CMake, "ninja": &tc.Ninja, "uv": &tc.UV, "cxx": &tc.HostCXX} {
		if p := tools[name]; p != "" {
			out, _ := runTool(ctx, env, p, "--version")
			*dst = Tool{Path: p, Version: ParseVersion(versionField(out)).String(), Raw: textfmt.FirstLine(out)}
		}
	}
	out, err := runTool(ctx, env, pyPath, "-c", probeScript)
	if err != nil {
		return nil, probeError(ctx, flag, python, pyPath, env, err, out)
	}
	if err := tc.parsePythonProbe(pyPath, out); err != nil {
		return nil, err
	}
	if opts.CacheFile != "" && fp != "" {
		writeProbeCache(opts.CacheFile, fp, tc)
	}
	return tc, nil
}

// probeError is the refusal of a --python that could not run the
// toolchain probe: what it printed (or that it printed nothing, as
// /bin/false does), and the remedy, naming an interpreter on PATH that
// imports torch when there is one (torchrun.Another).
func probeError(ctx context.Context, flag, python, pyPath string, env []string, err error, out string) error {
	what := "it printed nothing"
	if line := textfmt.LastLine(strings.TrimSpace(out)); line != "" {
		what = fmt.Sprintf("it printed %q", line)
	}
	fix := fmt.Sprintf("pass %s with the interpreter of your serving environment (the one with torch)", flag)
	if other, v := torchrun.Another(ctx, python, env); other != "" {
		fix = fmt.Sprintf("pass `%s %s` (it imports torch %s), or the interpreter of your serving environment", flag, shellq.Quote(other), v)
	}
	return fmt.Errorf("%s %s could not run the toolchain probe (%s, %v): is it a Python interpreter? %s", flag, shellq.Quote(pyPath), what, err, fix)
}

// parsePythonProbe fills Python, Pip and Torch from probeScript's JSON.
func (tc *Toolchain) parsePythonProbe(pyPath, out string) error {
	var p struct {
		Python     string `json:"python"`
		Executable string `json:"executable"`
		Scripts    string `json:"scripts"`
		Pip        string `json:"pip"`
		Torch      Torch  `json:"torch"`
	}
	line := textfmt.LastLine(out)
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		return fmt.Errorf("%s: unexpected toolchain probe output %q: %v", pyPath, line, err)
	}
	tc.Python = Tool{Path: pyPath, Version: p.Python, Raw: p.Executable}
	tc.Scripts = p.Scripts
	if p.Pip != "" {
		tc.Pip = Tool{Path: pyPath, Version: p.Pip, Raw: "pip " + p.Pip}
	}
	tc.Torch = p.Torch
	return nil
}

var nvccRelease = lazyre.New(`release (\d+\.\d+), V(\d+\.\d+\.\d+)`)

// ParseNVCCVersion reads "13.0.88" from `nvcc --version` output ("Cuda
// compilation tools, release 13.0, V13.0.88"); "" when absent.
func ParseNVCCVersion(out string) string {
	if m := nvccRelease().FindStringSubmatch(out); m != nil {
		return m[2]
	}
	return ""
}

// versionField finds the first token of the output that starts with a
// digit: "cmake version 4.4.3" gives "4.4.3", "uv 0.11.15 (...)" gives
// "0.11.15", "1.13.2.git.kitware" gives it whole.
func versionField(out string) string {
	for _, f := range strings.Fields(textfmt.FirstLine(out)) {
		if f[0] >= '0' && f[0] <= '9' {
			return f
		}
	}
	return ""
}

func runTool(ctx context.Context, env []string, prog string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := procgroup.Command(ctx, 0, prog, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// lookPath resolves prog against env's PATH (not this process's).
func lookPath(prog string, env []string) (string, error) {
	if strings.Contains(prog, "/") {
		abs, err := filepath.Abs(prog)
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable file", abs)
		}
		return abs, nil
	}
	for _, dir := range filepath.SplitList(getenv(env, "PATH")) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return filepath.Abs(p)
		}
	}
	return "", exec.ErrNotFound
}

func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// fingerprint hashes each tool's path, size and modification time.
func fingerprint(tools map[string]string, extra []string) string {
	h := sha256.New()
	names := []string{"cmake", "cxx", "ninja", "nvcc", "python", "uv"}
	files := []string{}
	for _, n := range names {
		files = append(files, n+"="+tools[n])
	}
	files = append(files, extra...)
	for _, f := range files {
		p := f
		if _, v, ok := strings.Cut(f, "="); ok {
			p = v
		}
		fmt.Fprintf(h, "%s\n", f)
		if fi, err := os.Stat(p); err == nil {
			fmt.Fprintf(h, "%d %d\n", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

type probeCache struct {
	Fingerprint string     `json:"fingerprint"`
	Toolchain   *Toolchain `json:"toolchain"`
}

func readProbeCache(file, fp string) *Toolchain {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var pc probeCache
	if json.Unmarshal(b, &pc) != nil || pc.Fingerprint != fp {
		return nil
	}
	return pc.Toolchain
}

func writeProbeCache(file, fp string, tc *Toolchain) {
	b, err := json.Marshal(probeCache{Fingerprint: fp, Toolchain: tc})
	if err == nil {
		// A cache of the probe: one that failed to write costs the next
		// run a probe, nothing else.
		_ = safefs.WriteFile(file, b, 0o644)
	}
}

// Needs says which tools a job requires.
type Needs struct {
	Archs   []cudaarch.Arch
	Builder string // recipes.ToolUV or ToolPip's word, or "" when the job builds no wheel
	CMake   bool   // the wheel build needs cmake and ninja
	Ninja   bool   // torch.utils.cpp_extension needs ninja
	Torch   bool
}

// ToolchainError is a toolchain that cannot do the job, with the remedy.
type ToolchainError struct {
	Problems []string
}

func (e *ToolchainError) Error() string {
	return "the toolchain cannot build this:\n  " + strings.Join(e.Problems, "\n  ")
}

// Validate refuses a toolchain that cannot do the job: no nvcc, an nvcc
// too old for an arch (sm_120a needs nvcc >= 12.8; see cudaarch's table), torch
// missing, torch built for another CUDA major than nvcc's (the extension
// would not load), or no cmake, ninja or build frontend. It returns a
// *ToolchainError listing every problem with its remedy.
func (tc *Toolchain) Validate(n Needs) error {
	var probs []string
	nv := ParseVersion(tc.NVCC.Version)
	if !tc.NVCC.Found() {
		probs = append(probs, tc.noNVCC(n.Archs))
	} else {
		for _, a := range n.Archs {
			if !a.NVCCSupports(nv.Major(), nv.Minor()) {
				major, minor, _ := a.MinNVCC()
				probs = append(probs, fmt.Sprintf("%s needs nvcc >= %d.%d, but %s is %s; install CUDA %d.%d or newer and set CUDA_HOME",
					a.SM(), major, minor, tc.NVCC.Path, tc.NVCC.Version, major, minor))
			}
		}
	}
	if n.Torch || n.Builder != "" {
		switch {
		case tc.Torch.Version == "":
			why := tc.Torch.Error
			if why == "" {
				why = "not installed"
			}
			probs = append(probs, fmt.Sprintf("%s cannot import torch (%s); pass %s with the interpreter of your serving environment", tc.Python.Path, why, tc.pythonFlag()))
		case tc.Torch.CUDA == "":
			probs = append(probs, fmt.Sprintf("torch %s is a CPU-only build; install a CUDA build of torch", tc.Torch.Version))
		case tc.NVCC.Found() && ParseVersion(tc.Torch.CUDA).Major() != nv.Major():
			probs = append(probs, fmt.Sprintf("torch %s is built for CUDA %s but nvcc is %s: a kernel built this way fails to load (CUDA 13 trees have hit a hard-coded libcudart.so.12); use nvcc %d.x or a torch built for CUDA %d",
				tc.Torch.Version, tc.Torch.CUDA, tc.NVCC.Version, ParseVersion(tc.Torch.CUDA).Major(), nv.Major()))
		}
	}
	if n.CMake {
		if !tc.CMake.Found() {
			probs = append(probs, tc.noTool("cmake", "the wheel build needs it"))
		}
		if !tc.Ninja.Found() {
			probs = append(probs, tc.noTool("ninja", "the wheel build needs it"))
		}
	}
	if n.Ninja && !n.CMake && !tc.Ninja.Found() {
		probs = append(probs, tc.noTool("ninja", "torch.utils.cpp_extension needs it"))
	}
	switch recipes.Tool(n.Builder) {
	case recipes.ToolUV:
		if !tc.UV.Found() {
			probs = append(probs, "uv not found on PATH; install it, or build with --tool pip")
		}
	case recipes.ToolPip:
		if !tc.Pip.Found() {
			probs = append(probs, fmt.Sprintf("%s has no pip; install pip there, or build with --tool uv", tc.Python.Path))
		}
	}
	if len(probs) > 0 {
		return &ToolchainError{Problems: probs}
	}
	return nil
}

// PickBuilder resolves recipes.ToolAuto to uv when present, else pip.
func (tc *Toolchain) PickBuilder(tool recipes.Tool) (string, error) {
	switch tool {
	case recipes.ToolUV, recipes.ToolPip:
		return string(tool), nil
	case "", recipes.ToolAuto:
		if tc.UV.Found() {
			return string(recipes.ToolUV), nil
		}
		if tc.Pip.Found() {
			return string(recipes.ToolPip), nil
		}
		return "", errors.New("neither uv nor pip is available to build the wheel; install uv (https://docs.astral.sh/uv/) or pip")
	}
	return "", fmt.Errorf("--tool %q: use %s", tool, recipes.ToolsText)
}

// noTool is the refusal of a build tool (cmake, ninja) missing from
// PATH, with a remedy that runs as printed: install it into the serving
// interpreter's environment with that interpreter's pip (its PyPI
// package has the tool's name), then put the interpreter's scripts
// directory, where pip puts the tool, first on PATH.
func (tc *Toolchain) noTool(name, why string) string {
	py := shellq.Path(tc.Python.Path)
	if tc.Scripts == "" || !tc.Pip.Found() {
		return fmt.Sprintf("%s not found on PATH (%s); install it and put it on PATH", name, why)
	}
	return fmt.Sprintf("%s not found on PATH (%s); install it with %s's pip and put its scripts directory on PATH: `%s -m pip install %s`, then `export PATH=%s:\"$PATH\"`",
		name, why, tc.Python.Path, py, name, shellq.Quote(tc.Scripts))
}

// toolkitGlobs are where CUDA toolkits are usually installed, each
// holding bin/nvcc.
var toolkitGlobs = []string{"/usr/local/cuda*/bin/nvcc", "/opt/cuda*/bin/nvcc", "/opt/nvidia/cuda*/bin/nvcc"}

// findToolkits returns the directories of the CUDA toolkits toolkitGlobs
// finds (each one's bin/nvcc an executable file), sorted, without
// duplicates (a /usr/local/cuda link to a versioned directory is kept
// as it is named).
func findToolkits() []string {
	var out []string
	for _, g := range toolkitGlobs {
		ms, _ := filepath.Glob(g)
		for _, m := range ms {
			if fi, err := os.Stat(m); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				out = append(out, filepath.Dir(filepath.Dir(m)))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// noNVCC is the refusal of a toolchain without nvcc. A toolkit found in
// the usual places is named with the export that makes arpatch use it;
// else the remedy says what to install for the archs asked.
func (tc *Toolchain) noNVCC(archs []cudaarch.Arch) string {
	const head = "nvcc not found (looked in $CUDA_HOME/bin and PATH)"
	if len(tc.Toolkits) > 0 {
		// /usr/local/cuda is the toolkit's installer's link to the one in
		// use; else the last by name.
		home := tc.Toolkits[len(tc.Toolkits)-1]
		if slices.Contains(tc.Toolkits, "/usr/local/cuda") {
			home = "/usr/local/cuda"
		}
		return fmt.Sprintf("%s; found a CUDA toolkit at %s: `export CUDA_HOME=%s`", head, strings.Join(tc.Toolkits, ", "), shellq.Quote(home))
	}
	need, newest := "", [2]int{}
	for _, a := range archs {
		if major, minor, ok := a.MinNVCC(); ok && (major > newest[0] || major == newest[0] && minor > newest[1]) {
			newest = [2]int{major, minor}
			need = fmt.Sprintf(" %d.%d or newer (for %s)", major, minor, a.SM())
		}
	}
	return fmt.Sprintf("%s; install the CUDA toolkit%s, then set CUDA_HOME to its directory (the one holding bin/nvcc)", head, need)
}

// CUDAHome is the CUDA installation nvcc belongs to, for CUDA_HOME: the
// directory above the real nvcc's bin/, through symlinks (/usr/bin/nvcc
// pointing into /usr/local/cuda-13.0). "" when no nvcc was found.
func (tc *Toolchain) CUDAHome() string {
	if tc.NVCC.Path == "" {
		return ""
	}
	nvcc := tc.NVCC.Path
	if real, err := filepath.EvalSymlinks(nvcc); err == nil {
		nvcc = real
	}
	return filepath.Dir(filepath.Dir(nvcc))
}

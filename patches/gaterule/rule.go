package gaterule

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Tags a series' patches may carry in series.toml (`provides`).
const (
	TagDispatchBranch = "pcie-dispatch-branch"
	TagGateBypass     = "pcie-gate-bypass"
)

// GateFiles are the Python files that hold SGLang's two custom allreduce
// gates (init time and per call), repository-relative.
var GateFiles = []string{
	"python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py",
	"python/sglang/srt/distributed/device_communicators/custom_all_reduce.py",
}

// DispatchBase is the file name of the kernel header that holds
// CustomAllreduce::allreduce.
const DispatchBase = "custom_all_reduce.cuh"

// DispatchPaths are where upstream has kept that header: eras A and B, and
// era C from c32c4ef79cf5 on. They are looked at when the tree cannot list
// its files; otherwise every file of the tree named DispatchBase is a
// candidate (see Judge).
var DispatchPaths = []string{
	"sgl-kernel/csrc/allreduce/" + DispatchBase,
	"python/sglang/kernels/aot/csrc/allreduce/" + DispatchBase,
}

// WorldSizes are the world sizes the judge runs the gates and the
// dispatch at: every one from 2 to 8 GPUs a host has, not only those
// upstream's custom allreduce supports (bounds.WorldSizes): a series may
// widen what the gates admit, and where they admit 3, 5 or 7 the dispatch
// must launch or throw there too.
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3
// (CustomAllreduce::allreduce: REDUCE_CASE(2), (4), (6), (8), else a throw).
var WorldSizes = []int{2, 3, 4, 5, 6, 7, 8}

// IsGateFile reports whether p is one of GateFiles.
func IsGateFile(p string) bool { return slices.Contains(GateFiles, p) }

// IsDispatchFile reports whether p is named like the dispatch header.
func IsDispatchFile(p string) bool { return path.Base(p) == DispatchBase }

// Reader reads one file of the patched tree, repository-relative; a
// missing file (or a directory) is an error wrapping fs.ErrNotExist.
type Reader func(path string) ([]byte, error)

// Input is the patched tree the rule judges, in memory, before anything
// is written.
type Input struct {
	// Read reads the patched tree.
	Read Reader
	// IsDir reports whether a path is a directory of the tree; nil when the
	// tree cannot say, and then a directory without __init__.py is not a
	// Python namespace package to the judge.
	IsDir func(path string) bool
	// BlobID returns, without reading it, the git blob id (hex SHA-1 of
	// "blob LEN\x00" and the bytes, as `git hash-object` gives it) of the
	// file Read would return at path, where the tree holds it (a commit's
	// tree entry, a clean file's index entry); "" and no error where it
	// does not (the file is then read and hashed); an error wrapping
	// fs.ErrNotExist where Read would give one. The cached Python answers
	// are found by these ids (verdicts.go), so an id must name the bytes
	// Read returns. nil: every file is read.
	BlobID func(path string) (string, error)
	// Paths are where to look for the dispatch header besides
	// DispatchPaths: the files the series changes and, when the tree can
	// list them, every file of the tree named DispatchBase.
	Paths []string
	// Changed are the files the series changes.
	Changed []string
	// Declared is whether the series says it opens the gates or branches
	// the dispatch (TagGateBypass or TagDispatchBranch).
	Declared bool
}

// touchesGates reports whether the series changes SGLang's Python side
// (a file under python/sglang/, the gates' package or anything it may
// import) or says it opens the gates: where the Python judge cannot run,
// the gates of such a series are taken as open.
func (in Input) touchesGates() bool {
	if in.Declared || in.unfollowedPython() != "" {
		return true
	}
	for _, p := range in.Changed {
		if strings.HasPrefix(p, "python/sglang/") && strings.HasSuffix(p, ".py") {
			return true
		}
	}
	return false
}

// dispatchCandidates are the files named DispatchBase among in.Paths and
// DispatchPaths, sorted, each once.
func (in Input) dispatchCandidates() []string {
	var out []string
	for _, p := range append(append([]string(nil), in.Paths...), DispatchPaths...) {
		if IsDispatchFile(p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// holdsDispatch reports whether a header is CustomAllreduce's (it names
// the class or switches on world_size_), not another kernel's file of the
// same name (the JIT custom allreduce v2 keeps one).
func holdsDispatch(src []byte) bool {
	return bytes.Contains(src, []byte("CustomAllreduce")) || switchRe.Match(src)
}

var switchRe = regexp.MustCompile(`switch\s*\(\s*world_size_\s*\)`)

// DispatchError is the rule's refusal: Path is the file it names (the
// dispatch header, a gate module, or "" when no dispatch was found),
// Problem what was found, Remedy what would make it pass.
type DispatchError struct {
	Path    string
	Problem string
	Remedy  string
	Looked  []string // where it looked, when no dispatch was found
}

func (e *DispatchError) Error() string {
	if e.Path == "" && len(e.Looked) > 0 {
		return fmt.Sprintf("the patched tree admits SGLang's custom allreduce on PCIe-only GPUs (%s), but it has no %s holding CustomAllreduce::allreduce (looked at %s), so arpatch cannot check that those calls get a kernel; nothing was changed",
			e.Problem, DispatchBase, strings.Join(e.Looked, ", "))
	}
	where := ""
	if e.Path != "" {
		where = "in " + e.Path + " as patched, "
	}
	msg := where + e.Problem
	if e.Remedy != "" {
		msg += "; " + e.Remedy
	}
	return msg
}

// unfollowedPython returns a file of the series that Python loads but the
// Python judge does not follow (it reads the tree's .py sources), if any:
// a compiled module (.so, .pyd: Python's finder takes an extension module
// before the .py of the same name), bytecode (.pyc, .pyo: a pyc built with
// an unchecked hash is taken without looking at its source), a
// sitecustomize or usercustomize (run at interpreter start from any
// sys.path entry) and a .pth file (run from a site directory).
func (in Input) unfollowedPython() string {
	for _, p := range in.Changed {
		b := path.Base(p)
		switch path.Ext(b) {
		case ".so", ".pyd", ".pyc", ".pyo", ".pth":
			return p
		}
		if b == "sitecustomize.py" || b == "usercustomize.py" {
			return p
		}
	}
	return ""
}

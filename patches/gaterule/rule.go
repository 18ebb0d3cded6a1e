package gaterule

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
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
// candidate (see Check).
var DispatchPaths = []string{
	"sgl-kernel/csrc/allreduce/" + DispatchBase,
	"python/sglang/kernels/aot/csrc/allreduce/" + DispatchBase,
}

// IsGateFile reports whether p is one of GateFiles.
func IsGateFile(p string) bool {
	for _, g := range GateFiles {
		if p == g {
			return true
		}
	}
	return false
}

// IsDispatchFile reports whether p is named like the dispatch header.
func IsDispatchFile(p string) bool { return path.Base(p) == DispatchBase }

// Reader reads one file of the patched tree, repository-relative; a
// missing file is an error wrapping fs.ErrNotExist.
type Reader func(path string) ([]byte, error)

// DispatchError says why a patched tree's dispatch fails the rule.
type DispatchError struct {
	Path    string // the dispatch header, or "" when none was found
	Problem string
	Looked  []string // where it looked, when none was found
}

func (e *DispatchError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("the series opens SGLang's custom allreduce gates, but the tree has no %s holding CustomAllreduce::allreduce (looked at %s), so arpatch cannot check that PCIe groups above 2 GPUs get a kernel; nothing was changed",
			DispatchBase, strings.Join(e.Looked, ", "))
	}
	return fmt.Sprintf("in %s as patched, CustomAllreduce::allreduce %s; the series opens SGLang's custom allreduce gates, so a PCIe-only group would get unreduced data without an error. The dispatch must launch a kernel or throw for every world size above 2 without full NVLink",
		e.Path, e.Problem)
}

// Check judges every dispatch header of the patched tree. It looks at the
// files of paths (the files the series changes and, when the tree can list
// them, every file of the tree) and at DispatchPaths, takes those named
// DispatchBase that hold CustomAllreduce (other kernels of that name, such
// as the JIT custom allreduce v2's, do not), and follows each one's
// dispatch. It returns nil when it found at least one and each launches a
// kernel or throws at every world size in WorldSizes without full NVLink;
// otherwise a *DispatchError naming the file, the world size and the line
// where a path ends with nothing launched; or the reader's error.
func Check(read Reader, paths []string) error {
	seen := map[string]bool{}
	var cands []string
	for _, p := range append(append([]string(nil), paths...), DispatchPaths...) {
		if IsDispatchFile(p) && !seen[p] {
			seen[p] = true
			cands = append(cands, p)
		}
	}
	sort.Strings(cands)
	found := 0
	for _, p := range cands {
		src, err := read(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !holdsDispatch(src) {
			continue
		}
		found++
		d, err := judgeDispatch(src)
		if err != nil {
			return &DispatchError{Path: p, Problem: "cannot be followed: " + err.Error()}
		}
		for _, c := range d.Cases {
			if !c.OK {
				return &DispatchError{Path: p, Problem: fmt.Sprintf("at world size %d without full NVLink %s", c.WorldSize, c.Miss)}
			}
		}
	}
	if found == 0 {
		return &DispatchError{Looked: cands}
	}
	return nil
}

// holdsDispatch reports whether a header is CustomAllreduce's (it names
// the class or switches on world_size_), not another kernel's file of the
// same name.
func holdsDispatch(src []byte) bool {
	return bytes.Contains(src, []byte("CustomAllreduce")) || switchRe.Match(src)
}

var switchRe = regexp.MustCompile(`switch\s*\(\s*world_size_\s*\)`)

package gaterule

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"strings"
	"testing"
)

// dispatchFixture (testdata/dispatch.cuh.in) is a small header written
// for these tests in the shape of sgl-kernel's custom_all_reduce.cuh:
// CustomAllreduce's constructor, register_buffer and allreduce with
// upstream's signatures, a REDUCE_CASE macro with continuation lines, a KL
// launch macro, a forced algorithm read from SGLANG_CUSTOM_ALLREDUCE_ALGO,
// the world size 2 branch, the full NVLink branch, a throwing default,
// and the USE_MUSA split of era B. BRANCH is replaced by each case's code
// for the branch after `world_size_ == 2`; TOP by code before the class,
// SWITCH by code just before the switch.
var dispatchFixture = mustRead("testdata/dispatch.cuh.in")

func mustRead(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// branches: the code after `world_size_ == 2`, one line per macro line.
var (
	upstream = []string{
		"} else if (full_nvlink_) {",
		"  if ((world_size_ <= 4 && bytes < kSmall) || (world_size_ <= 8 && bytes < kSmall / 2)) {",
		"    KL(ngpus, cross_device_reduce_1stage);",
		"  } else {",
		"    KL(ngpus, cross_device_reduce_2stage);",
		"  }",
	}
	patchedElse = []string{
		"} else { /* full NVLink, or PCIe-only above 2 GPUs */",
		"  if ((world_size_ <= 4 && bytes < kSmall) || (world_size_ <= 8 && bytes < kSmall / 2)) {",
		"    KL(ngpus, cross_device_reduce_1stage);",
		"  } else {",
		"    KL(ngpus, cross_device_reduce_2stage);",
		"  }",
	}
)

// header is the fixture with branch, and top and sw in their places.
func header(branch []string, top, sw string) []byte {
	var b strings.Builder
	for _, l := range branch {
		b.WriteString("      " + l + " \\\n")
	}
	s := strings.Replace(dispatchFixture, "BRANCH\n", b.String(), 1)
	s = strings.Replace(s, "TOP\n", top, 1)
	return []byte(strings.Replace(s, "SWITCH\n", sw, 1))
}

func fixture(branch []string) []byte { return header(branch, "", "") }

func with(lines []string, from, to string) []string {
	out := append([]string(nil), lines...)
	for i, l := range out {
		out[i] = strings.Replace(l, from, to, 1)
	}
	return out
}

// The Python side (testdata/gates): SGLang's gate modules, written for
// these tests in the shape of upstream's: the init-time gate in
// can_use_custom_all_reduce_with_nvlink (NVML's NVLink status, gathered
// over the group) and the per-call gate in should_custom_ar. GATE1 and
// GATE2 mark the lines the cases edit.
const (
	gatesDir = "python/sglang/srt/distributed/device_communicators/"
	utilsPy  = gatesDir + "custom_all_reduce_utils.py"
	gatePy   = gatesDir + "custom_all_reduce.py"
)

var (
	utilsSrc = mustRead("testdata/gates/custom_all_reduce_utils.py")
	gateSrc  = mustRead("testdata/gates/custom_all_reduce.py")
)

// openGate1 and openGate2 open both gates unconditionally; forced opens
// them under SGLANG_FORCE_CUSTOM_AR_PCIE=1.
var (
	openGate1 = [2]string{"if world_size > 2 and not full_nvlink:  # GATE1", "if False:  # GATE1"}
	openGate2 = [2]string{"if self.world_size == 2 or self.full_nvlink:  # GATE2", "if True:  # GATE2"}
	forced1   = [2]string{"if world_size > 2 and not full_nvlink:  # GATE1", `if world_size > 2 and not full_nvlink and os.getenv("SGLANG_FORCE_CUSTOM_AR_PCIE") != "1":  # GATE1`}
	forced2   = [2]string{"if self.world_size == 2 or self.full_nvlink:  # GATE2", `if self.world_size == 2 or self.full_nvlink or __import__("os").getenv("SGLANG_FORCE_CUSTOM_AR_PCIE") == "1":  # GATE2`}
)

const cuhPath = "sgl-kernel/csrc/allreduce/custom_all_reduce.cuh"

// tree is a patched tree in memory: the dispatch header, the gate
// modules (each edit applied) and their packages.
type tree map[string][]byte

func pyTree(cuh []byte, edits ...[2]string) tree {
	t := tree{cuhPath: cuh}
	for _, p := range []string{"python/sglang/", "python/sglang/srt/", "python/sglang/srt/distributed/", gatesDir} {
		t[p+"__init__.py"] = nil
	}
	t["python/sglang/srt/distributed/parallel_state.py"] = []byte("# fixture: parallel_state, which the judge imports first\n")
	utils, gate := utilsSrc, gateSrc
	for _, e := range edits {
		if !strings.Contains(utils, e[0]) && !strings.Contains(gate, e[0]) {
			panic("fixture edit does not apply: " + e[0])
		}
		utils = strings.Replace(utils, e[0], e[1], 1)
		gate = strings.Replace(gate, e[0], e[1], 1)
	}
	t[utilsPy], t[gatePy] = []byte(utils), []byte(gate)
	return t
}

func (t tree) with(p, src string) tree {
	u := maps.Clone(t)
	u[p] = []byte(src)
	return u
}

func (t tree) read(p string) ([]byte, error) {
	if b, ok := t[p]; ok {
		return b, nil
	}
	return nil, fs.ErrNotExist
}

func (t tree) isDir(p string) bool {
	for k := range t {
		if strings.HasPrefix(k, p+"/") {
			return true
		}
	}
	return false
}

func (t tree) input(changed ...string) Input {
	return Input{Read: t.read, IsDir: t.isDir, Paths: []string{cuhPath}, Changed: changed}
}

// judge runs the judge on t, skipping the test where this machine lacks
// clang++ or python3 (the report's notes say which).
func judge(t *testing.T, in Input) (*Report, error) {
	t.Helper()
	if _, err := Clang(); err != nil {
		t.Skipf("%v: the C++ judge is not run here", err)
	}
	if _, err := findPython(); err != nil {
		t.Skipf("%v: the Python judge is not run here", err)
	}
	rep, err := Judge(context.Background(), in)
	var de *DispatchError
	if err != nil && !errors.As(err, &de) {
		t.Fatalf("not a refusal: %v", err)
	}
	return rep, err
}

// refused checks err against want: "" is accepted, else a refusal holding
// every part of want (split at "|").
func refused(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("accepted; want a refusal holding %q", want)
	}
	for _, part := range strings.Split(want, "|") {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("refusal %q\ndoes not hold %q", err, part)
		}
	}
}

package patches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/patches/gaterule"
	"github.com/arpatch/arpatch/patches/kernelsim"
)

// The pcie series' PCIe-only settings are read twice in each shipped
// series: by 0002 in Python (custom_all_reduce_utils.py, checked at
// CustomAllreduce init, before sgl-kernel's init_custom_ar) and by 0001 in
// C++ (CustomAllreduce's constructor, which init_custom_ar calls). These
// tests run the series' own added lines, without torch, NVML or nvcc: the
// Python block under python3 with stubs, the C++ under the host's compiler
// (patches/kernelsim), and the two must agree on every input. The push
// kernels then run on emulated ranks and every sum is checked.

// addedBlock is AddedLines, failing t where no hunk holds the block.
func addedBlock(t *testing.T, ps []*Patch, file, from, end string, inclusive bool) string {
	t.Helper()
	block, err := AddedLines(ps, file, from, end, inclusive)
	if err != nil {
		t.Fatal(err)
	}
	return block
}

// python3 is the interpreter python3 on PATH runs (pyenv.Executable),
// asked once per test binary.
var python3 = sync.OnceValues(func() (string, error) {
	py, _, err := pyenv.Executable("python3")
	return py, err
})

// eachPCIeSeries runs f on the loaded patches of every shipped series of
// the pcie family, one subtest each.
func eachPCIeSeries(t *testing.T, f func(t *testing.T, ps []*Patch)) {
	names, loaded := pcieSeries(t)
	for i, name := range names {
		t.Run(name, func(t *testing.T) { f(t, loaded[i]) })
	}
}

// pcieSeries returns the names and the loaded patches of every shipped
// series of the pcie family.
func pcieSeries(t *testing.T) (names []string, loaded [][]*Patch) {
	t.Helper()
	cat, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cat.Members("pcie") {
		ps, err := s.Load(nil)
		if err != nil {
			t.Fatalf("series %s: %v", s.Name, err)
		}
		names, loaded = append(names, s.Name), append(loaded, ps)
	}
	return names, loaded
}

// dispatchPath is the path of custom_all_reduce.cuh that the series changes
// (sgl-kernel/csrc/... or python/sglang/kernels/aot/csrc/...).
func dispatchPath(t *testing.T, ps []*Patch) string {
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if filepath.Base(fc.Path) == gaterule.DispatchBase {
				return fc.Path
			}
		}
	}
	t.Fatal("no patch changes " + gaterule.DispatchBase)
	return ""
}

// pyPrelude is what the utils block needs of its module: the names it
// uses from custom_all_reduce_utils.py's imports, stubbed.
const pyPrelude = `import logging
import os
import types
from typing import List, Optional

logger = logging.getLogger("arpatch")
torch = types.SimpleNamespace(distributed=types.SimpleNamespace(ProcessGroup=object), device=object)
pynvml = None


class _Dist:
    """torch.distributed's all_gather_object for one process: every rank
    reads what this one read, unless a test sets other = (overrides of the
    settings, islands read from NVML) for rank 1."""

    other = None

    def all_gather_object(self, out, obj, group=None):
        for i in range(len(out)):
            out[i] = obj
        if self.other is not None and len(out) > 1:
            out[1] = ({**obj[0], **self.other[0]}, self.other[1])


dist = _Dist()


def with_nvml_context(fn):
    return fn


`

// pyRunner runs JSON cases against the gate module: each case sets its
// environment and calls one of the block's functions.
const pyRunner = `
import json, logging, os, sys
sys.path.insert(0, sys.argv[1])
import gate

VARS = ("SGLANG_FORCE_CUSTOM_AR_PCIE", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES", "SGLANG_PCIE_CUSTOM_AR_ALGO",
        "SGLANG_PCIE_CUSTOM_AR_ISLANDS", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES")


class NVML:
    NVML_TOPOLOGY_SYSTEM = 50

    def __init__(self, sockets):
        self.sockets = sockets

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 40 if self.sockets[a] == self.sockets[b] else 50


records = []


class Records(logging.Handler):
    def emit(self, r):
        records.append(r.getMessage())


gate.logger.addHandler(Records())
gate._physical_device_ids = lambda group, device, world_size: list(range(world_size))
out = []
for c in json.load(sys.stdin):
    for k in VARS:
        os.environ.pop(k, None)
    os.environ.update(c.get("env") or {})
    gate.pynvml = NVML(c["sockets"]) if c.get("sockets") else None
    gate.dist.other = (c["other_env"], c.get("other_islands")) if c.get("other_env") is not None else None
    op = c["op"]
    try:
        if op == "schedule":
            v = gate.pcie_custom_ar_schedule()
        elif op == "islands":
            v = gate._pcie_parse_islands(c["raw"], c["ws"])
        elif op == "setup":
            v = gate.pcie_custom_ar_setup(None, None, c["ws"], c["max_size"], c["max_bytes"])
        elif op == "max_bytes":
            v = gate.pcie_custom_ar_max_bytes()
        elif op == "warn":
            records.clear()
            gate._pcie_custom_ar_warned = False
            gate._warn_pcie_custom_ar_forced(c["rank"], c["ws"])
            gate._warn_pcie_custom_ar_forced(c["rank"], c["ws"])
            v = list(records)
        out.append({"value": v})
    except ValueError as e:
        out.append({"error": str(e)})
print(json.dumps(out))
`

// pyCase is one call into the series' Python block; pyResult its answer.
type pyCase struct {
	Op       string            `json:"op"`
	Env      map[string]string `json:"env,omitempty"`
	Raw      string            `json:"raw,omitempty"`
	WS       int               `json:"ws,omitempty"`
	MaxSize  int64             `json:"max_size,omitempty"`
	MaxBytes int64             `json:"max_bytes,omitempty"`
	Rank     int               `json:"rank"`
	Sockets  []int             `json:"sockets,omitempty"`
	// OtherEnv and OtherIslands, when OtherEnv is set, are what rank 1
	// read: its settings where they differ from this rank's, and the
	// islands it read from NVML (nil: none).
	OtherEnv     map[string]string `json:"other_env"`
	OtherIslands *string           `json:"other_islands,omitempty"`
}

type pyResult struct {
	Value json.RawMessage `json:"value"`
	Error string          `json:"error"`
}

// runPython runs cases against ps's custom_all_reduce_utils block.
func runPython(t *testing.T, ps []*Patch, cases []pyCase) []pyResult {
	t.Helper()
	py, err := python3()
	if err != nil {
		t.Skipf("python3 not found (%v): the Python side of the PCIe settings is not checked here", err)
	}
	block := addedBlock(t, ps, "python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py",
		"# arpatch pcie series: opt-in", "def can_use_custom_all_reduce_with_nvlink(", false)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gate.py"), []byte(pyPrelude+block), 0o644); err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(cases)
	cmd := exec.Command(py, "-c", pyRunner, dir)
	cmd.Stdin = strings.NewReader(string(in))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, b)
	}
	var out []pyResult
	if err := json.Unmarshal(b, &out); err != nil || len(out) != len(cases) {
		t.Fatalf("python3: %v: %s", err, b)
	}
	return out
}

// guardedBlock is GuardedBlock on ps's custom_all_reduce.cuh, failing t
// where no hunk holds the block.
func guardedBlock(t *testing.T, ps []*Patch, marker string) string {
	t.Helper()
	block, err := GuardedBlock(ps, filepath.Base(dispatchPath(t, ps)), marker)
	if err != nil {
		t.Fatal(err)
	}
	return block
}

// seriesSource returns the series' added C++ blocks for kernelsim.
func seriesSource(t *testing.T, ps []*Patch) kernelsim.Source {
	return kernelsim.Source{
		Kernels: guardedBlock(t, ps, "// arpatch pcie series: push allreduce for PCIe-only groups"),
		Members: guardedBlock(t, ps, "enum class PcieAlgo"),
		Methods: guardedBlock(t, ps, "static const char* pcie_algo_name(PcieAlgo algo)"),
	}
}

// simDir holds this test binary's kernelsim builds (TestMain removes it).
var simDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "arpatch-patches-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	simDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir) // the test binary's own scratch
	os.Exit(code)
}

// buildSim compiles src, skipping the test when there is no compiler.
func buildSim(t *testing.T, src kernelsim.Source) *kernelsim.Sim {
	t.Helper()
	sim, err := kernelsim.Build(context.Background(), simDir, src)
	if errors.Is(err, kernelsim.ErrNoCompiler) {
		t.Skipf("%v: the series' C++ is not run here", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sim
}

// algoInputs are SGLANG_PCIE_CUSTOM_AR_ALGO values: both sides must take
// each the same way. want is the schedule as C++ prints it, or the
// refusal's reason.
var algoInputs = []struct{ raw, want string }{
	{"push1", "push1:-"},
	{"push2", "push2:-"},
	{"island", "island:-"},
	{"pull1", "pull1:-"},
	{"pull2", "pull2:-"},
	{"push1:32768,island", "push1:32768 island:-"},
	{"pull1:0,pull2", "pull1:0 pull2:-"},
	{"push1:16,push2:4096,pull2", "push1:16 push2:4096 pull2:-"},
	{"push1:18446744073709551615,pull2", "push1:- pull2:-"}, // 2**64-1 bytes: every size, as the kernel keeps it
	{"push1:0040960,island", "push1:40960 island:-"},
	{"push3", "'push3' is not an algorithm"},
	{"PUSH1", "'PUSH1' is not an algorithm"},
	{"push1 ", "'push1 ' is not an algorithm"},
	{" push1", "' push1' is not an algorithm"},
	{"auto,push1", "'auto' is not an algorithm"},
	{"push1:16,", "'' is not an algorithm"},
	{",island", "'' is not an algorithm"},
	{"push1:16,,island", "'' is not an algorithm"},
	{"push1:16;island", "the last step takes every larger size, so it has no bound"},
	{"push1:x,island", "expected a whole number of bytes"},
	{"push1:,island", "expected a whole number of bytes"},
	{"push1:+16,island", "expected a whole number of bytes"},
	{"push1:-16,island", "expected a whole number of bytes"},
	{"push1:16K,island", "expected a whole number of bytes"},
	{"push1:１６,island", "expected a whole number of bytes"}, // full-width digits
	{"push1:18446744073709551616,pull2", "expected a whole number of bytes"},
	{"push1:32,pull1:16,pull2", "the bounds must ascend"},
	{"push1:16,push2:16,pull2", "the bounds must ascend"},
	{"island:16", "the last step takes every larger size, so it has no bound"},
	{"push1:32768,island:65536", "the last step takes every larger size, so it has no bound"},
	{"push1,island", "step 'push1' needs a bound (push1:MAX_BYTES): only the last step has none"},
}

// islandInputs are SGLANG_PCIE_CUSTOM_AR_ISLANDS values at a world size.
var islandInputs = []struct {
	ws        int
	raw, want string // want: islands as "0,1/2,3", or the refusal's reason
}{
	{8, "0,1,2,3/4,5,6,7", "0,1,2,3/4,5,6,7"},
	{8, "0,2,4,6/1,3,5,7", "0,2,4,6/1,3,5,7"},
	{8, "7,6,5,4/3,2,1,0", "7,6,5,4/3,2,1,0"},
	{8, "0,1/2,3/4,5/6,7", "0,1/2,3/4,5/6,7"},
	{8, "0/1/2/3/4/5/6/7", "0/1/2/3/4/5/6/7"},
	{8, "0,1,2,3,4,5,6,7", "0,1,2,3,4,5,6,7"},
	{8, "00,1,2,3/4,5,6,7", "0,1,2,3/4,5,6,7"},
	{6, "0,1,2/3,4,5", "0,1,2/3,4,5"},
	{6, "0,1/2,3/4,5", "0,1/2,3/4,5"},
	{4, "0,3/1,2", "0,3/1,2"},
	{2, "0/1", "0/1"},
	{8, "0,1,2,3/4,5,6", "rank 7 is missing"},
	{8, "0,1/2,3,4,5/6,7", "the islands differ in size"},
	{6, "0,1,2,3/4,5", "the islands differ in size"},
	{8, "0,1,2,3/4,5,6,8", "rank 8 is not below the world size 8"},
	{4, "0,1/2,3/4,5/6,7", "rank 4 is not below the world size 4"},
	{8, "0,0,2,3/4,5,6,7", "rank 0 appears twice"},
	{8, "0,1,2,3//4,5,6,7", "a rank is missing"},
	{8, "0,1,2,3,4,5,6,7,", "a rank is missing"},
	{8, "/0,1,2,3,4,5,6,7", "a rank is missing"},
	{8, "0,1,2,3/4,5,6,7/", "a rank is missing"},
}

// islandRefusal is the part of an islands refusal both sides word alike:
// C++ names the unexpected character where Python names the whole token.
var islandsOddInputs = []string{" 0,1,2,3/4,5,6,7", "0;1,2,3/4,5,6,7", "-1,0,1,2/3,4,5,6", "1e0,2,3,4/5,6,7,0", "0,1,2,3/4,5,6,7\r", "0,1,2,3/4,5,6,７"}

func formatSchedule(steps []kernelsim.Step) string {
	var s []string
	for _, st := range steps {
		b := "-"
		if st.MaxBytes != nil {
			b = fmt.Sprint(*st.MaxBytes)
		}
		s = append(s, st.Algo+":"+b)
	}
	return strings.Join(s, " ")
}

func formatIslands(is [][]int) string {
	var s []string
	for _, island := range is {
		var r []string
		for _, x := range island {
			r = append(r, fmt.Sprint(x))
		}
		s = append(s, strings.Join(r, ","))
	}
	return strings.Join(s, "/")
}

// pySchedule turns the Python block's schedule (a list of [algo, bound or
// null], or null for auto) into formatSchedule's form.
func pySchedule(t *testing.T, v json.RawMessage) string {
	var steps [][]json.RawMessage
	if err := json.Unmarshal(v, &steps); err != nil {
		t.Fatalf("%s: %v", v, err)
	}
	if steps == nil {
		return "auto"
	}
	var s []string
	for _, st := range steps {
		var algo string
		var bound *uint64
		if err := json.Unmarshal(st[0], &algo); err != nil || json.Unmarshal(st[1], &bound) != nil {
			t.Fatalf("step %s", st)
		}
		b := "-"
		if bound != nil && *bound != math.MaxUint64 {
			b = fmt.Sprint(*bound)
		}
		s = append(s, algo+":"+b)
	}
	return strings.Join(s, " ")
}

// reason is the text of a refusal between "VAR='value': " and "; ".
var reason = regexp.MustCompile(`^(SGLANG_[A-Z0-9_]+)='(?s:.*?)': (.*?); `)

// TestPCIeSettingsAgree runs every SGLANG_PCIE_CUSTOM_AR_ALGO and
// SGLANG_PCIE_CUSTOM_AR_ISLANDS input through both the series' C++
// (CustomAllreduce's constructor on a PCIe-only group) and its Python
// (checked before init_custom_ar): both take it as the same schedule and
// islands, or both refuse it, naming the variable, for the same reason.
func TestPCIeSettingsAgree(t *testing.T) {
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		sim := buildSim(t, seriesSource(t, ps))
		ctx := context.Background()
		const name = "SGLANG_PCIE_CUSTOM_AR_ALGO"
		var cases []pyCase
		for _, in := range algoInputs {
			cases = append(cases, pyCase{Op: "schedule", Env: map[string]string{name: in.raw}})
		}
		for _, in := range islandInputs {
			cases = append(cases, pyCase{Op: "islands", Raw: in.raw, WS: in.ws})
		}
		for _, raw := range islandsOddInputs {
			cases = append(cases, pyCase{Op: "islands", Raw: raw, WS: 8})
		}
		py := runPython(t, ps, cases)
		for i, in := range algoInputs {
			c, err := sim.Parse(ctx, 8, 8<<20, map[string]string{name: in.raw})
			if err != nil {
				t.Fatal(err)
			}
			got := formatSchedule(c.Schedule)
			if c.Error != "" {
				m := reason.FindStringSubmatch(c.Error)
				if m == nil || m[1] != name || c.Kind != "invalid_argument" {
					t.Errorf("C++ %s=%q: %s %q, want std::invalid_argument naming %s", name, in.raw, c.Kind, c.Error, name)
					continue
				}
				got = m[2]
				if strings.Contains(c.Error, "expected a whole number of bytes") {
					got = "expected a whole number of bytes"
				}
			} else if c.Auto {
				t.Errorf("C++ %s=%q: auto, want an explicit schedule", name, in.raw)
			}
			if got != in.want {
				t.Errorf("C++ %s=%q: %q, want %q", name, in.raw, got, in.want)
			}
			pyGot := ""
			if e := py[i].Error; e != "" {
				m := reason.FindStringSubmatch(e)
				if m == nil || m[1] != name {
					t.Errorf("Python %s=%q: ValueError %q does not name the variable", name, in.raw, e)
					continue
				}
				pyGot = m[2]
				if strings.Contains(e, "expected a whole number of bytes") {
					pyGot = "expected a whole number of bytes"
				}
			} else {
				pyGot = pySchedule(t, py[i].Value)
			}
			if pyGot != in.want {
				t.Errorf("Python %s=%q: %q, want %q (as C++)", name, in.raw, pyGot, in.want)
			}
		}
		const islands = "SGLANG_PCIE_CUSTOM_AR_ISLANDS"
		for j, in := range islandInputs {
			r := py[len(algoInputs)+j]
			c, err := sim.Parse(ctx, in.ws, 8<<20, map[string]string{islands: in.raw})
			if err != nil {
				t.Fatal(err)
			}
			got := formatIslands(c.Islands)
			if c.Error != "" {
				m := reason.FindStringSubmatch(c.Error)
				if m == nil || m[1] != islands {
					t.Errorf("C++ %s=%q at world size %d: %q does not name the variable", islands, in.raw, in.ws, c.Error)
					continue
				}
				got = m[2]
			}
			if got != in.want {
				t.Errorf("C++ %s=%q at world size %d: %q, want %q", islands, in.raw, in.ws, got, in.want)
			}
			pyGot := ""
			if r.Error != "" {
				if m := reason.FindStringSubmatch(r.Error); m != nil && m[1] == islands {
					pyGot = m[2]
				} else {
					pyGot = r.Error
				}
			} else {
				var v [][]int
				if err := json.Unmarshal(r.Value, &v); err != nil {
					t.Fatal(err)
				}
				pyGot = formatIslands(v)
			}
			if pyGot != in.want {
				t.Errorf("Python %s=%q at world size %d: %q, want %q (as C++)", islands, in.raw, in.ws, pyGot, in.want)
			}
		}
		for j, raw := range islandsOddInputs {
			r := py[len(algoInputs)+len(islandInputs)+j]
			c, err := sim.Parse(ctx, 8, 8<<20, map[string]string{islands: raw})
			if err != nil {
				t.Fatal(err)
			}
			if c.Kind != "invalid_argument" || !strings.HasPrefix(c.Error, islands+"=") {
				t.Errorf("C++ %s=%q: %q, want it refused naming the variable", islands, raw, c.Error)
			}
			if !strings.HasPrefix(r.Error, islands+"=") {
				t.Errorf("Python %s=%q: %+v, want a ValueError naming the variable", islands, raw, r)
			}
		}
	})
}

// TestPCIeSchedule: what CustomAllreduce chooses at each size, per world
// size, islands, scratch and setting: auto's choice, its fall-through when
// an algorithm does not fit the scratch, an explicit schedule's bounds, the
// older 1-stage variable, and the refusals.
func TestPCIeSchedule(t *testing.T) {
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		sim := buildSim(t, seriesSource(t, ps))
		ctx := context.Background()
		const M = 8 << 20
		push1Max := autoPush1Max(t, ps)
		for _, c := range []struct {
			name  string
			ws    int
			cap   uint64
			env   map[string]string
			sizes []uint64
			want  string // "algo ..." for the sizes, or "error: ..." prefix
		}{
			{"auto at world size 2 is upstream's 1-stage", 2, M, nil, []uint64{16, 40960, M}, "pull1 pull1 pull1"},
			{"auto above world size 2, one island", 8, M, nil, []uint64{16, push1Max, push1Max + 16, 40960, M}, "push1 push1 push2 push2 pull2"},
			{"auto with two islands", 8, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1,2,3/4,5,6,7"}, []uint64{push1Max, push1Max + 16, 40960, 3 << 20, 4 << 20, (4 << 20) + 16}, "push1 island island island push2 pull2"},
			{"auto at world size 4 and 6", 6, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1,2/3,4,5"}, []uint64{push1Max, 40960}, "push1 island"},
			{"auto falls through when the scratch is small", 8, 4 * push1Max, nil, []uint64{16, push1Max, 2 * push1Max, 2*push1Max + 16}, "push1 push2 push2 pull2"},
			{"auto falls through from island to push2", 8, 4 * push1Max, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1,2,3/4,5,6,7"}, []uint64{push1Max + 16, 2 * push1Max, 2*push1Max + 16}, "island push2 pull2"},
			{"an explicit schedule", 8, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "push1:32768,island", "SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1/2,3/4,5/6,7"}, []uint64{32768, 32784, 1 << 20}, "push1 island island"},
			{"island with one island", 4, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "island"}, []uint64{4096}, "island"},
			{"auto spelled out", 8, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "auto"}, []uint64{16, 1 << 20}, "push1 push2"},
			{"the older 1-stage limit", 8, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "4096"}, []uint64{4096, 4112, M}, "pull1 pull2 pull2"},
			{"the older 1-stage limit at 0", 2, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "0"}, []uint64{16}, "pull2"},
			{"an explicit push that does not fit throws", 8, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "push1"}, []uint64{1 << 20, (1 << 20) + 16}, "push1 error: custom allreduce (arpatch pcie series): push1 for 1048592 bytes needs 8388736 bytes of scratch after the Signal block, and this communicator has 8388608: bound that step lower in SGLANG_PCIE_CUSTOM_AR_ALGO, or lower SGLANG_PCIE_CUSTOM_AR_MAX_BYTES"},
			{"both variables", 8, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "push2", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "0"}, nil, "error: SGLANG_PCIE_CUSTOM_AR_ALGO and SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES are both set; set one (SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=B means SGLANG_PCIE_CUSTOM_AR_ALGO=pull1:B,pull2)"},
			{"a bad older limit", 8, M, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "16K"}, nil, "error: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='16K': expected a whole number of bytes"},
		} {
			p, err := sim.Parse(ctx, c.ws, c.cap, c.env, c.sizes...)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(p.Algos, " ")
			if p.Error != "" {
				got = "error: " + p.Error
			} else if p.Scratch != c.cap {
				t.Errorf("%s: scratch %d, want %d (the allocation's size less the Signal block)", c.name, p.Scratch, c.cap)
			}
			if !strings.HasPrefix(got, c.want) {
				t.Errorf("%s: %q, want %q", c.name, got, c.want)
			}
		}
	})
}

// autoPush1Max reads kPcieAutoPush1MaxBytes from ps's 0001.
func autoPush1Max(t *testing.T, ps []*Patch) uint64 {
	t.Helper()
	m := regexp.MustCompile(`kPcieAutoPush1MaxBytes = (\d+);`).FindStringSubmatch(guardedBlock(t, ps, "enum class PcieAlgo"))
	if m == nil {
		t.Fatal("0001 defines no kPcieAutoPush1MaxBytes")
	}
	v, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPCIeScratchCheckedAtInit: the Python side refuses, at init, exactly
// the schedules that would make the kernel throw mid-serving (a push
// algorithm whose scratch does not fit at some size the gate admits).
func TestPCIeScratchCheckedAtInit(t *testing.T) {
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		sim := buildSim(t, seriesSource(t, ps))
		ctx := context.Background()
		const M = 8 << 20
		type tc struct {
			env      map[string]string
			ws       int
			maxBytes int64
		}
		var cases []tc
		for _, algo := range []string{"push1", "push2", "island", "pull1", "push1:65536,island", "push1:1048576,push2", "push2:4194304,pull2"} {
			for _, mb := range []int64{65536, 1 << 20, 2 << 20, 4 << 20, M} {
				for _, ws := range []int{2, 4, 8} {
					cases = append(cases, tc{map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": algo}, ws, mb})
					if ws == 8 {
						cases = append(cases, tc{map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": algo, "SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1,2,3/4,5,6,7"}, ws, mb})
					}
				}
			}
		}
		var pc []pyCase
		for _, c := range cases {
			pc = append(pc, pyCase{Op: "setup", Env: c.env, WS: c.ws, MaxSize: M, MaxBytes: c.maxBytes})
		}
		py := runPython(t, ps, pc)
		for i, c := range cases {
			var sizes []uint64
			for n := uint64(16); n <= uint64(c.maxBytes); n = n*2 + 16 {
				sizes = append(sizes, n-16, n)
			}
			sizes = append(sizes, uint64(c.maxBytes))
			p, err := sim.Parse(ctx, c.ws, M, c.env, sizes...)
			if err != nil {
				t.Fatal(err)
			}
			throws := ""
			for j, a := range p.Algos {
				if strings.HasPrefix(a, "error: ") && sizes[j] > 0 {
					throws = fmt.Sprintf("%d bytes: %s", sizes[j], a)
					break
				}
			}
			refused := py[i].Error
			if throws != "" && refused == "" {
				t.Errorf("%v at world size %d up to %d bytes: Python takes it, but the kernel throws at %s", c.env, c.ws, c.maxBytes, throws)
			}
			if refused != "" && !strings.HasPrefix(refused, "SGLANG_PCIE_CUSTOM_AR_ALGO: ") {
				t.Errorf("%v at world size %d up to %d bytes: %q, want a refusal naming SGLANG_PCIE_CUSTOM_AR_ALGO", c.env, c.ws, c.maxBytes, refused)
			}
			if refused != "" && throws == "" {
				t.Errorf("%v at world size %d up to %d bytes: Python refuses (%s), but the kernel runs every size", c.env, c.ws, c.maxBytes, refused)
			}
		}
	})
}

// TestPCIeIslandsFromNVML: above world size 2, with no
// SGLANG_PCIE_CUSTOM_AR_ISLANDS, the Python side reads the islands from
// NVML (GPUs within one socket) and hands them over; unequal or single
// islands hand over nothing (one island); a user's value is checked and
// kept; a pair reads nothing.
func TestPCIeIslandsFromNVML(t *testing.T) {
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		cases := []struct {
			c    pyCase
			want string
		}{
			{pyCase{Op: "setup", WS: 8, Sockets: []int{0, 0, 0, 0, 1, 1, 1, 1}}, `"0,1,2,3/4,5,6,7"`},
			{pyCase{Op: "setup", WS: 8, Sockets: []int{0, 1, 0, 1, 0, 1, 0, 1}}, `"0,2,4,6/1,3,5,7"`},
			{pyCase{Op: "setup", WS: 6, Sockets: []int{0, 0, 0, 1, 1, 1}}, `"0,1,2/3,4,5"`},
			{pyCase{Op: "setup", WS: 8, Sockets: []int{0, 0, 0, 1, 1, 1, 1, 1}}, `null`},
			{pyCase{Op: "setup", WS: 8, Sockets: []int{0, 0, 0, 0, 0, 0, 0, 0}}, `null`},
			{pyCase{Op: "setup", WS: 2, Sockets: []int{0, 1}}, `null`},
			{pyCase{Op: "setup", WS: 8, Sockets: []int{0, 0, 0, 0, 1, 1, 1, 1}, Env: map[string]string{"SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1/2,3/4,5/6,7"}}, `null`},
			{pyCase{Op: "setup", WS: 8, Sockets: []int{0, 0, 0, 0, 1, 1, 1, 1}, Env: map[string]string{"SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1,2/3,4,5,6,7"}}, `error: SGLANG_PCIE_CUSTOM_AR_ISLANDS='0,1,2/3,4,5,6,7': the islands differ in size`},
		}
		var pc []pyCase
		for _, c := range cases {
			c.c.MaxSize, c.c.MaxBytes = 8<<20, 65536
			pc = append(pc, c.c)
		}
		py := runPython(t, ps, pc)
		for i, c := range cases {
			got := string(py[i].Value)
			if py[i].Error != "" {
				got = "error: " + py[i].Error
			}
			if !strings.HasPrefix(got, c.want) {
				t.Errorf("sockets %v, env %v: %s, want %s", c.c.Sockets, c.c.Env, got, c.want)
			}
		}
	})
}

// TestPCIePushKernels runs the series' push kernels on emulated ranks at
// world sizes 2, 4, 6 and 8, in fp32, fp16 and bf16, with several island
// layouts, 1-3 blocks and sizes from one packed element up, each rank's
// calls back to back on its own stream: every element of every rank's
// output is the exact sum, with rank 0's bits.
func TestPCIePushKernels(t *testing.T) {
	layouts := map[int][]string{
		2: {"", "0/1"},
		4: {"", "0,1/2,3", "0,3/1,2", "0/1/2/3"},
		6: {"", "0,1,2/3,4,5", "0,1/2,3/4,5"},
		8: {"", "0,1,2,3/4,5,6,7", "0,1/2,3/4,5/6,7", "1,3,5,7/0,2,4,6"},
	}
	seen := map[kernelsim.Source]string{}
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		src := seriesSource(t, ps)
		if first, ok := seen[src]; ok {
			t.Logf("the same added C++ as %s: run there", first)
			return
		}
		seen[src] = t.Name()
		sim := buildSim(t, src)
		ctx := context.Background()
		var cases []kernelsim.Case
		for _, ws := range []int{2, 4, 6, 8} {
			for _, dt := range []string{"float32", "float16", "bfloat16"} {
				cases = append(cases, kernelsim.Case{DType: dt, WS: ws, Algo: "push1"}, kernelsim.Case{DType: dt, WS: ws, Algo: "push2"})
				two := layouts[ws][1]
				cases = append(cases, kernelsim.Case{DType: dt, WS: ws, Algo: "island", Islands: two})
			}
			for _, l := range layouts[ws] {
				cases = append(cases, kernelsim.Case{DType: "float32", WS: ws, Algo: "island", Islands: l})
			}
			cases = append(cases, kernelsim.Case{DType: "bfloat16", WS: ws, Algo: "mixed", Islands: layouts[ws][len(layouts[ws])-1], Calls: 40})
		}
		for i, c := range cases {
			c.Threads = 8 << (i % 2)
			c.Seed = uint32(i + 1)
			if c.Calls == 0 {
				c.Calls = 24
			}
			r, err := sim.Reduce(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK {
				t.Errorf("%s world size %d %s islands %q, %d threads: %s", c.DType, c.WS, c.Algo, c.Islands, c.Threads, r)
			}
		}
	})
}

// TestPCIePushKernelsRefuseBroken: the emulation judges by effect. Push
// kernels that skip a peer, drop a term of the sum, skip the partners, or
// leave large sizes unreduced give wrong sums, and each is caught.
func TestPCIePushKernelsRefuseBroken(t *testing.T) {
	_, loaded := pcieSeries(t)
	ps := loaded[len(loaded)-1]
	src := seriesSource(t, ps)
	for _, m := range []struct {
		name, old, new, algo, islands string
	}{
		{"push1 writes only some slots", "(rank + k) % ngpus]) + (size_t)rank * size;\n", "(rank + k) % ngpus]) + (size_t)rank * size;\n    if (k == ngpus - 1) break;\n", "push1", ""},
		{"push2 skips the reduce of one source", "for (int s = 1; s < ngpus; s++) {\n      packed_assign_add(acc, upcast(s == rank ? in[start + idx]", "for (int s = 1; s < ngpus - 1; s++) {\n      packed_assign_add(acc, upcast(s == rank ? in[start + idx]", "push2", ""},
		{"island skips its partners", "for (int k = 1; k < nk; k++) {", "for (int k = 1; k < 1; k++) {", "island", "0,1,2,3/4,5,6,7"},
		{"island reduces only small sizes", "  P* mine = get_tmp_buf<P>(self_sg);\n  pcie_barrier<ngpus, true>", "  P* mine = get_tmp_buf<P>(self_sg);\n  if (size > 64) return;\n  pcie_barrier<ngpus, true>", "island", "0,1/2,3/4,5/6,7"},
	} {
		t.Run(m.name, func(t *testing.T) {
			if strings.Count(src.Kernels, m.old) != 1 {
				t.Fatalf("the mutation's anchor %q is not in 0001's kernels once", m.old)
			}
			broken := src
			broken.Kernels = strings.Replace(src.Kernels, m.old, m.new, 1)
			broken.Narrow = true
			sim := buildSim(t, broken)
			r, err := sim.Reduce(context.Background(), kernelsim.Case{DType: "float32", WS: 8, Algo: m.algo, Islands: m.islands, Threads: 8, Seed: 7, Calls: 24})
			if err != nil {
				t.Fatal(err)
			}
			if r.OK || r.Error != "" {
				t.Errorf("broken kernel: %s, want a wrong sum found", r)
			}
		})
	}
}

// thresholdInputs are byte counts as the environment may hold them, with
// what the series' Python must make of them: a byte count, or a refusal.
var thresholdInputs = []struct {
	raw  string
	want string // the value, or "refused"
}{
	{"0", "0"},
	{"65536", "65536"},
	{"0040960", "40960"},
	{"18446744073709551615", "18446744073709551615"},
	{"18446744073709551616", "refused"},
	{"-1", "refused"},
	{"64K", "refused"},
	{"1e5", "refused"},
	{" 65536", "refused"},
	{"65536 ", "refused"},
	{"+4096", "refused"},
	{"６５５３６", "refused"}, // full-width digits: str.isdigit alone would take them
	{"abc", "refused"},
}

// TestPCIeCapAndWarning: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES (the Python cut,
// NCCL above it) and the older SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES take
// byte counts only, naming the variable otherwise; the cut's default is
// the one the docs give; rank 0 warns once, naming the cut and the
// schedule.
func TestPCIeCapAndWarning(t *testing.T) {
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		cases := []pyCase{{Op: "max_bytes"}, {Op: "max_bytes", Env: map[string]string{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": ""}}}
		for _, in := range thresholdInputs {
			cases = append(cases,
				pyCase{Op: "max_bytes", Env: map[string]string{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": in.raw}},
				pyCase{Op: "schedule", Env: map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": in.raw}})
		}
		warn := []pyCase{
			{Op: "warn", Rank: 0, WS: 8, Env: map[string]string{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "32768", "SGLANG_PCIE_CUSTOM_AR_ALGO": "push1:16384,island"}},
			{Op: "warn", Rank: 0, WS: 8},
			{Op: "warn", Rank: 1, WS: 8},
			{Op: "warn", Rank: 1, WS: 8, Env: map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "push3"}},
		}
		py := runPython(t, ps, append(cases, warn...))
		def := pcieDefaultMaxBytes(t, ps)
		for i := 0; i < 2; i++ {
			if string(py[i].Value) != def {
				t.Errorf("SGLANG_PCIE_CUSTOM_AR_MAX_BYTES %v: %s %s, want the default %s", cases[i].Env, py[i].Value, py[i].Error, def)
			}
		}
		for j, in := range thresholdInputs {
			cut, legacy := py[2+2*j], py[3+2*j]
			for _, r := range []struct {
				name string
				res  pyResult
				ok   string
			}{
				{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES", cut, in.want},
				{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES", legacy, `[["pull1", ` + in.want + `], ["pull2", null]]`},
			} {
				if in.want == "refused" {
					if !strings.HasPrefix(r.res.Error, r.name+"=") || !strings.Contains(r.res.Error, "expected a whole number of bytes") {
						t.Errorf("%s=%q: %+v, want a ValueError naming it", r.name, in.raw, r.res)
					}
				} else if string(r.res.Value) != r.ok {
					t.Errorf("%s=%q: %s %s, want %s", r.name, in.raw, r.res.Value, r.res.Error, r.ok)
				}
			}
		}
		w := py[len(cases):]
		var got [][]string
		for _, r := range w {
			var msgs []string
			_ = json.Unmarshal(r.Value, &msgs)
			got = append(got, msgs)
		}
		if len(got[0]) != 1 || !strings.Contains(got[0][0], "up to 32768 bytes") || !strings.Contains(got[0][0], "Algorithms: push1:16384,island") {
			t.Errorf("rank 0's warning %q, want one naming the cut and the schedule", got[0])
		}
		if len(got[1]) != 1 || !strings.Contains(got[1][0], "up to "+def+" bytes") || !strings.Contains(got[1][0], "the built-in schedule") {
			t.Errorf("rank 0's warning, defaults: %q", got[1])
		}
		if len(got[2]) != 0 {
			t.Errorf("rank 1 warned %q; only rank 0 warns", got[2])
		}
		if !strings.HasPrefix(w[3].Error, "SGLANG_PCIE_CUSTOM_AR_ALGO='push3'") {
			t.Errorf("rank 1 with a bad schedule: %+v, want it refused on every rank", w[3])
		}
	})
}

// pcieDefaultMaxBytes reads PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES from ps's 0002.
func pcieDefaultMaxBytes(t *testing.T, ps []*Patch) string {
	t.Helper()
	block := addedBlock(t, ps, "python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py",
		"# arpatch pcie series: opt-in", "def can_use_custom_all_reduce_with_nvlink(", false)
	m := regexp.MustCompile(`(?m)^PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES = (\d+)$`).FindStringSubmatch(block)
	if m == nil {
		t.Fatal("0002 defines no PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES")
	}
	return m[1]
}

// TestPCIeSettingsCheckedWhereRead runs 0002's lines in
// CustomAllreduce.__init__ (each series' own) under python3 with the
// series' custom_all_reduce_utils block: the kernel's settings are checked
// on every PCIe-only group (full_nvlink False), a pair without
// SGLANG_FORCE_CUSTOM_AR_PCIE included, because 0001's kernel reads them
// there; SGLANG_PCIE_CUSTOM_AR_MAX_BYTES only with the gate open (it is read
// nowhere else); an NVLink group checks none; the islands NVML shows are
// handed over above world size 2.
func TestPCIeSettingsCheckedWhereRead(t *testing.T) {
	py, err := python3()
	if err != nil {
		t.Skipf("python3 not found (%v): the Python side of the PCIe settings is not checked here", err)
	}
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		utils := addedBlock(t, ps, "python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py",
			"# arpatch pcie series: opt-in", "def can_use_custom_all_reduce_with_nvlink(", false)
		init := addedBlock(t, ps, "python/sglang/srt/distributed/device_communicators/custom_all_reduce.py",
			"# arpatch pcie series: PCIe-only groups", "            )", true)
		dir := t.TempDir()
		mod := pyPrelude + utils + "\n\nclass CustomAllreduce:\n" +
			"    def __init__(self, world_size, full_nvlink, _is_cuda=True, max_size=8 << 20, group=None, device=None):\n" +
			init + "        self.pcie_islands = pcie_islands\n"
		if err := os.WriteFile(filepath.Join(dir, "ca.py"), []byte(mod), 0o644); err != nil {
			t.Fatal(err)
		}
		script := `
import json, os, sys
sys.path.insert(0, sys.argv[1])
import ca


class NVML:
    NVML_TOPOLOGY_SYSTEM = 50

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 40 if a // 4 == b // 4 else 50


ca.pynvml = NVML()
ca._physical_device_ids = lambda group, device, world_size: list(range(world_size))
out = []
for c in json.loads(sys.argv[2]):
    for k in ("SGLANG_FORCE_CUSTOM_AR_PCIE", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES", "SGLANG_PCIE_CUSTOM_AR_ALGO",
              "SGLANG_PCIE_CUSTOM_AR_ISLANDS", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"):
        os.environ.pop(k, None)
    os.environ.update(c["env"])
    try:
        a = ca.CustomAllreduce(c["ws"], c["nvlink"])
        out.append("ok forced=%s max=%s islands=%s" % (a.pcie_forced, a.pcie_max_bytes, a.pcie_islands))
    except ValueError as e:
        out.append("ValueError: " + str(e))
print(json.dumps(out))
`
		def := pcieDefaultMaxBytes(t, ps)
		type tc struct {
			WS     int               `json:"ws"`
			NVLink bool              `json:"nvlink"`
			Env    map[string]string `json:"env"`
			want   string
		}
		cases := []tc{
			// A PCIe pair without the force variable: upstream's path, but
			// the kernel reads its settings, so a bad one is refused here.
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "16K"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='16K'"},
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "1048576\r"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='1048576\\r'"},
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "push9"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_ALGO='push9'"},
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1,2"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_ISLANDS='0,1,2'"},
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "push1"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_ALGO: push1 up to 8388608 bytes needs"},
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "0"}, "ok forced=False max=0 islands=None"},
			// The cut is read only with the gate open: unforced, it is not read.
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "64K"}, "ok forced=False max=0 islands=None"},
			{2, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "64K"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES='64K'"},
			{2, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_ALGO": "push1"}, "ok forced=True max=" + def + " islands=None"},
			{8, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "x"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='x'"},
			{8, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1"}, "ok forced=True max=" + def + " islands=0,1,2,3/4,5,6,7"},
			{8, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1/2,3/4,5/6,7"}, "ok forced=True max=" + def + " islands=None"},
			{8, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "8388608", "SGLANG_PCIE_CUSTOM_AR_ALGO": "push1"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_ALGO: push1 up to 8388608 bytes needs 67108864 bytes"},
			// NVLink: the kernel keeps upstream's rule and reads none of them.
			{8, true, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "16K", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "64K", "SGLANG_PCIE_CUSTOM_AR_ALGO": "x", "SGLANG_PCIE_CUSTOM_AR_ISLANDS": "x"}, "ok forced=False max=0 islands=None"},
		}
		in, _ := json.Marshal(cases)
		cmd := exec.Command(py, "-c", script, dir, string(in))
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3: %v\n%s\n%s", err, b, mod)
		}
		var got []string
		if err := json.Unmarshal(b, &got); err != nil || len(got) != len(cases) {
			t.Fatalf("%v: %s", err, b)
		}
		for i, c := range cases {
			if !strings.HasPrefix(got[i], c.want) {
				t.Errorf("world size %d, full_nvlink %v, %v: %s, want %s", c.WS, c.NVLink, c.Env, got[i], c.want)
			}
		}
	})
}

// TestPCIeRanksAgree: every rank of a group must run the same PCIe
// dispatch, or the kernels' barriers never meet. A variable set differently
// on another rank is refused at init, naming it; islands that another
// rank's NVML read differently (or not at all) give every rank one island.
func TestPCIeRanksAgree(t *testing.T) {
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		none := ""
		cases := []struct {
			c    pyCase
			want string
		}{
			{pyCase{OtherEnv: map[string]string{}}, `"0,1,2,3/4,5,6,7"`},
			{pyCase{OtherEnv: map[string]string{"SGLANG_PCIE_CUSTOM_AR_ALGO": "push2"}}, "error: SGLANG_PCIE_CUSTOM_AR_ALGO differs between the ranks of this group ('' against 'push2')"},
			{pyCase{OtherEnv: map[string]string{"SGLANG_PCIE_CUSTOM_AR_ISLANDS": "0,1/2,3/4,5/6,7"}}, "error: SGLANG_PCIE_CUSTOM_AR_ISLANDS differs between the ranks"},
			{pyCase{OtherEnv: map[string]string{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "1024"}}, "error: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES differs between the ranks of this group ('1024' against '65536')"},
			{pyCase{OtherEnv: map[string]string{}, OtherIslands: &none}, `null`},
		}
		var pc []pyCase
		for _, c := range cases {
			c.c.Op, c.c.WS, c.c.MaxSize, c.c.MaxBytes = "setup", 8, 8<<20, 65536
			c.c.Sockets = []int{0, 0, 0, 0, 1, 1, 1, 1}
			if c.c.OtherIslands == nil {
				s := "0,1,2,3/4,5,6,7"
				c.c.OtherIslands = &s
			}
			pc = append(pc, c.c)
		}
		py := runPython(t, ps, pc)
		for i, c := range cases {
			got := string(py[i].Value)
			if py[i].Error != "" {
				got = "error: " + py[i].Error
			}
			if !strings.HasPrefix(got, c.want) {
				t.Errorf("rank 1 with %v, islands %q: %s, want %s", c.c.OtherEnv, *pc[i].OtherIslands, got, c.want)
			}
		}
	})
}

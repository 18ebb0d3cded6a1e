// Package seriessim runs the shipped pcie series' own settings code on
// this host, without torch, NVML, a GPU or nvcc, so that tests outside
// package patches can hold what arpatch prints to what the series takes:
// 0002's Python (the custom_all_reduce_utils.py block and the lines it
// adds to CustomAllreduce.__init__) under python3 with stubs for torch,
// torch.distributed and NVML, and 0001's C++ (CustomAllreduce's pcie_*
// members) under the host's C++ compiler through patches/kernelsim.
//
// Every era's series is run from its own added lines, as embedded in the
// binary (patches.Embedded): no SGLang checkout is needed. The stubs
// gather one rank's settings as every rank's and read no NVML unless a
// case gives the ranks' sockets. What it cannot show: anything of the
// real torch or NVML, and the GPU kernels' timing.
package seriessim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/kernelsim"
	"github.com/arpatch/arpatch/patches/sglenv"
)

// The files of the series whose added lines are run.
const (
	utilsPath = "python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py"
	initPath  = "python/sglang/srt/distributed/device_communicators/custom_all_reduce.py"
	dispatch  = "custom_all_reduce.cuh"
)

// Series is one shipped series of the pcie family, its added lines.
type Series struct {
	Name string
	// Utils is 0002's custom_all_reduce_utils.py block (from its "#
	// arpatch pcie series: opt-in" comment to can_use_custom_all_reduce_with_nvlink);
	// Init the lines it adds to CustomAllreduce.__init__.
	Utils, Init string
	// CXX is 0001's added C++ as kernelsim compiles it.
	CXX kernelsim.Source
}

// Shipped returns every shipped series of the pcie family, oldest era
// first, or an error when one lacks a block this package runs.
func Shipped() ([]*Series, error) {
	cat, err := patches.Embedded()
	if err != nil {
		return nil, err
	}
	var out []*Series
	for _, s := range cat.Members("pcie") {
		ps, err := s.Load(nil)
		if err != nil {
			return nil, fmt.Errorf("series %s: %w", s.Name, err)
		}
		ss := &Series{Name: s.Name}
		var errs []error
		get := func(b string, err error) string {
			errs = append(errs, err)
			return b
		}
		ss.Utils = get(patches.AddedLines(ps, utilsPath, "# arpatch pcie series: opt-in", "def can_use_custom_all_reduce_with_nvlink(", false))
		ss.Init = get(patches.AddedLines(ps, initPath, "# arpatch pcie series: PCIe-only groups", "            )", true))
		ss.CXX.Kernels = get(patches.GuardedBlock(ps, dispatch, "// arpatch pcie series: push allreduce for PCIe-only groups"))
		ss.CXX.Members = get(patches.GuardedBlock(ps, dispatch, "enum class PcieAlgo"))
		ss.CXX.Methods = get(patches.GuardedBlock(ps, dispatch, "static const char* pcie_algo_name(PcieAlgo algo)"))
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("series %s: %w", s.Name, err)
		}
		out = append(out, ss)
	}
	if len(out) == 0 {
		return nil, errors.New("no shipped series of the pcie family")
	}
	return out, nil
}

// Python3 is the interpreter python3 on PATH runs (sys.executable, so a
// version manager's shim starts once), or exec.LookPath's error when there
// is none: callers skip then.
var Python3 = sync.OnceValues(func() (string, error) {
	py, _, err := pyenv.Executable("python3")
	return py, err
})

// Init is one construction of CustomAllreduce on a PCIe-only group
// (full_nvlink False) of WorldSize ranks with 8 MiB of max_size, under
// Env (the series' variables not in it unset), every rank reading the
// same. Sockets, when set, is each rank's CPU socket as NVML shows it.
type Init struct {
	Env       map[string]string `json:"env"`
	WorldSize int               `json:"ws"`
	Sockets   []int             `json:"sockets,omitempty"`
}

// InitResult is what __init__ made of it: the gate open (Forced), the cut
// (MaxBytes, 0 unforced) and the islands handed to the kernel (nil:
// none), or the ValueError it raised (Error).
type InitResult struct {
	Forced   bool    `json:"forced"`
	MaxBytes uint64  `json:"max_bytes"`
	Islands  *string `json:"islands"`
	Error    string  `json:"error"`
}

// prelude is what the blocks need of their modules, stubbed: the imports
// of custom_all_reduce_utils.py they use, torch.distributed's
// all_gather_object for one process, and NVML from a case's sockets.
const prelude = `import logging
import os
import types
from typing import List, Optional

logger = logging.getLogger("seriessim")
torch = types.SimpleNamespace(distributed=types.SimpleNamespace(ProcessGroup=object), device=object)
pynvml = None


class _Dist:
    def all_gather_object(self, out, obj, group=None):
        for i in range(len(out)):
            out[i] = obj


dist = _Dist()


def with_nvml_context(fn):
    return fn


`

// runner constructs CustomAllreduce for each case (JSON on stdin) and
// prints the results, or calls pcie_custom_ar_forced ("forced" cases).
// The variables' names come from sglenv.
var runner = strings.NewReplacer("{VARS}", pyStrings(sglenv.Series), "{FORCE}", pyString(sglenv.Force)).Replace(runnerText)

// pyString returns s as a Python str literal: its JSON string, which
// Python reads as the same text.
func pyString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// pyStrings returns the elements of a Python tuple of names.
func pyStrings(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pyString(n)
	}
	return strings.Join(q, ", ")
}

const runnerText = `
import json, os, sys, types
sys.path.insert(0, sys.argv[1])
import ca

VARS = ({VARS},)
FORCE = {FORCE}


class NVML:
    NVML_TOPOLOGY_SYSTEM = 50

    def __init__(self, sockets):
        self.sockets = sockets

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 40 if self.sockets[a] == self.sockets[b] else 50


ca._physical_device_ids = lambda group, device, world_size: list(range(world_size))
out = []
for c in json.load(sys.stdin):
    for k in VARS:
        os.environ.pop(k, None)
    if "forced_scan" in c:
        # pcie_custom_ar_forced itself, with os.getenv answering each value:
        # the code points ch for which it reads ch + word + ch as on.
        real = ca.os
        hits = []
        for word in c["forced_scan"]:
            got = []
            for ch in range(0x110000):
                v = chr(ch) + word + chr(ch)
                ca.os = types.SimpleNamespace(getenv=lambda k, d=None, v=v: v, environ=real.environ)
                if ca.pcie_custom_ar_forced():
                    got.append(ch)
            hits.append(got)
        ca.os = real
        out.append({"hits": hits})
        continue
    if "forced" in c:
        if c["forced"] is not None:
            os.environ[FORCE] = c["forced"]
        out.append({"forced": ca.pcie_custom_ar_forced()})
        continue
    os.environ.update(c.get("env") or {})
    ca.pynvml = NVML(c["sockets"]) if c.get("sockets") else None
    try:
        a = ca.CustomAllreduce(c["ws"], False)
        out.append({"forced": a.pcie_forced, "max_bytes": a.pcie_max_bytes, "islands": a.pcie_islands})
    except ValueError as e:
        out.append({"error": str(e)})
print(json.dumps(out))
`

// module is the Python module the runner imports: the utils block and a
// CustomAllreduce whose __init__ is the series' added lines.
func (s *Series) module() string {
	return prelude + s.Utils + "\n\nclass CustomAllreduce:\n" +
		"    def __init__(self, world_size, full_nvlink, _is_cuda=True, max_size=8 << 20, group=None, device=None):\n" +
		s.Init + "        self.pcie_islands = pcie_islands\n"
}

// run runs cases (JSON objects) through the runner under py.
func (s *Series) run(ctx context.Context, py string, cases any, out any) error {
	dir, err := os.MkdirTemp("", "seriessim-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }() // our own scratch
	if err := os.WriteFile(filepath.Join(dir, "ca.py"), []byte(s.module()), 0o644); err != nil {
		return err
	}
	in, err := json.Marshal(cases)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, py, "-c", runner, dir)
	cmd.Stdin = strings.NewReader(string(in))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr // the blocks' log warnings
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("series %s under %s: %v\n%s%s", s.Name, py, err, b, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("series %s under %s: %v: %s", s.Name, py, err, b)
	}
	return nil
}

// Construct runs each case through 0002's CustomAllreduce.__init__ lines
// under the python3 at py, one process for all.
func (s *Series) Construct(ctx context.Context, py string, cases []Init) ([]InitResult, error) {
	var out []InitResult
	if err := s.run(ctx, py, cases, &out); err != nil {
		return nil, err
	}
	if len(out) != len(cases) {
		return nil, fmt.Errorf("series %s: %d results for %d cases", s.Name, len(out), len(cases))
	}
	return out, nil
}

// ForcedAround returns, for each word, the code points c (surrogates
// included: the function reads strings, not the environment's bytes) for
// which 0002's pcie_custom_ar_forced() reads c+word+c as on, with
// os.getenv answering that value: what the series strips around a value.
func (s *Series) ForcedAround(ctx context.Context, py string, words []string) ([][]rune, error) {
	var out []struct {
		Hits [][]rune `json:"hits"`
	}
	if err := s.run(ctx, py, []map[string][]string{{"forced_scan": words}}, &out); err != nil {
		return nil, err
	}
	if len(out) != 1 || len(out[0].Hits) != len(words) {
		return nil, fmt.Errorf("series %s: no scan result", s.Name)
	}
	return out[0].Hits, nil
}

// Forced is 0002's pcie_custom_ar_forced() with SGLANG_FORCE_CUSTOM_AR_PCIE
// set to each value (nil: unset).
func (s *Series) Forced(ctx context.Context, py string, values []*string) ([]bool, error) {
	type fc struct {
		Forced *string `json:"forced"`
	}
	cases := make([]fc, len(values))
	for i, v := range values {
		cases[i] = fc{v}
	}
	var out []InitResult
	if err := s.run(ctx, py, cases, &out); err != nil {
		return nil, err
	}
	if len(out) != len(values) {
		return nil, fmt.Errorf("series %s: %d results for %d values", s.Name, len(out), len(values))
	}
	got := make([]bool, len(out))
	for i, r := range out {
		got[i] = r.Forced
	}
	return got, nil
}

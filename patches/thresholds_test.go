package patches

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/arpatch/arpatch/internal/testbin"
	"github.com/arpatch/arpatch/patches/gaterule"
)

// The PCIe dispatch's run-time thresholds are parsed twice in each shipped
// series: by 0002 in Python (custom_all_reduce_utils.py, checked at
// CustomAllreduce init) and by 0001 in C++ (CustomAllreduce's constructor,
// called from init_custom_ar). These tests run the series' own added lines,
// without torch and without nvcc: the Python block under python3 with a
// stub logger, the C++ function under the host's g++, and they must agree.

// thresholdInputs are SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES values with what
// both sides must make of them: a byte count, or a refusal.
var thresholdInputs = []struct {
	raw  string
	want int64 // -1: refused
}{
	{"0", 0},
	{"65536", 65536},
	{"0040960", 40960},
	{"18446744073709551615", -2}, // 2**64-1 (SIZE_MAX): kept
	{"18446744073709551616", -1}, // 2**64: refused by both
	{"-1", -1},
	{"64K", -1},
	{"1e5", -1},
	{" 65536", -1},
	{"65536 ", -1},
	{"+4096", -1},
	{"６５５３６", -1}, // full-width digits: Python's str.isdigit alone would take them
	{"abc", -1},
}

// addedBlock returns the lines hunk h adds from the first line containing
// from up to the first added line after it that equals end (included when
// inclusive), as one string.
func addedBlock(t *testing.T, ps []*Patch, file, from, end string, inclusive bool) string {
	t.Helper()
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if fc.Path != file {
				continue
			}
			for _, h := range fc.Hunks {
				start := -1
				for i, l := range h.New {
					if start < 0 && strings.Contains(l, from) {
						start = i
					}
					if start >= 0 && i > start && strings.TrimRight(l, "\n") == end {
						if inclusive {
							i++
						}
						return strings.Join(h.New[start:i], "")
					}
				}
			}
		}
	}
	t.Fatalf("no hunk adds %q ... %q to %s", from, end, file)
	return ""
}

// python3 is python3Path's answer, asked once per test binary.
var python3 = sync.OnceValues(python3Path)

// python3Path returns the interpreter that python3 on PATH runs
// (sys.executable): where python3 is a version manager's shim (pyenv's
// starts about 15 shell scripts before the interpreter), each test then
// starts the interpreter alone. It returns exec.LookPath's error when
// there is no python3 on PATH (the tests then skip), and the looked-up
// path itself when asking fails or names nothing (a shim with no version
// set): the tests then run that python3 and fail on its error, rather
// than skip or exec "".
func python3Path() (string, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output()
	if exe := strings.TrimSpace(string(out)); err == nil && exe != "" {
		return exe, nil
	}
	return py, nil
}

// TestPython3Path: a python3 on PATH that fails, or names no interpreter,
// is run itself, not skipped.
func TestPython3Path(t *testing.T) {
	dir := t.TempDir()
	py := filepath.Join(dir, "python3")
	t.Setenv("PATH", dir)
	for _, script := range []string{
		"#!/bin/sh\necho 'pyenv: python3: command not found' >&2\nexit 127\n",
		"#!/bin/sh\nexit 0\n", // prints no sys.executable
	} {
		if err := testbin.Write(py, []byte(script)); err != nil {
			t.Fatal(err)
		}
		if got, err := python3Path(); got != py || err != nil {
			t.Errorf("python3 on PATH is %q: python3Path() = %q, %v; want %q, nil", script, got, err, py)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if got, err := python3Path(); got != "" || err == nil {
		t.Errorf("no python3 on PATH: python3Path() = %q, %v; want LookPath's error", got, err)
	}
}

func TestPCIeThresholdsPython(t *testing.T) {
	py, err := python3()
	if err != nil {
		t.Skipf("python3 not found (%v): the Python side of the PCIe thresholds is not checked here", err)
	}
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		block := addedBlock(t, ps, "python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py",
			"# arpatch pcie series: opt-in", "def can_use_custom_all_reduce_with_nvlink(", false)
		dir := t.TempDir()
		mod := "import logging\nimport os\nfrom typing import Optional\n\nlogger = logging.getLogger('arpatch')\n\n" + block
		if err := os.WriteFile(filepath.Join(dir, "gate.py"), []byte(mod), 0o644); err != nil {
			t.Fatal(err)
		}
		var raws []string
		for _, in := range thresholdInputs {
			raws = append(raws, in.raw)
		}
		rawsJSON, _ := json.Marshal(raws)
		script := `
import json, logging, os, sys
sys.path.insert(0, sys.argv[1])
import gate
out = {}
def run(name, fn):
    try:
        v = fn()
        out[name] = {"value": v}
    except ValueError as e:
        out[name] = {"error": str(e)}
for var in ("SGLANG_PCIE_CUSTOM_AR_MAX_BYTES", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"):
    os.environ.pop(var, None)
run("max/unset", gate.pcie_custom_ar_max_bytes)
run("1stage/unset", gate.pcie_custom_ar_1stage_max_bytes)
os.environ["SGLANG_PCIE_CUSTOM_AR_MAX_BYTES"] = ""
run("max/empty", gate.pcie_custom_ar_max_bytes)
for raw in json.loads(sys.argv[2]):
    os.environ["SGLANG_PCIE_CUSTOM_AR_MAX_BYTES"] = raw
    run("max/" + raw, gate.pcie_custom_ar_max_bytes)
    os.environ["SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"] = raw
    run("1stage/" + raw, gate.pcie_custom_ar_1stage_max_bytes)
# The init-time warning reads both thresholds on every rank: a bad value
# raises there, before sgl-kernel's init_custom_ar.
os.environ["SGLANG_PCIE_CUSTOM_AR_MAX_BYTES"] = "65536"
os.environ["SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"] = "16K"
run("warn/bad-1stage", lambda: gate._warn_pcie_custom_ar_forced(1, 8))
os.environ["SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"] = "16384"
records = []
class H(logging.Handler):
    def emit(self, r):
        records.append(r.getMessage())
gate.logger.addHandler(H())
run("warn/ok", lambda: gate._warn_pcie_custom_ar_forced(0, 8))
run("warn/again", lambda: gate._warn_pcie_custom_ar_forced(0, 8))
out["warnings"] = records
print(json.dumps(out))
`
		cmd := exec.Command(py, "-c", script, dir, string(rawsJSON))
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3: %v\n%s", err, b)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		type res struct {
			Value *json.Number `json:"value"`
			Error string       `json:"error"`
		}
		get := func(k string) res {
			var r res
			if err := json.Unmarshal(got[k], &r); err != nil {
				t.Fatalf("%s: %v (%s)", k, err, got[k])
			}
			return r
		}
		if r := get("max/unset"); r.Value == nil || *r.Value != "65536" {
			t.Errorf("SGLANG_PCIE_CUSTOM_AR_MAX_BYTES unset: %+v, want the default 65536", r)
		}
		if r := get("max/empty"); r.Value == nil || *r.Value != "65536" {
			t.Errorf("SGLANG_PCIE_CUSTOM_AR_MAX_BYTES empty: %+v, want the default 65536", r)
		}
		if string(got["1stage/unset"]) != `{"value": null}` {
			t.Errorf("SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES unset: %s, want None (sgl-kernel's default)", got["1stage/unset"])
		}
		for _, in := range thresholdInputs {
			for _, v := range []string{"max", "1stage"} {
				r := get(v + "/" + in.raw)
				want := json.Number(strconv.FormatInt(in.want, 10))
				if in.want == -2 {
					want = json.Number(in.raw)
				}
				switch {
				case in.want == -1:
					name := map[string]string{"max": "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES", "1stage": "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"}[v]
					if r.Error == "" || !strings.Contains(r.Error, name+"=") || !strings.Contains(r.Error, "expected a whole number of bytes") {
						t.Errorf("%s=%q: got %+v, want a ValueError naming %s", v, in.raw, r, name)
					}
				default:
					if r.Value == nil || *r.Value != want {
						t.Errorf("%s=%q: got %+v, want %d", v, in.raw, r, in.want)
					}
				}
			}
		}
		if r := get("warn/bad-1stage"); !strings.Contains(r.Error, "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='16K'") {
			t.Errorf("init warning with a bad 1-stage limit on rank 1: %+v, want it refused on every rank", r)
		}
		var warnings []string
		if err := json.Unmarshal(got["warnings"], &warnings); err != nil {
			t.Fatal(err)
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], "up to 65536 bytes") || !strings.Contains(warnings[0], "1-stage up to 16384 bytes") {
			t.Errorf("rank 0 warnings %q, want one naming both limits", warnings)
		}
	})
}

func TestPCIeThresholdsCxx(t *testing.T) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: the C++ side of the PCIe thresholds is not checked here")
	}
	// One program holds every series' function (a namespace for each
	// distinct one), compiled once: argv[1] picks the function, argv[2]
	// is the world size.
	names, loaded := pcieSeries(t)
	cxxFn := func(t *testing.T, ps []*Patch) string {
		return addedBlock(t, ps, dispatchPath(t, ps), "static size_t pcie_1stage_max_bytes(int world_size)", "  }", true)
	}
	fns := map[string]int{}
	var src, cases strings.Builder
	src.WriteString("#include <cstdio>\n#include <cstdlib>\n#include <limits>\n#include <stdexcept>\n#include <string>\n")
	for i, ps := range loaded {
		fn := cxxFn(t, ps)
		if _, ok := fns[fn]; ok {
			continue
		}
		n := len(fns)
		fns[fn] = n
		fmt.Fprintf(&src, "namespace s%d {  // %s\nstruct CustomAllreduce {\n%s};\n}\n", n, names[i], fn)
		fmt.Fprintf(&cases, "    case %d: v = s%d::CustomAllreduce::pcie_1stage_max_bytes(ws); break;\n", n, n)
	}
	src.WriteString(`int main(int argc, char** argv) {
  int ws = std::atoi(argv[2]);
  size_t v = 0;
  try {
    switch (std::atoi(argv[1])) {
` + cases.String() + `    default: return 2;
    }
    std::printf("ok %zu\n", v);
  } catch (const std::invalid_argument& e) {
    std::printf("error %s\n", e.what());
  }
}
`)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.cc"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "t")
	if b, err := exec.Command(cxx, "-std=c++17", "-O1", "-o", bin, filepath.Join(dir, "t.cc")).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, b)
	}
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		which := strconv.Itoa(fns[cxxFn(t, ps)])
		run := func(ws int, env ...string) string {
			cmd := exec.Command(bin, which, strconv.Itoa(ws))
			cmd.Env = env
			b, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(b))
		}
		// Unset or empty: every size at world size 2, none above.
		for _, c := range []struct {
			ws   int
			env  []string
			want string
		}{
			{2, nil, "ok 18446744073709551615"},
			{4, nil, "ok 0"},
			{8, nil, "ok 0"},
			{8, []string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES="}, "ok 0"},
			{2, []string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=4096"}, "ok 4096"},
		} {
			if got := run(c.ws, c.env...); got != c.want {
				t.Errorf("world size %d, env %q: %q, want %q", c.ws, c.env, got, c.want)
			}
		}
		for _, in := range thresholdInputs {
			got := run(8, "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES="+in.raw)
			want := fmt.Sprintf("ok %d", in.want)
			switch {
			case in.want == -2:
				want = "ok " + in.raw
			case in.want == -1:
				want = "error SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='" + in.raw + "': expected a whole number of bytes"
			}
			if !strings.HasPrefix(got, want) {
				t.Errorf("SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=%q: %q, want %q...", in.raw, got, want)
			}
		}
	})
}

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

// TestPCIeThresholdsCheckedWhereRead runs 0002's lines in
// CustomAllreduce.__init__ (each series' own) under python3 with the
// series' custom_all_reduce_utils block: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES
// is checked on every PCIe-only group (full_nvlink False), a pair without
// SGLANG_FORCE_CUSTOM_AR_PCIE included, because 0001's kernel reads it
// there; SGLANG_PCIE_CUSTOM_AR_MAX_BYTES only with the gate open (it is read
// nowhere else); an NVLink group checks neither.
func TestPCIeThresholdsCheckedWhereRead(t *testing.T) {
	py, err := python3()
	if err != nil {
		t.Skipf("python3 not found (%v): the Python side of the PCIe thresholds is not checked here", err)
	}
	eachPCIeSeries(t, func(t *testing.T, ps []*Patch) {
		utils := addedBlock(t, ps, "python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py",
			"# arpatch pcie series: opt-in", "def can_use_custom_all_reduce_with_nvlink(", false)
		init := addedBlock(t, ps, "python/sglang/srt/distributed/device_communicators/custom_all_reduce.py",
			"# arpatch pcie series: PCIe-only groups", "            pcie_custom_ar_1stage_max_bytes()", true)
		dir := t.TempDir()
		mod := "import logging\nimport os\nfrom typing import Optional\n\nlogger = logging.getLogger('arpatch')\n\n" + utils +
			"\n\nclass CustomAllreduce:\n    def __init__(self, world_size, full_nvlink, _is_cuda=True):\n" + init
		if err := os.WriteFile(filepath.Join(dir, "ca.py"), []byte(mod), 0o644); err != nil {
			t.Fatal(err)
		}
		script := `
import json, os, sys
sys.path.insert(0, sys.argv[1])
import ca
cases = json.loads(sys.argv[2])
out = []
for c in cases:
    for k in ("SGLANG_FORCE_CUSTOM_AR_PCIE", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"):
        os.environ.pop(k, None)
    os.environ.update(c["env"])
    try:
        a = ca.CustomAllreduce(c["ws"], c["nvlink"])
        out.append("ok forced=%s max=%s" % (a.pcie_forced, a.pcie_max_bytes))
    except ValueError as e:
        out.append("ValueError: " + str(e))
print(json.dumps(out))
`
		type tc struct {
			WS     int               `json:"ws"`
			NVLink bool              `json:"nvlink"`
			Env    map[string]string `json:"env"`
			want   string
		}
		cases := []tc{
			// A PCIe pair without the force variable: upstream's path, but
			// the kernel reads the 1-stage limit, so a bad one is refused
			// here, naming it.
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "16K"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='16K'"},
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "1048576\r"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='1048576\\r'"},
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "0"}, "ok forced=False max=0"},
			// The cap is read only with the gate open: unforced, it changes
			// nothing and is not read.
			{2, false, map[string]string{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "64K"}, "ok forced=False max=0"},
			{2, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "64K"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES='64K'"},
			{8, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "x"}, "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='x'"},
			{8, false, map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1"}, "ok forced=True max=65536"},
			// NVLink: the kernel keeps upstream's rule and reads neither.
			{8, true, map[string]string{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES": "16K", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "64K"}, "ok forced=False max=0"},
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

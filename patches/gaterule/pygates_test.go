package gaterule

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// shadowSrc is a package custom_all_reduce/ beside custom_all_reduce.py:
// Python imports the package, whose CustomAllreduce opens both gates. No
// gate file is touched.
const shadowSrc = `import torch
import torch.distributed as dist

import sgl_kernel.allreduce as ops


class CustomAllreduce:
    def __init__(self, group, device, max_size=8192 * 1024):
        self.world_size = dist.get_world_size(group=group)
        self.max_size = max_size
        self._ptr = ops.init_custom_ar([0] * self.world_size, torch.empty(max_size), dist.get_rank(group=group), False)
        self.disabled = False

    def should_custom_ar(self, inp):
        return inp.numel() * inp.element_size() <= self.max_size

    def custom_all_reduce(self, inp):
        out = torch.empty_like(inp)
        ops.all_reduce(self._ptr, inp, out, 0, 0)
        return out
`

// monkeySrc is the distributed package's __init__ opening both gates of
// the modules below it, which it leaves untouched.
const monkeySrc = `def _open():
    from sglang.srt.distributed.device_communicators import custom_all_reduce as car
    from sglang.srt.distributed.device_communicators import custom_all_reduce_utils as utils

    def can_use(group, device, supported_world_size, cls_name):
        return False

    utils.can_use_custom_all_reduce_with_nvlink = can_use
    car.can_use_custom_all_reduce_with_nvlink = can_use
    car.CustomAllreduce.should_custom_ar = lambda self, inp: not self.disabled


_open()
`

func TestJudgeRunsThePythonGates(t *testing.T) {
	shadow := gatesDir + "custom_all_reduce/__init__.py"
	distInit := "python/sglang/srt/distributed/__init__.py"
	for _, tc := range []struct {
		name    string
		tree    tree
		changed []string
		want    string
	}{
		{"both gates opened by a package that shadows the gate module", pyTree(fixture(upstream)).with(shadow, shadowSrc), []string{shadow},
			"at world size 4, no variable set (rank 0, without full NVLink|launches no kernel"},
		{"the same with the PCIe dispatch", pyTree(fixture(patchedElse)).with(shadow, shadowSrc), []string{shadow}, ""},
		{"both gates opened from the package's __init__", pyTree(fixture(upstream)).with(distInit, monkeySrc), []string{distInit},
			"at world size 4, no variable set|launches no kernel"},
		{"a variable read at import opens them", pyTree(fixture(upstream)).with(distInit, "import os\n\nif os.environ.get(\"ARPATCH_OPEN\") == \"1\":\n"+indent(monkeySrc)), []string{distInit},
			"at world size 4, ARPATCH_OPEN=1 (rank 0|launches no kernel"},
		{"ranks that disagree", pyTree(fixture(patchedElse), openGate1, [2]string{openGate2[0], "if self.world_size == 2 or self.full_nvlink or dist.get_rank() == 0:  # GATE2"}), []string{gatePy},
			"in " + gatePy + " as patched, at world size 4, no variable set, ranks 0 and 1 admit different sizes"},
		{"an admitted call that never reaches the kernel", pyTree(fixture(patchedElse), append(open, [2]string{"        out = torch.empty_like(inp)\n", "        return inp\n"})...), []string{gatePy},
			"should_custom_ar admits 16 bytes, but custom_all_reduce returns without calling sgl-kernel's all_reduce (rank 0)"},
		{"another class than sgl-kernel's", pyTree(fixture(patchedElse)).with(gatePy, gateSrc+"\n\nclass Other(CustomAllreduce):\n    pass\n\n\ndef dispatch_custom_allreduce():\n    return Other\n").with(utilsPy, strings.Replace(utilsSrc, openGate1[0], openGate1[1], 1)), []string{gatePy},
			"the gates admit custom allreduce through Other, not sgl-kernel's CustomAllreduce"},
		{"full NVLink handed to the kernel takes its NVLink path", pyTree(fixture(upstream), append(open, [2]string{"rank, full_nvlink)", "rank, True)"})...), []string{gatePy}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := judge(t, tc.tree.input(tc.changed...))
			refused(t, err, tc.want)
		})
	}
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString("    ")
		}
		b.WriteString(l)
	}
	return b.String()
}

// Where a side cannot run, the judge says what it did not check, and
// takes the gates of a series that touches them as open.
func TestJudgeSaysWhatItDidNotCheck(t *testing.T) {
	broken := pyTree(fixture(upstream)).with(gatePy, gateSrc+"\ndef broken(:\n")
	_, err := judge(t, broken.input(gatePy))
	refused(t, err, "at world size 4, no variable set (rank 0, without full NVLink; the Python gates taken as open up to 8388608 bytes)|launches no kernel")
	rep, err := judge(t, broken.input())
	refused(t, err, "")
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "the Python gate modules did not import under the judge (SyntaxError") ||
		!strings.Contains(rep.Notes[0], "so its gates are taken as upstream's, closed on PCIe above 2 GPUs") {
		t.Errorf("notes = %q", rep.Notes)
	}

	orig := python3
	python3 = func() (string, error) { return "", ErrNoPython }
	defer func() { python3 = orig }()
	_, err = judge(t, pyTree(fixture(upstream), open...).input(gatePy))
	refused(t, err, "launches no kernel")
	rep, err = judge(t, pyTree(fixture(patchedElse), open...).input(gatePy))
	refused(t, err, "")
	if len(rep.Notes) != 1 || !strings.HasPrefix(rep.Notes[0], "the Python gates were not run (no python3 on PATH") ||
		!strings.Contains(rep.Notes[0], "so they are taken as open at every world size") {
		t.Errorf("notes = %q", rep.Notes)
	}
	python3 = orig

	t.Setenv("ARPATCH_CLANG", "/nonexistent/clang++")
	rep, err = Judge(t.Context(), pyTree(fixture(upstream), open...).input(gatePy))
	if err != nil || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "was not compiled, and what it launches where the gates admit custom allreduce") {
		t.Errorf("no clang: %v, notes %q", err, rep.Notes)
	}
	var de *DispatchError
	if errors.As(err, &de) {
		t.Errorf("refused without a compiler: %v", err)
	}
}

// Files Python loads that the Python judge does not follow (it reads the
// tree's .py sources): with one in the series the gates are taken as open
// at every world size, so upstream's dispatch is refused and the patched
// one passes, with a note naming the file.
func TestJudgeTakesUnfollowedPythonAsOpen(t *testing.T) {
	for _, p := range []string{
		"python/sitecustomize.py",
		"python/usercustomize.py",
		"python/sglang.pth",
		gatesDir + "custom_all_reduce.cpython-311-x86_64-linux-gnu.so",
		gatesDir + "__pycache__/custom_all_reduce.cpython-311.pyc",
	} {
		t.Run(p, func(t *testing.T) {
			_, err := judge(t, pyTree(fixture(upstream)).with(p, "x").input(p))
			refused(t, err, "the Python gates taken as open|launches no kernel")
			rep, err := judge(t, pyTree(fixture(patchedElse)).with(p, "x").input(p))
			refused(t, err, "")
			if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "the series changes "+p+", which Python loads but the gate judge does not follow") {
				t.Errorf("notes = %q", rep.Notes)
			}
		})
	}
	// A changed .py the gates' imports do not read (the adversary's p6: a
	// module the server imports first replaces a gate function) takes them
	// as open too; one they read is followed, and upstream's stay closed.
	const runner = "python/sglang/srt/model_executor/model_runner.py"
	_, err := judge(t, pyTree(fixture(upstream)).with(runner, "import sglang.srt.distributed.device_communicators.custom_all_reduce as c\nc.CustomAllreduce.should_custom_ar = lambda self, inp: True\n").input(runner))
	refused(t, err, "the Python gates taken as open|launches no kernel")
	rep, err := judge(t, pyTree(fixture(patchedElse)).with(runner, "x = 1\n").input(runner))
	refused(t, err, "")
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "the series changes "+runner+", which the Python gates' imports did not read") {
		t.Errorf("notes = %q", rep.Notes)
	}
	_, err = judge(t, pyTree(fixture(upstream), [2]string{"return n <= self.max_size", "return n <= self.max_size  # read"}).input(gatePy))
	refused(t, err, "")
}

// A variable read as bytes (os.environb, the adversary's p5) is driven
// like one read through os.environ.
func TestJudgeDrivesEnvironb(t *testing.T) {
	forcedB := [2]string{"if world_size > 2 and not full_nvlink:  # GATE1", `if world_size > 2 and not full_nvlink and __import__("os").environb.get(b"SGLANG_FORCE_CUSTOM_AR_PCIE") != b"1":  # GATE1`}
	forcedB2 := [2]string{"if self.world_size == 2 or self.full_nvlink:  # GATE2", `if self.world_size == 2 or self.full_nvlink or __import__("os").environb.get(b"SGLANG_FORCE_CUSTOM_AR_PCIE") == b"1":  # GATE2`}
	_, err := judge(t, pyTree(fixture(upstream), forcedB, forcedB2).input(gatePy, utilsPy))
	refused(t, err, "at world size 4, SGLANG_FORCE_CUSTOM_AR_PCIE=1 (rank 0, without full NVLink|launches no kernel")
}

// World sizes upstream does not support: gates widened to admit 3, 5 and
// 7 GPUs hand those calls to the dispatch, which must launch or throw
// there too (the fixture's switch throws: accepted); one that returns at
// world size 3 is refused there.
func TestJudgeRunsEveryWorldSize(t *testing.T) {
	widen := [2]string{"_SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]", "_SUPPORTED_WORLD_SIZES = [2, 3, 4, 5, 6, 7, 8]"}
	rep, err := judge(t, pyTree(fixture(patchedElse), openGate1, openGate2, widen).input(gatePy, utilsPy))
	refused(t, err, "")
	for _, ws := range []string{"world size 3,", "world size 5,", "world size 7,"} {
		if !slices.ContainsFunc(rep.Admitted, func(a string) bool { return strings.HasPrefix(a, ws) }) {
			t.Errorf("admitted %q: no %s", rep.Admitted, ws)
		}
	}
	sw := "    if (world_size_ == 3) return;\n"
	_, err = judge(t, pyTree(header(patchedElse, "", sw), openGate1, openGate2, widen).input(gatePy, utilsPy))
	refused(t, err, "at world size 3, no variable set (rank 0, without full NVLink|launches no kernel")
	// Upstream's list: 3 is not admitted, and the same return passes.
	_, err = judge(t, pyTree(header(patchedElse, "", sw), openGate1, openGate2).input(gatePy, utilsPy))
	refused(t, err, "")
}

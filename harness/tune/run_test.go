package tune

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
)

func fakeRun(t *testing.T, ws int, env ...string) *Outcome {
	t.Helper()
	py, err := filepath.Abs("testdata/fakeranks.sh")
	if err != nil {
		t.Fatal(err)
	}
	layout := allreduce.OneIsland(ws)
	if ws == 8 {
		layout = allreduce.Consecutive(8, 4)
	}
	o := Options{
		Bench: allreduce.Options{Python: py, WorldSize: ws, Ext: "fake.so", Timeout: time.Minute, Layouts: []allreduce.Islands{layout},
			Env: append([]string{"PATH=" + os.Getenv("PATH"), "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=7", "SGLANG_CUSTOM_ALLREDUCE_ALGO=2stage",
				"SGLANG_PCIE_CUSTOM_AR_ALGO=pull1", "NCCL_ALGO=Tree"}, env...)},
		Sizes:    []int{4096, 16384, 40960, 1 << 20},
		Modes:    []string{"eager", "graph"},
		Variants: allreduce.NCCLVariants,
		Verify:   allreduce.Verify{Count: 122, Shape: allreduce.Shape{Tokens: 4, Hidden: 5120, ElemBytes: 2}, Bytes: 40960},
		Host:     Host{Name: "gpu-a", Driver: "580.95.05"},
		Now:      func() time.Time { return time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC) },
	}
	out, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunFakeRanks tunes on fake ranks (testdata/fakeranks.sh, records
// handwritten in bench.py's format) at world size 8 in two islands:
// push1 wins up to 16K, island above, NCCL (even its fastest variant)
// never; the built-in default and the chosen settings are each run once
// with every sum checked, and the inherited settings of the caller's
// environment never leak into a run.
func TestRunFakeRanks(t *testing.T) {
	out := fakeRun(t, 8)
	if out.Failed() || out.File == nil {
		t.Fatalf("failed: %v", out.Findings)
	}
	th := out.File.Thresholds
	if th.MaxBytes != 1<<20 || th.Schedule.String() != "push1:16384,island" || th.Islands != "0,1,2,3/4,5,6,7" || th.NCCL != nil || th.OneStageMax != nil ||
		out.File.Mode != "graph" || out.File.Host.NCCL != "2.28.9" || out.File.Host.GPUs() != "2 x Fake GPU" {
		t.Errorf("file %+v", out.File)
	}
	if got := string(out.File.Format()); !strings.HasSuffix(got, "\nSGLANG_FORCE_CUSTOM_AR_PCIE=1\nSGLANG_PCIE_CUSTOM_AR_MAX_BYTES=1048576\nSGLANG_PCIE_CUSTOM_AR_ALGO=push1:16384,island\nSGLANG_PCIE_CUSTOM_AR_ISLANDS=0,1,2,3/4,5,6,7\n") {
		t.Errorf("file:\n%s", got)
	}
	// The measurement: every forced kernel, custom-island with the
	// layout; the NCCL variants at their sizes (LL up to 512K: 15 µs, the
	// fastest NCCL there), P2P-SYS not run (NCCL used P2P).
	m := out.Measure
	if got := strings.Join(m.Options.Impls, ","); got != "nccl,custom-1stage,custom-2stage,custom-push1,custom-push2,custom-island" {
		t.Errorf("measured %s", got)
	}
	if len(m.NCCLVariants) != 8 || len(m.VariantsSkipped) != 1 || !strings.HasPrefix(m.VariantsSkipped[0], "nccl:P2P-SYS: not run") {
		t.Errorf("variants %d, skipped %q", len(m.NCCLVariants), m.VariantsSkipped)
	}
	for _, vr := range m.NCCLVariants {
		// Each variant's NCCL took its own knob only: the inherited
		// NCCL_ALGO=Tree did not reach the others.
		if len(vr.Run.NCCL.Env) != 1 || vr.Run.NCCL.Env[strings.Split(vr.Variant.Env[0], "=")[0]] == "" || vr.Run.Exit != "ok" || len(vr.Missing) != 0 {
			t.Errorf("variant %s: env %v, exit %s, missing %v", vr.Variant.Name, vr.Run.NCCL.Env, vr.Run.Exit, vr.Missing)
		}
		if vr.Variant.Name == "LL" && (len(vr.Sizes) != 3 || vr.Run.NCCL.At(40960) != "RING/LL channels 0..1") {
			t.Errorf("LL: sizes %v, chose %v", vr.Sizes, vr.Run.NCCL.Chose)
		}
	}
	c40 := out.File.Choices[2]
	if c40.Bytes != 40960 || c40.BestNCCL != "nccl:LL" || c40.US["nccl:LL"] != 15 || c40.Chosen != allreduce.CustomIsland || c40.Fastest != allreduce.CustomIsland || math.Abs(c40.Speedup-15.0/7) > 1e-9 {
		t.Errorf("40K: %+v", c40)
	}
	var names, envs []string
	for _, s := range out.Settings {
		names = append(names, s.Name)
		envs = append(envs, strings.Join(s.Env, " "))
		if s.Report.Failed() {
			t.Errorf("%s: failed %v", s.Name, s.Report.Findings)
		}
	}
	want := []string{
		"",
		"SGLANG_FORCE_CUSTOM_AR_PCIE=1 SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=1048576 SGLANG_PCIE_CUSTOM_AR_ALGO=push1:16384,island SGLANG_PCIE_CUSTOM_AR_ISLANDS=0,1,2,3/4,5,6,7",
	}
	if !reflect.DeepEqual(envs, want) || names[1] != "chosen: custom allreduce up to 1M (push1 up to 16K, island above, islands 0,1,2,3/4,5,6,7), NCCL above" {
		t.Errorf("settings %q %q", names, envs)
	}
	// The built-in default ran the fake's auto (2-stage at world size 8,
	// 12 µs): neither the inherited schedule (pull1: 5 or 50 µs) nor the
	// legacy limit reached it.
	for _, r := range out.Settings[0].Report.Run.Results {
		if r.MedianUS != 12 {
			t.Errorf("built-in default at %d: %.0f µs", r.Bytes, r.MedianUS)
		}
	}
	// The chosen setting: NCCL and custom-auto, every case exact, and by
	// time custom-auto ran push1 up to 16K and island above.
	if n := len(out.Settings[1].Report.Run.Results); n != 16 {
		t.Errorf("chosen: %d results, want NCCL and custom-auto at 4 sizes x 2 modes", n)
	}
	for i, want := range []string{
		"the kernel's own constants choose (auto): not judged by time",
		"by time: 4 of 4 told apart, all ran the selected kernel",
	} {
		if got := kernelSummary(out.Settings[i].Kernel); got != want {
			t.Errorf("%s: %s", out.Settings[i].Name, got)
		}
	}
	if k := out.Settings[1].Kernel; len(k) != 4 || k[0].Expected != allreduce.CustomPush1 || k[0].Like != allreduce.CustomPush1 || k[2].Expected != allreduce.CustomIsland || k[2].Like != allreduce.CustomIsland {
		t.Errorf("chosen: %+v", k)
	}
	// A dispatch that ignored its schedule would show.
	bad := Observe([]allreduce.Result{{Impl: allreduce.CustomAuto, Branch: "pcie", Bytes: 40960, Mode: "graph", OK: true, MedianUS: 12}},
		out.Measure.Run.Results, th, 8)
	if got := kernelSummary(bad); got != "by time: 1 of 1 told apart; 40K (graph) ran like custom-2stage" {
		t.Errorf("mismatch: %s", got)
	}
	if p := out.Measure.Run.ThresholdProbe; p == nil || !p.Refused {
		t.Errorf("threshold probe %+v", p)
	}
	if p := out.Measure.Run.AlgoProbe; p == nil || !p.Refused {
		t.Errorf("algo probe %+v", p)
	}
	var b bytes.Buffer
	out.Write(&b)
	for _, s := range []string{
		"init_custom_ar with SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=16K: refused it",
		"init_custom_ar with SGLANG_PCIE_CUSTOM_AR_ALGO=bogus: refused it",
		"islands (SGLANG_PCIE_CUSTOM_AR_ISLANDS): 0,1,2,3/4,5,6,7",
		"built-in default (no setting)\n    8 of 8 cases exact: all exact; the kernel's own constants choose (auto)",
		"    16 of 16 cases exact: all exact; by time: 4 of 4 told apart, all ran the selected kernel",
		"custom allreduce beat the fastest NCCL at 4 of 4 sizes at world size 8 (graph mode)",
		"  SGLANG_PCIE_CUSTOM_AR_ALGO=push1:16384,island\n",
		"  nccl:LL (NCCL_PROTO=LL; NCCL took NCCL_PROTO=LL): 4K RING/LL channels 0..1",
		"  nccl:P2P-SYS: not run: NCCL as the environment leaves it did not use SHM or NET between the GPUs",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, b.String())
		}
	}
	if !regexp.MustCompile(`(?m)^40K +20\.0 +15\.0 \(nccl:LL\) +50\.0 +12\.0 +30\.0 +9\.0 +7\.0 +custom-island +custom-island +2\.14x$`).MatchString(b.String()) {
		t.Errorf("the choices table lacks the 40K row:\n%s", b.String())
	}

	// The fastest NCCL variant beats custom allreduce at 1M: the cut
	// falls below it, and NCCL_PROTO=Simple is written for the sizes left
	// to NCCL and checked under the chosen setting with NCCL.
	out = fakeRun(t, 8, "FAKE_AR_SIMPLE_US=4")
	if out.Failed() || out.File == nil {
		t.Fatalf("Simple wins at 1M: %v", out.Findings)
	}
	th = out.File.Thresholds
	if th.MaxBytes != 40960 || th.Schedule.String() != "push1:16384,island" || strings.Join(th.NCCL, " ") != "NCCL_PROTO=Simple" || out.File.Choices[3].Chosen != "nccl:Simple" ||
		!strings.HasSuffix(string(out.File.Format()), "\nSGLANG_PCIE_CUSTOM_AR_ISLANDS=0,1,2,3/4,5,6,7\nNCCL_PROTO=Simple\n") {
		t.Errorf("Simple: %s, choices %+v", th, out.File.Choices)
	}
	chosen := out.Settings[1].Report
	if chosen.Failed() || chosen.Run.NCCL.Env["NCCL_PROTO"] != "Simple" || !strings.Contains(out.File.Verdict, "beat the fastest NCCL at 3 of 4 sizes") {
		t.Errorf("chosen setting: failed %v, NCCL took %v; verdict %q", chosen.Failed(), chosen.Run.NCCL.Env, out.File.Verdict)
	}
	na := 0
	for _, r := range chosen.Run.Results {
		if r.Impl == allreduce.CustomAuto && r.Bytes == 1<<20 && r.NotApplicable {
			na++
		}
	}
	if na != 2 {
		t.Errorf("custom-auto at 1M, above the cut: %d n/a results, want 2 (one per mode)", na)
	}

	// NCCL faster everywhere: said plainly, NCCL at every size.
	out = fakeRun(t, 8, "FAKE_AR_NCCL_US=1", "FAKE_AR_LL_US=1")
	if out.File == nil || out.File.Thresholds.MaxBytes != 0 || !strings.HasPrefix(out.File.Verdict, "custom allreduce never beat the fastest NCCL") {
		t.Errorf("NCCL everywhere: %+v %v", out.File, out.Findings)
	}
	if !strings.Contains(string(out.File.Format()), "\nSGLANG_PCIE_CUSTOM_AR_MAX_BYTES=0\n") || len(out.Settings) != 2 || strings.Join(out.Settings[1].Report.Options.Impls, ",") != "nccl" {
		t.Errorf("file:\n%s", out.File.Format())
	}

	// A wrong push1 kernel: the measurement fails, nothing is chosen and
	// no file is written; the variants are not run.
	out = fakeRun(t, 8, "FAKE_AR_WRONG_ALGO=custom-push1")
	if !out.Failed() || out.File != nil || len(out.Settings) != 1 || len(out.Measure.NCCLVariants) != 0 ||
		!strings.Contains(strings.Join(out.Measure.Findings, "\n"), "WRONG custom-push1/pcie at 4K (eager): rank 0 element 0 is nan") {
		t.Errorf("wrong push1: file %v, findings %q", out.File, out.Measure.Findings)
	}

	// A wrong NCCL variant is reported, never a baseline, and fails
	// nothing: the tune is the one without it.
	out = fakeRun(t, 8, "FAKE_AR_WRONG_ALGO=nccl:LL")
	if out.Failed() || out.File == nil || out.File.Choices[2].BestNCCL != "nccl" ||
		!strings.Contains(strings.Join(out.Measure.Findings, "\n"), "WRONG nccl:LL (NCCL_PROTO=LL) at 4K (eager): rank 0 element 0 is nan, want 2.0 (8 of 8 elements wrong); never a baseline") {
		t.Errorf("wrong LL: failed %v, file %v, findings %q", out.Failed(), out.File, out.Measure.Findings)
	}

	// Extensions from before the run-time thresholds, and from before the
	// push kernels: the push kernels are unsupported, never timed.
	out = fakeRun(t, 8, "FAKE_AR_OLD_EXT=1")
	if !out.Failed() || out.File != nil || !strings.HasPrefix(out.Findings[0], "NO RUN-TIME THRESHOLDS: init_custom_ar took SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=\"16K\"") {
		t.Errorf("old extension: %q", out.Findings)
	}
	out = fakeRun(t, 8, "FAKE_AR_NO_PUSH=1")
	var unsupported []string
	for _, r := range out.Measure.Run.Results {
		if r.Unsupported {
			unsupported = append(unsupported, caseName(r))
		}
		if allreduce.PushOnly(r.Impl) && r.Timed() {
			t.Errorf("timed on an extension without push kernels: %+v", r)
		}
	}
	if !out.Failed() || out.File != nil || !strings.HasPrefix(out.Findings[0], "NO PUSH ALGORITHMS: init_custom_ar took SGLANG_PCIE_CUSTOM_AR_ALGO=\"bogus\"") ||
		!reflect.DeepEqual(unsupported, []string{"custom-push1/pcie", "custom-push2/pcie", "custom-island/pcie[0,1,2,3/4,5,6,7]"}) {
		t.Errorf("no push kernels: %q, unsupported %v", out.Findings, unsupported)
	}

	// Oversubscribed: the built-in default is checked, nothing is chosen,
	// no variant runs; one island, so no custom-island.
	out = fakeRun(t, 4, "FAKE_AR_OVERSUB=1")
	if out.Failed() || out.File != nil || len(out.Settings) != 1 || len(out.Measure.NCCLVariants) != 0 ||
		!strings.HasPrefix(out.Findings[0], "custom-island not measured: the ranks form one island") ||
		!strings.HasPrefix(out.Findings[1], "oversubscribed (4 ranks on 2 GPUs)") || kernelSummary(out.Settings[0].Kernel) != "untimed" {
		t.Errorf("oversubscribed: %+v %q", out.File, out.Findings)
	}
}

// caseName is the allreduce report's name of a result's case.
func caseName(r allreduce.Result) string {
	s := r.Impl + "/" + r.Branch
	if r.Islands != "" {
		s += "[" + r.Islands + "]"
	}
	return s
}

func TestServingSizesAndApplyEnv(t *testing.T) {
	got := ServingSizes(5120, 4)
	want := []int{10240, 20480, 40960, 81920, 163840, 327680, 655360, 1310720, 2621440, 5242880, 8 << 20}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ServingSizes(5120, 4) = %v", got)
	}
	if got := BenchSizes(4); !reflect.DeepEqual(got, want) {
		t.Errorf("BenchSizes(4) = %v, want ServingSizes(5120, 4)", got)
	}
	// No speculation (0 draft tokens) is one token per step: the decode
	// batches of 1 to 64 rows.
	if got, one := BenchSizes(0), []int{10240, 20480, 40960, 81920, 163840, 327680, 655360, 1310720, 2621440, 5242880, 8 << 20}; !reflect.DeepEqual(got, one) {
		t.Errorf("BenchSizes(0) = %v, want %v", got, one)
	}
	if got := ServingSizes(7168, 3); got[0] != 14336 || got[1] != 28672 || got[2] != 43008 || got[len(got)-1] != 8<<20 {
		t.Errorf("ServingSizes(7168, 3) = %v", got)
	}
	arm := map[string]string{EnvForce: "1", EnvMaxBytes: "262144", Env1StageMax: "9", EnvIslands: "0,1/2,3"}
	if set, gate := (Thresholds{MaxBytes: 65536}).ApplyEnv(arm); !gate || arm[EnvMaxBytes] != "65536" || arm[Env1StageMax] != "" || arm[EnvIslands] != "" ||
		strings.Join(set, " ") != "SGLANG_FORCE_CUSTOM_AR_PCIE=1 SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=65536" {
		t.Errorf("applied: %v, set %q", arm, set)
	}
	base := map[string]string{}
	if set, gate := (Thresholds{MaxBytes: 65536}).ApplyEnv(base); gate || len(set) != 0 || len(base) != 0 {
		t.Errorf("an arm without the gate took thresholds: %v", base)
	}
	// The gate as the series reads the variable: "True" opens it, "2" not.
	for v, open := range map[string]bool{"True": true, " yes": true, "2": false, "0": false} {
		arm := map[string]string{EnvForce: v}
		if _, gate := (Thresholds{MaxBytes: 65536}).ApplyEnv(arm); gate != open || (arm[EnvMaxBytes] == "65536") != open {
			t.Errorf("%s=%q: gate %v, %v; the series opens it: %v", EnvForce, v, gate, arm, open)
		}
	}
	// A tune's schedule replaces an arm's legacy limit; its NCCL variant
	// reaches every arm, the baseline's too.
	th := sched("push1:32768,island", 1<<20)
	th.Islands, th.NCCL = "0,1,2,3/4,5,6,7", []string{"NCCL_PROTO=Simple"}
	arm = map[string]string{EnvForce: "1", Env1StageMax: "9"}
	if set, gate := th.ApplyEnv(arm); !gate || len(set) != 5 || arm[Env1StageMax] != "" || arm[EnvSchedule] != "push1:32768,island" || arm[EnvIslands] != "0,1,2,3/4,5,6,7" || arm["NCCL_PROTO"] != "Simple" {
		t.Errorf("schedule over a legacy arm: %v, set %q", arm, set)
	}
	base = map[string]string{"NCCL_PROTO": "LL"}
	if set, gate := th.ApplyEnv(base); gate || strings.Join(set, " ") != "NCCL_PROTO=Simple" || len(base) != 1 || base["NCCL_PROTO"] != "Simple" {
		t.Errorf("baseline: %v, set %q", base, set)
	}
}

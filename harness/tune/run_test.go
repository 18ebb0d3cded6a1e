package tune

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
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
	o := Options{
		Bench: allreduce.Options{Python: py, WorldSize: ws, Ext: "fake.so", Timeout: time.Minute,
			Env: append([]string{"PATH=" + os.Getenv("PATH"), "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=7", "SGLANG_CUSTOM_ALLREDUCE_ALGO=2stage"}, env...)},
		Sizes:  []int{4096, 16384, 40960, 1 << 20},
		Modes:  []string{"eager", "graph"},
		Verify: allreduce.Verify{Count: 122, Shape: allreduce.Shape{Tokens: 4, Hidden: 5120, ElemBytes: 2}, Bytes: 40960},
		Host:   Host{Name: "gpu-a", Driver: "580.95.05"},
		Now:    func() time.Time { return time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC) },
	}
	out, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunFakeRanks tunes on fake ranks: 1-stage wins up to 16K, 2-stage
// above, NCCL never; the settings forcing each algorithm and the chosen
// one are each run once with every sum checked, and the inherited
// thresholds of the caller's environment never leak into a run.
func TestRunFakeRanks(t *testing.T) {
	out := fakeRun(t, 8)
	if out.Failed() || out.File == nil {
		t.Fatalf("failed: %v", out.Findings)
	}
	th := out.File.Thresholds
	if th.MaxBytes != 1<<20 || *th.OneStageMax != 16384 || out.File.Mode != "graph" || out.File.Host.NCCL != "2.28.9" || out.File.Host.GPUs() != "2 x Fake GPU" {
		t.Errorf("file %+v", out.File)
	}
	var names, envs []string
	for _, s := range out.Settings {
		names = append(names, s.Name)
		envs = append(envs, strings.Join(s.Env, " "))
		if n := len(s.Report.Run.Results); n != 8 || s.Report.Failed() {
			t.Errorf("%s: %d results, failed %v", s.Name, n, s.Report.Failed())
		}
	}
	want := []string{
		"",
		"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=18446744073709551615",
		"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=0",
		"SGLANG_FORCE_CUSTOM_AR_PCIE=1 SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=1048576 SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=16384",
	}
	if !reflect.DeepEqual(envs, want) || names[3] != "chosen: custom allreduce up to 1M (1-stage up to 16K, 2-stage above), NCCL above" {
		t.Errorf("settings %q %q", names, envs)
	}
	// Under "2-stage at every size", custom-auto took 12 µs everywhere:
	// the inherited SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=7 did not reach it.
	for _, r := range out.Settings[2].Report.Run.Results {
		if r.MedianUS != 12 {
			t.Errorf("2-stage setting at %d: %.0f µs", r.Bytes, r.MedianUS)
		}
	}
	if p := out.Measure.Run.ThresholdProbe; p == nil || !p.Refused {
		t.Errorf("probe %+v", p)
	}
	// By time, each setting ran the kernel its thresholds select: the
	// default 2-stage at world size 8, the chosen 1-stage up to 16K.
	for i, want := range []string{
		"by time: 4 of 4 told apart, all ran the selected kernel",
		"by time: 4 of 4 told apart, all ran the selected kernel",
		"by time: 4 of 4 told apart, all ran the selected kernel",
		"by time: 4 of 4 told apart, all ran the selected kernel",
	} {
		if got := kernelSummary(out.Settings[i].Kernel); got != want {
			t.Errorf("%s: %s", out.Settings[i].Name, got)
		}
	}
	if k := out.Settings[3].Kernel; len(k) != 4 || k[0].Bytes != 4096 || k[0].Expected != allreduce.Custom1Stage || k[2].Bytes != 40960 || k[2].Like != allreduce.Custom2Stage {
		t.Errorf("chosen: %+v", k)
	}
	// A dispatch that ignored its threshold would show.
	bad := Observe([]allreduce.Result{{Impl: allreduce.CustomAuto, Branch: "pcie", Bytes: 40960, Mode: "graph", OK: true, MedianUS: 48}},
		out.Measure.Run.Results, Thresholds{OneStageMax: U64(0)}, 8)
	if got := kernelSummary(bad); got != "by time: 1 of 1 told apart; 40K (graph) ran like custom-1stage" {
		t.Errorf("mismatch: %s", got)
	}
	var b bytes.Buffer
	out.Write(&b)
	for _, s := range []string{
		"init_custom_ar with SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=16K: refused it",
		"2-stage at every size (SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=0)\n    8 of 8 cases exact: all exact; by time: 4 of 4 told apart, all ran the selected kernel",
		"custom allreduce beat NCCL at 4 of 4 sizes at world size 8 (graph mode)",
		"  SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=16384\n",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, b.String())
		}
	}

	// NCCL faster everywhere: said plainly, NCCL at every size.
	out = fakeRun(t, 8, "FAKE_AR_NCCL_US=3")
	if out.File == nil || out.File.Thresholds.MaxBytes != 0 || !strings.HasPrefix(out.File.Verdict, "custom allreduce never beat NCCL") {
		t.Errorf("NCCL everywhere: %+v %v", out.File, out.Findings)
	}
	if !strings.Contains(string(out.File.Format()), "\nSGLANG_PCIE_CUSTOM_AR_MAX_BYTES=0\n") {
		t.Errorf("file:\n%s", out.File.Format())
	}

	// A wrong 2-stage kernel: the measurement and the settings that reach
	// it fail, and no file is written.
	out = fakeRun(t, 8, "FAKE_AR_WRONG_ALGO=custom-2stage")
	if !out.Failed() || out.File != nil || len(out.Settings) != 3 || !out.Settings[0].Report.Failed() || !out.Settings[2].Report.Failed() || out.Settings[1].Report.Failed() {
		t.Errorf("wrong 2-stage: file %v, findings %q", out.File, out.Findings)
	}

	// An extension without the run-time thresholds.
	out = fakeRun(t, 8, "FAKE_AR_OLD_EXT=1")
	if !out.Failed() || out.File != nil || !strings.HasPrefix(out.Findings[0], "NO RUN-TIME THRESHOLDS: init_custom_ar took SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=\"16K\"") {
		t.Errorf("old extension: %q", out.Findings)
	}

	// Oversubscribed: the settings are checked, nothing is chosen.
	out = fakeRun(t, 4, "FAKE_AR_OVERSUB=1")
	if out.Failed() || out.File != nil || len(out.Settings) != 3 || !strings.HasPrefix(out.Findings[0], "oversubscribed (4 ranks on 2 GPUs)") || kernelSummary(out.Settings[0].Kernel) != "untimed" {
		t.Errorf("oversubscribed: %+v %q", out.File, out.Findings)
	}
}

func TestServingSizesAndApplyEnv(t *testing.T) {
	got := ServingSizes(5120, 4)
	want := []int{10240, 20480, 40960, 81920, 163840, 327680, 655360, 1310720, 2621440, 5242880, 8 << 20}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ServingSizes(5120, 4) = %v", got)
	}
	if got := ServingSizes(7168, 3); got[0] != 14336 || got[1] != 28672 || got[2] != 43008 || got[len(got)-1] != 8<<20 {
		t.Errorf("ServingSizes(7168, 3) = %v", got)
	}
	arm := map[string]string{EnvForce: "1", EnvMaxBytes: "262144", Env1StageMax: "9"}
	if !(Thresholds{MaxBytes: 65536}).ApplyEnv(arm) || arm[EnvMaxBytes] != "65536" || arm[Env1StageMax] != "" {
		t.Errorf("applied: %v", arm)
	}
	base := map[string]string{}
	if (Thresholds{MaxBytes: 65536}).ApplyEnv(base) || len(base) != 0 {
		t.Errorf("an arm without the gate took thresholds: %v", base)
	}
}

package nightly

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/tune"
)

// TestApplyTune: bench.tune reaches the arm that opens the PCIe gate and
// not the baseline, is recorded with the dispatch per size, and a file
// from another host is refused unless bench.force_tune.
func TestApplyTune(t *testing.T) {
	dir := t.TempDir()
	f := &tune.File{Host: tune.Host{Name: "gpu-a", GPUModel: "NVIDIA RTX PRO 6000 Blackwell Server Edition", GPUCount: 8, NCCL: "2.28.9"},
		WorldSize: 8, Date: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Mode: "graph", Verdict: "v",
		Thresholds: tune.Thresholds{MaxBytes: 65536, OneStageMax: tune.U64(0)}}
	if err := os.WriteFile(filepath.Join(dir, "tune.env"), f.Format(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Dir: dir, Bench: Bench{Tune: "tune.env"}}
	tf, err := tune.Load(cfg.Path(cfg.Bench.Tune))
	if err != nil {
		t.Fatal(err)
	}
	mkOpts := func() *bench.Options {
		return &bench.Options{TP: 8, SpecDraftTokens: 4, Arms: []bench.Arm{
			{Name: "baseline"},
			{Name: "pcie", Env: map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES": "262144"}},
		}}
	}
	here := Environment{Host: "gpu-a", GPUModel: "NVIDIA RTX PRO 6000 Blackwell Server Edition", GPUCount: 8, NCCL: "2.28.9"}
	rep := &Report{Environment: here}
	bo := mkOpts()
	if err := applyTune(cfg, tf, rep, bo); err != nil {
		t.Fatal(err)
	}
	if bo.Arms[0].Env != nil || bo.Arms[1].Env["SGLANG_PCIE_CUSTOM_AR_MAX_BYTES"] != "65536" || bo.Arms[1].Env["SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"] != "0" {
		t.Errorf("arms %+v", bo.Arms)
	}
	got := strings.Join(rep.Tune.Dispatch, ", ")
	if got != "10K custom-2stage, 20K custom-2stage, 40K custom-2stage, 80K nccl, 160K nccl, 320K nccl, 640K nccl, 1280K nccl, 2560K nccl, 5M nccl, 8M nccl" {
		t.Errorf("dispatch %s", got)
	}
	if strings.Join(rep.Tune.Arms, ",") != "pcie" || len(rep.Warnings) != 0 {
		t.Errorf("record %+v, warnings %v", rep.Tune, rep.Warnings)
	}

	rep = &Report{Environment: Environment{Host: "gpu-b", GPUModel: here.GPUModel, GPUCount: 8}}
	var he *tune.HostError
	if err := applyTune(cfg, tf, rep, mkOpts()); !errors.As(err, &he) || !strings.HasPrefix(err.Error(), "bench.tune: tune file "+filepath.Join(dir, "tune.env")+" was made on gpu-a") ||
		!strings.HasSuffix(err.Error(), "(in nightly.toml: bench.force_tune = true)") {
		t.Errorf("other host: %v", err)
	}
	cfg.Bench.ForceTune = true
	if err := applyTune(cfg, tf, rep, mkOpts()); err != nil || len(rep.Warnings) != 1 || !strings.HasPrefix(rep.Warnings[0], "--force-tune: ") {
		t.Errorf("forced: %v %v", err, rep.Warnings)
	}
}

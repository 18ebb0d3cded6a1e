package allreduce

import (
	"reflect"
	"testing"
)

// TestRecordedUnpatchedX2 reads the unpatched 84118acf tree's PCIe branch
// measured on 2x H200 (2026-11-30, docs/pcie-dispatch.md): at world size 4
// (two ranks per GPU) custom-auto launches nothing and every element keeps
// the NaN the check put there, while the forced kernels are exact; at world
// size 2 upstream's world_size_ == 2 branch runs 1-stage, exact, and faster
// than NCCL in CUDA graphs.
func TestRecordedUnpatchedX2(t *testing.T) {
	ws4, opts := loadRecorded(t, "h200x2-ws4-unpatched-report.json")
	rep := NewReport(opts, ws4.Verify, ws4.Run, "test")
	var wrong, ok []string
	for _, r := range ws4.Run.Results {
		name := caseName(r) + " " + FormatBytes(r.Bytes)
		switch r.Status() {
		case "WRONG":
			wrong = append(wrong, name)
			if r.Wrong == nil || r.Wrong.Got != "nan" || r.Wrong.Mismatches != r.Wrong.Of {
				t.Errorf("%s: %+v, want every element NaN", name, r.Wrong)
			}
		case "ok":
			ok = append(ok, name)
		}
	}
	if !rep.Failed() || !ws4.Run.Env.Oversubscribed || !reflect.DeepEqual(wrong, []string{"custom-auto/pcie 4K", "custom-auto/pcie 40K", "custom-auto/pcie 1M"}) || len(ok) != 6 {
		t.Errorf("world size 4: failed %v, wrong %v, ok %v", rep.Failed(), wrong, ok)
	}

	ws2, opts2 := loadRecorded(t, "h200x2-ws2-unpatched-report.json")
	rep2 := NewReport(opts2, ws2.Verify, ws2.Run, "test")
	if rep2.Failed() || len(ws2.Run.Results) != 24 {
		t.Fatalf("world size 2: failed %v, %d results, findings %v", rep2.Failed(), len(ws2.Run.Results), rep2.Findings)
	}
	if best, nccl, ok := rep2.BestCustom("graph"); !ok || best.Impl != Custom1Stage && best.Impl != CustomAuto || nccl/best.PerCallUS < 1.5 {
		t.Errorf("graph at the verify size: best %+v, NCCL %.1f us", best, nccl)
	}
}

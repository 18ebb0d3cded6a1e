package allreduce

import (
	"fmt"
	"strings"
	"testing"
)

// TestRecordedPushOneH200 reads the correctness matrix of the pcie series'
// push kernels run on one NVIDIA H200 with ranks oversubscribed over gloo
// (2026-12-02, bench/pcie-correctness.sh; docs/pcie-dispatch.md, "Correct
// on one H200"): every era's patched tree, world sizes 2, 4, 6 and 8, bf16, fp16 and fp32, eager and CUDA graphs, 4 KiB,
// 40 KiB, 1 MiB and each kernel's cap, every island layout the world size
// allows. Every sum is exact; the only cases not run are those whose
// scratch does not hold the size. The unpatched tree takes the push
// forcing silently (UNSUPPORTED) and its PCIe branch launches nothing
// (WRONG, every element NaN).
func TestRecordedPushOneH200(t *testing.T) {
	for _, c := range []struct {
		file     string
		ws, ok   int
		layouts  int
		notFit   int
		unpushed bool
	}{
		{"A-ws2", 2, 192, 2, 0, false},
		{"A-ws4", 4, 288, 4, 0, false},
		{"A-ws6", 6, 378, 6, 0, false},
		{"A-ws8", 8, 372, 6, 6, false},
		{"B-ws2", 2, 192, 2, 0, false},
		{"B-ws4", 4, 288, 4, 0, false},
		{"B-ws6", 6, 378, 6, 0, false},
		{"B-ws8", 8, 372, 6, 6, false},
		{"C-ws2", 2, 192, 2, 0, false},
		{"C-ws4", 4, 288, 4, 0, false},
		{"C-ws6", 6, 378, 6, 0, false},
		{"C-ws8", 8, 372, 6, 6, false},
	} {
		t.Run(c.file, func(t *testing.T) {
			rec, _ := loadRecorded(t, "h200-oversub/"+c.file+".json")
			e := rec.Run.Env
			if e.WorldSize != c.ws || e.Devices != 1 || !e.Oversubscribed || len(e.Islands) != c.layouts {
				t.Fatalf("env %+v", e)
			}
			if p := rec.Run.AlgoProbe; p == nil || !p.Refused || !strings.Contains(p.Error, "SGLANG_PCIE_CUSTOM_AR_ALGO='bogus'") {
				t.Errorf("the extension's refusal of SGLANG_PCIE_CUSTOM_AR_ALGO=bogus: %+v", p)
			}
			count := map[string]int{}
			seen := map[string]bool{}
			for _, r := range rec.Run.Results {
				count[r.Status()]++
				seen[fmt.Sprintf("%s/%s/%s", r.Impl, r.DType, r.Mode)] = true
				if r.Status() == "n/a" && (r.Impl != CustomIsland || r.Islands != "0/1/2/3/4/5/6/7" || !strings.Contains(r.Error, "bytes of scratch")) {
					t.Errorf("%s n/a: %s", caseName(r), r.Error)
				}
			}
			if count["ok"] != c.ok || count["n/a"] != c.notFit || len(rec.Run.Results) != c.ok+c.notFit {
				t.Errorf("statuses %v, want %d ok and %d n/a (the scratch)", count, c.ok, c.notFit)
			}
			for _, impl := range []string{CustomPush1, CustomPush2, CustomIsland, CustomAuto, Custom1Stage, Custom2Stage} {
				for _, dt := range []string{"bf16", "fp16", "fp32"} {
					for _, m := range []string{ModeEager, ModeGraph} {
						if !seen[impl+"/"+dt+"/"+m] {
							t.Errorf("no %s %s %s case", impl, dt, m)
						}
					}
				}
			}
		})
	}
	rec, _ := loadRecorded(t, "h200-oversub/A-base-ws8.json")
	var unsupported, wrong int
	for _, r := range rec.Run.Results {
		switch r.Status() {
		case "UNSUPPORTED":
			unsupported++
		case "WRONG":
			wrong++
			if r.Impl != CustomAuto || r.Wrong == nil || r.Wrong.Got != "nan" || r.Wrong.Mismatches != r.Wrong.Of {
				t.Errorf("unpatched %s: %+v, want every element NaN", caseName(r), r.Wrong)
			}
		default:
			t.Errorf("unpatched %s: %s", caseName(r), r.Status())
		}
	}
	if p := rec.Run.AlgoProbe; p == nil || p.Refused || unsupported != 1 || wrong != 6 {
		t.Errorf("unpatched tree: probe %+v, %d UNSUPPORTED, %d WRONG; want the forcing taken silently, the push impl UNSUPPORTED and auto WRONG at 3 sizes x 2 modes", p, unsupported, wrong)
	}
}

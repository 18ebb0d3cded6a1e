package tune

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

func loadOutcome(t *testing.T, path string) *Outcome {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var o Outcome
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return &o
}

// TestRecordedH200Tunes re-derives the tunes recorded on 2x H200 (NVLink,
// CUDA-graph medians; docs/pcie-dispatch.md) for each era's patched tree:
// every sum exact under every threshold setting, the extension refused a
// bad threshold at init, Pick gives the recorded thresholds from the
// recorded medians (written then as the legacy 1-stage limit, now as the
// schedule that dispatches every size alike), and in CUDA graphs
// custom-auto ran the kernel each setting selects wherever the two
// kernels' times differ by more than 25%.
func TestRecordedH200Tunes(t *testing.T) {
	for _, era := range []string{"A", "B", "C"} {
		o := loadOutcome(t, "testdata/h200x2-ws2-"+era+".json")
		if o.Failed() || o.File == nil || o.Measure.Run.Env.Device != "NVIDIA H200" || o.Measure.Run.Env.WorldSize != 2 {
			t.Fatalf("%s: failed %v, file %v, env %+v", era, o.Failed(), o.File, o.Measure.Run.Env)
		}
		if p := o.Measure.Run.ThresholdProbe; p == nil || !p.Refused || !strings.Contains(p.Error, "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='16K': expected a whole number of bytes") {
			t.Errorf("%s: probe %+v", era, p)
		}
		th, cs, verdict, err := Pick(o.Measure.Run.Results, 2, "graph", true)
		sizes := ServingSizes(5120, 4)
		if err != nil || th.MaxBytes != o.File.Thresholds.MaxBytes || !reflect.DeepEqual(Dispatch(th, 2, sizes), Dispatch(o.File.Thresholds, 2, sizes)) ||
			!strings.HasPrefix(verdict, "custom allreduce beat the fastest NCCL at 11 of 11 sizes") || !strings.HasPrefix(o.File.Verdict, "custom allreduce beat NCCL at 11 of 11 sizes") {
			t.Errorf("%s: Pick = %s, %q, %v; recorded %s, %q", era, th, verdict, err, o.File.Thresholds, o.File.Verdict)
		}
		// 1-stage was fastest at every serving size on NVLink, so the
		// tune keeps it up to the 8 MiB cap.
		if th.MaxBytes != 8<<20 || th.Schedule.String() != "pull1" || *o.File.Thresholds.OneStageMax != 8<<20 || len(cs) != 11 || cs[2].Bytes != 40960 || cs[2].Fastest != "custom-1stage" {
			t.Errorf("%s: %s, choices %+v", era, th, cs)
		}
		told := 0
		for _, s := range o.Settings {
			if s.Report.Failed() || len(s.Report.Run.Results) != 22 {
				t.Errorf("%s %s: %d results, failed %v", era, s.Name, len(s.Report.Run.Results), s.Report.Failed())
			}
			th := s.Thresholds
			if strings.HasPrefix(s.Name, "chosen: ") {
				th = o.File.Thresholds
			} else if s.Name == "2-stage at every size" {
				th = Thresholds{OneStageMax: U64(0)} // run 1 did not record it
			} else if s.Name == "1-stage at every size" {
				th = Thresholds{OneStageMax: U64(1<<64 - 1)}
			}
			obs := Observe(s.Report.Run.Results, o.Measure.Run.Results, th, 2)
			for _, x := range obs {
				if x.Like != "" {
					told++
					if x.Like != x.Expected {
						t.Errorf("%s %s: %d bytes ran like %s, selected %s", era, s.Name, x.Bytes, x.Like, x.Expected)
					}
				}
			}
		}
		if told < 20 {
			t.Errorf("%s: only %d graph timings told the kernels apart", era, told)
		}
	}
}

// TestRecordedTuneFile reads the env file the era A tune wrote on the H200
// host: the host record and the thresholds come back as written.
func TestRecordedTuneFile(t *testing.T) {
	f, err := Load("testdata/h200x2-ws2-A.env")
	if err != nil {
		t.Fatal(err)
	}
	want := Host{Name: "vm", GPUModel: "NVIDIA H200", GPUCount: 2, Driver: "580.159.04", NCCL: "2.28.9"}
	if f.Host != want || f.WorldSize != 2 || f.Mode != "graph" || f.Thresholds.MaxBytes != 8<<20 || *f.Thresholds.OneStageMax != 8<<20 ||
		f.Date.Format("2006-01-02") != "2026-11-30" || !strings.HasPrefix(f.Command, "arpatch tune allreduce --world-size 2 --src A-pcie") {
		t.Errorf("%+v", f)
	}
	if _, err := f.Check("h200.env", Host{Name: "gpu-a", GPUModel: "NVIDIA RTX PRO 6000 Blackwell Server Edition", GPUCount: 8}, 8, false); err == nil {
		t.Error("an H200 tune accepted on an RTX PRO 6000 host")
	}
}

// TestRecordedOversubscribed: world size 4 as two ranks per H200 reaches
// the PCIe branch above world size 2 in each era's patched tree: every sum
// exact, eager and CUDA graphs, under the built-in default (2-stage), 1-stage
// at every size and 2-stage at every size; nothing chosen, no file.
func TestRecordedOversubscribed(t *testing.T) {
	for _, era := range []string{"A", "B", "C"} {
		o := loadOutcome(t, "testdata/h200x2-ws4-oversub-"+era+".json")
		if o.Failed() || o.File != nil || !o.Measure.Run.Env.Oversubscribed || o.Measure.Run.Env.WorldSize != 4 {
			t.Fatalf("%s: failed %v, file %v, env %+v", era, o.Failed(), o.File, o.Measure.Run.Env)
		}
		var names []string
		for _, s := range o.Settings {
			names = append(names, s.Name)
			modes := map[string]int{}
			for _, r := range s.Report.Run.Results {
				if !r.OK || r.Impl != "custom-auto" || r.Branch != "pcie" {
					t.Errorf("%s %s: %+v", era, s.Name, r)
				}
				modes[r.Mode]++
			}
			if modes["eager"] != 11 || modes["graph"] != 11 {
				t.Errorf("%s %s: cases per mode %v", era, s.Name, modes)
			}
		}
		if strings.Join(names, ", ") != "built-in default, 1-stage at every size, 2-stage at every size" {
			t.Errorf("%s: settings %v", era, names)
		}
	}
}

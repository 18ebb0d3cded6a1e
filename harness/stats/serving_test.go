package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestServingMatchesVLLM computes the serving metrics of recorded trials
// (testdata/serving: two trials streamed by arpatch's SGLang-protocol
// server, one with injected HTTP 500s, one of one-token requests, and
// the first with its times x10 so that it spans several seconds) and
// compares every figure with expected.json, which vllm_metrics.py
// computes with numpy by vllm bench serve's calculate_metrics: mean,
// median, np.std, np.percentile at 25, 50, 90, 99 and 99.9 of TTFT,
// TPOT, ITL and E2EL, the throughputs and the per-second peaks, to 1e-9
// relative. The JSON keys are vLLM's result file's.
func TestServingMatchesVLLM(t *testing.T) {
	b, err := os.ReadFile("testdata/serving/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Percentiles []float64                     `json:"percentiles"`
		Metrics     []string                      `json:"metrics"`
		Trials      map[string]map[string]float64 `json:"trials"`
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	sel := Selection{Metrics: want.Metrics, Percentiles: want.Percentiles}
	if len(want.Trials) != 3 {
		t.Fatalf("expected.json has %d trials, want 3", len(want.Trials))
	}
	for name, exp := range want.Trials {
		var tr Trial
		b, err := os.ReadFile(filepath.Join("testdata/serving", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatal(err)
		}
		s := ComputeServing(tr, sel)
		got := map[string]float64{}
		for _, f := range s.Figures() {
			got[f.Key] = f.Value
		}
		if len(got) != len(exp) {
			t.Errorf("%s: %d figures, vLLM's file has %d", name, len(got), len(exp))
		}
		for k, w := range exp {
			g, ok := got[k]
			if !ok {
				t.Errorf("%s: no %s", name, k)
				continue
			}
			if math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
				t.Errorf("%s: %s = %.12g, vLLM's formula gives %.12g", name, k, g, w)
			}
		}
		// What MarshalJSON writes reads back, figure for figure.
		j, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Serving
		if err := json.Unmarshal(j, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Figures(), s.Figures()) || back.Traffic != s.Traffic {
			t.Errorf("%s: JSON round trip\n%s\ngave\n%+v", name, j, back)
		}
		// The row says which trial and level it is, under vLLM's
		// top-level names where vLLM has them (max_concurrency for the
		// level; a closed loop's request rate is inf, as vLLM writes it).
		head := fmt.Sprintf(`{"trial":%d,"num_prompts":%d,"request_rate":"inf","burstiness":1,"max_concurrency":%d,"duration":`, tr.Index, len(tr.Samples), tr.Concurrency)
		if tr.Index < 1 || tr.Concurrency < 1 || !strings.HasPrefix(string(j), head) || !strings.Contains(string(j), `"p99.9_itl_ms":`) {
			t.Errorf("%s: JSON keys are not vLLM's: %s, want it to start %s", name, j, head)
		}
	}
}

// An open loop's rate and burstiness are written under vLLM's
// --save-result names, "inf" as vLLM writes an infinite one, and read
// back; a string where a number belongs is refused.
func TestServingTrafficJSON(t *testing.T) {
	s := Serving{Traffic: Traffic{Trial: 3, NumPrompts: 8, RequestRate: 2.5, Burstiness: math.Inf(1), MaxConcurrency: 4}, Duration: 1, Completed: 8}
	j, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// vLLM's names (vllm/benchmarks/serve.py, main: result_json's
	// "Traffic" and the merged benchmark result).
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	for k, w := range map[string]any{"trial": 3.0, "num_prompts": 8.0, "request_rate": 2.5, "burstiness": "inf", "max_concurrency": 4.0, "duration": 1.0, "completed": 8.0} {
		if m[k] != w {
			t.Errorf("%s = %v, want %v (in %s)", k, m[k], w, j)
		}
	}
	var back Serving
	if err := json.Unmarshal(j, &back); err != nil || back.Traffic != s.Traffic {
		t.Errorf("round trip of %s: %+v, %v", j, back.Traffic, err)
	}
	if err := json.Unmarshal([]byte(`{"duration":"inf"}`), &back); err == nil {
		t.Errorf(`duration "inf" read as a number`)
	}
	// No cap on the requests in flight (an open loop without
	// --max-concurrency): null, as vLLM writes args.max_concurrency's
	// None, and read back as none.
	s.MaxConcurrency = 0
	if j, err = json.Marshal(s); err != nil || !strings.Contains(string(j), `"burstiness":"inf","max_concurrency":null,"duration":1`) {
		t.Errorf("uncapped: %s, %v; want max_concurrency null", j, err)
	}
	back = Serving{Traffic: Traffic{MaxConcurrency: 9}}
	if err := json.Unmarshal(j, &back); err != nil || back.Traffic != s.Traffic {
		t.Errorf("round trip of %s: %+v, %v", j, back.Traffic, err)
	}
	if err := json.Unmarshal([]byte(`{"duration":null}`), &back); err == nil {
		t.Errorf(`duration null read as a number`)
	}
}

// ParseSelection reads vLLM's --percentile-metrics and
// --metric-percentiles, and refuses what vLLM's would misread.
func TestParseSelection(t *testing.T) {
	s, err := ParseSelection("e2el,ttft", "50,99.9")
	if err != nil || !reflect.DeepEqual(s, Selection{Metrics: []string{"ttft", "e2el"}, Percentiles: []float64{50, 99.9}}) {
		t.Errorf("ParseSelection: %+v, %v", s, err)
	}
	for _, c := range [][2]string{{"ttft,bogus", "99"}, {"ttft,ttft", "99"}, {"", "99"}, {"ttft", "101"}, {"ttft", "-1"}, {"ttft", "x"}, {"ttft", "99,99"}, {"ttft", "NaN"}} {
		if _, err := ParseSelection(c[0], c[1]); err == nil {
			t.Errorf("ParseSelection(%q, %q) accepted it", c[0], c[1])
		}
	}
	if k := PercentileKey(99, "ttft"); k != "p99_ttft_ms" {
		t.Errorf("PercentileKey(99) = %s", k)
	}
	if k := PercentileKey(99.9, "itl"); k != "p99.9_itl_ms" {
		t.Errorf("PercentileKey(99.9) = %s", k)
	}
}

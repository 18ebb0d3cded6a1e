package stats

import (
	"encoding/json"
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
		if !reflect.DeepEqual(back.Figures(), s.Figures()) {
			t.Errorf("%s: JSON round trip\n%s\ngave\n%+v", name, j, back)
		}
		if !strings.HasPrefix(string(j), `{"duration":`) || !strings.Contains(string(j), `"p99.9_itl_ms":`) {
			t.Errorf("%s: JSON keys are not vLLM's: %s", name, j)
		}
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

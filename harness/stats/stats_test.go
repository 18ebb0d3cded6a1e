package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/sglang"
)

func TestComputeTrial(t *testing.T) {
	tr := Trial{Wall: 2, Samples: []sglang.Sample{
		{Prompt: 0, TTFT: 0.1, E2E: 1.1, CompletionTokens: 101, SpecVerifyCt: 40, Text: "x", ITL: []float64{0.01, 0.01}},
		{Prompt: 1, TTFT: 0.2, E2E: 0.7, CompletionTokens: 51, SpecVerifyCt: 20, Text: "y", ITL: []float64{0.02}},
		{Prompt: 2, Err: "HTTP 500: boom"},
		{Prompt: 3, TTFT: 0.1, E2E: 0.1, CompletionTokens: 0},
	}}
	m := Compute(tr)
	if m.Requests != 4 || m.Errors != 1 || m.Empty != 1 || m.Tokens != 152 || m.VerifyCt != 60 {
		t.Errorf("counts %+v", m)
	}
	if m.TokPerSec != 76 || math.Abs(m.AcceptLength-152.0/60) > 1e-12 {
		t.Errorf("tok/s %v accept %v", m.TokPerSec, m.AcceptLength)
	}
	// decode: 100/1.0 = 100 and 50/0.5 = 100 tok/s.
	if m.DecodeTokPerS != 100 || m.TPOTms != 10 || m.ITLp50ms != 10 {
		t.Errorf("decode %v tpot %v itl %v", m.DecodeTokPerS, m.TPOTms, m.ITLp50ms)
	}
}

func TestSummarizeConfidence(t *testing.T) {
	s := Summarize([]float64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19})
	if s.Center != 14.5 || s.Confidence < 0.95 || math.IsInf(s.Lo, 0) || s.Lo > 14 || s.Hi < 15 || s.Warning != "" {
		t.Errorf("10 values: %+v", s)
	}
	s = Summarize([]float64{5, 1, 3, 2, 4})
	if s.Center != 3 || s.Lo != 1 || s.Hi != 5 || math.Abs(s.Confidence-0.9375) > 1e-9 || !strings.Contains(s.Warning, "5 trials allow a 93.8% interval") {
		t.Errorf("5 values: %+v", s)
	}
	// 2 or 3 trials allow no interval: the JSON says so rather than
	// "confidence": 1 with null bounds.
	for _, vals := range [][]float64{{7, 8}, {7, 8, 9}} {
		s = Summarize(vals)
		b, _ := json.Marshal(s)
		if s.Confidence != 0 || !strings.Contains(string(b), `"lo":null,"hi":null`) || !strings.Contains(string(b), `"confidence":null,"no_interval":true`) ||
			!strings.Contains(s.Warning, fmt.Sprintf("%d trials allow no confidence interval", len(vals))) {
			t.Errorf("%d values: %+v %s", len(vals), s, b)
		}
	}
	s = Summarize([]float64{7})
	if !math.IsInf(s.Lo, -1) || !math.IsInf(s.Hi, 1) || s.Warning == "" {
		t.Errorf("1 value: %+v", s)
	}
	// JSON has no infinity: unbounded ends are null and read back.
	b, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(b), `"lo":null`) {
		t.Fatalf("json %s %v", b, err)
	}
	if b, _ := json.Marshal(Summarize([]float64{5, 1, 3, 2, 4})); !strings.Contains(string(b), `"confidence":0.9375`) || strings.Contains(string(b), "no_interval") {
		t.Errorf("5 values json %s", b)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || !math.IsInf(back.Lo, -1) || back.Center != 7 {
		t.Errorf("round trip %+v %v", back, err)
	}
}

func TestCompareVerdicts(t *testing.T) {
	base := []float64{90.1, 89.7, 90.4, 90.0, 89.9}
	same := []float64{90.2, 89.8, 90.3, 90.1, 89.6}
	slow := []float64{54.0, 54.2, 53.9, 54.1, 54.3} // 40% slower
	if d := Compare(base, same, true); d.Verdict != NoChange || d.P < 0.05 {
		t.Errorf("identical arms: %+v", d)
	}
	d := Compare(base, slow, true)
	if d.Verdict != Slower || d.P >= 0.05 || math.Abs(d.Pct+40) > 0.5 {
		t.Errorf("40%% slower: %+v", d)
	}
	if d := Compare(slow, base, true); d.Verdict != Faster {
		t.Errorf("faster: %+v", d)
	}
	// Latency: lower is better.
	if d := Compare([]float64{10, 10.1, 9.9, 10, 10.2}, []float64{20, 20.1, 19.9, 20, 20.2}, false); d.Verdict != Slower {
		t.Errorf("higher latency: %+v", d)
	}
	d = Compare(base[:3], slow[:3], true)
	if d.Verdict != NoChange || !strings.Contains(d.TooFew, "need >= 4 samples") || !strings.Contains(d.String(), "need >= 4") {
		t.Errorf("3 trials: %+v", d)
	}
}

func TestAgree(t *testing.T) {
	// One character is one token here; the check compares 10.
	mk := func(texts ...string) []Trial {
		var s []sglang.Sample
		for i, x := range texts {
			s = append(s, sglang.Sample{Prompt: i, Text: x, Text32: x[:min(len(x), 10)], CompletionTokens: len(x), FinishReason: "length"})
		}
		return []Trial{{Samples: s}}
	}
	base := mk("0123456789abcdef", "same text here", "another prompt out")
	ag := Agree(base, mk("0123456789abcdef", "same text here", "another prompt out"), 0.9, 10)
	if ag.Prompts != 3 || ag.Identical != 3 || ag.Share != 1 || ag.Invalid {
		t.Errorf("identical: %+v", ag)
	}
	// Diverges after the compared prefix: still agrees over the first tokens.
	ag = Agree(base, mk("0123456789XXXX", "same text here", "another prompt out"), 0.9, 10)
	if ag.Identical != 2 || ag.IdenticalN != 3 || ag.Invalid || len(ag.Divergences) != 1 || ag.Divergences[0].Offset != 10 {
		t.Errorf("late divergence: %+v", ag)
	}
	ag = Agree(base, mk("X123456789abcdef", "Xame text here", "another prompt out"), 0.9, 10)
	if ag.IdenticalN != 1 || !ag.Invalid || ag.Divergences[0].Offset != 0 || ag.Divergences[0].Arm != "X123456789abcdef" {
		t.Errorf("early divergence: %+v", ag)
	}
	// An empty or short baseline agrees with nothing longer: its few
	// characters are no comparison (it used to score 3/3 here).
	short := mk("", "sa", "anoth")
	if ag = Agree(short, mk("completely other text", "something else", "different"), 0.9, 10); ag.IdenticalN != 0 || !ag.Invalid {
		t.Errorf("empty/short baseline: %+v", ag)
	}
	// ... but one that stopped at the same point for the same reason agrees.
	if ag = Agree(short, mk("", "sa", "anoth"), 0.9, 10); ag.IdenticalN != 3 || ag.Invalid {
		t.Errorf("same short outputs: %+v", ag)
	}
	stop := mk("", "sa", "anoth")
	for i := range stop[0].Samples {
		stop[0].Samples[i].FinishReason = "stop"
	}
	if ag = Agree(short, stop, 0.9, 10); ag.IdenticalN != 0 || !ag.Invalid {
		t.Errorf("same text, other finish reason: %+v", ag)
	}
	// An arm that stops short of the compared count where the baseline
	// went on does not agree either.
	if ag = Agree(base, mk("01234", "same text here", "another prompt out"), 0.5, 10); ag.IdenticalN != 2 {
		t.Errorf("arm stops short: %+v", ag)
	}
	var sum Agreement
	sum.Add(Agree(base, mk("0123456789abcdef", "same text here", "another prompt out"), 0.9, 10))
	sum.Add(Agree(base, mk("X123456789abcdef", "same text here", "another prompt out"), 0.5, 10))
	if sum.Outputs != 6 || sum.IdenticalN != 5 || sum.Prompts != 3 || sum.Invalid || math.Abs(sum.Share-5.0/6) > 1e-12 || len(sum.Divergences) != 1 {
		t.Errorf("sum: %+v", sum)
	}
}

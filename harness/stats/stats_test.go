package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
)

func TestComputeTrial(t *testing.T) {
	tr := Trial{Index: 2, Concurrency: 4, Wall: 2, Samples: []sglang.Sample{
		{Prompt: 0, TTFT: 0.1, E2E: 1.1, CompletionTokens: 101, SpecVerifyCt: 40, Text: "x", ITL: []float64{0.01, 0.01}},
		{Prompt: 1, TTFT: 0.2, E2E: 0.7, CompletionTokens: 51, SpecVerifyCt: 20, Text: "y", ITL: []float64{0.02}},
		{Prompt: 2, Err: "HTTP 500: boom"},
		{Prompt: 3, TTFT: 0.1, E2E: 0.1, CompletionTokens: 0},
	}}
	m := Compute(tr)
	if m.Trial != 2 || m.Concurrency != 4 || m.Requests != 4 || m.Errors != 1 || m.Empty != 1 || m.Tokens != 152 || m.VerifyCt != 60 {
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
	// 1, 2 or 3 trials allow no interval: the JSON says so rather than
	// "confidence": 1 with null bounds.
	for _, vals := range [][]float64{{7}, {7, 8}, {7, 8, 9}} {
		s = Summarize(vals)
		b, _ := json.Marshal(s)
		if s.Confidence != 0 || !strings.Contains(string(b), `"lo":null,"hi":null`) || !strings.Contains(string(b), `"confidence":null,"no_interval":true`) ||
			!strings.HasPrefix(s.Warning, map[int]string{1: "1 trial allows", 2: "2 trials allow", 3: "3 trials allow"}[len(vals)]+" no confidence interval") {
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
			s = append(s, sglang.Sample{Prompt: i, Text: x, TextAtAgree: x[:min(len(x), 10)], CompletionTokens: len(x), FinishReason: "length"})
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

// stream is a /generate stream of words streamed chunk tokens at a time,
// read by the client: the sample the output check gets.
func stream(t *testing.T, words []string, chunk int) sglang.Sample {
	t.Helper()
	var b strings.Builder
	text := ""
	for i := 0; i < len(words); i += chunk {
		end := min(i+chunk, len(words))
		text += strings.Join(words[i:end], "")
		fin := "null"
		if end == len(words) {
			fin = `{"type": "length", "length": ` + fmt.Sprint(end) + `}`
		}
		j, _ := json.Marshal(text)
		fmt.Fprintf(&b, "data: {\"text\": %s, \"meta_info\": {\"completion_tokens\": %d, \"finish_reason\": %s}}\n\n", j, end, fin)
	}
	b.WriteString("data: [DONE]\n\n")
	var s sglang.Sample
	sglang.ReadStream(strings.NewReader(b.String()), time.Now(), time.Now, false, 0, &s)
	if s.Err != "" {
		t.Fatal(s.Err)
	}
	return s
}

// The output check compares exactly the first 32 tokens' worth of text,
// however each side's chunks fall (with EAGLE a chunk is an accept
// length, which differs between arms). It used to compare the baseline's
// text to the end of the chunk that crossed token 32 (36 tokens with
// 3-token chunks), so an arm identical over 32 tokens and different from
// token 33 read INVALID when its chunks fell elsewhere.
func TestAgreeWindowIndependentOfChunking(t *testing.T) {
	const n, total = 32, 48
	words := func(divergeAt int) []string {
		var w []string
		for i := 0; i < total; i++ {
			x := fmt.Sprintf(" w%d", i*7%13) // words of 2 to 3 bytes after the space
			if divergeAt >= 0 && i >= divergeAt {
				x = fmt.Sprintf(" v%d", i)
			}
			w = append(w, x)
		}
		return w
	}
	base := words(-1)
	trial := func(s sglang.Sample) []Trial { return []Trial{{Index: 1, Samples: []sglang.Sample{s}}} }
	chunkings := []int{1, 2, 3, 4, 5, 7, 8, 16}
	for _, cb := range chunkings {
		for _, ca := range chunkings {
			b := trial(stream(t, base, cb))
			// Identical over the first 32 tokens, different from token 33.
			ag := Agree(b, trial(stream(t, words(n), ca)), 0.9, n)
			if ag.IdenticalN != 1 || ag.Invalid {
				t.Errorf("chunks %d/%d, differing from token 33: %d/%d agree, want 1/1", cb, ca, ag.IdenticalN, ag.Outputs)
			} else if len(ag.Divergences) != 1 || !ag.Divergences[0].Beyond || !strings.Contains(ag.Divergences[0].String(), ", beyond the compared window (it agrees over the compared tokens)") {
				t.Errorf("chunks %d/%d: the late difference is not marked beyond the window: %+v", cb, ca, ag.Divergences)
			}
			// Different from token 21: inside the window whatever the chunks.
			ag = Agree(b, trial(stream(t, words(20), ca)), 0.9, n)
			if ag.IdenticalN != 0 || !ag.Invalid || ag.Divergences[0].Beyond {
				t.Errorf("chunks %d/%d, differing from token 21: %d/%d agree, want 0", cb, ca, ag.IdenticalN, ag.Outputs)
			}
		}
		// Different at token 32 itself: caught wherever either side has a
		// chunk ending at token 32 (here the arm's, one token a chunk).
		for _, ca := range []int{1, 2, 4, 8, 16} {
			if ag := Agree(trial(stream(t, base, cb)), trial(stream(t, words(n-1), ca)), 0.9, n); ag.IdenticalN != 0 {
				t.Errorf("chunks %d/%d, differing at token 32: agrees", cb, ca)
			}
		}
	}
	// Neither side vouches for a byte (every compared token in the first
	// chunk): the shorter first chunk is compared, as documented.
	one := stream(t, base, total)
	if ag := Agree(trial(one), trial(stream(t, base, total)), 0.9, n); ag.IdenticalN != 1 {
		t.Errorf("single chunks, same text: %+v", ag)
	}
	if ag := Agree(trial(one), trial(stream(t, words(n), total)), 0.9, n); ag.IdenticalN != 0 {
		t.Errorf("single chunks differing at token 33 agree, though neither side can place the difference: %+v", ag)
	}
}

// Outputs with the same text that end differently say so, instead of two
// identical snippets; texts that differ only in invisible or combining
// characters print differently.
func TestDivergenceText(t *testing.T) {
	mk := func(text, reason string, tokens int) []Trial {
		return []Trial{{Index: 1, Concurrency: 1, Samples: []sglang.Sample{{Text: text, TextAtAgree: text, CompletionTokens: tokens, FinishReason: reason}}}}
	}
	ag := Agree(mk("the micron chip", "stop", 5), mk("the micron chip", "length", 5), 0.9, 32)
	if d := ag.Divergences[0].String(); d != "ends differently with the same text: finish reason stop vs length at token 5 (trial 1, concurrency 1)" {
		t.Errorf("finish reason only: %s", d)
	}
	ag = Agree(mk("the micron chip", "stop", 5), mk("the micron chip", "stop", 6), 0.9, 32)
	if d := ag.Divergences[0].String(); !strings.Contains(d, "5 vs 6 tokens (finish reason stop)") {
		t.Errorf("token count only: %s", d)
	}
	ag = Agree(mk("un caf\u00e9 noir", "stop", 3), mk("un cafe\u0301 noir", "stop", 3), 0.9, 32)
	if d := ag.Divergences[0].String(); !strings.Contains(d, `baseline "un caf\u00e9 noir", arm "un cafe\u0301 noir"`) {
		t.Errorf("NFC vs NFD: %s", d)
	}
	ag = Agree(mk("a\u200bb", "stop", 3), mk("ab", "stop", 3), 0.9, 32)
	if d := ag.Divergences[0].String(); !strings.Contains(d, `baseline "a\u200bb", arm "ab"`) {
		t.Errorf("zero-width space: %s", d)
	}
}

// TestQuantileIsNumpyPercentile checks Quantile against numpy's default
// (linear) percentile, np.percentile(xs, 100*q), which bench_serving uses
// for every p99 (Upstream:
// python/sglang/bench_serving.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (calculate_metrics)). Each want is worked by hand from numpy's rule:
// sorted xs, k = (n-1) x q, xs[floor k] + (xs[ceil k] - xs[floor k]) x
// frac(k).
func TestQuantileIsNumpyPercentile(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 0.99, 3.97},                    // k = 2.97: 3 + 0.97 x 1
		{[]float64{5, 1, 4, 2, 3}, 0.99, 4.96},                 // unsorted; k = 3.96: 4 + 0.96 x 1
		{[]float64{10, 20}, 0.99, 19.9},                        // k = 0.99: 10 + 0.99 x 10
		{[]float64{0, 10, 20, 30, 40}, 0.99, 39.6},             // k = 3.96: 30 + 0.96 x 10
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},                      // np.median: k = 1.5
		{[]float64{3, 1, 2}, 0.5, 2},                           // k = 1, an order statistic
		{[]float64{7}, 0.99, 7},                                // one value
		{[]float64{2, 2, 2, 100}, 0.5, 2},                      // k = 1.5 between equal values
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99, 9.91}, // k = 8.91
		{nil, 0.99, 0},                                         // np.percentile(xs or 0, 99) of no values
	} {
		if got := Quantile(tc.xs, tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v, %v) = %v, numpy %v", tc.xs, tc.q, got, tc.want)
		}
	}
}

// TestComputeTPOTp99 checks TPOT median and p99 over a trial's requests
// by bench_serving's rule: a request of more than one token has TPOT =
// (E2E - TTFT) / (tokens - 1), 0 included; failed and one-token requests
// have none.
func TestComputeTPOTp99(t *testing.T) {
	tr := Trial{Wall: 1, Samples: []sglang.Sample{
		{Prompt: 0, TTFT: 0.1, E2E: 0.1 + 0.010*10, CompletionTokens: 11, Text: "a"}, // 10 ms
		{Prompt: 1, TTFT: 0.2, E2E: 0.2 + 0.020*5, CompletionTokens: 6, Text: "b"},   // 20 ms
		{Prompt: 2, TTFT: 0.1, E2E: 0.1 + 0.040*4, CompletionTokens: 5, Text: "c"},   // 40 ms
		{Prompt: 3, TTFT: 0.3, E2E: 0.3 + 0.030*2, CompletionTokens: 3, Text: "d"},   // 30 ms
		{Prompt: 4, TTFT: 0.05, E2E: 0.05, CompletionTokens: 8, Text: "e"},           // 0 ms: one chunk
		{Prompt: 5, TTFT: 0.05, E2E: 0.5, CompletionTokens: 1, Text: "f"},            // one token: none
		{Prompt: 6, Err: "HTTP 500: boom", CompletionTokens: 9},                      // failed: none
	}}
	m := Compute(tr)
	// tpots (ms) = [0, 10, 20, 30, 40]: median 20; p99 k = 3.96: 39.6.
	if math.Abs(m.TPOTms-20) > 1e-9 || math.Abs(m.TPOTp99ms-39.6) > 1e-9 {
		t.Errorf("TPOT median %v ms (want 20), p99 %v ms (want 39.6)", m.TPOTms, m.TPOTp99ms)
	}
	if v := Values(m); v["tpot_ms_p99"] != m.TPOTp99ms || v["tpot_ms"] != m.TPOTms {
		t.Errorf("Values %v", v)
	}
	b, _ := json.Marshal(m)
	if !strings.Contains(string(b), `"tpot_ms_p99":39.6`) {
		t.Errorf("JSON %s", b)
	}
}

// TestTable checks that every metric has a unique name and column, a
// unit, a label and a benchfmt unit, and that each getter reads its own
// field: Metrics with a distinct value per field give distinct values.
func TestTable(t *testing.T) {
	m := Metrics{TokPerSec: 1, DecodeTokPerS: 2, AcceptLength: 3, TTFTp50ms: 4, TTFTp99ms: 5, ITLp50ms: 6, TPOTms: 7, TPOTp99ms: 8}
	names, cols, bf, vals := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[float64]string{}
	for _, d := range Table {
		if d.Name == "" || d.Unit == "" || d.Label == "" || d.Column == "" || d.Benchfmt == "" || d.Get == nil {
			t.Errorf("incomplete entry %+v", d)
			continue
		}
		if names[d.Name] || cols[d.Column] || bf[d.Benchfmt] {
			t.Errorf("%s: name, column or benchfmt unit repeated", d.Name)
		}
		names[d.Name], cols[d.Column], bf[d.Benchfmt] = true, true, true
		if other, ok := vals[d.Get(m)]; ok {
			t.Errorf("%s and %s read the same field", d.Name, other)
		}
		vals[d.Get(m)] = d.Name
		if got, ok := Lookup(d.Name); !ok || got.Column != d.Column {
			t.Errorf("Lookup(%s) = %+v %v", d.Name, got, ok)
		}
		if (d.Unit == "ms") != strings.HasSuffix(d.Benchfmt, "-sec") {
			t.Errorf("%s: unit %s, benchfmt unit %s", d.Name, d.Unit, d.Benchfmt)
		}
	}
	if len(vals) != len(Table) {
		t.Errorf("%d metrics read distinct fields, want one each (%d)", len(vals), len(Table))
	}
	if d, ok := Lookup("tpot_ms_p99"); !ok || d.HigherIsBetter || d.Unit != "ms" || d.BenchfmtValue(39.6) != 0.0396 {
		t.Errorf("tpot_ms_p99: %+v %v", d, ok)
	}
	if d, _ := Lookup(TokS); !d.HigherIsBetter || d.BenchfmtValue(90) != 90 {
		t.Errorf("tok_s: %+v", d)
	}
	if _, ok := Lookup("speed"); ok {
		t.Error("Lookup(speed) found")
	}
}

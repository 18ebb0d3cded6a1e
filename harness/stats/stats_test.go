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
		return []Trial{{Index: 1, Concurrency: 1, Samples: []sglang.Sample{{Text: text, Text32: text, CompletionTokens: tokens, FinishReason: reason}}}}
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

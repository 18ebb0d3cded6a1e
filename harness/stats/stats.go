// Package stats turns the requests of a benchmark trial into its metrics,
// summarizes a metric across trials (median with a 95% confidence
// interval), and compares an arm with the baseline (Mann-Whitney U), with
// golang.org/x/perf/benchmath, as benchstat does. It owns the metric
// table (Table: name, unit, direction, getter, history column) that every
// report, the history, plots and regression checks read. It knows nothing
// about servers or printing.
package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"golang.org/x/perf/benchmath"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// Trial is one pass of the workload against one arm.
type Trial struct {
	Arm   string `json:"arm"`
	Index int    `json:"index"` // 1-based
	// Concurrency is the level the trial ran at: requests in flight.
	Concurrency int             `json:"concurrency"`
	Start       time.Time       `json:"start"`
	Wall        float64         `json:"wall_s"` // first request sent to last response done
	Samples     []sglang.Sample `json:"samples"`
}

// Metrics are one trial's results.
type Metrics struct {
	Trial         int     `json:"trial"`       // 1-based, as Trial.Index
	Concurrency   int     `json:"concurrency"` // the level, as Trial.Concurrency
	Requests      int     `json:"requests"`
	Errors        int     `json:"errors"`
	Empty         int     `json:"empty_outputs"`
	Tokens        int     `json:"completion_tokens"`
	VerifyCt      int     `json:"spec_verify_ct"`
	TokPerSec     float64 `json:"tok_s"`               // Σ completion tokens / wall time
	DecodeTokPerS float64 `json:"decode_tok_s_median"` // median over requests of (tokens-1)/(E2E-TTFT)
	AcceptLength  float64 `json:"accept_length"`       // Σ completion tokens / Σ spec_verify_ct; 0 without verify counts
	TPOTms        float64 `json:"tpot_ms_median"`      // median over requests of more than one token of (E2E-TTFT)/(tokens-1), ms
	TPOTp99ms     float64 `json:"tpot_ms_p99"`         // 99th percentile of the same, ms (Quantile: numpy's default percentile)
	ITLp50ms      float64 `json:"itl_ms_p50"`
	TTFTp50ms     float64 `json:"ttft_ms_p50"`
	TTFTp99ms     float64 `json:"ttft_ms_p99"`
	E2Ep50ms      float64 `json:"e2e_ms_p50"`
}

// Compute derives a trial's metrics. Failed requests count as errors and
// add nothing else; a request without output counts as empty. The sums
// cannot overflow: a sample's counts come from sglang's client, which
// fails a request whose completion_tokens exceed its max_new_tokens (at
// most 2^20, bounds.Bench) or whose spec_verify_ct exceeds that, and a
// trial has at most 100,000 requests: below 2^37 tokens.
func Compute(t Trial) Metrics {
	m := Metrics{Trial: t.Index, Concurrency: t.Concurrency, Requests: len(t.Samples)}
	var decode, tpot, itl, ttft, e2e []float64
	for _, s := range t.Samples {
		if s.Err != "" {
			m.Errors++
			continue
		}
		if s.CompletionTokens == 0 || s.Text == "" {
			m.Empty++
		}
		m.Tokens += s.CompletionTokens
		m.VerifyCt += s.SpecVerifyCt
		if d := s.DecodeTokPerSec(); d > 0 {
			decode = append(decode, d)
		}
		// As bench_serving: every request of more than one token has a
		// TPOT, 0 included (all its tokens in the first chunk).
		if s.CompletionTokens > 1 {
			tpot = append(tpot, s.TPOT()*1000)
		}
		for _, x := range s.ITL {
			itl = append(itl, x*1000)
		}
		ttft = append(ttft, s.TTFT*1000)
		e2e = append(e2e, s.E2E*1000)
	}
	if t.Wall > 0 {
		m.TokPerSec = float64(m.Tokens) / t.Wall
	}
	if m.VerifyCt > 0 {
		m.AcceptLength = float64(m.Tokens) / float64(m.VerifyCt)
	}
	m.DecodeTokPerS = Quantile(decode, 0.5)
	m.TPOTms = Quantile(tpot, 0.5)
	m.TPOTp99ms = Quantile(tpot, 0.99)
	m.ITLp50ms = Quantile(itl, 0.5)
	m.TTFTp50ms = Quantile(ttft, 0.5)
	m.TTFTp99ms = Quantile(ttft, 0.99)
	m.E2Ep50ms = Quantile(e2e, 0.5)
	return m
}

// Quantile is the q-quantile (0 to 1) of xs by linear interpolation
// between order statistics, numpy's default percentile definition:
// sorted, k = (n-1) x q, xs[floor k] + (xs[ceil k] - xs[floor k]) x (k -
// floor k); 0 for no values, as bench_serving's np.percentile(xs or 0,
// ...) (Upstream:
// python/sglang/bench_serving.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (calculate_metrics)).
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	k := float64(len(s)-1) * q
	lo, hi := int(math.Floor(k)), int(math.Ceil(k))
	return s[lo] + (s[hi]-s[lo])*(k-float64(lo))
}

// Summary is a metric across trials: the median and its confidence
// interval (benchmath.AssumeNothing, 95%).
type Summary struct {
	Center float64 `json:"center"`
	Lo     float64 `json:"lo"` // -Inf when the interval is unbounded (JSON: null)
	Hi     float64 `json:"hi"` // +Inf likewise
	N      int     `json:"n"`
	// Confidence is the interval's actual confidence level: 0.95 or more
	// when the trials allow it; with 4 or 5 trials the best they allow,
	// 1 - 2 x 0.5^n (the [min, max] interval: 0.9375 for 5); 0 with 1 to
	// 3 trials, which allow no interval (JSON: null, and "no_interval").
	Confidence float64 `json:"confidence"`
	// Warning says why the interval is below 95% or unbounded.
	Warning string `json:"warning,omitempty"`
}

// MarshalJSON writes an unbounded end of the interval as null: JSON has
// no infinity.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain struct {
		Center     float64  `json:"center"`
		Lo         *float64 `json:"lo"`
		Hi         *float64 `json:"hi"`
		N          int      `json:"n"`
		Confidence float64  `json:"confidence"`
		Warning    string   `json:"warning,omitempty"`
	}
	p := plain{Center: s.Center, N: s.N, Warning: s.Warning}
	if !math.IsInf(s.Lo, 0) && !math.IsNaN(s.Lo) {
		p.Lo = &s.Lo
	}
	if !math.IsInf(s.Hi, 0) && !math.IsNaN(s.Hi) {
		p.Hi = &s.Hi
	}
	if p.Lo == nil || p.Hi == nil {
		// No interval: no level to state.
		return json.Marshal(struct {
			plain
			Confidence *float64 `json:"confidence"`
			NoInterval bool     `json:"no_interval"`
		}{p, nil, true})
	}
	p.Confidence = s.Confidence
	return json.Marshal(p)
}

// UnmarshalJSON reads null ends back as infinities.
func (s *Summary) UnmarshalJSON(b []byte) error {
	var p struct {
		Center     float64  `json:"center"`
		Lo         *float64 `json:"lo"`
		Hi         *float64 `json:"hi"`
		N          int      `json:"n"`
		Confidence float64  `json:"confidence"`
		Warning    string   `json:"warning"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Summary{Center: p.Center, Lo: math.Inf(-1), Hi: math.Inf(1), N: p.N, Confidence: p.Confidence, Warning: p.Warning}
	if p.Lo != nil {
		s.Lo = *p.Lo
	}
	if p.Hi != nil {
		s.Hi = *p.Hi
	}
	return nil
}

// Confidence is the level of every interval this package reports.
const Confidence = 0.95

// Summarize returns the median of values and its 95% confidence interval
// (benchmath.AssumeNothing: order statistics, no distribution assumed).
// Six values are needed for 95%; with 4 or 5 it returns the best interval
// they allow, [min, max] at 1 - 2 x 0.5^n (87.5%, 93.75%), and says so in
// Warning; with fewer the interval is unbounded (Lo, Hi = ±Inf): [min, max]
// of 3 values holds the median only 75% of the time.
func Summarize(values []float64) Summary {
	if len(values) == 0 {
		return Summary{Lo: math.Inf(-1), Hi: math.Inf(1), Warning: "no values"}
	}
	sample := benchmath.NewSample(append([]float64(nil), values...), &benchmath.DefaultThresholds)
	s := benchmath.AssumeNothing.Summary(sample, Confidence)
	out := Summary{Center: s.Center, Lo: s.Lo, Hi: s.Hi, N: len(values), Confidence: s.Confidence}
	if len(s.Warnings) > 0 {
		out.Warning = s.Warnings[0].Error()
		if n := len(values); n < 4 {
			out.Confidence = 0
			out.Warning = fmt.Sprintf("%s %s no confidence interval (4 allow 87.5%%, 6 allow 95%%): %s", textfmt.Plural(n, "trial", "trials"), textfmt.Word(n, "allows", "allow"), s.Warnings[0])
		}
		if n := len(values); n >= 4 {
			best := 1 - 2*math.Pow(0.5, float64(n))
			s2 := benchmath.AssumeNothing.Summary(sample, best-1e-9)
			if !math.IsInf(s2.Lo, 0) && !math.IsInf(s2.Hi, 0) {
				out.Lo, out.Hi, out.Confidence = s2.Lo, s2.Hi, s2.Confidence
				out.Warning = fmt.Sprintf("%d trials allow a %.1f%% interval, not 95%% (%s)", n, s2.Confidence*100, s.Warnings[0])
			}
		}
	}
	return out
}

// Verdict is Compare's word for an arm against the baseline on one
// metric; its values are the constants below (JSON writes the words).
type Verdict string

// Verdict words.
const (
	Faster   Verdict = "faster"
	Slower   Verdict = "slower"
	NoChange Verdict = "no significant change"
)

// Delta compares an arm with the baseline on one metric.
type Delta struct {
	Pct     float64 `json:"pct"` // (arm/base - 1) x 100, medians
	P       float64 `json:"p"`   // Mann-Whitney U, two-sided
	Alpha   float64 `json:"alpha"`
	Verdict Verdict `json:"verdict"` // Faster, Slower or NoChange
	// TooFew says that no difference could be significant with this many
	// trials (benchmath's warning), so "no significant change" means "could
	// not tell".
	TooFew string `json:"too_few,omitempty"`
}

// DefaultAlpha is the significance level Compare tests at: benchmath's
// (0.05). nightly's regression.alpha defaults to it.
var DefaultAlpha = benchmath.DefaultThresholds.CompareAlpha

// Compare tests arm against base with the Mann-Whitney U test at
// DefaultAlpha. higherIsBetter says which direction is "faster" (true for tok/s,
// false for latencies).
func Compare(base, arm []float64, higherIsBetter bool) Delta {
	return CompareAt(base, arm, higherIsBetter, DefaultAlpha)
}

// CompareAt is Compare at significance level alpha.
func CompareAt(base, arm []float64, higherIsBetter bool, alpha float64) Delta {
	th := benchmath.DefaultThresholds
	th.CompareAlpha = alpha
	c := benchmath.AssumeNothing.Compare(benchmath.NewSample(append([]float64(nil), base...), &th), benchmath.NewSample(append([]float64(nil), arm...), &th))
	b, a := Quantile(base, 0.5), Quantile(arm, 0.5)
	d := Delta{P: c.P, Alpha: c.Alpha, Verdict: NoChange}
	if b != 0 {
		d.Pct = (a/b - 1) * 100
	}
	for _, w := range c.Warnings {
		d.TooFew = w.Error()
	}
	if c.P < c.Alpha {
		better := a > b
		if !higherIsBetter {
			better = a < b
		}
		if better {
			d.Verdict = Faster
		} else {
			d.Verdict = Slower
		}
	}
	return d
}

func (d Delta) String() string {
	s := fmt.Sprintf("%+.1f%% (p=%.3f): %s", d.Pct, d.P, d.Verdict)
	if d.TooFew != "" && d.Verdict == NoChange {
		s += " (" + d.TooFew + ")"
	}
	return s
}

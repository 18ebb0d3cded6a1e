package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/internal/lazyre"
)

// The serving metrics are one trial's figures as `vllm bench serve`
// reports them (and SGLang's bench_serving, whose figures are the same
// but for their names), for people and dashboards that read those: request
// and token throughput, and the mean, median, standard deviation and
// chosen percentiles of TTFT, TPOT, ITL and E2E latency. They are
// measurements only: the A/B verdicts, the history and the regression
// checks stay on Table's metrics and their statistics.
//
// Formulas (Upstream: vllm/benchmarks/serve.py@2e2bf3cb16509a3bf7f66bb532a8a561b26a280f
// of flytiger-eco/vllm-for-sail (calculate_metrics, benchmark); the same
// in Upstream: python/sglang/bench_serving.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (calculate_metrics)), over the requests that succeeded, with the
// trial's wall time (first request sent to last response done) as the
// duration:
//   - request_throughput = completed / duration (req/s);
//   - output_throughput = Σ completion tokens / duration (tok/s);
//   - total_token_throughput = (Σ prompt tokens + Σ completion tokens) /
//     duration (tok/s);
//   - TTFT and E2EL per request; TPOT = (E2EL - TTFT) / (tokens - 1) per
//     request of more than one token; ITL every gap between tokens;
//   - mean (numpy's mean), median, std (numpy's np.std: the population
//     standard deviation) and percentiles (np.percentile: Quantile) of
//     each, in ms; 0 for a metric with no values (numpy of `xs or 0`);
//   - max_output_tokens_per_s and max_concurrent_requests: the most
//     tokens that arrived, and requests that were in flight, within one
//     whole second counted from the first request's start.
//
// Where arpatch's inputs differ from theirs: prompt tokens are the
// server's prompt_tokens (vLLM and SGLang count them with a tokenizer on
// the client); completion tokens the server's completion_tokens, as
// vLLM's usage field. The ITL of a chunk of n tokens is n gaps of 1/n of
// its delay each, as SGLang's bench_serving has it for SGLang's native
// /generate stream; vLLM's OpenAI backends keep one gap per chunk, which
// differs only where a chunk brings several tokens (EAGLE's accepted
// drafts), and counts one token per chunk in max_output_tokens_per_s.

// The serving latency metrics, as --percentile-metrics names them.
const (
	ServingTTFT = "ttft"
	ServingTPOT = "tpot"
	ServingITL  = "itl"
	ServingE2EL = "e2el"
)

// ServingMetrics lists the serving latency metrics in the order vLLM
// reports them, with their labels.
var ServingMetrics = []struct{ Name, Label string }{
	{ServingTTFT, "TTFT"}, {ServingTPOT, "TPOT"}, {ServingITL, "ITL"}, {ServingE2EL, "E2EL"},
}

// Selection is which latency metrics get mean, median, std and
// percentiles, and which percentiles (0 to 100): vLLM's
// --percentile-metrics and --metric-percentiles.
type Selection struct {
	Metrics     []string  `json:"percentile_metrics"`
	Percentiles []float64 `json:"metric_percentiles"`
}

// DefaultSelection is vLLM's default for a generative model: ttft, tpot
// and itl at the 99th percentile.
var DefaultSelection = Selection{Metrics: []string{ServingTTFT, ServingTPOT, ServingITL}, Percentiles: []float64{99}}

// ParseSelection reads --percentile-metrics ("ttft,tpot,itl,e2el", any
// of them, each once) and --metric-percentiles ("25,50,99.9": each in
// [0, 100], each once), as vLLM spells them. The metrics are kept in
// ServingMetrics' order, the percentiles in the order given.
func ParseSelection(metrics, percentiles string) (Selection, error) {
	var s Selection
	for _, m := range strings.Split(metrics, ",") {
		m = strings.TrimSpace(m)
		if !slices.ContainsFunc(ServingMetrics, func(k struct{ Name, Label string }) bool { return k.Name == m }) {
			return s, fmt.Errorf("percentile metric %q: use any of ttft, tpot, itl, e2el, comma-separated", m)
		}
		if slices.Contains(s.Metrics, m) {
			return s, fmt.Errorf("percentile metric %q is given twice", m)
		}
		s.Metrics = append(s.Metrics, m)
	}
	slices.SortFunc(s.Metrics, func(a, b string) int { return servingIndex(a) - servingIndex(b) })
	for _, p := range strings.Split(percentiles, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
			return s, fmt.Errorf("metric percentile %q: want a number from 0 to 100, comma-separated (e.g. 50,90,99)", p)
		}
		if slices.Contains(s.Percentiles, v) {
			return s, fmt.Errorf("metric percentile %v is given twice", v)
		}
		s.Percentiles = append(s.Percentiles, v)
	}
	return s, nil
}

func servingIndex(name string) int {
	return slices.IndexFunc(ServingMetrics, func(k struct{ Name, Label string }) bool { return k.Name == name })
}

// Latency is one serving latency metric of a trial, in ms.
type Latency struct {
	Metric      string       // ttft, tpot, itl or e2el
	Mean        float64      // ms
	Median      float64      // ms
	Std         float64      // ms, population standard deviation
	Percentiles []Percentile // in Selection order
}

// Percentile is the P-th percentile (0 to 100) of a metric: Value, ms.
type Percentile struct{ P, Value float64 }

// Serving is one trial's serving metrics. Its JSON is flat, with
// vLLM's --save-result names (duration, completed, request_throughput,
// mean_ttft_ms, p99_ttft_ms, ...), so that what reads vLLM's result
// files reads these.
type Serving struct {
	Traffic
	Duration              float64 // s
	Completed, Failed     int     // requests
	TotalInputTokens      int
	TotalOutputTokens     int
	RequestThroughput     float64 // req/s
	OutputThroughput      float64 // tok/s
	TotalTokenThroughput  float64 // tok/s
	MaxOutputTokensPerS   float64 // tokens in the busiest whole second
	MaxConcurrentRequests int     // requests in flight in the busiest whole second
	Latencies             []Latency
}

// Traffic is how a trial's requests were sent, each field under the
// name vLLM's --save-result gives the same figure at its top level
// (num_prompts, request_rate, burstiness, max_concurrency), with the
// trial's number beside them (vLLM's file holds one run; arpatch's rows
// are one per trial and level).
type Traffic struct {
	Trial      int // 1-based, as stats.Trial.Index
	NumPrompts int // requests sent in the trial
	// RequestRate is the open loop's mean arrival rate, req/s; +Inf sends
	// every request at once (written "inf", as vLLM writes it).
	RequestRate float64
	Burstiness  float64 // the arrival gaps' gamma shape (1: Poisson); +Inf is written "inf"
	// MaxConcurrency is the most requests in flight the load allowed:
	// the trial's concurrency level; 0 when nothing capped it (an open
	// loop with no --max-concurrency, a level of one per prompt), which
	// is written null, as vLLM writes its unset --max-concurrency.
	MaxConcurrency int
}

// trafficKeys are Traffic's JSON keys, in the order MarshalJSON writes them.
var trafficKeys = []string{"trial", "num_prompts", "request_rate", "burstiness", "max_concurrency"}

// ComputeServing returns t's serving metrics for the selected latency
// metrics and percentiles.
func ComputeServing(t Trial, sel Selection) Serving {
	s := Serving{Traffic: Traffic{Trial: t.Index, NumPrompts: len(t.Samples), RequestRate: math.Inf(1), Burstiness: 1, MaxConcurrency: t.Concurrency}}
	s.Duration = t.Wall
	vals := map[string][]float64{}
	var ok []int
	for i, x := range t.Samples {
		if x.Err != "" {
			s.Failed++
			continue
		}
		ok = append(ok, i)
		s.Completed++
		s.TotalInputTokens += x.PromptTokens
		s.TotalOutputTokens += x.CompletionTokens
		if x.CompletionTokens > 1 {
			vals[ServingTPOT] = append(vals[ServingTPOT], x.TPOT()*1000)
		}
		for _, g := range x.ITL {
			vals[ServingITL] = append(vals[ServingITL], g*1000)
		}
		vals[ServingTTFT] = append(vals[ServingTTFT], x.TTFT*1000)
		vals[ServingE2EL] = append(vals[ServingE2EL], x.E2E*1000)
	}
	if t.Wall > 0 {
		s.RequestThroughput = float64(s.Completed) / t.Wall
		s.OutputThroughput = float64(s.TotalOutputTokens) / t.Wall
		s.TotalTokenThroughput = float64(s.TotalInputTokens+s.TotalOutputTokens) / t.Wall
	}
	s.MaxOutputTokensPerS, s.MaxConcurrentRequests = peaks(t, ok)
	for _, m := range sel.Metrics {
		xs := vals[m]
		l := Latency{Metric: m, Mean: mean(xs), Median: Quantile(xs, 0.5), Std: popStd(xs)}
		for _, p := range sel.Percentiles {
			l.Percentiles = append(l.Percentiles, Percentile{P: p, Value: Quantile(xs, p/100)})
		}
		s.Latencies = append(s.Latencies, l)
	}
	return s
}

// peaks is max_output_tokens_per_s and max_concurrent_requests over the
// samples ok of t: time in whole seconds from the earliest start, a
// token counted in the second it arrived (the first at TTFT, the others
// ITL after each other), a request in every second from its start's to
// its end's.
func peaks(t Trial, ok []int) (float64, int) {
	if len(ok) == 0 {
		return 0, 0
	}
	t0, end := t.Samples[ok[0]].Start, 0.0
	for _, i := range ok {
		if s := t.Samples[i].Start; s.Before(t0) {
			t0 = s
		}
	}
	for _, i := range ok {
		x := t.Samples[i]
		end = max(end, x.Start.Sub(t0).Seconds()+x.E2E)
	}
	n := int(math.Ceil(end)) + 1
	toks, inflight := make([]int, n), make([]int, n)
	for _, i := range ok {
		x := t.Samples[i]
		st := x.Start.Sub(t0).Seconds()
		at := st + x.TTFT
		if b := int(at); b >= 0 && b < n {
			toks[b]++
		}
		for _, g := range x.ITL {
			at += g
			if b := int(at); b >= 0 && b < n {
				toks[b]++
			}
		}
		for sec := int(st); sec <= int(st+x.E2E) && sec < n; sec++ {
			inflight[sec]++
		}
	}
	return float64(slices.Max(toks)), slices.Max(inflight)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// popStd is numpy's np.std: the square root of the mean squared
// deviation from the mean (ddof 0); 0 for no values.
func popStd(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m, ss := mean(xs), 0.0
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(xs)))
}

// Figure is one named number of a Serving, as its JSON key names it.
type Figure struct {
	Key   string
	Value float64
	Count bool // a count (written as an integer), not a rate or a time
}

// Figures lists s's numbers in vLLM's order, keyed as its result file:
// duration, completed, failed, total_input_tokens, total_output_tokens,
// request_throughput, output_throughput, total_token_throughput,
// max_output_tokens_per_s, max_concurrent_requests, then per selected
// metric mean_M_ms, median_M_ms, std_M_ms and pP_M_ms per percentile
// (P as vLLM writes it: 99, 99.9).
func (s Serving) Figures() []Figure {
	out := []Figure{
		{"duration", s.Duration, false}, {"completed", float64(s.Completed), true}, {"failed", float64(s.Failed), true},
		{"total_input_tokens", float64(s.TotalInputTokens), true}, {"total_output_tokens", float64(s.TotalOutputTokens), true},
		{"request_throughput", s.RequestThroughput, false}, {"output_throughput", s.OutputThroughput, false},
		{"total_token_throughput", s.TotalTokenThroughput, false},
		{"max_output_tokens_per_s", s.MaxOutputTokensPerS, false}, {"max_concurrent_requests", float64(s.MaxConcurrentRequests), true},
	}
	for _, l := range s.Latencies {
		out = append(out, Figure{"mean_" + l.Metric + "_ms", l.Mean, false}, Figure{"median_" + l.Metric + "_ms", l.Median, false},
			Figure{"std_" + l.Metric + "_ms", l.Std, false})
		for _, p := range l.Percentiles {
			out = append(out, Figure{PercentileKey(p.P, l.Metric), p.Value, false})
		}
	}
	return out
}

// PercentileKey is vLLM's result key of the p-th percentile of metric:
// "p99_ttft_ms", "p99.9_itl_ms".
func PercentileKey(p float64, metric string) string {
	return "p" + strconv.FormatFloat(p, 'f', -1, 64) + "_" + metric + "_ms"
}

// rateJSON is a rate or shape as vLLM writes it: a number, or "inf".
func rateJSON(x float64) any {
	if math.IsInf(x, 1) {
		return "inf"
	}
	return x
}

// MarshalJSON writes the Traffic (trafficKeys) and then Figures as one
// flat object, in their order.
func (s Serving) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	var maxConc any
	if s.MaxConcurrency > 0 {
		maxConc = s.MaxConcurrency
	}
	traffic := []any{s.Trial, s.NumPrompts, rateJSON(s.RequestRate), rateJSON(s.Burstiness), maxConc}
	figs := s.Figures()
	for i := range len(traffic) + len(figs) {
		key, val := "", any(nil)
		if i < len(traffic) {
			key, val = trafficKeys[i], traffic[i]
		} else {
			key, val = figs[i-len(traffic)].Key, figs[i-len(traffic)].Value
		}
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(val)
		if err != nil {
			return nil, fmt.Errorf("serving metric %s: %w", key, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

var latencyKey = lazyre.New(`^(mean|median|std|p([0-9.]+))_(ttft|tpot|itl|e2el)_ms$`)

// UnmarshalJSON reads what MarshalJSON writes (a result file read back).
func (s *Serving) UnmarshalJSON(data []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	m := map[string]float64{}
	for k, v := range raw {
		switch v := v.(type) {
		case float64:
			m[k] = v
		case string:
			if v != "inf" || (k != "request_rate" && k != "burstiness") {
				return fmt.Errorf("serving metric %s: %q is not a number", k, v)
			}
			m[k] = math.Inf(1)
		case nil:
			if k != "max_concurrency" {
				return fmt.Errorf("serving metric %s: null is not a number", k)
			}
		default:
			return fmt.Errorf("serving metric %s: %v is not a number", k, v)
		}
	}
	*s = Serving{Traffic: Traffic{Trial: int(m["trial"]), NumPrompts: int(m["num_prompts"]), RequestRate: m["request_rate"],
		Burstiness: m["burstiness"], MaxConcurrency: int(m["max_concurrency"])},
		Duration: m["duration"], Completed: int(m["completed"]), Failed: int(m["failed"]),
		TotalInputTokens: int(m["total_input_tokens"]), TotalOutputTokens: int(m["total_output_tokens"]),
		RequestThroughput: m["request_throughput"], OutputThroughput: m["output_throughput"],
		TotalTokenThroughput: m["total_token_throughput"], MaxOutputTokensPerS: m["max_output_tokens_per_s"],
		MaxConcurrentRequests: int(m["max_concurrent_requests"])}
	lat := map[string]*Latency{}
	for k, v := range m {
		g := latencyKey().FindStringSubmatch(k)
		if g == nil {
			continue
		}
		l := lat[g[3]]
		if l == nil {
			l = &Latency{Metric: g[3]}
			lat[g[3]] = l
		}
		switch g[1] {
		case "mean":
			l.Mean = v
		case "median":
			l.Median = v
		case "std":
			l.Std = v
		default:
			p, err := strconv.ParseFloat(g[2], 64)
			if err != nil {
				return fmt.Errorf("serving metric %s: %w", k, err)
			}
			l.Percentiles = append(l.Percentiles, Percentile{P: p, Value: v})
		}
	}
	for _, k := range ServingMetrics {
		if l := lat[k.Name]; l != nil {
			slices.SortFunc(l.Percentiles, func(a, b Percentile) int { return cmpFloat(a.P, b.P) })
			s.Latencies = append(s.Latencies, *l)
		}
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

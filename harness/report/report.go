// Package report renders a bench result: a terminal table, a versioned
// JSON document with every sample, a markdown table, and Go benchmark
// format lines that benchstat reads. It only formats; the numbers come
// from harness/bench and harness/stats.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/perf/benchfmt"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/errwriter"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// Schema names the JSON layout. v2: settings.concurrency is a list of
// levels, each trial carries its level, and each arm's summaries, deltas
// and verdict are per level (result.arms[].levels[]), with an overall
// verdict and the arm's effective environment. A trial's metrics
// (trial_metrics[], stats.Metrics) name two values by how they are
// made, decode_tok_s_median and tpot_ms_median (medians over the trial's
// requests); the summaries, the metric table (stats.Table) and the
// history name the same metrics decode_tok_s and tpot_ms. Each arm's
// serving[] (parallel to trials[]) holds a trial's serving metrics under
// vllm bench serve's result names, and settings say the load
// (request_rate, burstiness, seed) and the serving selection: fields
// added to v2, which readers of v2 pass over.
const Schema = "arpatch.bench/v2"

// Environment is where the run happened.
type Environment struct {
	Host           string            `json:"host"`
	OS             string            `json:"os"`
	GPUs           []string          `json:"gpus,omitempty"` // nvidia-smi --query-gpu=name,driver_version
	ArpatchVersion string            `json:"arpatch_version"`
	GoVersion      string            `json:"go_version"`
	Versions       map[string]string `json:"versions,omitempty"` // e.g. sglang, from the servers
}

// Settings are the run's options that shape its numbers.
type Settings struct {
	Model           string  `json:"model,omitempty"`
	DraftModel      string  `json:"draft_model,omitempty"`
	TP              int     `json:"tp,omitempty"`
	SpecAlgorithm   string  `json:"speculative_algorithm,omitempty"`
	SpecSteps       int     `json:"speculative_num_steps,omitempty"`
	SpecTopK        int     `json:"speculative_eagle_topk,omitempty"`
	SpecDraftTokens int     `json:"speculative_num_draft_tokens,omitempty"`
	Workload        string  `json:"workload,omitempty"` // the prompts' name and digest (bench.Options.Workload, workload.Identity)
	Prompts         int     `json:"prompts"`
	MaxNewTokens    int     `json:"max_new_tokens"`
	Concurrency     []int   `json:"concurrency"` // levels, in run order
	Warmup          int     `json:"warmup"`
	Trials          int     `json:"trials"`
	Temperature     float64 `json:"temperature"`
	IgnoreEOS       bool    `json:"ignore_eos"`
	Interleave      bool    `json:"interleave"`
	AgreeTokens     int     `json:"agree_tokens"`    // leading tokens the output check compares (bench.Options.AgreeTokens; all of them when max_new_tokens is fewer)
	AgreeThreshold  float64 `json:"agree_threshold"` // share of outputs that must agree, 0..1, as the run used it (0: the check was off)
	// RequestRate is the open-loop rate in req/s (a float64), or "inf"
	// when every request of a level was sent at once, as vLLM's result
	// file writes it; Burstiness (a float64, or "inf" for even spacing)
	// and Seed shape the arrivals then.
	RequestRate any    `json:"request_rate"`
	Burstiness  any    `json:"burstiness"`
	Seed        uint64 `json:"seed"`
	// Serving is the serving metrics' selection (--percentile-metrics,
	// --metric-percentiles).
	Serving stats.Selection `json:"serving_selection"`
}

// SettingsOf returns the settings of a run's options: the one place they
// are turned into what reports print, for bench and nightly alike. It
// records the values the run uses (bench.Options.Resolved): a zero that
// means a default is recorded as that default.
func SettingsOf(o bench.Options) Settings {
	o = o.Resolved()
	rate := infOr(o.Arrivals.Rate)
	if !o.Arrivals.Open() {
		rate = "inf"
	}
	burst := o.Arrivals.Burstiness
	if burst == 0 {
		burst = 1
	}
	return Settings{RequestRate: rate, Burstiness: infOr(burst), Seed: o.Arrivals.Seed, Serving: o.Serving, Model: o.Model, DraftModel: o.DraftModel, TP: o.TP, SpecAlgorithm: o.SpecAlgorithm, SpecSteps: o.SpecSteps,
		SpecTopK: o.SpecTopK, SpecDraftTokens: o.SpecDraftTokens, Workload: o.Workload, Prompts: len(o.Prompts), MaxNewTokens: o.MaxNewTokens,
		Concurrency: o.Concurrency, Warmup: o.Warmup, Trials: o.Trials, Temperature: o.Temperature, IgnoreEOS: o.IgnoreEOS,
		Interleave: o.Interleave, AgreeTokens: o.AgreeTokens, AgreeThreshold: o.AgreeThreshold}
}

// infOr is v, or "inf" for +Inf, which JSON cannot hold (vLLM's result
// file writes an infinite request rate so).
func infOr(v float64) any {
	if math.IsInf(v, 1) {
		return "inf"
	}
	return v
}

// Document is the JSON file.
type Document struct {
	Schema      string        `json:"schema"`
	CreatedAt   time.Time     `json:"created_at"`
	Environment Environment   `json:"environment"`
	Settings    Settings      `json:"settings"`
	Result      *bench.Result `json:"result"`
	// Error is set when the run did not finish (a server that died, an
	// interruption): Result then holds only what was measured before, and
	// no number in it is a result.
	Error string `json:"error,omitempty"`
}

// NewDocument wraps a result with its environment. gpus is one "name,
// driver" per GPU (nvsmi.Drivers), nil when unknown.
func NewDocument(res *bench.Result, s Settings, version string, gpus []string) *Document {
	d := &Document{Schema: Schema, CreatedAt: time.Now().UTC(), Settings: s, Result: res}
	d.Environment = Environment{OS: runtime.GOOS + "/" + runtime.GOARCH, ArpatchVersion: version, GoVersion: runtime.Version(), GPUs: gpus, Versions: map[string]string{}}
	d.Environment.Host, _ = os.Hostname()
	for _, a := range res.Arms {
		if v, ok := a.ServerInfo["version"].(string); ok {
			d.Environment.Versions["sglang@"+a.Arm.Name] = v
		}
	}
	return d
}

// WriteJSON writes the document, indented.
func (d *Document) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// ci formats a median with its interval: "54.1 [52.0, 55.3]", the level
// when below 95% ("... 94%]"), or "[n=3, no interval]" when the trials
// allow none.
func ci(s stats.Summary, prec int) string {
	if s.N == 0 {
		return "-"
	}
	if math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) {
		return fmt.Sprintf("%.*f [n=%d, no interval]", prec, s.Center, s.N)
	}
	conf := ""
	if s.Confidence > 0 && math.Round(s.Confidence*100) != 95 && s.Confidence < stats.Confidence {
		conf = fmt.Sprintf(" %.0f%%", s.Confidence*100)
	}
	return fmt.Sprintf("%.*f [%.*f, %.*f%s]", prec, s.Center, prec, s.Lo, prec, s.Hi, conf)
}

// deltaP formats a level's tok/s change against the baseline and its
// p-value, or none twice for the baseline.
func deltaP(l *bench.Level, none string) (string, string) {
	d, ok := l.Deltas[stats.TokS]
	if !ok {
		return none, none
	}
	return fmt.Sprintf("%+.1f%%", d.Pct), fmt.Sprintf("%.3f", d.P)
}

func agreement(ag *stats.Agreement) string {
	if ag == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d", ag.IdenticalN, ag.Outputs)
}

// others are the metrics of stats.Table after tok/s, which tables show
// as one median column each.
func others() []stats.Metric {
	var out []stats.Metric
	for _, m := range stats.Table {
		if m.Name != stats.TokS {
			out = append(out, m)
		}
	}
	return out
}

// header is the table's column titles.
func header() []string {
	tokS, _ := stats.Lookup(stats.TokS)
	h := []string{"arm", "conc", tokS.Label, "delta", "p"}
	for _, m := range others() {
		h = append(h, m.Label)
	}
	return append(h, "agree", "verdict")
}

// rows are one arm at one level each, as the table and the markdown print
// them, in header's order.
func rows(res *bench.Result, none string) [][]string {
	var out [][]string
	for _, a := range res.Arms {
		for _, l := range a.Levels {
			delta, p := deltaP(l, none)
			r := []string{a.Arm.Name, fmt.Sprint(l.Concurrency), ci(l.Summaries[stats.TokS], 1), delta, p}
			for _, m := range others() {
				r = append(r, fmt.Sprintf("%.*f", m.Prec, l.Summaries[m.Name].Center))
			}
			out = append(out, append(r, agreement(l.Agreement), string(l.Verdict)))
		}
	}
	return out
}

// overall is the line "overall: pcie slower (1: faster, 4: no
// significant change, 16: slower)" of an arm run at several levels.
func overall(a *bench.ArmResult) string {
	var per []string
	for _, l := range a.Levels {
		per = append(per, fmt.Sprintf("%d: %s", l.Concurrency, l.Verdict))
	}
	return fmt.Sprintf("overall: %s %s (concurrency %s)", a.Arm.Name, a.Verdict, strings.Join(per, ", "))
}

// openLoop is ", request rate R req/s" for an open-loop run, else "".
func openLoop(s Settings) string {
	if r, ok := s.RequestRate.(float64); ok {
		return fmt.Sprintf(", request rate %g req/s (burstiness %v)", r, s.Burstiness)
	}
	return ""
}

// WriteTable prints the terminal table: per arm and concurrency level,
// tok/s median [CI], delta % and p against the baseline, the median of
// every other metric of stats.Table (in its order, under its Label),
// output agreement and the verdict;
// with several levels an overall line per arm (but a valid baseline);
// then warnings.
func WriteTable(w io.Writer, res *bench.Result, s Settings) {
	fmt.Fprintf(w, "%s: %d prompts x %d trials, concurrency %s%s, max %d new tokens, temperature %g; medians across trials [confidence interval, 95%% where the trials allow]\n", benchName(s),
		s.Prompts, s.Trials, textfmt.Ints(s.Concurrency, ","), openLoop(s), s.MaxNewTokens, s.Temperature)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header(), "\t")+"\t")
	for _, r := range rows(res, "-") {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
	for _, a := range res.Arms {
		if len(a.Levels) > 1 && a.Verdict != bench.Baseline {
			fmt.Fprintln(w, overall(a))
		}
	}
	for _, a := range res.Arms {
		for _, l := range a.Levels {
			if d, ok := l.Deltas[stats.TokS]; ok && d.TooFew != "" {
				fmt.Fprintf(w, "note: %s: %s\n", a.Arm.Name, d.TooFew)
				break
			}
		}
		for _, warn := range a.Warnings {
			fmt.Fprintf(w, "WARNING %s: %s\n", a.Arm.Name, warn)
		}
		if ag := a.Agreement; ag != nil {
			for i, dv := range ag.Divergences {
				if i == 3 {
					fmt.Fprintf(w, "  ... %d more divergent %s\n", len(ag.Divergences)-3, textfmt.Word(len(ag.Divergences)-3, "prompt", "prompts"))
					break
				}
				fmt.Fprintf(w, "  %s prompt %d %s\n", a.Arm.Name, dv.Prompt, dv)
			}
		}
	}
	for _, f := range res.Findings {
		fmt.Fprintf(w, "finding: %s\n", f)
	}
}

// WriteMarkdown writes the table as GitHub markdown, a row per arm and
// concurrency level, with the overall verdicts when there are several.
// It returns w's first write error (internal/errwriter).
func WriteMarkdown(out io.Writer, res *bench.Result, s Settings) error {
	w := errwriter.New(out) // every write below: its first error is returned
	fmt.Fprintf(w, "### %s\n\n%d prompts x %d trials, concurrency %s, max %d new tokens. Medians across trials with confidence intervals (95%% where the number of trials allows; each interval shows its level); p from a Mann-Whitney U test against `%s`.\n\n", benchName(s),
		s.Prompts, s.Trials, textfmt.Ints(s.Concurrency, ","), s.MaxNewTokens, res.Baseline)
	h := header()
	h[1], h[len(h)-2] = "concurrency", "output agreement"
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, r := range rows(res, "") {
		r[len(r)-1] = "**" + r[len(r)-1] + "**"
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	if len(res.Levels()) > 1 {
		fmt.Fprintln(w)
		for _, a := range res.Arms {
			if a.Verdict != bench.Baseline {
				fmt.Fprintf(w, "- %s\n", overall(a))
			}
		}
	}
	writeServingMarkdown(w, res, s)
	for _, a := range res.Arms {
		for _, warn := range a.Warnings {
			fmt.Fprintf(w, "\n> **%s**: %s\n", a.Arm.Name, warn)
		}
	}
	return w.Err()
}

// WriteBenchfmt writes one Go benchmark line per arm, trial and level,
// named BenchmarkEAGLE3/arm=<name>/concurrency=<N>, with every metric of
// stats.Table in its Benchfmt unit (tok/s, ...; ms metrics in seconds,
// "-sec") and its direction as "better" metadata, so that `benchstat
// -col /arm file` compares arms level by level.
//
// An arm whose figures are no result (bench.Verdict.Valid is false:
// INVALID, INVALID baseline, no verdict) gets no line, since benchstat
// would compare it like any other ("+69% (p=0.008 n=5)"), however the
// columns are chosen; the file says so in a configuration line that
// benchstat prints above its tables, "arpatch-excluded: arm broken:
// INVALID: ...".
func WriteBenchfmt(w io.Writer, res *bench.Result, s Settings) error {
	bw := benchfmt.NewWriter(w)
	cfg := []benchfmt.Config{
		{Key: "goos", Value: []byte(runtime.GOOS), File: true},
		{Key: "goarch", Value: []byte(runtime.GOARCH), File: true},
		{Key: "pkg", Value: []byte("arpatch/bench"), File: true},
	}
	if s.Model != "" {
		cfg = append(cfg, benchfmt.Config{Key: "model", Value: []byte(s.Model), File: true})
	}
	if ex := excluded(res); len(ex) > 0 {
		cfg = append(cfg, benchfmt.Config{Key: "arpatch-excluded", Value: []byte(strings.Join(ex, "; ") + ": no result, so no lines"), File: true})
	}
	for _, m := range stats.Table {
		if err := bw.Write(&benchfmt.UnitMetadata{UnitMetadataKey: benchfmt.UnitMetadataKey{Unit: m.Benchfmt, Key: "better"}, OrigUnit: m.Benchfmt, Value: m.Better()}); err != nil {
			return err
		}
	}
	wrote := false
	for _, a := range res.Arms {
		if !a.Verdict.Valid() {
			continue
		}
		for i, m := range a.Metrics {
			wrote = true
			name := fmt.Sprintf("EAGLE3/arm=%s/concurrency=%d", a.Arm.Name, a.Trials[i].Concurrency)
			r := &benchfmt.Result{Config: cfg, Name: benchfmt.Name(name), Iters: m.Requests}
			for _, d := range stats.Table {
				r.Values = append(r.Values, benchfmt.Value{Value: d.BenchfmtValue(d.Get(m)), Unit: d.Benchfmt})
			}
			if err := bw.Write(r); err != nil {
				return err
			}
		}
	}
	if !wrote && len(excluded(res)) > 0 {
		// No result line carries the configuration: say it on its own.
		_, err := fmt.Fprintf(w, "arpatch-excluded: %s: no result, so no lines\n", strings.Join(excluded(res), "; "))
		return err
	}
	return nil
}

// excluded names each arm whose figures are no result, with its verdict
// and why: "arm broken: INVALID (only 0 of 9 outputs ...)".
func excluded(res *bench.Result) []string {
	var out []string
	for _, a := range res.Arms {
		if !a.Verdict.Valid() {
			out = append(out, fmt.Sprintf("arm %s: %s", a.Arm.Name, a.Verdict))
		}
	}
	return out
}

// benchName is "EAGLE-3 bench", or "bench" when speculation is off.
func benchName(s Settings) string {
	if s.SpecAlgorithm == "" || strings.EqualFold(s.SpecAlgorithm, "EAGLE3") {
		return "EAGLE-3 bench"
	}
	if strings.EqualFold(s.SpecAlgorithm, "none") {
		return "bench (no speculative decoding)"
	}
	return s.SpecAlgorithm + " bench"
}

// Package report renders a bench result: a terminal table, a versioned
// JSON document with every sample, a markdown table, and Go benchmark
// format lines that benchstat reads. It only formats; the numbers come
// from harness/bench and harness/stats.
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/perf/benchfmt"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
)

// Schema names the JSON layout. v2: settings.concurrency is a list of
// levels, each trial carries its level, and each arm's summaries, deltas
// and verdict are per level (result.arms[].levels[]), with an overall
// verdict and the arm's effective environment.
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
	Prompts         int     `json:"prompts"`
	MaxNewTokens    int     `json:"max_new_tokens"`
	Concurrency     []int   `json:"concurrency"` // levels, in run order
	Warmup          int     `json:"warmup"`
	Trials          int     `json:"trials"`
	Temperature     float64 `json:"temperature"`
	IgnoreEOS       bool    `json:"ignore_eos"`
	Interleave      bool    `json:"interleave"`
	AgreeTokens     int     `json:"agree_tokens"`
	AgreeThreshold  float64 `json:"agree_threshold"`
}

// SettingsOf returns the settings of a run's options: the one place they
// are turned into what reports print, for bench and nightly alike.
func SettingsOf(o bench.Options) Settings {
	return Settings{Model: o.Model, DraftModel: o.DraftModel, TP: o.TP, SpecAlgorithm: o.SpecAlgorithm, SpecSteps: o.SpecSteps,
		SpecTopK: o.SpecTopK, SpecDraftTokens: o.SpecDraftTokens, Prompts: len(o.Prompts), MaxNewTokens: o.MaxNewTokens,
		Concurrency: o.Concurrency, Warmup: o.Warmup, Trials: o.Trials, Temperature: o.Temperature, IgnoreEOS: o.IgnoreEOS,
		Interleave: o.Interleave, AgreeTokens: cmp.Or(o.AgreeTokens, sglang.DefaultAgreeTokens), AgreeThreshold: o.AgreeThreshold}
}

// levels is the concurrency list as "1,4,16".
func levels(cs []int) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprint(c))
	}
	return strings.Join(parts, ",")
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

// NewDocument wraps a result with its environment.
func NewDocument(res *bench.Result, s Settings, version string) *Document {
	d := &Document{Schema: Schema, CreatedAt: time.Now().UTC(), Settings: s, Result: res}
	d.Environment = Environment{OS: runtime.GOOS + "/" + runtime.GOARCH, ArpatchVersion: version, GoVersion: runtime.Version(), GPUs: gpus(), Versions: map[string]string{}}
	d.Environment.Host, _ = os.Hostname()
	for _, a := range res.Arms {
		if v, ok := a.ServerInfo["version"].(string); ok {
			d.Environment.Versions["sglang@"+a.Arm.Name] = v
		}
	}
	return d
}

func gpus() []string {
	out, err := exec.Command("nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader").Output()
	if err != nil {
		return nil
	}
	var g []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			g = append(g, l)
		}
	}
	return g
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
	d, ok := l.Deltas["tok_s"]
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

// row is one arm at one level, as the table and the markdown print it.
type row struct {
	arm, conc, tokS, delta, p, decode, accept, ttft, itl, agree, verdict string
}

func rows(res *bench.Result, none string) []row {
	var out []row
	for _, a := range res.Arms {
		for _, l := range a.Levels {
			sm := l.Summaries
			delta, p := deltaP(l, none)
			out = append(out, row{a.Arm.Name, fmt.Sprint(l.Concurrency), ci(sm["tok_s"], 1), delta, p,
				fmt.Sprintf("%.1f", sm["decode_tok_s"].Center), fmt.Sprintf("%.2f", sm["accept_length"].Center),
				fmt.Sprintf("%.1f/%.1f", sm["ttft_ms_p50"].Center, sm["ttft_ms_p99"].Center), fmt.Sprintf("%.2f", sm["itl_ms_p50"].Center),
				agreement(l.Agreement), string(l.Verdict)})
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

// WriteTable prints the terminal table: per arm and concurrency level,
// tok/s median [CI], delta % and p against the baseline, decode tok/s,
// accept length, TTFT p50/p99, ITL p50, output agreement and the verdict;
// with several levels an overall line per arm (but a valid baseline);
// then warnings.
func WriteTable(w io.Writer, res *bench.Result, s Settings) {
	fmt.Fprintf(w, "%s: %d prompts x %d trials, concurrency %s, max %d new tokens, temperature %g; medians across trials [confidence interval, 95%% where the trials allow]\n", benchName(s),
		s.Prompts, s.Trials, levels(s.Concurrency), s.MaxNewTokens, s.Temperature)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tconc\ttok/s\tdelta\tp\tdecode tok/s\taccept len\tTTFT p50/p99 ms\tITL p50 ms\tagree\tverdict\t")
	for _, r := range rows(res, "-") {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.arm, r.conc, r.tokS, r.delta, r.p, r.decode, r.accept, r.ttft, r.itl, r.agree, r.verdict)
	}
	tw.Flush()
	for _, a := range res.Arms {
		if len(a.Levels) > 1 && a.Verdict != bench.Baseline {
			fmt.Fprintln(w, overall(a))
		}
	}
	for _, a := range res.Arms {
		for _, l := range a.Levels {
			if d, ok := l.Deltas["tok_s"]; ok && d.TooFew != "" {
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
					fmt.Fprintf(w, "  ... %d more divergent prompts\n", len(ag.Divergences)-3)
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
func WriteMarkdown(w io.Writer, res *bench.Result, s Settings) error {
	fmt.Fprintf(w, "### %s\n\n%d prompts x %d trials, concurrency %s, max %d new tokens. Medians across trials with confidence intervals (95%% where the number of trials allows; each interval shows its level); p from a Mann-Whitney U test against `%s`.\n\n", benchName(s),
		s.Prompts, s.Trials, levels(s.Concurrency), s.MaxNewTokens, res.Baseline)
	fmt.Fprintln(w, "| arm | concurrency | tok/s | delta | p | decode tok/s | accept length | TTFT p50 / p99 (ms) | ITL p50 (ms) | output agreement | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows(res, "") {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | **%s** |\n", r.arm, r.conc, r.tokS, r.delta, r.p, r.decode, r.accept,
			strings.Replace(r.ttft, "/", " / ", 1), r.itl, r.agree, r.verdict)
	}
	if len(res.Levels()) > 1 {
		fmt.Fprintln(w)
		for _, a := range res.Arms {
			if a.Verdict != bench.Baseline {
				fmt.Fprintf(w, "- %s\n", overall(a))
			}
		}
	}
	for _, a := range res.Arms {
		for _, warn := range a.Warnings {
			fmt.Fprintf(w, "\n> **%s**: %s\n", a.Arm.Name, warn)
		}
	}
	return nil
}

// WriteBenchfmt writes one Go benchmark line per arm, trial and level,
// named BenchmarkEAGLE3/arm=<name>/concurrency=<N>, with tok/s,
// decode-tok/s, accept-len, ttft-sec and itl-sec, so that `benchstat -col
// /arm file` compares arms level by level.
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
	for _, u := range []struct{ unit, better string }{{"tok/s", "higher"}, {"decode-tok/s", "higher"}, {"accept-len", "higher"}, {"ttft-sec", "lower"}, {"itl-sec", "lower"}} {
		if err := bw.Write(&benchfmt.UnitMetadata{UnitMetadataKey: benchfmt.UnitMetadataKey{Unit: u.unit, Key: "better"}, OrigUnit: u.unit, Value: u.better}); err != nil {
			return err
		}
	}
	for _, a := range res.Arms {
		for i, m := range a.Metrics {
			name := fmt.Sprintf("EAGLE3/arm=%s/concurrency=%d", a.Arm.Name, a.Trials[i].Concurrency)
			r := &benchfmt.Result{Config: cfg, Name: benchfmt.Name(name), Iters: m.Requests,
				Values: []benchfmt.Value{
					{Value: m.TokPerSec, Unit: "tok/s"},
					{Value: m.DecodeTokPerS, Unit: "decode-tok/s"},
					{Value: m.AcceptLength, Unit: "accept-len"},
					{Value: m.TTFTp50ms / 1000, Unit: "ttft-sec"},
					{Value: m.ITLp50ms / 1000, Unit: "itl-sec"},
				}}
			if err := bw.Write(r); err != nil {
				return err
			}
		}
	}
	return nil
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

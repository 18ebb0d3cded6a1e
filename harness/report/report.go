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
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/perf/benchfmt"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/stats"
)

// Schema names the JSON layout.
const Schema = "arpatch.bench/v1"

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
	Concurrency     int     `json:"concurrency"`
	Warmup          int     `json:"warmup"`
	Trials          int     `json:"trials"`
	Temperature     float64 `json:"temperature"`
	IgnoreEOS       bool    `json:"ignore_eos"`
	Interleave      bool    `json:"interleave"`
	AgreeTokens     int     `json:"agree_tokens"`
	AgreeThreshold  float64 `json:"agree_threshold"`
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

func ci(s stats.Summary, prec int) string {
	if s.N == 0 {
		return "-"
	}
	if math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) {
		return fmt.Sprintf("%.*f [n=%d, no CI]", prec, s.Center, s.N)
	}
	conf := ""
	if s.Confidence > 0 && math.Round(s.Confidence*100) != 95 && s.Confidence < stats.Confidence {
		conf = fmt.Sprintf(" %.0f%%", s.Confidence*100)
	}
	return fmt.Sprintf("%.*f [%.*f, %.*f%s]", prec, s.Center, prec, s.Lo, prec, s.Hi, conf)
}

func verdict(a *bench.ArmResult) string {
	switch {
	case a.Deltas == nil && a.Invalid:
		return "INVALID baseline"
	case a.Deltas == nil:
		return "baseline"
	case a.Invalid:
		return "INVALID"
	}
	d := a.Deltas["tok_s"]
	v := d.Verdict
	if d.TooFew != "" && v == stats.NoChange {
		v = "too few trials to tell"
	}
	return v
}

// deltaP formats an arm's tok/s change against the baseline and its
// p-value, or none twice for the baseline.
func deltaP(a *bench.ArmResult, none string) (string, string) {
	d, ok := a.Deltas["tok_s"]
	if !ok {
		return none, none
	}
	return fmt.Sprintf("%+.1f%%", d.Pct), fmt.Sprintf("%.3f", d.P)
}

func agreement(a *bench.ArmResult) string {
	if a.Agreement == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d", a.Agreement.IdenticalN, a.Agreement.Outputs)
}

// WriteTable prints the terminal table: per arm, tok/s median [CI],
// delta % and p against the baseline, decode tok/s, accept length, TTFT
// p50/p99, ITL p50, output agreement and the verdict; then warnings.
func WriteTable(w io.Writer, res *bench.Result, s Settings) {
	fmt.Fprintf(w, "%s: %d prompts x %d trials, concurrency %d, max %d new tokens, temperature %g; medians across trials [confidence interval, 95%% where the trials allow]\n", benchName(s),
		s.Prompts, s.Trials, s.Concurrency, s.MaxNewTokens, s.Temperature)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\ttok/s\tdelta\tp\tdecode tok/s\taccept len\tTTFT p50/p99 ms\tITL p50 ms\tagree\tverdict\t")
	for _, a := range res.Arms {
		sm := a.Summaries
		delta, p := deltaP(a, "-")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f\t%.2f\t%.1f/%.1f\t%.2f\t%s\t%s\t\n", a.Arm.Name, ci(sm["tok_s"], 1), delta, p,
			sm["decode_tok_s"].Center, sm["accept_length"].Center, sm["ttft_ms_p50"].Center, sm["ttft_ms_p99"].Center,
			sm["itl_ms_p50"].Center, agreement(a), verdict(a))
	}
	tw.Flush()
	for _, a := range res.Arms {
		if d, ok := a.Deltas["tok_s"]; ok && d.TooFew != "" {
			fmt.Fprintf(w, "note: %s: %s\n", a.Arm.Name, d.TooFew)
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
				fmt.Fprintf(w, "  %s prompt %d diverges at byte %d (trial %d): baseline %q, arm %q\n", a.Arm.Name, dv.Prompt, dv.Offset, dv.Trial, dv.Base, dv.Arm)
			}
		}
	}
	for _, f := range res.Findings {
		fmt.Fprintf(w, "finding: %s\n", f)
	}
}

// WriteMarkdown writes the table as GitHub markdown.
func WriteMarkdown(w io.Writer, res *bench.Result, s Settings) error {
	fmt.Fprintf(w, "### %s\n\n%d prompts x %d trials, concurrency %d, max %d new tokens. Medians across trials with confidence intervals (95%% where the number of trials allows; each interval shows its level); p from a Mann-Whitney U test against `%s`.\n\n", benchName(s),
		s.Prompts, s.Trials, s.Concurrency, s.MaxNewTokens, res.Baseline)
	fmt.Fprintln(w, "| arm | tok/s | delta | p | decode tok/s | accept length | TTFT p50 / p99 (ms) | ITL p50 (ms) | output agreement | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, a := range res.Arms {
		sm := a.Summaries
		delta, p := deltaP(a, "")
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f | %.2f | %.1f / %.1f | %.2f | %s | **%s** |\n", a.Arm.Name, ci(sm["tok_s"], 1), delta, p,
			sm["decode_tok_s"].Center, sm["accept_length"].Center, sm["ttft_ms_p50"].Center, sm["ttft_ms_p99"].Center, sm["itl_ms_p50"].Center, agreement(a), verdict(a))
	}
	for _, a := range res.Arms {
		for _, warn := range a.Warnings {
			fmt.Fprintf(w, "\n> **%s**: %s\n", a.Arm.Name, warn)
		}
	}
	return nil
}

// WriteBenchfmt writes one Go benchmark line per arm and trial, named
// BenchmarkEAGLE3/arm=<name>, with tok/s, decode-tok/s, accept-len,
// ttft-sec and itl-sec, so that `benchstat -col /arm file` compares arms.
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
		for _, m := range a.Metrics {
			r := &benchfmt.Result{Config: cfg, Name: benchfmt.Name("EAGLE3/arm=" + a.Arm.Name), Iters: m.Requests,
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

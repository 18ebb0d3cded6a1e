// Package bench runs an EAGLE-3 serving benchmark: for each trial and arm
// it starts (or attaches to) an SGLang server, sends the workload at each
// concurrency level, and records every request; then, per level, it
// summarizes each metric across trials, compares every arm with the
// baseline, and checks that each arm's greedy outputs match the
// baseline's, so a fast result from a broken allreduce is reported
// INVALID rather than as a win. An arm whose requests fail or abort, or a
// baseline that cannot be compared, gets no speed verdict.
//
// Each launched arm runs in the caller's environment less the variables
// the recipes and arms control (ControlledEnv and every variable an arm
// sets), plus its own: a variable exported in the shell cannot make the
// baseline run patched.
package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/internal/progress"
)

// Arm is one configuration under test.
type Arm struct {
	Name      string            `json:"name"`
	Python    string            `json:"python,omitempty"` // interpreter of the arm's build (default python3)
	Env       map[string]string `json:"env,omitempty"`
	Args      []string          `json:"args,omitempty"`       // extra server arguments
	URL       string            `json:"url,omitempty"`        // attach to this running server instead of launching
	LaunchCmd string            `json:"launch_cmd,omitempty"` // sh command template replacing the launch, e.g. "my-serve --port {port}"; {arpatch} is Options.Self
}

// Options holds every input of Run. A zero Trials, Concurrency,
// MaxNewTokens, ReadyTimeout, RequestTimeout, AgreeTokens or (unless
// AgreeOff) AgreeThreshold means its default: Resolved fills them, for
// Run and for the settings a report records (report.SettingsOf) alike.
// A zero Warmup, TP or speculative setting means none.
type Options struct {
	Arms     []Arm
	Baseline string

	Model, DraftModel string
	TP                int
	SpecAlgorithm     string // EAGLE3, or "" for no speculation
	SpecSteps         int
	SpecTopK          int
	SpecDraftTokens   int

	Prompts []string
	// Workload names where Prompts came from and their content,
	// workload.Identity ("builtin@sha256:3f1c0a9e2b7d"); FromRecipe sets
	// it, reports record it (report.Settings.Workload) and nightly keys its
	// history by it. Empty when a caller set Prompts directly.
	Workload     string
	MaxNewTokens int
	Temperature  float64
	IgnoreEOS    bool
	// Concurrency lists the levels (requests in flight) to run, in order:
	// each trial of each arm runs every level on one server start ([1]).
	// With an open Arrivals a level caps the requests in flight, as
	// vllm bench serve's --max-concurrency does.
	Concurrency []int
	// Uncapped says that no --max-concurrency bounds the open loop: its
	// one level is a request per prompt, and the serving rows write
	// max_concurrency null, as vllm bench serve does without the flag.
	Uncapped bool
	// Arrivals, when Open, sends each level's requests at the times it
	// gives (an open-loop load: --request-rate, --burstiness) instead of
	// all at once; every trial of every arm gets the same times (one
	// seed), so arms meet the same load.
	Arrivals workload.Arrivals
	// Serving selects the latency metrics and percentiles of the serving
	// metrics (vLLM's --percentile-metrics, --metric-percentiles); an
	// empty one is stats.DefaultSelection.
	Serving    stats.Selection
	Warmup     int // untimed single requests after each server start (or attach), before its first timed level
	Trials     int
	Interleave bool // restart servers each trial so arms alternate A B A B

	Host           string
	Env            []string // the base environment of launched servers
	Self           string   // the arpatch binary, for {arpatch} in a launch template
	LogDir         string
	ReadyTimeout   time.Duration // wait for /health_generate after a launch (0: server.DefaultReadyTimeout)
	RequestTimeout time.Duration // give up on one request after it (0: DefaultRequestTimeout)
	AgreeThreshold float64       // share of outputs identical over the first AgreeTokens tokens, in [0, 1] (0 means DefaultAgreeThreshold unless AgreeOff)
	// AgreeTokens is how many leading tokens of each output the output
	// check compares (all of them when MaxNewTokens is fewer); 0 means
	// sglang.DefaultAgreeTokens.
	AgreeTokens int
	// AgreeOff turns the output check off (threshold 0): only an arm with
	// no output to compare at all is INVALID by it.
	AgreeOff bool

	// Preflight, when set, runs first; Force lets the run go on when it
	// finds custom allreduce slower than NCCL at the verify shape.
	Preflight func(ctx context.Context) (*allreduce.Report, error)
	Force     bool

	// Notes are what the caller's settings decided for the run that a
	// reader of its result must know (a server measured alone); Run
	// puts them first in Result.Findings.
	Notes []string

	// Progress is told about each request; nil for none.
	Progress func(p Progress)
	// Starting is told before each server launch (a model load takes
	// minutes): the arm, the trial that starts it and its log file; nil
	// for none.
	Starting func(arm string, trial int, log string)
	// HTTP, when set, is the HTTP client for every server's requests (a
	// test's in-memory network, sglangtest.Network); nil gives each server
	// start a client of its own.
	HTTP *http.Client
}

// Progress is where a run is: trial Trial of Trials, arm Arm at
// concurrency Concurrency, Done of Total requests finished.
type Progress struct {
	Trial, Trials int
	Arm           string
	Concurrency   int
	Done, Total   int
}

// ShowProgress returns a Progress function that shows each level's
// requests on w: a live bar per trial, arm and concurrency when w is a
// terminal, else a line when a level starts, every 30 s and when it is
// done ("trial 2/5 pcie concurrency 4 [32/32] requests 100% eta 0s"),
// through internal/progress.
func ShowProgress(w io.Writer) func(Progress) {
	c := progress.New(w, "requests")
	return func(p Progress) {
		c.Set(fmt.Sprintf("trial %d/%d %s concurrency %d", p.Trial, p.Trials, p.Arm, p.Concurrency), p.Done, p.Total)
	}
}

// ArmResult is everything measured for one arm.
type ArmResult struct {
	Arm Arm `json:"arm"`
	// Env is the arm's effective SGLANG_*, NCCL_*, CUDA_* and PYTORCH_*
	// variables, as its server was launched with them; nil for an arm
	// attached by URL, whose environment arpatch does not know.
	Env map[string]string `json:"effective_env,omitempty"`
	// Trials holds one pass of the workload per trial and level, in the
	// order they ran; Metrics is parallel to it.
	Trials  []stats.Trial   `json:"trials"`
	Metrics []stats.Metrics `json:"trial_metrics"`
	// Serving is parallel to Trials: each trial's serving metrics, as
	// vllm bench serve computes and names them (stats.Serving).
	Serving []stats.Serving `json:"serving"`
	// Levels holds the summaries and verdict per concurrency level, in
	// Options.Concurrency order.
	Levels []*Level `json:"levels"`
	// Agreement sums the output check over all levels (each level is
	// compared with the baseline at the same level).
	Agreement  *stats.Agreement `json:"agreement,omitempty"`
	Invalid    bool             `json:"invalid"`
	Verdict    Verdict          `json:"verdict"` // over all levels
	Warnings   []string         `json:"warnings,omitempty"`
	ServerInfo map[string]any   `json:"server_info,omitempty"`
}

// Level is one arm at one concurrency level.
type Level struct {
	Concurrency int `json:"concurrency"`
	// Summaries per metric of stats.Table across trials, by name (tok_s,
	// ..., tpot_ms_p99), each in the metric's unit.
	Summaries map[string]stats.Summary `json:"summaries"`
	// Deltas against the baseline at this level, per metric (absent for
	// the baseline, for an INVALID arm, and when the baseline is INVALID:
	// no figure of theirs is compared).
	Deltas    map[string]stats.Delta `json:"deltas,omitempty"`
	Agreement *stats.Agreement       `json:"agreement,omitempty"`
	Verdict   Verdict                `json:"verdict"`
}

// Level returns the arm's level at concurrency c, or nil.
func (a *ArmResult) Level(c int) *Level {
	for _, l := range a.Levels {
		if l.Concurrency == c {
			return l
		}
	}
	return nil
}

// MetricsAt returns the metrics of the arm's trials at concurrency c, in
// trial order.
func (a *ArmResult) MetricsAt(c int) []stats.Metrics {
	var out []stats.Metrics
	for i, t := range a.Trials {
		if t.Concurrency == c && i < len(a.Metrics) {
			out = append(out, a.Metrics[i])
		}
	}
	return out
}

// Levels returns the concurrency levels the result holds, in run order.
func (r *Result) Levels() []int {
	var out []int
	if len(r.Arms) > 0 {
		for _, l := range r.Arms[0].Levels {
			out = append(out, l.Concurrency)
		}
	}
	return out
}

// Result is a whole run.
type Result struct {
	Baseline  string            `json:"baseline"`
	Arms      []*ArmResult      `json:"arms"`
	Preflight *allreduce.Report `json:"preflight,omitempty"`
	Findings  []string          `json:"findings,omitempty"`
	Started   time.Time         `json:"started"`
	Seconds   float64           `json:"seconds"`
}

// Arm returns the named arm's result.
func (r *Result) Arm(name string) *ArmResult {
	for _, a := range r.Arms {
		if a.Arm.Name == name {
			return a
		}
	}
	return nil
}

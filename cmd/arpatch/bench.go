package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/chart"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/recipes"
)

// Exit code of bench for an infrastructure failure (a server that would
// not start or died), apart from a measured failure (1).
const exitInfra = 4

// benchDefaults puts the defaults into bench's --help text: {{trials}}
// and the like become the one constant each (recipes.Default*,
// bench.Default*, server.DefaultReadyTimeout, sglang.DefaultAgreeTokens).
var benchDefaults = strings.NewReplacer(
	"{{trials}}", strconv.Itoa(recipes.DefaultTrials), "{{num-prompts}}", strconv.Itoa(recipes.DefaultNumPrompts),
	"{{max-new-tokens}}", strconv.Itoa(recipes.DefaultMaxNewTokens), "{{concurrency}}", strconv.Itoa(recipes.DefaultConcurrency),
	"{{warmup}}", strconv.Itoa(recipes.DefaultWarmup), "{{agree-tokens}}", strconv.Itoa(sglang.DefaultAgreeTokens),
	"{{agree-threshold%}}", strconv.FormatFloat(100*bench.DefaultAgreeThreshold, 'f', -1, 64)+"%",
	"{{controlled-env}}", strings.Join(bench.ControlledEnv, ", "), "{{recorded-env}}", envPrefixes(bench.RecordedEnvPrefixes))

// envPrefixes writes prefixes as --help names them: "SGLANG_*, NCCL_* and
// PYTORCH_*".
func envPrefixes(prefixes []string) string {
	var out []string
	for _, p := range prefixes {
		out = append(out, p+"*")
	}
	if len(out) < 2 {
		return strings.Join(out, "")
	}
	return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
}

// recipeDefault is the --help default of a flag that overrides a recipe's
// [bench] key, whose own default is v.
func recipeDefault(v int) string {
	return fmt.Sprintf("the recipe's [bench] value, else %d", v)
}

// newCmdBench is bench, running its options with runF (benchRun).
func newCmdBench(runF func(context.Context, benchOptions, streams) error) *cli.Command {
	var f benchFlags
	return &cli.Command{
		Name:  "bench",
		Usage: "EAGLE-3 serving benchmark: tok/s, accept length and latency of each arm against the baseline",
		UsageText: benchDefaults.Replace(`arpatch bench [--recipe NAME] [--model M --draft-model D] [--arm NAME:key=val,...] [--baseline NAME]
              [--trials {{trials}}] [--num-prompts {{num-prompts}}] [--max-new-tokens {{max-new-tokens}}] [--concurrency {{concurrency}}[,4,16]] [--warmup {{warmup}}]
              [--request-rate R [--burstiness 1] [--seed N]] [--percentile-metrics ttft,tpot,itl] [--metric-percentiles 99]
              [--prompts FILE] [--launch-cmd 'TEMPLATE {port}' | --url URL] [--preflight --ext PATH]
              [--json FILE] [--markdown FILE] [--benchfmt FILE] [--plot FILE.svg]
arpatch bench allreduce ...`),
		Description: benchDefaults.Replace(`For each trial and arm, bench starts python -m sglang.launch_server with the
recipe's model, draft model, --speculative-algorithm EAGLE3, speculative
settings and TP (log in --log-dir), waits for /health_generate, sends
--warmup untimed requests, then the workload at temperature 0 through the
native streaming /generate API at each --concurrency level in turn, and
stops the server (SIGTERM to its process group, then SIGKILL). Arms are
interleaved across trials (A B A B ...), restarting servers each time,
unless --no-interleave. On a GPU host with SGLang installed, pass the
model and its EAGLE-3 draft: --model /models/target --draft-model
/models/target-eagle3 --json bench.json.

The recipe's [bench] table defines the arms: for pcie, "baseline" (the same
build with custom allreduce on upstream's path, NCCL on PCIe) and "pcie"
(SGLANG_FORCE_CUSTOM_AR_PCIE=1). --arm adds or changes one, with keys
python, url, launch-cmd, args and env.VAR; a comma starts a new key only
where one of those follows, so launch-cmd= and args= values may hold
commas (none may end with one). args= splits as sh does (quotes; no
$VARIABLES) and is for the built-in launch only (refused with a launch
command); url= must be http://HOST:PORT and takes no env., args=, python=
or launch-cmd= (arpatch launches nothing for it). Each launched arm inherits the caller's environment without the
variables the arms control ({{controlled-env}}, and every variable an arm sets)
unless it sets them itself; the JSON records each arm's effective
{{recorded-env}} variables. In a --launch-cmd
template, {arpatch} is this arpatch binary.

Metrics per request: TTFT, E2E, tokens, spec_verify_ct, decode tok/s =
(tokens-1)/(E2E-TTFT), as SGLang's bench_serving defines TPOT. Per trial
and level: tok/s = total tokens / wall time, median decode tok/s, accept
length = total tokens / total verify steps, TPOT p50/p99, ITL (a multi-token
chunk's gap spread over its tokens), TTFT p50/p99, errors. Across trials,
per level: medians with confidence intervals (95% from 6 trials; 4 or 5
give a lower level, which is shown; 2 or 3 give no interval, and say so)
and a Mann-Whitney U test against the baseline at the same level
(golang.org/x/perf/benchmath); with several levels, an overall verdict per
arm (slower if any level is slower). A server started with
--incremental-streaming-output (read from /server_info) streams text
deltas, which are joined.

Load: each level sends its requests as a closed loop of that many in
flight, unless --request-rate R makes it an open loop, as vllm bench
serve --request-rate does: requests arrive at R per second on average
(gaps drawn from a gamma distribution of shape --burstiness, 1 being a
Poisson process; --seed fixes them, and every trial and arm gets the
same arrivals), at most --concurrency (alias --max-concurrency) in
flight; without --concurrency nothing caps them.

Serving metrics (a second table, the markdown, and each trial's
"serving" in the JSON, under vLLM's --save-result names): request
throughput (req/s), output and total token throughput, and the mean,
median, std and --metric-percentiles (99) of --percentile-metrics
(ttft,tpot,itl; e2el too), with vllm bench serve's formulas. The A/B
statistics and the verdicts stay on the first table's metrics.

Output check: at temperature 0 every output of every trial must be the
baseline's text for its prompt at the same level; an arm whose outputs
match over the first {{agree-tokens}} tokens less than --agree-threshold ({{agree-threshold%}}) of the
time is INVALID, whatever its speed. An output shorter than that agrees
only with one that ended at the same token for the same reason. The
compared text is the first {{agree-tokens}} tokens' worth whatever the chunking (the
output check in docs/usage.md gives the rule for multi-token chunks); a
difference after it is shown as such and does not count. An arm
with failed requests is INVALID, an abort in the stream
(finish_reason abort) included; so is a baseline whose own trials
disagree or that has no output, and then no arm gets a speed verdict.

--preflight runs arpatch bench allreduce at the verify shape first and stops
when the patched allreduce is slower than NCCL (--force runs anyway), is
WRONG, hangs or fails (never run past: exit 1).

Exit codes: 0 ok, 1 an arm is INVALID or significantly slower at a level,
the baseline is INVALID, or the preflight failed, 2 usage (a flag, recipe
or tune file out of range or malformed), 4 a server
failed to start, died or answered nothing, a server of a killed run still
runs, or the run was interrupted.

Examples (each runs in seconds against arpatch's built-in fake server):
   arpatch bench --trials 2 --num-prompts 4 --max-new-tokens 32 --warmup 1 --launch-cmd '{arpatch} fake-sglang --port {port} --rate 2000 --ttft 2ms' --markdown bench.md
   arpatch bench --trials 2 --num-prompts 4 --max-new-tokens 32 --concurrency 1,4 --launch-cmd '{arpatch} fake-sglang --port {port} --rate 2000 --ttft 2ms' --arm 'algo1:env.SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage,env.SGLANG_FORCE_CUSTOM_AR_PCIE=1' --json bench.json --plot bench.svg
   arpatch bench --trials 2 --num-prompts 8 --max-new-tokens 16 --warmup 0 --request-rate 40 --metric-percentiles 50,90,99 --launch-cmd '{arpatch} fake-sglang --port {port} --rate 2000 --ttft 2ms' --json open.json`),
		Flags: slices.Concat(f.recipeFlags.flags(), []cli.Flag{
			&cli.StringFlag{Name: "model", Destination: &f.Model, Usage: "target model `PATH` (default: the recipe's [bench] model)"},
			&cli.StringFlag{Name: "draft-model", Destination: &f.DraftModel, Usage: "EAGLE-3 draft model `PATH`"},
			&cli.IntFlag{Name: "tp", Destination: &f.TP, Usage: "tensor parallel size `N`", DefaultText: recipeDefault(recipes.DefaultTP)},
			&cli.StringFlag{Name: "speculative-algorithm", Destination: &f.SpecAlgorithm, Usage: "`ALGO` (EAGLE3; none disables speculation)"},
			&cli.IntFlag{Name: "speculative-num-steps", Destination: &f.SpecSteps, Usage: "draft steps `N`", DefaultText: recipeDefault(recipes.DefaultSpecSteps)},
			&cli.IntFlag{Name: "speculative-eagle-topk", Destination: &f.SpecTopK, Usage: "top-k `N`", DefaultText: recipeDefault(recipes.DefaultSpecTopK)},
			&cli.IntFlag{Name: "speculative-num-draft-tokens", Destination: &f.SpecDraftTokens, Usage: "draft tokens `N`", DefaultText: recipeDefault(recipes.DefaultSpecDraftTokens)},
			&cli.GenericFlag{Name: "arm", Value: &f.Arms, Usage: "add or change an arm: `NAME:key=val,...` (keys: python, url, launch-cmd, args, env.VAR; repeat for several)"},
			&cli.StringFlag{Name: "baseline", Destination: &f.Baseline, Usage: "baseline arm `NAME`"},
			&cli.StringFlag{Name: "prompts", Destination: &f.Prompts, Usage: "prompt `FILE`: JSONL ({\"prompt\": ...}) or ShareGPT JSON", DefaultText: fmt.Sprintf("%d built-in prompts", len(workload.Builtin()))},
			&cli.IntFlag{Name: "num-prompts", Destination: &f.NumPrompts, Usage: "prompts `N` per trial (cycling the set)", DefaultText: recipeDefault(recipes.DefaultNumPrompts)},
			&cli.IntFlag{Name: "max-new-tokens", Destination: &f.MaxNewTokens, Usage: "tokens `N` per request", DefaultText: recipeDefault(recipes.DefaultMaxNewTokens)},
			&cli.StringFlag{Name: "concurrency", Destination: &f.Concurrency, Aliases: []string{"max-concurrency"}, Usage: "requests in flight, one level or several in increasing order: `N[,N...]` (1: single-stream tok/s; 1,4,16: a sweep on one server start per arm and trial); with --request-rate, the most in flight, uncapped without this flag", DefaultText: recipeDefault(recipes.DefaultConcurrency)},
			&cli.Float64Flag{Name: "request-rate", Destination: &f.RequestRate, Value: math.Inf(1), DefaultText: "inf", Usage: "open-loop load: send each level's requests at `R` per second on average (arrival gaps from a gamma distribution of shape --burstiness: 1 is a Poisson process), as vllm bench serve does; inf sends them all at once"},
			&cli.Float64Flag{Name: "burstiness", Destination: &f.Burstiness, Value: 1, Usage: "with --request-rate: the arrival gaps' gamma shape `B` (below 1 burstier, above 1 more even, inf evenly spaced)"},
			&cli.IntFlag{Name: "seed", Destination: &f.Seed, Usage: "with --request-rate: the arrivals' random `SEED` (every trial and arm gets the same arrivals)"},
			&cli.StringFlag{Name: "percentile-metrics", Destination: &f.PercentileMets, Value: strings.Join(stats.DefaultSelection.Metrics, ","), Usage: "serving latency metrics to report mean, median, std and percentiles of: `M[,M...]` of ttft, tpot, itl, e2el (as vllm bench serve)"},
			&cli.StringFlag{Name: "metric-percentiles", Destination: &f.MetricPcts, Value: "99", Usage: "percentiles of the serving latency metrics: `P[,P...]`, each 0 to 100 (e.g. 50,90,99.9)"},
			&cli.BoolFlag{Name: "ignore-eos", Destination: &f.IgnoreEOS, Usage: "generate max-new-tokens even past EOS"},
			&cli.IntFlag{Name: "warmup", Destination: &f.Warmup, Usage: "untimed requests `N` after each server start (or attach), before the first timed level", Value: recipes.DefaultWarmup, DefaultText: recipeDefault(recipes.DefaultWarmup)},
			&cli.IntFlag{Name: "trials", Destination: &f.Trials, Usage: "trials `N` per arm", DefaultText: recipeDefault(recipes.DefaultTrials)},
			&cli.BoolFlag{Name: "no-interleave", Destination: &f.NoInterleave, Usage: "run all trials of an arm on one server start"},
			&cli.StringFlag{Name: "launch-cmd", Destination: &f.LaunchCmd, Usage: "launch every arm with this sh `TEMPLATE` ({port}, {host}, {model}, {draft}, {tp}, {arm}, {arpatch})"},
			&cli.StringFlag{Name: "url", Destination: &f.URL, Usage: "attach every arm without its own url to the server at `URL`; with a recipe's A/B (no --baseline, no --arm naming its arms) that one server is measured as one arm, named server, the baseline of the arms --arm adds"},
			&cli.DurationFlag{Name: "ready-timeout", Destination: &f.ReadyTimeout, Usage: "wait `DURATION` for /health_generate", Value: server.DefaultReadyTimeout},
			&cli.DurationFlag{Name: "request-timeout", Destination: &f.RequestTimeout, Usage: "give up on a request after `DURATION`", Value: bench.DefaultRequestTimeout},
			&cli.StringFlag{Name: "log-dir", Destination: &f.LogDir, Usage: "server logs `DIR` (default: bench-logs/ in the state directory, $ARPATCH_STATE or ~/.local/state/arpatch)"},
			&cli.Float64Flag{Name: "agree-threshold", Destination: &f.AgreeThreshold, Usage: "share `F` of prompts that must match the baseline over the first tokens", Value: bench.DefaultAgreeThreshold},
			&cli.IntFlag{Name: "agree-tokens", Destination: &f.AgreeTokens, Usage: "tokens `N` compared by the output check", Value: sglang.DefaultAgreeTokens},
			&cli.BoolFlag{Name: "preflight", Destination: &f.Preflight, Usage: "run the allreduce micro-benchmark first and stop if the patch is slower than NCCL"},
			&cli.StringFlag{Name: "ext", Destination: &f.Ext, Usage: "with --preflight: the allreduce extension `PATH`"},
			&cli.BoolFlag{Name: "force", Destination: &f.Force, Usage: "run even when the preflight finds the patched allreduce slower than NCCL (never when it is WRONG, hangs or fails)"},
			&cli.StringFlag{Name: "python", Destination: &f.Python, Usage: "default Python `INTERPRETER` of the arms", Value: pyenv.Default},
			&cli.StringFlag{Name: "json", Destination: &f.JSON, Usage: "write every sample and the environment to `FILE`"},
			&cli.StringFlag{Name: "markdown", Destination: &f.Markdown, Usage: "write a markdown table to `FILE`"},
			&cli.StringFlag{Name: "benchfmt", Destination: &f.Benchfmt, Usage: "write Go benchmark lines (for benchstat) to `FILE`"},
			&cli.StringFlag{Name: "plot", Destination: &f.Plot, Usage: "write tok/s against concurrency per arm to `FILE` (.svg or .png)"},
		}, f.tuneFlags.flags("for the arms that open the PCIe gate and the preflight")),
		Before:      noArgs,
		Action:      act(&f, benchOpts, runF),
		Subcommands: []*cli.Command{newCmdBenchAllreduce(benchAllreduceRun), newCmdBenchP2P(benchP2PRun)},
	}
}

// benchFlags are bench's parsed flags.
type benchFlags struct {
	recipeFlags
	Model           string
	DraftModel      string
	TP              int
	SpecAlgorithm   string
	SpecSteps       int
	SpecTopK        int
	SpecDraftTokens int
	Arms            armFlag
	Baseline        string
	Prompts         string
	NumPrompts      int
	MaxNewTokens    int
	Concurrency     string
	RequestRate     float64
	Burstiness      float64
	Seed            int
	PercentileMets  string
	MetricPcts      string
	IgnoreEOS       bool
	Warmup          int
	Trials          int
	NoInterleave    bool
	LaunchCmd       string
	URL             string
	ReadyTimeout    time.Duration
	RequestTimeout  time.Duration
	LogDir          string
	AgreeThreshold  float64
	AgreeTokens     int
	Preflight       bool
	Ext             string
	Force           bool
	Python          string
	JSON            string
	Markdown        string
	Benchfmt        string
	Plot            string
	tuneFlags
	cmdline
}

// benchOptions are every input of benchRun.
type benchOptions struct {
	// Bench is the run, but for the tune's thresholds, the preflight, the
	// progress and the binary, which benchRun adds.
	Bench    bench.Options
	Settings report.Settings
	// Tune is --tune's file ("" without it); TuneInputs the flags
	// (--ext, --python) that a printed retune command repeats.
	Tune       tuneFlags
	TuneInputs []string
	// Preflight: run bench allreduce at the verify shape first, with the
	// extension Ext and the interpreter Python.
	Preflight   bool
	Ext, Python string
	Reports     benchReports
}

// benchReports are the report files asked for ("": none), ~ expanded.
type benchReports struct {
	JSON, Markdown, Benchfmt, Plot string
}

// benchOverrides turns the flags into overrides of the recipe's [bench],
// refusing a value out of its range with the flag's name.
func benchOverrides(f benchFlags) (bench.Overrides, error) {
	logDir, err := stateDirFlag("log-dir", f.LogDir, "bench-logs")
	if err != nil {
		return bench.Overrides{}, err
	}
	ov := bench.Overrides{Interleave: !f.NoInterleave, IgnoreEOS: f.IgnoreEOS,
		ReadyTimeout: f.ReadyTimeout, RequestTimeout: f.RequestTimeout,
		LogDir: logDir, AgreeThreshold: f.AgreeThreshold}
	for _, s := range []struct {
		flag string
		v    string
		dst  **string
	}{{"model", f.Model, &ov.Model}, {"draft-model", f.DraftModel, &ov.DraftModel}, {"speculative-algorithm", f.SpecAlgorithm, &ov.SpecAlgorithm}, {"baseline", f.Baseline, &ov.Baseline}} {
		if f.Given[s.flag] {
			*s.dst = &s.v
		}
	}
	for _, s := range []struct {
		flag string
		v    int
		dst  **int
	}{{"tp", f.TP, &ov.TP}, {"speculative-num-steps", f.SpecSteps, &ov.SpecSteps}, {"speculative-eagle-topk", f.SpecTopK, &ov.SpecTopK},
		{"speculative-num-draft-tokens", f.SpecDraftTokens, &ov.SpecDraftTokens}, {"num-prompts", f.NumPrompts, &ov.NumPrompts}, {"max-new-tokens", f.MaxNewTokens, &ov.MaxNewTokens},
		{"trials", f.Trials, &ov.Trials}, {"warmup", f.Warmup, &ov.Warmup}, {"agree-tokens", f.AgreeTokens, &ov.AgreeTokens}} {
		if !f.Given[s.flag] {
			continue
		}
		if err := bounds.Check(strings.ReplaceAll(s.flag, "-", "_"), int64(s.v)); err != nil {
			return ov, usagef("--%s %v", s.flag, err)
		}
		*s.dst = &s.v
	}
	if f.Given["concurrency"] {
		l, err := recipes.ParseLevels(f.Concurrency)
		if err != nil {
			return ov, usagef("--%s %v", f.name("concurrency"), err)
		}
		ov.Concurrency = l
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"ready-timeout", f.ReadyTimeout}, {"request-timeout", f.RequestTimeout}} {
		if err := bounds.CheckDuration(strings.ReplaceAll(d.flag, "-", "_"), d.v); err != nil {
			return ov, usagef("--%s %v", d.flag, err)
		}
	}
	if err := bounds.CheckFloat("agree_threshold", f.AgreeThreshold); err != nil {
		return ov, usagef("--agree-threshold %v (0 turns the check off)", err)
	}
	if p := expandHome(f.Prompts); p != "" {
		prompts, err := workload.Load(p)
		if err != nil {
			return ov, usagef("--prompts: %v", err)
		}
		ov.Prompts, ov.PromptsFrom = prompts, p
	}
	return ov, nil
}

// benchOpts turns bench's flags into options: the recipe's [bench] table
// and the flags merged (bench.FromRecipe), then the arms the flags add or
// change, and the report files. A value out of range, arms that cannot
// run as asked, or a report file that cannot be written is a usage error.
func benchOpts(f benchFlags) (benchOptions, error) {
	r, err := f.load(f.Given)
	if err != nil {
		return benchOptions{}, err
	}
	o, err := benchSettings(f, r)
	if err != nil {
		return benchOptions{}, err
	}
	bo := benchOptions{Bench: o, Settings: report.SettingsOf(o), Tune: tuneFlags{Tune: expandHome(f.Tune), ForceTune: f.ForceTune},
		Preflight: f.Preflight, Ext: expandHome(f.Ext), Python: f.Python,
		Reports: benchReports{JSON: expandHome(f.JSON), Markdown: expandHome(f.Markdown), Benchfmt: expandHome(f.Benchfmt), Plot: expandHome(f.Plot)}}
	if bo.Ext != "" {
		// As --keep goes with --gc: alone, --ext would be ignored.
		if !f.Preflight && f.Tune == "" {
			return benchOptions{}, usagef("--ext goes with --preflight (the allreduce check before the bench) or --tune (whose inputs it is): add --preflight, or leave --ext out")
		}
		if err := checkPathFlag("ext", bo.Ext, false); err != nil {
			return benchOptions{}, err
		}
		bo.TuneInputs = append(bo.TuneInputs, "--ext", bo.Ext)
	}
	if f.Given["python"] {
		bo.TuneInputs = append(bo.TuneInputs, "--python", f.Python)
	}
	if p := bo.Reports.Plot; p != "" {
		if err := history.PlotFormat(p); err != nil {
			return benchOptions{}, usagef("--plot %v", err)
		}
	}
	rep := bo.Reports
	outs := []outFile{{flag: "json", path: rep.JSON}, {flag: "markdown", path: rep.Markdown}, {flag: "benchfmt", path: rep.Benchfmt}, {flag: "plot", path: rep.Plot}}
	if err := checkOutputs(outs...); err != nil {
		return benchOptions{}, err
	}
	if err := checkNotInputs(outs, inFile{"tune", bo.Tune.Tune}); err != nil {
		return benchOptions{}, err
	}
	return bo, nil
}

// benchSettings merges the recipe's [bench] table and the flags
// (bench.FromRecipe), then the arms the flags add or change.
func benchSettings(f benchFlags, r *recipes.Recipe) (bench.Options, error) {
	ov, err := benchOverrides(f)
	if err != nil {
		return bench.Options{}, err
	}
	if u := f.URL; u != "" {
		if err := bench.CheckURL(u); err != nil {
			return bench.Options{}, usagef("--url %v", err)
		}
	}
	if f.URL != "" && f.LaunchCmd != "" {
		return bench.Options{}, usagef("--url attaches to a running server and --launch-cmd starts one: pass one of them")
	}
	o, err := bench.FromRecipe(r.Bench, ov)
	if err != nil {
		return o, usagef("%v", err)
	}
	o.Force = f.Force
	if err := benchLoad(f, &o); err != nil {
		return o, err
	}
	if alone := soleServer(f, o.Arms); alone != "" {
		// One server named by --url and no recipe arm of its own: measure
		// it as one arm, as vllm bench serve measures the server it is
		// given, not as the recipe's A/B, which needs a server per arm.
		// The arms --arm adds are compared with it.
		o.Arms, o.Baseline = []bench.Arm{{Name: soleArm}}, soleArm
		o.Notes = append(o.Notes, alone)
	}
	arms := map[string]*bench.Arm{}
	var order []string
	for i := range o.Arms {
		arms[o.Arms[i].Name] = &o.Arms[i]
		order = append(order, o.Arms[i].Name)
	}
	for _, spec := range f.Arms {
		name, err := parseArm(spec, arms)
		if err != nil {
			return o, usageError{err}
		}
		if !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	var out []bench.Arm
	for _, name := range order {
		a := arms[name]
		if a.Python == "" {
			a.Python = f.Python
		}
		if a.URL == "" && f.URL != "" {
			a.URL = f.URL
		}
		if a.LaunchCmd == "" && f.LaunchCmd != "" {
			a.LaunchCmd = f.LaunchCmd
		}
		out = append(out, *a)
	}
	o.Arms = out
	if err := checkArmServers(f.URL, o, order); err != nil {
		return o, err
	}
	return o, nil
}

// checkArmServers refuses arms whose servers cannot be what they say:
// server arguments with an attached server or a launch command, one --url
// (url) for several arms, arms bench.CheckArms refuses, a baseline that
// is not one of order, and an arm with no server to launch or attach to.
func checkArmServers(url string, o bench.Options, order []string) error {
	for _, a := range o.Arms {
		// Arguments for the built-in launch would be dropped silently.
		if len(a.Args) > 0 && a.URL != "" {
			return usagef("arm %s attaches to %s, so its server arguments (%s) would not apply: start that server with them, or launch the arm", a.Name, a.URL, shellq.Join(a.Args))
		}
		if len(a.Args) > 0 && a.LaunchCmd != "" {
			return usagef("arm %s: its server arguments (%s) are for the built-in launch (python -m sglang.launch_server); with a launch command, put them in it (--arm %s:launch-cmd=...)", a.Name, shellq.Join(a.Args), a.Name)
		}
	}
	// One server for several arms measures the server against itself.
	if u := url; u != "" && len(o.Arms) > 1 {
		var shared []string
		for _, a := range o.Arms {
			if a.URL == u {
				shared = append(shared, a.Name)
			}
		}
		if len(shared) > 1 {
			return usagef("--url %s would serve %d arms (%s), so the A/B would compare one server with itself (and no arm's env applies); give each arm its own server: --arm NAME:url=URL, or --launch-cmd", u, len(shared), strings.Join(shared, ", "))
		}
	}
	if err := o.CheckArms(); err != nil {
		return usageError{err}
	}
	if o.Baseline != "" && !slices.Contains(order, o.Baseline) {
		return usagef("--baseline %q is not an arm (arms: %s)", o.Baseline, strings.Join(order, ", "))
	}
	for _, a := range o.Arms {
		if a.URL == "" && a.LaunchCmd == "" && o.Model == "" {
			return usagef("arm %s needs a server: pass --model (and --draft-model) to launch SGLang, --launch-cmd TEMPLATE, or --url URL", a.Name)
		}
	}
	return nil
}

// soleArm is the name of the one arm that --url measures alone.
const soleArm = "server"

// soleServer returns the note for a run that --url measures as one arm,
// or "": --url with no --baseline and no --arm that names a recipe arm,
// where the recipe's arms (more than one, none attached by URL) would
// otherwise all take that one server and compare it with itself. Arms
// that --arm adds (new names) are compared with that one arm.
func soleServer(f benchFlags, recipeArms []bench.Arm) string {
	if f.URL == "" || f.Given["baseline"] || len(recipeArms) < 2 {
		return ""
	}
	var names []string
	for _, a := range recipeArms {
		if a.URL != "" {
			return ""
		}
		names = append(names, a.Name)
	}
	var added []string
	for _, spec := range f.Arms {
		name, _, _ := strings.Cut(spec, ":")
		name = strings.TrimSpace(name)
		if slices.Contains(names, name) {
			return ""
		}
		if name != soleArm && !slices.Contains(added, name) {
			added = append(added, name)
		}
	}
	against := ""
	if len(added) > 0 {
		against = fmt.Sprintf(", the baseline against the arms --arm adds (%s)", strings.Join(added, ", "))
	}
	return fmt.Sprintf("--url %s: one server, measured as one arm named %s%s; the recipe's arms (%s) are an A/B that needs a server per arm: --arm NAME:url=URL for each", f.URL, soleArm, against, strings.Join(names, ", "))
}

// benchLoad sets the open-loop load and the serving metrics' selection
// from --request-rate, --burstiness, --seed, --percentile-metrics and
// --metric-percentiles. With a rate and no --concurrency, nothing caps
// the requests in flight (a level of one per prompt, at most
// concurrency's bound), as vllm bench serve without --max-concurrency.
func benchLoad(f benchFlags, o *bench.Options) error {
	arr := workload.Arrivals{Rate: f.RequestRate, Burstiness: f.Burstiness, Seed: uint64(f.Seed)}
	if f.RequestRate <= 0 || math.IsNaN(f.RequestRate) {
		return usagef("--request-rate %v: want requests per second above 0, or inf to send them all at once", f.RequestRate)
	}
	if f.Burstiness <= 0 || math.IsNaN(f.Burstiness) {
		return usagef("--burstiness %v: want a gamma shape above 0 (1 is a Poisson process, inf even spacing)", f.Burstiness)
	}
	if f.Seed < 0 {
		return usagef("--seed %d: want 0 or more", f.Seed)
	}
	if !arr.Open() {
		for _, fl := range []string{"burstiness", "seed"} {
			if f.Given[fl] {
				return usagef("--%s shapes the arrivals of --request-rate, which is inf (every request at once): add --request-rate R, or leave --%s out", fl, fl)
			}
		}
	} else {
		o.Arrivals = arr
		if !f.Given["concurrency"] {
			o.Concurrency = []int{int(min(int64(len(o.Prompts)), bounds.Bench["concurrency"].Max))}
			o.Uncapped = o.Concurrency[0] >= len(o.Prompts)
		}
	}
	sel, err := stats.ParseSelection(f.PercentileMets, f.MetricPcts)
	if err != nil {
		return usagef("--percentile-metrics %s --metric-percentiles %s: %v", shellq.Quote(f.PercentileMets), shellq.Quote(f.MetricPcts), err)
	}
	o.Serving = sel
	return nil
}

// benchRun applies the tune, runs the bench (after the preflight), prints
// the table and writes the reports. An INVALID or slower arm is a failure
// (exit 1); a server that failed, or an interrupted run, exit 4.
func benchRun(ctx context.Context, bo benchOptions, s streams) error {
	o, settings := bo.Bench, bo.Settings
	tuned, err := applyTune(ctx, &o, bo.Tune, bo.TuneInputs, s.Err)
	if err != nil {
		return err
	}
	if bo.Preflight && skipTunedPreflight(s.Err, tuned) {
		// The tune keeps NCCL at every size: no custom allreduce to check.
	} else if bo.Preflight {
		if bo.Ext == "" {
			return usagef("--preflight needs --ext PATH, the allreduce extension from arpatch build --allreduce-ext")
		}
		// Before any server starts: the preflight's ranks need torch.
		if err := checkTorch(ctx, bo.Python, nil); err != nil {
			return err
		}
		tp := o.TP
		o.Preflight = func(ctx context.Context) (*allreduce.Report, error) {
			v := allreduce.DefaultVerify()
			ao := allreduce.Options{Python: bo.Python, WorldSize: tp, Sizes: []int{v.Bytes}, Impls: allreduce.KnownImpls,
				Branches: []string{"pcie"}, Modes: []string{allreduce.ModeGraph}, Ext: bo.Ext, Warmup: allreduce.DefaultWarmup, NCCLDebug: true}
			tunePreflight(tuned, &ao, v, s.Err)
			run, err := allreduce.Execute(ctx, ao)
			if err != nil {
				return nil, err
			}
			rep := allreduce.NewReport(ao, v, run, arpatchVersion())
			rep.WriteTable(s.Err)
			return rep, nil
		}
	}
	o.Progress = bench.ShowProgress(s.Err)
	o.Starting = func(arm string, trial int, log string) {
		// As the trials' counts: a line on stderr (a model loads for
		// minutes before the first request).
		fmt.Fprintf(s.Err, "starting the %s server for trial %d of %d (log %s)...\n", arm, trial, o.Trials, log)
	}
	o.Self = selfPath()
	res, err := bench.Run(ctx, o)
	interrupted := ctx.Err() != nil
	if interrupted {
		err = fmt.Errorf("interrupted: the servers were stopped; no result")
	}
	if err == nil && res != nil && len(res.Arms) > 0 && res.Arms[0].Levels != nil {
		report.WriteTable(s.Out, res, settings)
		fmt.Fprintln(s.Out)
		report.WriteServing(s.Out, res, settings)
	}
	if res != nil {
		doc := report.NewDocument(res, settings, arpatchVersion(), nvsmi.Drivers(context.Background()))
		if err != nil {
			doc.Error = err.Error()
		}
		if werr := writeReports(bo.Reports, doc, res, settings, err == nil); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		var ie *bench.InfraError
		if interrupted && bo.Reports.JSON != "" {
			// Said on the terminal only: the JSON's error field is the
			// file itself.
			err = fmt.Errorf("%v (%s says so)", err, bo.Reports.JSON)
		}
		if errors.As(err, &ie) || interrupted {
			return exitWith(exitInfra, err.Error())
		}
		return err
	}
	for _, a := range res.Arms {
		if a.Verdict.Fails() {
			return exitWith(exitFailure, "")
		}
	}
	return nil
}

// writeReports writes the report files asked for. A run that did not
// finish (complete false) writes only the JSON, marked with its error:
// the markdown and benchfmt files hold results, and it has none.
func writeReports(files benchReports, doc *report.Document, res *bench.Result, s report.Settings, complete bool) error {
	for _, f := range []struct {
		flag, path string
		write      func(io.Writer) error
	}{
		{"json", files.JSON, doc.WriteJSON},
		{"markdown", files.Markdown, func(w io.Writer) error { return report.WriteMarkdown(w, res, s) }},
		{"benchfmt", files.Benchfmt, func(w io.Writer) error { return report.WriteBenchfmt(w, res, s) }},
		{"plot", files.Plot, nil},
	} {
		p := f.path
		if p == "" || (!complete && f.flag != "json") {
			continue
		}
		if f.write == nil { // the plot: gonum writes the file itself
			tokS, _ := stats.Lookup(stats.TokS)
			if err := chart.PlotConcurrency(p, "arpatch bench: tok/s against concurrency", tokS.Axis(), report.Curves(res, stats.TokS)); err != nil {
				return fmt.Errorf("--plot: %w", err)
			}
			continue
		}
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			return err
		}
		if err := safefs.WriteFile(p, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("--%s: %w", f.flag, err)
		}
	}
	return nil
}

// selfPath is this arpatch binary, for {arpatch} in a launch template: the
// path it was started by (made absolute, or looked up on PATH), else the
// executable's.
func selfPath() string {
	if a := os.Args[0]; strings.Contains(a, "/") {
		if abs, err := filepath.Abs(a); err == nil {
			return abs
		}
	} else if p, err := exec.LookPath(a); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	p, _ := os.Executable()
	return p
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/recipes"
)

// Exit code of bench for an infrastructure failure (a server that would
// not start or died), apart from a measured failure (1).
const exitInfra = 4

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "EAGLE-3 serving benchmark: tok/s, accept length and latency of each arm against the baseline",
		UsageText: `arpatch bench [--recipe NAME] [--model M --draft-model D] [--arm NAME:key=val,...] [--baseline NAME]
              [--trials 5] [--num-prompts 32] [--max-new-tokens 256] [--concurrency 1] [--warmup 2]
              [--prompts FILE] [--launch-cmd 'TEMPLATE {port}' | --url URL] [--preflight --ext PATH]
              [--json FILE] [--markdown FILE] [--benchfmt FILE]
arpatch bench allreduce ...`,
		Description: `For each trial and arm, bench starts python -m sglang.launch_server with the
recipe's model, draft model, --speculative-algorithm EAGLE3, speculative
settings and TP (log in --log-dir), waits for /health_generate, sends the
workload at temperature 0 through the native streaming /generate API, and
stops the server (SIGTERM to its process group, then SIGKILL). Arms are
interleaved across trials (A B A B ...), restarting servers each time, unless
--no-interleave.

The recipe's [bench] table defines the arms: for pcie, "baseline" (the same
build with custom allreduce on upstream's path, NCCL on PCIe) and "pcie"
(SGLANG_FORCE_CUSTOM_AR_PCIE=1). --arm adds or changes one:
   --arm algo1:env.SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage,env.SGLANG_FORCE_CUSTOM_AR_PCIE=1
   --arm mine:python=/venv/bin/python,args=--cuda-graph-max-bs 8
   --arm remote:url=http://10.0.0.2:30000

Metrics per request: TTFT, E2E, tokens, spec_verify_ct, decode tok/s =
(tokens-1)/(E2E-TTFT). Per trial: tok/s = total tokens / wall time, median
decode tok/s, accept length = total tokens / total verify steps, TPOT, ITL
(a multi-token chunk's gap spread over its tokens), TTFT p50/p99, errors.
Across trials: medians with confidence intervals (95% from 6 trials; each
shows its level) and a Mann-Whitney U test against the baseline
(golang.org/x/perf/benchmath).

Output check: at temperature 0 every output of every trial must be the
baseline's text for its prompt; an arm whose outputs match over the first
32 tokens less than --agree-threshold (90%) of the time is INVALID, whatever
its speed, and so is an arm with failed requests, and a baseline whose own
trials disagree.

--preflight runs arpatch bench allreduce at the verify shape first and stops
when the patched allreduce is slower than NCCL, is WRONG or hangs (--force
runs anyway).

Exit codes: 0 ok, 1 an arm is INVALID or significantly slower, or the
preflight failed, 2 usage, 4 a server failed to start, died or answered
nothing, a server of a killed run still runs, or the run was interrupted.

Examples:
   arpatch bench --model /models/target --draft-model /models/target-eagle3 --json bench.json
   arpatch bench --trials 3 --launch-cmd 'arpatch fake-sglang --port {port}' --markdown bench.md`,
		Flags: []cli.Flag{
			recipeFlag(), recipeFileFlag(),
			&cli.StringFlag{Name: "model", Usage: "target model `PATH` (default: the recipe's [bench] model)"},
			&cli.StringFlag{Name: "draft-model", Usage: "EAGLE-3 draft model `PATH`"},
			&cli.IntFlag{Name: "tp", Usage: "tensor parallel size `N`", DefaultText: "the recipe's [bench] value"},
			&cli.StringFlag{Name: "speculative-algorithm", Usage: "`ALGO` (EAGLE3; none disables speculation)"},
			&cli.IntFlag{Name: "speculative-num-steps", Usage: "draft steps `N`", DefaultText: "the recipe's [bench] value"},
			&cli.IntFlag{Name: "speculative-eagle-topk", Usage: "top-k `N`", DefaultText: "the recipe's [bench] value"},
			&cli.IntFlag{Name: "speculative-num-draft-tokens", Usage: "draft tokens `N`", DefaultText: "the recipe's [bench] value"},
			&cli.StringSliceFlag{Name: "arm", Usage: "add or change an arm: `NAME:key=val,...` (keys: python, url, launch-cmd, args, env.VAR)"},
			&cli.StringFlag{Name: "baseline", Usage: "baseline arm `NAME`"},
			&cli.StringFlag{Name: "prompts", Usage: "prompt `FILE`: JSONL ({\"prompt\": ...}) or ShareGPT JSON (default: 32 built-in prompts)"},
			&cli.IntFlag{Name: "num-prompts", Usage: "prompts `N` per trial (cycling the set)", DefaultText: "the recipe's [bench] value"},
			&cli.IntFlag{Name: "max-new-tokens", Usage: "tokens `N` per request", DefaultText: "the recipe's [bench] value"},
			&cli.IntFlag{Name: "concurrency", Usage: "requests `N` in flight (1: single-stream tok/s)", DefaultText: "the recipe's [bench] value"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "generate max-new-tokens even past EOS"},
			&cli.IntFlag{Name: "warmup", Usage: "untimed requests `N` after each server start", Value: 2},
			&cli.IntFlag{Name: "trials", Usage: "trials `N` per arm", DefaultText: "the recipe's [bench] value"},
			&cli.BoolFlag{Name: "no-interleave", Usage: "run all trials of an arm on one server start"},
			&cli.StringFlag{Name: "launch-cmd", Usage: "launch every arm with this sh `TEMPLATE` ({port}, {host}, {model}, {draft}, {tp}, {arm})"},
			&cli.StringFlag{Name: "url", Usage: "attach every arm without its own url to the server at `URL`"},
			&cli.DurationFlag{Name: "ready-timeout", Usage: "wait `DURATION` for /health_generate", Value: 20 * time.Minute},
			&cli.DurationFlag{Name: "request-timeout", Usage: "give up on a request after `DURATION`", Value: 10 * time.Minute},
			&cli.StringFlag{Name: "log-dir", Usage: "server logs `DIR`", Value: "bench-logs"},
			&cli.Float64Flag{Name: "agree-threshold", Usage: "share `F` of prompts that must match the baseline over the first tokens", Value: 0.9},
			&cli.IntFlag{Name: "agree-tokens", Usage: "tokens `N` compared by the output check", Value: 32},
			&cli.BoolFlag{Name: "preflight", Usage: "run the allreduce micro-benchmark first and stop if the patch is slower than NCCL"},
			&cli.StringFlag{Name: "ext", Usage: "with --preflight: the allreduce extension `PATH`"},
			&cli.BoolFlag{Name: "force", Usage: "run even when the preflight fails"},
			&cli.StringFlag{Name: "python", Usage: "default Python `INTERPRETER` of the arms", Value: "python3"},
			&cli.StringFlag{Name: "json", Usage: "write every sample and the environment to `FILE`"},
			&cli.StringFlag{Name: "markdown", Usage: "write a markdown table to `FILE`"},
			&cli.StringFlag{Name: "benchfmt", Usage: "write Go benchmark lines (for benchstat) to `FILE`"},
		},
		Before:      noArgs,
		Action:      runBench,
		Subcommands: []*cli.Command{benchAllreduceCommand()},
	}
}

// parseArm reads "NAME:key=val,key=val" (args= may hold spaces and take
// the rest of the string).
func parseArm(spec string, into map[string]*bench.Arm) (string, error) {
	name, rest, _ := strings.Cut(spec, ":")
	name = strings.TrimSpace(name)
	if name == "" {
		return "", fmt.Errorf("--arm %q: want NAME:key=val,...", spec)
	}
	a := into[name]
	if a == nil {
		a = &bench.Arm{Name: name}
		into[name] = a
	}
	for rest != "" {
		var kv string
		if strings.HasPrefix(rest, "args=") {
			kv, rest = rest, ""
		} else {
			kv, rest, _ = strings.Cut(rest, ",")
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", fmt.Errorf("--arm %s: %q is not key=val", name, kv)
		}
		if strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("--arm %s: %s= was given an empty value", name, k)
		}
		switch {
		case k == "python":
			a.Python = v
		case k == "url":
			a.URL = v
		case k == "launch-cmd":
			a.LaunchCmd = v
		case k == "args":
			a.Args = strings.Fields(v)
		case strings.HasPrefix(k, "env."):
			if a.Env == nil {
				a.Env = map[string]string{}
			}
			a.Env[strings.TrimPrefix(k, "env.")] = v
		default:
			return "", fmt.Errorf("--arm %s: unknown key %q (python, url, launch-cmd, args, env.VAR)", name, k)
		}
	}
	return name, nil
}

// benchOptions merges the recipe's [bench] table and the flags.
func benchOptions(c *cli.Context, r *recipes.Recipe) (bench.Options, report.Settings, error) {
	b := r.Bench
	o := bench.Options{
		Model: b.Model, DraftModel: b.DraftModel, TP: b.TP, SpecAlgorithm: b.SpeculativeAlgorithm,
		SpecSteps: b.SpeculativeNumSteps, SpecTopK: b.SpeculativeEagleTopK, SpecDraftTokens: b.SpeculativeNumDraftTokens,
		MaxNewTokens: b.MaxNewTokens, Concurrency: b.Concurrency, Trials: b.Trials, Warmup: c.Int("warmup"),
		Baseline: b.BaselineArm, Interleave: !c.Bool("no-interleave"), IgnoreEOS: c.Bool("ignore-eos"),
		ReadyTimeout: c.Duration("ready-timeout"), RequestTimeout: c.Duration("request-timeout"),
		LogDir: pathFlag(c, "log-dir"), AgreeThreshold: c.Float64("agree-threshold"), Force: c.Bool("force"),
	}
	if !c.IsSet("warmup") {
		o.Warmup = b.Warmup // the recipe's, 2 unless it says otherwise
	}
	for _, v := range []struct {
		flag   string
		bad    bool
		range_ string
	}{
		{"warmup", c.Int("warmup") < 0, "0 or more"},
		{"num-prompts", c.IsSet("num-prompts") && c.Int("num-prompts") < 1, "1 or more"},
		{"agree-tokens", c.Int("agree-tokens") < 1, "1 or more"},
		{"agree-threshold", c.Float64("agree-threshold") < 0 || c.Float64("agree-threshold") > 1, "a share in [0, 1] (0 turns the check off)"},
		{"request-timeout", c.Duration("request-timeout") <= 0, "a positive duration"},
		{"ready-timeout", c.Duration("ready-timeout") <= 0, "a positive duration"},
	} {
		if v.bad {
			return o, report.Settings{}, usagef("--%s %v: use %s", v.flag, c.Value(v.flag), v.range_)
		}
	}
	if c.String("url") != "" && c.String("launch-cmd") != "" {
		return o, report.Settings{}, usagef("--url attaches to a running server and --launch-cmd starts one: pass one of them")
	}
	for _, s := range []struct {
		flag string
		dst  *string
	}{{"model", &o.Model}, {"draft-model", &o.DraftModel}, {"speculative-algorithm", &o.SpecAlgorithm}, {"baseline", &o.Baseline}} {
		if c.IsSet(s.flag) {
			*s.dst = c.String(s.flag)
		}
	}
	for _, s := range []struct {
		flag string
		dst  *int
	}{{"tp", &o.TP}, {"speculative-num-steps", &o.SpecSteps}, {"speculative-eagle-topk", &o.SpecTopK},
		{"speculative-num-draft-tokens", &o.SpecDraftTokens}, {"max-new-tokens", &o.MaxNewTokens}, {"concurrency", &o.Concurrency}, {"trials", &o.Trials}} {
		if c.IsSet(s.flag) {
			if c.Int(s.flag) < 1 {
				return o, report.Settings{}, usagef("--%s must be at least 1", s.flag)
			}
			*s.dst = c.Int(s.flag)
		}
	}
	if strings.EqualFold(o.SpecAlgorithm, "EAGLE") && strings.Contains(strings.ToLower(o.DraftModel), "eagle3") {
		return o, report.Settings{}, usagef("--speculative-algorithm EAGLE with the EAGLE-3 draft %s gives accept length 1.00; use EAGLE3", o.DraftModel)
	}
	prompts := workload.Builtin()
	if p := pathFlag(c, "prompts"); p != "" {
		var err error
		if prompts, err = workload.Load(p); err != nil {
			return o, report.Settings{}, err
		}
	}
	n := b.NumPrompts
	if c.IsSet("num-prompts") {
		n = c.Int("num-prompts")
	}
	o.Prompts = workload.Take(prompts, n)
	arms := map[string]*bench.Arm{}
	var order []string
	for _, ra := range b.Arms {
		a := &bench.Arm{Name: ra.Name, Python: ra.Python, Env: ra.Env, Args: ra.Args}
		arms[a.Name] = a
		order = append(order, a.Name)
	}
	if len(order) == 0 {
		arms["baseline"] = &bench.Arm{Name: "baseline"}
		order = []string{"baseline"}
	}
	for _, spec := range c.StringSlice("arm") {
		name, err := parseArm(spec, arms)
		if err != nil {
			return o, report.Settings{}, usageError{err}
		}
		if !contains(order, name) {
			order = append(order, name)
		}
	}
	for _, name := range order {
		a := arms[name]
		if a.Python == "" {
			a.Python = c.String("python")
		}
		if a.URL == "" && c.String("url") != "" {
			a.URL = c.String("url")
		}
		if a.LaunchCmd == "" && c.String("launch-cmd") != "" {
			a.LaunchCmd = c.String("launch-cmd")
		}
		o.Arms = append(o.Arms, *a)
	}
	// One server for several arms measures the server against itself.
	if u := c.String("url"); u != "" && len(o.Arms) > 1 {
		shared := 0
		for _, a := range o.Arms {
			if a.URL == u {
				shared++
			}
		}
		if shared > 1 {
			return o, report.Settings{}, usagef("--url %s would serve %d arms, so the A/B would compare one server with itself (and no arm's env applies); give each arm its own server: --arm NAME:url=URL, or --launch-cmd", u, shared)
		}
	}
	if err := o.CheckArms(); err != nil {
		return o, report.Settings{}, usageError{err}
	}
	if o.Baseline != "" && !contains(order, o.Baseline) {
		return o, report.Settings{}, usagef("--baseline %q is not an arm (arms: %s)", o.Baseline, strings.Join(order, ", "))
	}
	for _, a := range o.Arms {
		if a.URL == "" && a.LaunchCmd == "" && o.Model == "" {
			return o, report.Settings{}, usagef("arm %s needs a server: pass --model (and --draft-model) to launch SGLang, --launch-cmd TEMPLATE, or --url URL", a.Name)
		}
	}
	if c.IsSet("agree-tokens") {
		sglang.AgreeTokens = c.Int("agree-tokens")
	}
	s := report.Settings{Model: o.Model, DraftModel: o.DraftModel, TP: o.TP, SpecAlgorithm: o.SpecAlgorithm, SpecSteps: o.SpecSteps,
		SpecTopK: o.SpecTopK, SpecDraftTokens: o.SpecDraftTokens, Prompts: len(o.Prompts), MaxNewTokens: o.MaxNewTokens,
		Concurrency: o.Concurrency, Warmup: o.Warmup, Trials: o.Trials, IgnoreEOS: o.IgnoreEOS, Interleave: o.Interleave,
		AgreeTokens: sglang.AgreeTokens, AgreeThreshold: o.AgreeThreshold}
	return o, s, nil
}

func runBench(c *cli.Context) error {
	r, err := loadRecipe(c)
	if err != nil {
		return err
	}
	o, settings, err := benchOptions(c, r)
	if err != nil {
		return err
	}
	if c.Bool("preflight") {
		ext := pathFlag(c, "ext")
		if ext == "" {
			return usagef("--preflight needs --ext PATH, the allreduce extension from arpatch build --allreduce-ext")
		}
		tp := o.TP
		o.Preflight = func(ctx context.Context) (*allreduce.Report, error) {
			v := allreduce.Verify{Count: 122, Shape: allreduce.Shape{Tokens: 4, Hidden: 5120, ElemBytes: 2}}
			v.Bytes = v.Shape.Bytes()
			ao := allreduce.Options{Python: c.String("python"), WorldSize: tp, Sizes: []int{v.Bytes}, Impls: allreduce.KnownImpls,
				Branches: []string{"pcie"}, Modes: []string{"graph"}, Ext: ext, Timeout: 10 * time.Minute, NCCLDebug: true}
			run, err := allreduce.Execute(ctx, ao)
			if err != nil {
				return nil, err
			}
			rep := allreduce.NewReport(ao, v, run, arpatchVersion())
			rep.WriteTable(c.App.ErrWriter)
			return rep, nil
		}
	}
	for _, f := range []string{"json", "markdown", "benchfmt"} {
		if p := pathFlag(c, f); p != "" {
			if err := safefs.CanWrite(p); err != nil {
				return usagef("--%s: %v", f, err)
			}
		}
	}
	o.Progress = benchProgress(c)
	res, err := bench.Run(c.Context, o)
	if c.Context.Err() != nil {
		err = fmt.Errorf("interrupted: the servers were stopped; no result (the --json file, if any, says so)")
	}
	if err == nil && res != nil && len(res.Arms) > 0 && res.Arms[0].Summaries != nil {
		report.WriteTable(c.App.Writer, res, settings)
	}
	if res != nil {
		doc := report.NewDocument(res, settings, arpatchVersion())
		if err != nil {
			doc.Error = err.Error()
		}
		if werr := writeReports(c, doc, res, settings, err == nil); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		var ie *bench.InfraError
		if errors.As(err, &ie) || c.Context.Err() != nil {
			return cli.Exit(err.Error(), exitInfra)
		}
		return err
	}
	for _, a := range res.Arms {
		if a.Invalid || (a.Deltas != nil && a.Deltas["tok_s"].Verdict == "slower") {
			return cli.Exit("", exitFailure)
		}
	}
	return nil
}

// writeReports writes the report files asked for. A run that did not
// finish (complete false) writes only the JSON, marked with its error:
// the markdown and benchfmt files hold results, and it has none.
func writeReports(c *cli.Context, doc *report.Document, res *bench.Result, s report.Settings, complete bool) error {
	for _, f := range []struct {
		flag  string
		write func(io.Writer) error
	}{
		{"json", doc.WriteJSON},
		{"markdown", func(w io.Writer) error { return report.WriteMarkdown(w, res, s) }},
		{"benchfmt", func(w io.Writer) error { return report.WriteBenchfmt(w, res, s) }},
	} {
		p := pathFlag(c, f.flag)
		if p == "" || (!complete && f.flag != "json") {
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

// benchProgress draws "trial 2/5 pcie [#####     ] 16/32" on the
// terminal, or prints a line per finished trial otherwise.
func benchProgress(c *cli.Context) func(trial, trials int, arm string, done, total int) {
	w := c.App.ErrWriter
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isTerminal(f)
	}
	return func(trial, trials int, arm string, done, total int) {
		if tty {
			width := 30
			fill := width * done / total
			fmt.Fprintf(w, "\rtrial %d/%d %-12s [%s%s] %d/%d requests", trial, trials, arm, strings.Repeat("#", fill), strings.Repeat(" ", width-fill), done, total)
			if done == total {
				fmt.Fprintln(w)
			}
		} else if done == total {
			fmt.Fprintf(w, "trial %d/%d %s: %d requests done\n", trial, trials, arm, total)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/internal/shellq"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/doctor"
	"github.com/arpatch/arpatch/harness/p2p"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/recipes"
)

func newCmdTune() *cli.Command {
	return &cli.Command{
		Name:        "tune",
		Usage:       "tune the pcie series' run-time thresholds on this host",
		UsageText:   "arpatch tune allreduce [flags]",
		Before:      noArgs,
		Subcommands: []*cli.Command{newCmdTuneAllreduce(tuneAllreduceRun)},
	}
}

// newCmdTuneAllreduce is tune allreduce, running its options with runF (tuneAllreduceRun).
func newCmdTuneAllreduce(runF func(context.Context, tuneAllreduceOptions, streams) error) *cli.Command {
	var f tuneAllreduceFlags
	return &cli.Command{
		Name:  "allreduce",
		Usage: "measure NCCL and its variants, the pull and push kernels through the PCIe branch, and write the fastest correct settings as an env file",
		UsageText: fmt.Sprintf(`arpatch tune allreduce [--recipe NAME] [--world-size N] [--hidden %d] [--draft-tokens N] [--sizes SIZES]
                       [--modes eager,graph] [--islands LAYOUT] [--nccl-variants all|none|NAMES]
                       (--ext PATH | --src DIR [--arch A]) [--out tune.env] [--json FILE] [--p2p FILE]`, allreduce.VerifyHidden),
		Description: `On the target host, at the recipe's TP (or --world-size), tune measures NCCL
and, through the PCIe branch (full_nvlink=false), the pull kernels
(custom-1stage, custom-2stage) and the push kernels (custom-push1,
custom-push2, and custom-island when the ranks form more than one island) at
the sizes a serving run uses: one decode token to the 8 MiB custom allreduce
cap in powers of two, the EAGLE-3 verify pass (--draft-tokens x --hidden x
bf16) and its decode batches. Every sum is checked, in eager mode and in CUDA
graphs. It first checks that the extension refuses a bad
SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES and SGLANG_PCIE_CUSTOM_AR_ALGO=bogus at
init_custom_ar (an extension built before the run-time thresholds or the push
kernels takes them silently). Then NCCL runs again under each of
--nccl-variants (as bench allreduce runs them), one torchrun each.

Per size it compares each custom kernel with the fastest correct NCCL variant
there (CUDA-graph medians when measured: SGLang decodes in graphs) and cuts
the sizes into custom allreduce and NCCL with the least summed slow-down:
SGLANG_PCIE_CUSTOM_AR_MAX_BYTES; below the cut a schedule of the fastest
kernels, SGLANG_PCIE_CUSTOM_AR_ALGO (e.g. push1:32768,push2:2097152,pull2), with
SGLANG_PCIE_CUSTOM_AR_ISLANDS when island runs (--islands, or the host
topology as bench allreduce reads it); above it the NCCL variant with the
least summed slow-down there, its variables written when it beats NCCL as
the environment leaves it by 3% or more, and never NCCL_PROTO=LL128 unless
NVLink joins every rank (NCCL enables LL128 only there: elsewhere its data
may be corrupt without a wrong sum in a test). Then custom-auto runs again through
the PCIe branch with no setting and under the chosen one, which NCCL runs
under too above the cut, every sum checked. A tune where custom allreduce
never beats NCCL says so and writes SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=0: NCCL
at every size.

The env file (--out) records the host, GPUs, driver, NCCL version, world
size, date and this command. arpatch bench --tune FILE and nightly's tune =
"FILE" use it (the pcie series' variables in the arms that open the PCIe
gate, the NCCL variant's in every arm) and refuse one made on another host
unless --force-tune; a shell reads it with set -a; . ./FILE; set +a. Files
written before the push kernels, with SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES,
still load (pull1 up to it, pull2 above). Nothing is written when a sum is
wrong, a case hangs or the run is oversubscribed (more ranks than GPUs:
correctness only).

Beside what it measured, it prints what the traffic model expects of these
GPUs at the verify shape (doctor's expect: line): with the calibrated
constants, or, given --p2p, those of this host's P2P measurement (arpatch
bench p2p --json FILE).

It exits 1 when any sum is wrong, a case hangs or errors, or the extension
takes a bad threshold or predates the push kernels; a failed NCCL variant
is reported and never chosen.

Examples:
   arpatch tune allreduce --src sglang --out tune.env
   arpatch tune allreduce --world-size 2 --ext arpatch_custom_ar.so --modes graph --out tune.env --json tune.json`,
		Flags: append([]cli.Flag{
			recipeFlag(&f.Recipe), recipeFileFlag(&f.RecipeFile),
			&cli.IntFlag{Name: "world-size", Destination: &f.WorldSize, Usage: "ranks `N`", DefaultText: "the recipe's bench.tp"},
			&cli.IntFlag{Name: "hidden", Destination: &f.Hidden, Usage: "the model's hidden size `H` (bf16 allreduces of tokens x H)", Value: allreduce.VerifyHidden},
			&cli.IntFlag{Name: "draft-tokens", Destination: &f.DraftTokens, Usage: "tokens `N` of one EAGLE-3 verify pass", DefaultText: "the recipe's speculative_num_draft_tokens"},
			&cli.StringFlag{Name: "sizes", Destination: &f.Sizes, Usage: "`SIZES` in bytes instead of the serving sizes: list and ranges of powers of two"},
			&cli.StringFlag{Name: "modes", Destination: &f.Modes, Usage: "`MODES`: eager, graph", Value: "eager,graph"},
			&cli.StringFlag{Name: "out", Destination: &f.Out, Usage: "write the thresholds to the env `FILE`", Value: "tune.env"},
			&cli.StringFlag{Name: "json", Destination: &f.JSON, Usage: "write every run and the choice to `FILE`"},
			&cli.StringFlag{Name: "p2p", Destination: &f.P2P, Usage: "the host's P2P measurement `FILE` (arpatch bench p2p --json FILE): the traffic model's constants for expect:"},
		}, f.allreduceRunValues.flags("the islands of ranks custom-island is measured with and the tune file's "+tune.EnvIslands+" gets: one `LAYOUT`, as 0,1,2,3/4,5,6,7 (to compare layouts, or all of them, use arpatch bench allreduce --islands)")...),
		Before: noArgs,
		Action: act(&f, tuneAllreduceOpts, runF),
	}
}

// tuneAllreduceFlags are tune allreduce's parsed flags.
type tuneAllreduceFlags struct {
	recipeFlags
	WorldSize   int
	Hidden      int
	DraftTokens int
	Sizes       string
	Modes       string
	Out         string
	JSON        string
	P2P         string
	allreduceRunValues
	cmdline
}

// tuneAllreduceOptions are every input of tuneAllreduceRun.
type tuneAllreduceOptions struct {
	// Tune is the run, but for the extension (found by Ext), the host and
	// the progress, which the run fills in, and the log.
	Tune tune.Options
	Ext  extFinder
	// Out is the env file, JSON the report's and Log the ranks' output
	// file ("": none).
	Out, JSON, Log string
	// P2P is --p2p's measurement (nil: none), read from P2PFile: the
	// traffic model's constants for expect:.
	P2P     *p2p.Report
	P2PFile string
}

// tuneAllreduceOpts turns tune allreduce's flags and the recipe's [bench]
// (TP, draft tokens) into options, refusing a world size, shape, size,
// mode or batch count out of range and an output file that cannot be
// written.
func tuneAllreduceOpts(f tuneAllreduceFlags) (tuneAllreduceOptions, error) {
	var o tuneAllreduceOptions
	r, err := f.load(f.Given)
	if err != nil {
		return o, err
	}
	ws := r.Bench.TP
	if f.Given["world-size"] {
		ws = f.WorldSize
	}
	if err := checkWorldSize(ws); err != nil {
		return o, err
	}
	draft := r.Bench.SpeculativeNumDraftTokens
	if f.Given["draft-tokens"] || draft <= 0 {
		draft = f.DraftTokens
	}
	if draft <= 0 || f.Hidden <= 0 {
		return o, usagef("--draft-tokens %d, --hidden %d: use positive numbers (e.g. --draft-tokens %d --hidden %d)", draft, f.Hidden, allreduce.VerifyTokens, allreduce.VerifyHidden)
	}
	verify := allreduce.Verify{Count: allreduce.VerifyCount, Shape: allreduce.Shape{Tokens: draft, Hidden: f.Hidden, ElemBytes: allreduce.BF16Bytes}}
	verify.Bytes = verify.Shape.Bytes() / 16 * 16
	sizes := tune.ServingSizes(f.Hidden, draft)
	if f.Given["sizes"] {
		if sizes, err = allreduce.ParseSizes(f.Sizes); err != nil {
			return o, usagef("--sizes: %w", err)
		}
	}
	modes, err := splitList("modes", f.Modes)
	if err != nil {
		return o, err
	}
	if err := allreduce.ModesError(modes); err != nil {
		return o, usagef("--modes %w", err)
	}
	if err := f.check(); err != nil {
		return o, err
	}
	layouts, err := f.layouts(ws)
	if err != nil {
		return o, err
	}
	if len(f.Islands) > 1 || slices.Contains(f.Islands, "all") {
		return o, usagef("--islands %s: tune allreduce measures custom-island with one layout (the one it writes to %s); tune once per layout, or compare layouts with arpatch bench allreduce --islands", strings.Join(f.Islands, " --islands "), tune.EnvIslands)
	}
	variants, err := f.variants()
	if err != nil {
		return o, err
	}
	o.Out, o.JSON, o.Log = expandHome(f.Out), expandHome(f.JSON), expandHome(f.Log)
	if err := checkOutputs(outFile{flag: "out", path: o.Out}, outFile{flag: "json", path: o.JSON}, outFile{flag: "log", path: o.Log}); err != nil {
		return o, err
	}
	if err := checkNotInputs([]outFile{{flag: "out", path: o.Out}, {flag: "json", path: o.JSON}, {flag: "log", path: o.Log}}, inFile{"p2p", expandHome(f.P2P)}); err != nil {
		return o, err
	}
	if f.P2P != "" {
		if o.P2P, err = p2p.Load(expandHome(f.P2P)); err != nil {
			return o, loadError("p2p", err)
		}
		o.P2PFile = f.P2P
	}
	o.Ext = f.extFinder(f.Given)
	o.Tune = tune.Options{
		Bench: allreduce.Options{Python: f.Python, WorldSize: ws, Warmup: f.Warmup, Inner: f.Inner,
			Reps: f.Reps, Timeout: f.Timeout, NCCLDebug: true, Layouts: layouts},
		Sizes: sizes, Modes: modes, Verify: verify, Version: arpatchVersion(), Variants: variants,
	}
	if layouts != nil {
		o.Tune.IslandsFrom = "from --islands"
	}
	if o.Ext.Src != "" && o.Ext.Ext == "" {
		o.Tune.Rebuild = shellq.Join(append([]string{"arpatch", "build", "--allreduce-ext", "--src", o.Ext.Src}, o.Ext.buildArgs(false)...))
	}
	return o, nil
}

// tuneAllreduceRun tunes on this host, prints the choice and writes the
// env file and the JSON report; a wrong sum, a hang or an extension that
// takes a bad threshold is a failure (exit 1).
func tuneAllreduceRun(ctx context.Context, to tuneAllreduceOptions, s streams) (err error) {
	o := to.Tune
	if err := checkTorch(ctx, o.Bench.Python, o.Bench.Env); err != nil {
		return err
	}
	ext, err := to.Ext.find(ctx)
	if err != nil {
		return err
	}
	o.Bench.Ext = ext
	o.Host = discoverHost(ctx)
	if o.Bench.Layouts == nil {
		var is allreduce.Islands
		is, o.IslandsFrom = hostIslands(ctx, o.Bench.WorldSize)
		o.Bench.Layouts = []allreduce.Islands{is}
	}
	o.Progress = func(msg string) { fmt.Fprintln(s.Err, msg+"...") }
	var endProgress func()
	o.Bench.Progress, endProgress = caseProgress(s.Err)
	if to.Log != "" {
		lw, closeLog, lerr := openLog(to.Log)
		if lerr != nil {
			return lerr
		}
		defer closeLog(&err) // err: the result, not a shadow
		o.Bench.Log = lw
	}
	// The ranks' GPUs, as the probe sees them: whether NVLink joins them
	// all (NCCL's LL128 rule), and the model's expect: line.
	gpus, topo, gerr := visibleGPUs(ctx)
	known := gerr == nil && topo != nil && len(gpus) >= o.Bench.WorldSize && len(topo.GPUs) >= o.Bench.WorldSize
	if known {
		o.NVLink = topo.Sub(topo.GPUs[:o.Bench.WorldSize]).FullNVLink()
	}
	res, err := tune.Run(ctx, o)
	endProgress()
	if err != nil {
		return err
	}
	if known {
		names := topo.GPUs[:o.Bench.WorldSize]
		res.Expect = doctor.ModelExpectation(gpus[:o.Bench.WorldSize], topo.Sub(names), to.P2P, to.P2PFile)
	}
	if res.File != nil {
		res.File.Command = commandLine(os.Args)
	}
	res.Write(s.Out)
	if to.JSON != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := safefs.WriteFile(to.JSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if out := to.Out; res.File != nil {
		if err := safefs.WriteFile(out, res.File.Format(), 0o644); err != nil {
			return err
		}
		// Not a command to run as is: bench needs its server flags too.
		fmt.Fprintf(s.Out, "wrote %s: add --tune %s to arpatch bench (beside its server flags: --model and --draft-model, --launch-cmd or --url) or to arpatch apply (to print the runtime environment), or set nightly's [bench] tune\n", out, shellq.Join([]string{out}))
	}
	if res.Interrupted {
		return exitWith(exitInfra, "interrupted: the ranks were stopped; no tune file was written; the runs above are the ones that finished")
	}
	if res.Failed() {
		return exitWith(exitFailure, "")
	}
	return nil
}

// discoverHost reads this machine's hostname and its GPUs and driver from
// nvidia-smi; what cannot be read stays empty.
func discoverHost(ctx context.Context) tune.Host {
	var h tune.Host
	h.Name, _ = os.Hostname()
	if out, err := doctor.ExecRunner(os.Environ())(ctx, "nvidia-smi", "--query-gpu="+nvsmi.QueryGPUFields, "--format=csv"); err == nil {
		if gpus, err := nvsmi.ParseQueryGPU(out); err == nil && len(gpus) > 0 {
			h.GPUModel, h.GPUCount, h.Driver = gpus[0].Name, len(gpus), gpus[0].Driver
		}
	}
	return h
}

// commandLine is argv as a shell would read it back, starting "arpatch".
func commandLine(argv []string) string {
	return shellq.Join(append([]string{"arpatch"}, argv[1:]...))
}

// flags are --tune and --force-tune, writing into t, for the commands
// that take a tune file; what says what the file is for.
func (t *tuneFlags) flags(what string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tune", Destination: &t.Tune, Usage: "thresholds `FILE` from arpatch tune allreduce, " + what},
		&cli.BoolFlag{Name: "force-tune", Destination: &t.ForceTune, Usage: "use --tune's file even when it was made on another host"},
	}
}

// tuneFlags are --tune's file ("" without it) and --force-tune.
type tuneFlags struct {
	Tune      string
	ForceTune bool
}

// tunedRecipe returns r with the thresholds of t's file in its [env] (when
// it opens the PCIe gate; tuned reports it), for the runtime environment
// apply prints; r itself without a file. The file is checked against this
// host first (t.ForceTune overrides); a file made elsewhere is refused with
// the command that tunes src's tree here. It prints the tune to w.
func tunedRecipe(ctx context.Context, r *recipes.Recipe, t tuneFlags, src string, w io.Writer) (out *recipes.Recipe, tuned bool, err error) {
	if t.Tune == "" {
		return r, false, nil
	}
	f, err := loadTune(ctx, t.Tune, r.Bench.TP, t.ForceTune, tune.BenchSizes(r.Bench.SpeculativeNumDraftTokens), w,
		"--src", src)
	if err != nil {
		return nil, false, err
	}
	rc := *r
	rc.Env, tuned = tunedEnv(r.Env, f.Thresholds)
	return &rc, tuned, nil
}

// tunedEnv returns a copy of env with t's variables in it when env opens
// the PCIe gate (tuned), else env itself: the runtime environment apply
// prints is the patched server's. It is bench.TuneArms on one arm.
func tunedEnv(env map[string]string, t tune.Thresholds) (out map[string]string, tuned bool) {
	arm := []bench.Arm{{Env: env}}
	if set := bench.TuneArms(arm, t); len(set) == 0 || !set[0].PCIe {
		return env, false
	}
	return arm[0].Env, true
}

// loadTune reads a tune file and checks it was made on this host at world
// size ws (0: not checked); force turns another host into a warning. It
// prints the warnings and the dispatch per size to w. A file made on
// another host is refused with the command that tunes here, writing path,
// from this command's inputs (e.g. "--src", "sglang").
func loadTune(ctx context.Context, path string, ws int, force bool, sizes []int, w io.Writer, inputs ...string) (*tune.File, error) {
	f, err := tune.Load(path)
	var pe *os.PathError
	switch {
	case errors.As(err, &pe):
		return nil, usagef("--tune: %w", err) // a file the invocation names, missing: exit 2
	case err != nil:
		return nil, usageError{err} // malformed (its errors name file and line): exit 2
	}
	warnings, err := f.Check(path, discoverHost(ctx), ws, force)
	var he *tune.HostError
	var ie *tune.IslandsError
	switch {
	case errors.As(err, &he):
		rws := ws
		if rws == 0 {
			rws = f.WorldSize
		}
		he.Command = tune.RetuneCommand(path, rws, inputs...)
	case errors.As(err, &ie):
		ie.Command = tune.RetuneCommand(path, ws, inputs...)
	}
	if err != nil {
		return nil, err
	}
	for _, x := range warnings {
		fmt.Fprintln(w, "warning: "+x)
	}
	if ws == 0 {
		ws = f.WorldSize
	}
	fmt.Fprintf(w, "tune %s (%s, %s, world size %d): %s\n  dispatch per size at world size %d: %s\n", path, f.Host.Name, f.Date.Format("2006-01-02"), f.WorldSize,
		f.Thresholds, ws, strings.Join(tune.Dispatch(f.Thresholds, ws, sizes), ", "))
	return f, nil
}

// applyTune loads the tune file t names, checks its host (t.ForceTune
// overrides) and sets its variables in the arms (bench.TuneArms: the pcie
// series' where the PCIe gate is open, the NCCL variant's in every arm),
// printing what it did to w; nil without a file. A file made on
// another host is refused with the command that tunes here, repeating
// inputs (e.g. "--ext", PATH).
func applyTune(ctx context.Context, o *bench.Options, t tuneFlags, inputs []string, w io.Writer) (*tune.File, error) {
	if t.Tune == "" {
		return nil, nil
	}
	f, err := loadTune(ctx, t.Tune, o.TP, t.ForceTune, tune.BenchSizes(o.SpecDraftTokens), w, inputs...)
	if err != nil {
		return nil, err
	}
	for _, a := range bench.TuneArms(o.Arms, f.Thresholds) {
		fmt.Fprintf(w, "  arm %s: %s\n", a.Name, strings.Join(a.Env, " "))
	}
	return f, nil
}

// skipTunedPreflight reports (and says on w) when a tune keeps NCCL at
// every size, so the preflight has no custom allreduce to check.
func skipTunedPreflight(w io.Writer, f *tune.File) bool {
	if f == nil || f.Thresholds.MaxBytes > 0 {
		return false
	}
	fmt.Fprintln(w, "preflight: the tune keeps NCCL at every size; no custom allreduce to check")
	return true
}

// tunePreflight makes the preflight run what the tuned dispatch runs:
// NCCL and custom-auto through the PCIe branch under the tune's
// thresholds, at the serving sizes it sends to custom allreduce (the
// verify size among them when it does), and prints the algorithm per size.
func tunePreflight(f *tune.File, ao *allreduce.Options, v allreduce.Verify, w io.Writer) {
	if f == nil {
		return
	}
	var sizes []int
	for _, n := range append(tune.ServingSizes(v.Shape.Hidden, v.Shape.Tokens), v.Bytes) {
		if f.Thresholds.Algorithm(ao.WorldSize, n) != allreduce.NCCL && !slices.Contains(sizes, n) {
			sizes = append(sizes, n)
		}
	}
	slices.Sort(sizes)
	ao.Sizes, ao.Impls = sizes, []string{allreduce.NCCL, allreduce.CustomAuto}
	ao.Env = append(os.Environ(), f.Thresholds.Env()...)
	fmt.Fprintf(w, "preflight under the tune: %s\n", strings.Join(tune.Dispatch(f.Thresholds, ao.WorldSize, sizes), ", "))
}

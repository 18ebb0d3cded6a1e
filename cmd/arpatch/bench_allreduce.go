package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/textfmt"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/shellq"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/internal/listspec"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/kernels"
)

// newCmdBenchAllreduce is bench allreduce, running its options with runF (benchAllreduceRun).
func newCmdBenchAllreduce(runF func(context.Context, benchAllreduceOptions, streams) error) *cli.Command {
	var f benchAllreduceFlags
	return &cli.Command{
		Name:  "allreduce",
		Usage: "measure NCCL against the patched custom allreduce, checking every sum",
		UsageText: fmt.Sprintf(`arpatch bench allreduce [--world-size N] [--sizes 4K..1M[,cap]] [--shape %s] [--count %d]
                        [--impl IMPLS] [--branches nvlink,pcie] [--modes eager,graph] [--dtype bf16,fp16,fp32]
                        [--islands LAYOUT|all]... [--nccl-variants all|none|NAMES]
                        (--ext PATH | --src DIR [--arch 90a]) [--json FILE]`, allreduce.VerifyShape.Spec(), allreduce.VerifyCount),
		Description: fmt.Sprintf(`Go starts bench.py on N ranks with torchrun. For each implementation, branch,
size, dtype and mode, every rank first checks the result is the exact sum over
ranks (a kernel that launched nothing shows as WRONG, never as fast), then
times eager loops and CUDA-graph-captured loops (as nccl-tests -G). Medians
and p10/p90 are in microseconds. NCCL runs with NCCL_DEBUG=INFO so the
transport it chose (P2P, SHM, NET), the knobs it took and its algorithm and
protocol per size are recorded; SHM or NET within one host is flagged. The
run is guarded by --timeout; a hang is reported with its case.

The implementations: nccl; custom-1stage and custom-2stage (upstream's pull
kernels, forced by SGLANG_CUSTOM_ALLREDUCE_ALGO); custom-push1, custom-push2
and custom-island (the pcie series' push kernels, forced by
SGLANG_PCIE_CUSTOM_AR_ALGO, on the PCIe branch only: n/a on the nvlink
branch); custom-auto (the kernel's own choice). An extension that takes
SGLANG_PCIE_CUSTOM_AR_ALGO=bogus at init_custom_ar predates the push kernels:
they are reported UNSUPPORTED, never timed, and the run fails. A size a push
kernel's scratch cannot hold is n/a; "cap" in --sizes adds each
implementation's largest size that fits.

--islands sets SGLANG_PCIE_CUSTOM_AR_ISLANDS: ranks joined by ',' and islands
by '/' (0,1,2,3/4,5,6,7), islands of equal size; repeat it for several
layouts, or give "all" (every consecutive and strided layout the world size
allows): custom-island and custom-auto run once per layout, the other push
kernels with the first. Without it the islands come from the host's
topology (GPUs joined by anything but SYS in nvidia-smi topo -m share an
island; unequal islands, an unknown topology or more ranks than GPUs: one
island).

--nccl-variants runs NCCL again under its knobs, each in a torchrun of its
own and at the sizes where it can win (LL, LL128, Simple: NCCL_PROTO; Ring,
Tree: NCCL_ALGO; ch2, ch16: NCCL_MAX_NCHANNELS=2, NCCL_MIN_NCHANNELS=16;
buff1M: NCCL_BUFFSIZE=1048576; P2P-SYS: NCCL_P2P_LEVEL=SYS, only when NCCL
used SHM or NET), every sum checked; every speed-up then compares with the
fastest correct NCCL at that size and names it. A variant that is wrong,
fails, hangs or runs out of memory is reported and never used as a baseline;
it does not fail the run.

The verify shape (--shape, default %s) is
always measured, and the predicted allreduce time of one EAGLE-3 verify pass
is --count (default %d) x its latency.

"pcie" initializes custom allreduce with full_nvlink=false, "nvlink" with
true. The kernel's PCIe branch is reached only above world size 2; a world
size above the GPU count runs ranks two to a GPU, over gloo, to check
correctness there (no timings, no NCCL).

It exits 1 when any case is WRONG, hangs (--timeout) or errors; 4 when
interrupted (SIGINT, SIGTERM, SIGHUP): the table and --json hold the cases
that finished, the rest were not run.

Examples:
   arpatch bench allreduce --world-size 2 --ext arpatch_custom_ar.so                # the .so build --allreduce-ext printed
   arpatch bench allreduce --world-size 8 --src sglang --arch 120a --json allreduce.json
   arpatch bench allreduce --world-size 4 --impl custom-auto --branches pcie --modes eager --src sglang --arch 90a
   arpatch bench allreduce --world-size 8 --impl custom-push1,custom-push2,custom-island,custom-auto --branches pcie --sizes 4K,40K,1M,cap --dtype bf16,fp16,fp32 --islands all --src sglang --arch 90a`, allreduce.VerifyShape, allreduce.VerifyCount),
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "world-size", Destination: &f.WorldSize, Usage: "ranks `N` (one per GPU up to the GPU count)", Value: 2},
			&cli.StringFlag{Name: "sizes", Destination: &f.Sizes, Usage: "`SIZES` in bytes: list and ranges of powers of two, and cap (each implementation's largest)", Value: "4K..1M"},
			&cli.StringFlag{Name: "shape", Destination: &f.Shape, Usage: "verify-pass allreduce `TOKENSxHIDDEN` (bf16)", Value: allreduce.VerifyShape.Spec()},
			&cli.IntFlag{Name: "count", Destination: &f.Count, Usage: "allreduces `N` per EAGLE-3 verify pass", Value: allreduce.VerifyCount},
			&cli.StringFlag{Name: "impl", Destination: &f.Impl, Usage: "`IMPLS` to run", Value: strings.Join(allreduce.KnownImpls, ",")},
			&cli.StringFlag{Name: "branches", Destination: &f.Branches, Usage: "custom allreduce `BRANCHES`: nvlink (full_nvlink=true), pcie (false)", Value: "nvlink,pcie"},
			&cli.StringFlag{Name: "modes", Destination: &f.Modes, Usage: "`MODES`: eager, graph (CUDA-graph-captured loops)", Value: "eager,graph"},
			&cli.StringFlag{Name: "dtype", Destination: &f.DType, Usage: "element `TYPES`: bf16, fp16, fp32", Value: allreduce.BF16},
			&cli.BoolFlag{Name: "nccl-debug", Destination: &f.NCCLDebug, Usage: "record NCCL's transport (NCCL_DEBUG=INFO)", Value: true},
			&cli.StringFlag{Name: "json", Destination: &f.JSON, Usage: "write the report to `FILE`"},
		}, f.allreduceRunValues.flags("islands of ranks for the PCIe branch, `LAYOUT` as 0,1,2,3/4,5,6,7, or all; repeat for several")...),
		Before: noArgs,
		Action: act(&f, benchAllreduceOpts, runF),
	}
}

// benchAllreduceFlags are bench allreduce's parsed flags.
type benchAllreduceFlags struct {
	WorldSize int
	Sizes     string
	Shape     string
	Count     int
	Impl      string
	Branches  string
	Modes     string
	DType     string
	NCCLDebug bool
	JSON      string
	allreduceRunValues
	cmdline
}

// benchAllreduceOptions are every input of benchAllreduceRun.
type benchAllreduceOptions struct {
	// Run is the run, but for Ext (found by Ext when a custom
	// implementation needs it) and Log.
	Run    allreduce.Options
	Verify allreduce.Verify
	Ext    extFinder
	// Variants are the NCCL variants to run after the run.
	Variants []allreduce.NCCLVariant
	// Log is the ranks' output file, JSON the report's ("": none).
	Log, JSON string
}

// benchAllreduceOpts turns bench allreduce's flags into options, refusing
// a size, shape, implementation, branch, mode, count or world size that
// bench.py cannot run.
func benchAllreduceOpts(f benchAllreduceFlags) (benchAllreduceOptions, error) {
	var o benchAllreduceOptions
	if _, _, err := allreduce.ParseSizesCap(f.Sizes); err != nil {
		return o, usagef("--sizes: %w", err)
	}
	shape, err := allreduce.ParseShape(f.Shape)
	if err != nil {
		return o, usagef("--shape: %w", err)
	}
	verify := allreduce.Verify{Count: f.Count, Shape: shape, Bytes: (shape.Bytes() + 15) / 16 * 16}
	sizes, capped, err := allreduce.ParseSizesCap(f.Sizes + "," + fmt.Sprint(verify.Bytes))
	if err != nil { // both parts parsed alone: not reached
		return o, usagef("--sizes with --shape %s: %w", f.Shape, err)
	}
	impls, err := allreduceImpls(f.Impl)
	if err != nil {
		return o, err
	}
	if f.Count < 1 {
		return o, usagef("--count %d: use 1 or more", f.Count)
	}
	if err := f.check(); err != nil {
		return o, err
	}
	branches, err := allreduceBranches(f.Branches)
	if err != nil {
		return o, err
	}
	modes, err := splitList("modes", f.Modes)
	if err != nil {
		return o, err
	}
	if err := allreduce.ModesError(modes); err != nil {
		return o, usagef("--modes %w", err)
	}
	if len(impls) == 0 {
		return o, usagef("--impl is empty: use %s", strings.Join(allreduce.KnownImpls, ", "))
	}
	if err := checkWorldSize(f.WorldSize); err != nil {
		return o, err
	}
	dtypes, err := splitList("dtype", f.DType)
	if err != nil {
		return o, err
	}
	if err := allreduce.DTypesError(dtypes); err != nil {
		return o, usagef("--dtype %w", err)
	}
	layouts, err := f.layouts(f.WorldSize)
	if err != nil {
		return o, err
	}
	if o.Variants, err = f.variants(); err != nil {
		return o, err
	}
	if !slices.Contains(impls, allreduce.NCCL) {
		o.Variants = nil
	}
	o.Run = allreduce.Options{
		Python: f.Python, WorldSize: f.WorldSize, Sizes: sizes, Cap: capped, Impls: impls,
		Branches: branches, Modes: modes, DTypes: dtypes, Layouts: layouts,
		Warmup: f.Warmup, Inner: f.Inner, Reps: f.Reps, Timeout: f.Timeout, NCCLDebug: f.NCCLDebug,
	}
	o.Verify, o.Ext, o.Log, o.JSON = verify, f.extFinder(f.Given), expandHome(f.Log), expandHome(f.JSON)
	if err := checkOutputs(outFile{flag: "json", path: o.JSON}, outFile{flag: "log", path: o.Log}); err != nil {
		return o, err
	}
	return o, nil
}

// checkWorldSize refuses a --world-size custom allreduce does not support.
func checkWorldSize(ws int) error {
	if err := bounds.WorldSizeError(ws); err != nil {
		return usagef("--world-size %w", err)
	}
	return nil
}

// benchAllreduceRun runs bench.py, prints the table and writes the JSON
// report; a WRONG, hung or failed case is a failure (exit 1), an
// interrupted run infrastructure (exit 4), with the cases that finished.
func benchAllreduceRun(ctx context.Context, o benchAllreduceOptions, s streams) (err error) {
	opts := o.Run
	if err := checkTorch(ctx, opts.Python, opts.Env); err != nil {
		return err
	}
	needsExt := false
	for _, i := range opts.Impls {
		needsExt = needsExt || strings.HasPrefix(i, "custom")
	}
	if needsExt {
		if opts.Ext, err = o.Ext.find(ctx); err != nil {
			return err
		}
	}
	if o.Log != "" {
		lw, closeLog, lerr := openLog(o.Log)
		if lerr != nil {
			return lerr
		}
		defer closeLog(&err) // err: the result, not a shadow
		opts.Log = lw
	}
	islandsFrom := "from --islands"
	if opts.Layouts == nil && needsExt {
		var is allreduce.Islands
		is, islandsFrom = hostIslands(ctx, opts.WorldSize)
		opts.Layouts = []allreduce.Islands{is}
	}
	opts.NVLink = ranksOnNVLink(ctx, opts.WorldSize)
	fmt.Fprintf(s.Err, "running %s on %d ranks (timeout %s)...\n", strings.Join(opts.Impls, ", "), opts.WorldSize, opts.Timeout)
	var endProgress func()
	opts.Progress, endProgress = caseProgress(s.Err)
	defer endProgress() // an error after a run left its count short
	run, err := allreduce.Execute(ctx, opts)
	if err != nil {
		return err
	}
	rep := allreduce.NewReport(opts, o.Verify, run, arpatchVersion())
	if opts.Layouts != nil {
		rep.IslandsFrom = islandsFrom
	}
	if len(o.Variants) > 0 && ctx.Err() == nil {
		fmt.Fprintf(s.Err, "running NCCL under %d variants, one torchrun each...\n", len(o.Variants))
		vs, skipped, err := allreduce.ExecuteVariants(ctx, opts, run, o.Variants)
		if err != nil {
			return err
		}
		rep.AddVariants(vs, skipped)
	}
	endProgress()
	rep.WriteTable(s.Out)
	if o.JSON != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := safefs.WriteFile(o.JSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if rep.Interrupted() {
		kept := "the table above holds"
		if o.JSON != "" {
			kept = "the table above and " + o.JSON + " hold"
		}
		return exitWith(exitInfra, fmt.Sprintf("interrupted: the ranks were stopped (torchrun's process group); %d of the cases asked for %s not run; %s the %s that finished", len(rep.Missing), textfmt.Word(len(rep.Missing), "was", "were"), kept, textfmt.Plural(len(run.Results), "case", "cases")))
	}
	if len(run.Results) == 0 {
		tail := run.Output
		if len(tail) > 30 {
			tail = tail[len(tail)-30:]
		}
		return fmt.Errorf("the benchmark produced no result (%s); last lines of its output:\n%s", run.Exit, strings.Join(tail, "\n"))
	}
	if rep.Failed() {
		return exitWith(exitFailure, "")
	}
	return nil
}

// extFinder finds the allreduce extension: --ext, or the cached build of
// --src's tree for --arch (Given: which of --src, --arch, --cache-dir and
// --python were given).
type extFinder struct {
	Ext, Src string
	Arch     []string
	CacheDir string
	Python   string
	Given    given
}

// find returns --ext, or the cached extension of --src for --arch.
func (e extFinder) find(ctx context.Context) (string, error) {
	if e.Ext != "" {
		if _, err := os.Stat(e.Ext); err != nil {
			return "", fmt.Errorf("--ext: %w", err)
		}
		return filepath.Abs(e.Ext)
	}
	src := e.Src
	if src == "" {
		return "", usagef("the custom implementations need the allreduce extension: pass --ext PATH, or --src DIR of a tree built with `arpatch build --allreduce-ext`")
	}
	if _, err := os.Stat(src); err != nil && !e.Given["src"] {
		// The default --src, as apply, status and build use it; absent,
		// the user has neither a checkout here nor said where one is.
		return "", usagef("the custom implementations need the allreduce extension, and there is no checkout at the default --src %s: pass --ext PATH, or --src DIR of a tree built with `arpatch build --allreduce-ext --src DIR`", src)
	}
	dir, err := cacheDirOf(e.CacheDir)
	if err != nil {
		return "", err
	}
	cache := kernels.Cache{Dir: dir}
	tries, err := e.archSets(src, cache)
	if err != nil {
		return "", err
	}
	var found []string
	var foundArchs []string
	for _, archs := range tries {
		plan, err := kernels.PlanExt(ctx, kernels.BuildOptions{Src: src, Archs: archs, Python: e.Python, Cache: cache})
		if err != nil {
			return "", err
		}
		m, err := cache.Lookup(plan.Key)
		if err != nil {
			return "", err
		}
		if m != nil {
			found = append(found, filepath.Join(cache.EntryDir(m.Key), m.Outputs[0].File))
			foundArchs = append(foundArchs, strings.Join(cudaarch.Strings(archs), ","))
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return "", usagef("the cache holds allreduce extensions of %s for several arch sets (%s); pick one with --arch", src, strings.Join(foundArchs, "; "))
	}
	// The build that makes it: for the same tree, archs (the recipe's
	// when --arch is not given), cache and interpreter.
	build := append([]string{"arpatch", "build", "--allreduce-ext", "--src", src}, e.buildArgs(true)...)
	if e.Given["python"] {
		build = append(build, "--python", e.Python)
	}
	return "", fmt.Errorf("no allreduce extension of %s matching its tree and this toolchain in the cache %s; build it: `%s`",
		src, cache.Dir, shellq.Join(build))
}

// allreduceImpls splits --impl, refusing an implementation bench.py does
// not know.
func allreduceImpls(list string) ([]string, error) {
	impls, err := splitList("impl", list)
	if err != nil {
		return nil, err
	}
	for _, i := range impls {
		if !slices.Contains(allreduce.KnownImpls, i) {
			return nil, usagef("--impl %q: known implementations are %s", i, strings.Join(allreduce.KnownImpls, ", "))
		}
	}
	return impls, nil
}

// allreduceBranches splits --branches: nvlink, pcie or both.
func allreduceBranches(list string) ([]string, error) {
	branches, err := splitList("branches", list)
	if err != nil {
		return nil, err
	}
	if len(branches) == 0 {
		return nil, usagef("--branches is empty: use nvlink, pcie")
	}
	for _, b := range branches {
		if b != "nvlink" && b != "pcie" {
			return nil, usagef("--branches %q: use nvlink, pcie", b)
		}
	}
	return branches, nil
}

// archSets are the arch sets to look the extension up for: --arch's when
// given, else every set an extension was built for at src's applied
// commit in cache (the plan tells which match the tree and toolchain).
func (e extFinder) archSets(src string, cache kernels.Cache) ([][]cudaarch.Arch, error) {
	var tries [][]cudaarch.Arch
	if e.Given["arch"] {
		archs, err := cudaarch.Parse(e.Arch)
		if err != nil {
			return nil, usagef("--arch: %w", err)
		}
		tries = append(tries, archs)
	} else {
		st, err := checkout.Status(src, nil)
		if err != nil {
			return nil, err
		}
		if st.State == nil {
			return nil, fmt.Errorf("%s has no apply state; %s, then `%s`", src, checkout.ApplyFirst(src), shellq.Join([]string{"arpatch", "build", "--allreduce-ext", "--src", src}))
		}
		ents, _ := cache.List()
		seen := map[string]bool{}
		for _, en := range ents {
			if en.Err != nil || en.Manifest.Inputs.Kind != kernels.KindAllreduceExt || en.Manifest.Inputs.Commit != st.State.Commit {
				continue
			}
			k := strings.Join(en.Manifest.Inputs.Archs, ",")
			if archs, err := cudaarch.Parse(en.Manifest.Inputs.Archs); err == nil && !seen[k] {
				seen[k] = true
				tries = append(tries, archs)
			}
		}
	}
	return tries, nil
}

// buildArgs repeats --arch and --cache-dir as given, for a printed arpatch
// build command; the cache directory ~ expanded when expand.
func (e extFinder) buildArgs(expand bool) []string {
	var out []string
	if e.Given["arch"] {
		out = append(out, "--arch", strings.Join(e.Arch, ","))
	}
	if e.Given["cache-dir"] {
		d := e.CacheDir
		if expand {
			d = expandHome(d)
		}
		out = append(out, "--cache-dir", d)
	}
	return out
}

// splitList reads the comma-separated list a flag gives
// (listspec.Split): no items for an empty value, and a usage error naming
// the flag for an empty item ("eager,,graph").
func splitList(flag, s string) ([]string, error) {
	items, err := listspec.Split(s)
	if err != nil {
		return nil, usagef("--%s: %w", flag, err)
	}
	return items, nil
}

// flags are the flags of a bench.py run that bench allreduce
// and tune allreduce share: the extension, the interpreter, the timeout,
// the batch counts, the log, the NCCL variants and --islands, whose usage
// islands is (bench compares layouts, tune measures one).
func (v *allreduceRunValues) flags(islands string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ext", Destination: &v.Ext, Usage: "allreduce extension `PATH` (.so) from arpatch build --allreduce-ext"},
		&cli.StringFlag{Name: "src", Destination: &v.Src, Usage: "find the extension of this patched checkout `DIR` in the build cache; not read when --ext is given", Value: "sglang"},
		&cli.StringSliceFlag{Name: "arch", Destination: &v.Arch, Usage: "with --src: the `ARCHS` the extension was built for (default: the one build of --src in the cache)"},
		&cli.StringFlag{Name: "cache-dir", Destination: &v.CacheDir, Usage: "build cache `DIR`"},
		&cli.StringFlag{Name: "python", Destination: &v.Python, Usage: "Python `INTERPRETER` with torch", Value: pyenv.Default},
		&cli.DurationFlag{Name: "timeout", Destination: &v.Timeout, Usage: "kill a run after `DURATION` and report the case in progress as a hang", Value: allreduce.DefaultTimeout},
		&cli.IntFlag{Name: "warmup", Destination: &v.Warmup, Usage: "untimed calls `N` per case", Value: allreduce.DefaultWarmup},
		&cli.IntFlag{Name: "inner", Destination: &v.Inner, Usage: "allreduces `N` per timed batch or graph", Value: allreduce.DefaultInner},
		&cli.IntFlag{Name: "reps", Destination: &v.Reps, Usage: "timed batches `N` per case", Value: allreduce.DefaultReps},
		&cli.StringFlag{Name: "log", Destination: &v.Log, Usage: "write the ranks' output to `FILE`"},
		&cli.GenericFlag{Name: "islands", Value: &v.Islands, Usage: islands, DefaultText: "from the host topology"},
		&cli.StringFlag{Name: "nccl-variants", Destination: &v.NCCLVariants, Usage: "NCCL variants `NAMES` to run besides NCCL as the environment leaves it: all, none, or " + strings.Join(allreduce.VariantNames()[2:], ", "), Value: "all"},
	}
}

// islandsFlag collects --islands values whole: urfave/cli would split a
// slice flag's value at every comma, and a layout holds commas.
type islandsFlag []string

func (a *islandsFlag) Set(v string) error { *a = append(*a, v); return nil }
func (a *islandsFlag) String() string     { return strings.Join(*a, " ") }
func (a *islandsFlag) Get() any           { return []string(*a) }

// layouts reads --islands for a group of ws ranks; nil without it (the
// host's topology decides, hostIslands).
func (v allreduceRunValues) layouts(ws int) ([]allreduce.Islands, error) {
	if len(v.Islands) == 0 {
		return nil, nil
	}
	ls, err := allreduce.ParseLayouts(v.Islands, ws)
	if err != nil {
		return nil, usagef("--islands %w", err)
	}
	return ls, nil
}

// variants reads --nccl-variants.
func (v allreduceRunValues) variants() ([]allreduce.NCCLVariant, error) {
	names, err := splitList("nccl-variants", v.NCCLVariants)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, usagef("--nccl-variants is empty: use all, none, or names among %s", strings.Join(allreduce.VariantNames()[2:], ", "))
	}
	vs, err := allreduce.ParseVariants(names)
	if err != nil {
		return nil, usagef("--nccl-variants %w", err)
	}
	return vs, nil
}

// hostIslands reads this host's islands for a group of ws ranks from
// nvidia-smi (the GPUs CUDA_VISIBLE_DEVICES leaves, in CUDA's order, and
// topo -m), as the pcie series' 0002 does from NVML; why says how, or why
// one island.
func hostIslands(ctx context.Context, ws int) (allreduce.Islands, string) {
	gpus, topo, err := visibleGPUs(ctx)
	switch {
	case err != nil:
		return allreduce.OneIsland(ws), fmt.Sprintf("the host topology is unknown (%s): one island", textfmt.FirstLine(err.Error()))
	case topo == nil:
		return allreduce.OneIsland(ws), "the host topology is unknown (nvidia-smi topo -m could not be read): one island"
	}
	idx := make([]int, len(gpus))
	for i, g := range gpus {
		idx[i] = g.Index
	}
	return allreduce.HostIslands(topo, idx, ws)
}

// allreduceRunValues are the values of a bench.py run's flags (flags).
type allreduceRunValues struct {
	Ext      string
	Src      string
	Arch     cli.StringSlice
	CacheDir string
	Python   string
	Timeout  time.Duration
	Warmup   int
	Inner    int
	Reps     int
	Log      string
	Islands  islandsFlag
	// NCCLVariants is --nccl-variants, a list.
	NCCLVariants string
}

// check refuses batch counts and a timeout bench.py cannot use, and an
// --ext that names no file.
func (v allreduceRunValues) check() error {
	for _, chk := range []struct {
		flag  string
		val   int
		least int
	}{{"inner", v.Inner, 1}, {"reps", v.Reps, 1}, {"warmup", v.Warmup, 0}} {
		if chk.val < chk.least {
			return usagef("--%s %d: use %d or more", chk.flag, chk.val, chk.least)
		}
	}
	if v.Timeout <= 0 {
		return usagef("--timeout %s: use a positive duration, e.g. 10m", v.Timeout)
	}
	if v.Ext != "" {
		return checkPathFlag("ext", expandHome(v.Ext), false)
	}
	return nil
}

// extFinder returns the finder of the extension these flags name (g: the
// flags given).
func (v allreduceRunValues) extFinder(g given) extFinder {
	return extFinder{Ext: expandHome(v.Ext), Src: expandHome(v.Src), Arch: v.Arch.Value(), CacheDir: v.CacheDir, Python: v.Python, Given: g}
}

// ranksOnNVLink reports whether NVLink joins every one of the first ws
// visible GPUs (nvidia-smi topo -m); false where that cannot be read. Off
// it no NVLink-only NCCL variant (LL128) is the baseline of a speed-up
// (allreduce.IsBaseline).
func ranksOnNVLink(ctx context.Context, ws int) bool {
	gpus, topo, err := visibleGPUs(ctx)
	return err == nil && topo != nil && len(gpus) >= ws && len(topo.GPUs) >= ws && topo.Sub(topo.GPUs[:ws]).FullNVLink()
}

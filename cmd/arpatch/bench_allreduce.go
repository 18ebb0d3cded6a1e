package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/internal/checkout"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/kernels"
)

func benchAllreduceCommand() *cli.Command {
	return &cli.Command{
		Name:  "allreduce",
		Usage: "measure NCCL against the patched custom allreduce, checking every sum",
		UsageText: `arpatch bench allreduce [--world-size N] [--sizes 4K..1M] [--shape 4x5120] [--count 122]
                        [--impl nccl,custom-1stage,custom-2stage,custom-auto] [--branches nvlink,pcie]
                        [--modes eager,graph] (--ext PATH | --src DIR [--arch 90a]) [--json FILE]`,
		Description: `Go starts bench.py on N ranks with torchrun. For each implementation, branch
and size, every rank first checks the result is the exact sum over ranks (a
kernel that launched nothing shows as WRONG, never as fast), then times eager
loops and CUDA-graph-captured loops (as nccl-tests -G). Medians and p10/p90
are in microseconds. NCCL runs with NCCL_DEBUG=INFO so the transport it chose
(P2P, SHM, NET) is recorded; SHM or NET within one host is flagged. The run
is guarded by --timeout; a hang is reported with its case.

The verify shape (--shape, default 4 tokens x hidden 5120 x bf16 = 40K) is
always measured, and the predicted allreduce time of one EAGLE-3 verify pass
is --count (default 122) x its latency.

"pcie" initializes custom allreduce with full_nvlink=false, "nvlink" with
true. The kernel's PCIe branch is reached only above world size 2; a world
size above the GPU count runs ranks two to a GPU, over gloo, to check
correctness there (no timings, no NCCL).

It exits 1 when any case is WRONG, hangs or errors.

Examples:
   arpatch bench allreduce --world-size 2 --ext arpatch_custom_ar.so                # the .so build --allreduce-ext printed
   arpatch bench allreduce --world-size 8 --src sglang --arch 120a --json allreduce.json
   arpatch bench allreduce --world-size 4 --impl custom-auto --branches pcie --modes eager --src sglang --arch 90a`,
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "world-size", Usage: "ranks `N` (one per GPU up to the GPU count)", Value: 2},
			&cli.StringFlag{Name: "sizes", Usage: "`SIZES` in bytes: list and ranges of powers of two", Value: "4K..1M"},
			&cli.StringFlag{Name: "shape", Usage: "verify-pass allreduce `TOKENSxHIDDEN` (bf16)", Value: "4x5120"},
			&cli.IntFlag{Name: "count", Usage: "allreduces `N` per EAGLE-3 verify pass", Value: 122},
			&cli.StringFlag{Name: "impl", Usage: "`IMPLS` to run", Value: strings.Join(allreduce.KnownImpls, ",")},
			&cli.StringFlag{Name: "branches", Usage: "custom allreduce `BRANCHES`: nvlink (full_nvlink=true), pcie (false)", Value: "nvlink,pcie"},
			&cli.StringFlag{Name: "modes", Usage: "`MODES`: eager, graph (CUDA-graph-captured loops)", Value: "eager,graph"},
			&cli.BoolFlag{Name: "nccl-debug", Usage: "record NCCL's transport (NCCL_DEBUG=INFO)", Value: true},
			&cli.StringFlag{Name: "json", Usage: "write the report to `FILE`"},
		}, allreduceRunFlags()...),
		Before: noArgs,
		Action: runBenchAllreduce,
	}
}

func runBenchAllreduce(c *cli.Context) error {
	sizes, err := allreduce.ParseSizes(c.String("sizes"))
	if err != nil {
		return usageError{err}
	}
	shape, err := allreduce.ParseShape(c.String("shape"))
	if err != nil {
		return usageError{err}
	}
	verify := allreduce.Verify{Count: c.Int("count"), Shape: shape, Bytes: (shape.Bytes() + 15) / 16 * 16}
	sizes, _ = allreduce.ParseSizes(c.String("sizes") + "," + fmt.Sprint(verify.Bytes))
	impls := splitList(c.String("impl"))
	for _, i := range impls {
		if !contains(allreduce.KnownImpls, i) {
			return usagef("--impl %q: known implementations are %s", i, strings.Join(allreduce.KnownImpls, ", "))
		}
	}
	if c.Int("count") < 1 {
		return usagef("--count %d: use 1 or more", c.Int("count"))
	}
	if err := checkRunFlags(c); err != nil {
		return err
	}
	for _, l := range []struct {
		flag  string
		known []string
	}{{"branches", []string{"nvlink", "pcie"}}, {"modes", []string{"eager", "graph"}}} {
		vals := splitList(c.String(l.flag))
		if len(vals) == 0 {
			return usagef("--%s is empty: use %s", l.flag, strings.Join(l.known, ", "))
		}
		for _, v := range vals {
			if !contains(l.known, v) {
				return usagef("--%s %q: use %s", l.flag, v, strings.Join(l.known, ", "))
			}
		}
	}
	if len(impls) == 0 {
		return usagef("--impl is empty: use %s", strings.Join(allreduce.KnownImpls, ", "))
	}
	ws := c.Int("world-size")
	if ws != 2 && ws != 4 && ws != 6 && ws != 8 {
		return usagef("--world-size %d: custom allreduce supports 2, 4, 6 and 8", ws)
	}
	opts := allreduce.Options{
		Python: c.String("python"), WorldSize: ws, Sizes: sizes, Impls: impls,
		Branches: splitList(c.String("branches")), Modes: splitList(c.String("modes")),
		Warmup: c.Int("warmup"), Inner: c.Int("inner"), Reps: c.Int("reps"), Timeout: c.Duration("timeout"), NCCLDebug: c.Bool("nccl-debug"),
	}
	needsExt := false
	for _, i := range impls {
		needsExt = needsExt || strings.HasPrefix(i, "custom")
	}
	if needsExt {
		if opts.Ext, err = findExt(c); err != nil {
			return err
		}
	}
	if p := pathFlag(c, "log"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		opts.Log = f
	}
	fmt.Fprintf(c.App.ErrWriter, "running %s on %d ranks (timeout %s)...\n", strings.Join(impls, ", "), ws, opts.Timeout)
	run, err := allreduce.Execute(c.Context, opts)
	if err != nil {
		return err
	}
	rep := allreduce.NewReport(opts, verify, run, arpatchVersion())
	rep.WriteTable(c.App.Writer)
	if p := pathFlag(c, "json"); p != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := safefs.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if len(run.Results) == 0 {
		tail := run.Output
		if len(tail) > 30 {
			tail = tail[len(tail)-30:]
		}
		return fmt.Errorf("the benchmark produced no result (%s); last lines of its output:\n%s", run.Exit, strings.Join(tail, "\n"))
	}
	if rep.Failed() {
		return cli.Exit("", exitFailure)
	}
	return nil
}

// findExt returns --ext, or the cached extension of --src for --arch.
func findExt(c *cli.Context) (string, error) {
	if p := pathFlag(c, "ext"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("--ext: %w", err)
		}
		return filepath.Abs(p)
	}
	src := pathFlag(c, "src")
	if src == "" {
		return "", usagef("the custom implementations need the allreduce extension: pass --ext PATH, or --src DIR of a tree built with `arpatch build --allreduce-ext`")
	}
	if _, err := os.Stat(src); err != nil && !c.IsSet("src") {
		// The default --src, as apply, status and build use it; absent,
		// the user has neither a checkout here nor said where one is.
		return "", usagef("the custom implementations need the allreduce extension, and there is no checkout at the default --src %s: pass --ext PATH, or --src DIR of a tree built with `arpatch build --allreduce-ext --src DIR`", src)
	}
	dir, err := cacheDir(c)
	if err != nil {
		return "", err
	}
	cache := kernels.Cache{Dir: dir}
	var tries [][]cudaarch.Arch
	if c.IsSet("arch") {
		archs, err := cudaarch.Parse(c.StringSlice("arch"))
		if err != nil {
			return "", usageError{err}
		}
		tries = append(tries, archs)
	} else {
		// Every arch set an extension was built for at this tree's commit;
		// the plan below tells which of them match the tree and toolchain.
		st, err := checkout.Status(src, nil)
		if err != nil {
			return "", err
		}
		if st.State == nil {
			return "", fmt.Errorf("%s has no apply state; %s, then `%s`", src, checkout.ApplyFirst(src), shellq.Join([]string{"arpatch", "build", "--allreduce-ext", "--src", src}))
		}
		ents, _ := cache.List()
		seen := map[string]bool{}
		for _, e := range ents {
			if e.Err != nil || e.Manifest.Inputs.Kind != "allreduce-ext" || e.Manifest.Inputs.Commit != st.State.Commit {
				continue
			}
			k := strings.Join(e.Manifest.Inputs.Archs, ",")
			if archs, err := cudaarch.Parse(e.Manifest.Inputs.Archs); err == nil && !seen[k] {
				seen[k] = true
				tries = append(tries, archs)
			}
		}
	}
	var found []string
	var foundArchs []string
	for _, archs := range tries {
		plan, err := kernels.PlanExt(c.Context, kernels.BuildOptions{Src: src, Archs: archs, Python: c.String("python"), Cache: cache})
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
	build := []string{"arpatch", "build", "--allreduce-ext", "--src", src}
	if c.IsSet("arch") {
		build = append(build, "--arch", strings.Join(c.StringSlice("arch"), ","))
	}
	if c.IsSet("cache-dir") {
		build = append(build, "--cache-dir", pathFlag(c, "cache-dir"))
	}
	if c.IsSet("python") {
		build = append(build, "--python", c.String("python"))
	}
	return "", fmt.Errorf("no allreduce extension of %s matching its tree and this toolchain in the cache %s; build it: `%s`",
		src, cache.Dir, shellq.Join(build))
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// allreduceRunFlags are the flags of a bench.py run that bench allreduce
// and tune allreduce share: the extension, the interpreter, the timeout,
// the batch counts and the log.
func allreduceRunFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ext", Usage: "allreduce extension `PATH` (.so) from arpatch build --allreduce-ext"},
		&cli.StringFlag{Name: "src", Usage: "find the extension of this patched checkout `DIR` in the build cache; not read when --ext is given", Value: "sglang"},
		&cli.StringSliceFlag{Name: "arch", Usage: "with --src: the `ARCHS` the extension was built for (default: the one build of --src in the cache)"},
		&cli.StringFlag{Name: "cache-dir", Usage: "build cache `DIR`"},
		&cli.StringFlag{Name: "python", Usage: "Python `INTERPRETER` with torch", Value: "python3"},
		&cli.DurationFlag{Name: "timeout", Usage: "kill a run after `DURATION` and report the case in progress as a hang", Value: 10 * time.Minute},
		&cli.IntFlag{Name: "warmup", Usage: "untimed calls `N` per case", Value: 10},
		&cli.IntFlag{Name: "inner", Usage: "allreduces `N` per timed batch or graph", Value: 20},
		&cli.IntFlag{Name: "reps", Usage: "timed batches `N` per case", Value: 30},
		&cli.StringFlag{Name: "log", Usage: "write the ranks' output to `FILE`"},
	}
}

// checkRunFlags refuses batch counts and a timeout bench.py cannot use.
func checkRunFlags(c *cli.Context) error {
	for _, chk := range []struct {
		flag  string
		val   int
		least int
	}{{"inner", c.Int("inner"), 1}, {"reps", c.Int("reps"), 1}, {"warmup", c.Int("warmup"), 0}} {
		if chk.val < chk.least {
			return usagef("--%s %d: use %d or more", chk.flag, chk.val, chk.least)
		}
	}
	if c.Duration("timeout") <= 0 {
		return usagef("--timeout %s: use a positive duration, e.g. 10m", c.Duration("timeout"))
	}
	return nil
}

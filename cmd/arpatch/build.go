package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/recipes"
)

// flags are build's flags for one tree, writing into v: the recipe, the
// checkout and the build settings (buildToolValues.flags).
func (v *buildFlagValues) flags() []cli.Flag {
	return slices.Concat(v.recipeFlags.flags(), []cli.Flag{srcFlag(&v.Src)}, v.buildToolValues.flags())
}

// flags are the build settings `arpatch build` and `arpatch ab build`
// share (ab build takes its recipes and trees from its own flags),
// writing into v.
func (v *buildToolValues) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "arch", Destination: &v.Arch, Usage: "CUDA `ARCHS` to compile, without sm_ (default: the recipe's [build] archs), e.g. --arch 120a,90a"},
		&cli.IntFlag{Name: "jobs", Destination: &v.Jobs, Usage: "parallel compile `N`: sets MAX_JOBS and CMAKE_BUILD_PARALLEL_LEVEL, and bounds SGL_KERNEL_COMPILE_THREADS; 0 = one per core", DefaultText: "the recipe's [build] jobs"},
		&cli.StringFlag{Name: "tool", Destination: &v.Tool, Usage: "wheel build frontend `auto|uv|pip` (default: the recipe's)"},
		&cli.BoolFlag{Name: "offline", Destination: &v.Offline, Usage: "refuse to download any FetchContent dependency"},
		&cli.StringFlag{Name: "deps-dir", Destination: &v.DepsDir, Usage: "the FetchContent dependencies, each as `DIR`/<name> (a clone at the pin or an unpacked archive) or DIR/<name>.tar.gz (the archive upstream's URL_HASH pins)"},
		&cli.StringFlag{Name: "python", Destination: &v.Python, Usage: "Python `INTERPRETER` of the serving environment (with torch)", Value: pyenv.Default},
		&cli.StringFlag{Name: "cache-dir", Destination: &v.CacheDir, Usage: "build cache `DIR` (default $ARPATCH_CACHE or ~/.cache/arpatch/builds)"},
		&cli.BoolFlag{Name: "plan", Destination: &v.Plan, Usage: "print the exact command, environment, archs and cache key; build nothing"},
		&cli.DurationFlag{Name: "lock-timeout", Destination: &v.LockTimeout, Value: kernels.DefaultLockWait, Usage: "how long to wait for another build that is using the fixed build path (builds of one kind share it); 0 refuses at once"},
	}
}

// newCmdBuild is build, running its options with runF (buildRun).
func newCmdBuild(runF func(context.Context, buildOptions, streams) error) *cli.Command {
	var f buildCmdFlags
	return &cli.Command{
		Name:  "build",
		Usage: "build sgl-kernel from a patched tree for the recipe's archs, cached by content",
		UsageText: `arpatch build [--recipe NAME] [--src DIR] [--arch 120a,90a] [--jobs N] [--tool auto|uv|pip]
              [--offline --deps-dir D] [--out DIR] [--python PY] [--cache-dir DIR] [--plan]
arpatch build --check [--src DIR] [--arch 120a,90a]
arpatch build --allreduce-ext [--src DIR] [--arch 90a] [--out DIR]
arpatch build [--allreduce-ext] --verify-reproducible [--src DIR] [--arch 90a]
arpatch build --list | --gc [--keep N]`,
		Description: `build drives upstream's own wheel build (uv build --wheel --no-build-isolation,
or pip wheel) in the tree's sgl-kernel project, found by what it holds:
DIR/sgl-kernel up to 2026-07-28, DIR/python/sglang/kernels/aot since (the
directory holding csrc/allreduce/custom_all_reduce.cu, CMakeLists.txt and a
scikit-build pyproject.toml named sglang-kernel). Upstream hard-codes its gencode list and
ignores TORCH_CUDA_ARCH_LIST, so arpatch runs nvcc through a launcher
(arpatch gencode-filter, set as CMAKE_CUDA_COMPILER_LAUNCHER) that keeps only
the requested archs; every arm of an A/B build gets the same one.

The toolchain is probed first, and the build refused with a remedy when it
cannot work (e.g. sm_120a with nvcc < 12.8, torch built for another CUDA major
than nvcc). The cache key is the sha256 of the upstream commit, the series and
patch hashes, the archs, the build environment and the toolchain versions; a
second build with the same key is a cache hit. Each entry holds the wheel,
manifest.json and build.log.

--check compiles only the project's csrc/allreduce/custom_all_reduce.cu,
compile-only, once per arch: a minute, not an hour.
--allreduce-ext builds a small torch extension of the patched allreduce
(with arpatch's binding) for arpatch bench allreduce.

Builds are reproducible: SOURCE_DATE_EPOCH is the upstream commit's time,
TZ=UTC, LC_ALL=C, and the compilers run in a fixed build path
(/tmp/arpatch-build/<id>, or under $ARPATCH_BUILD_ROOT) with prefix maps,
-frandom-seed and nvcc's --objdir-as-tempdir added by the launcher; the
wheel is normalised (sorted entries, fixed times and modes, RECORD
rewritten). --verify-reproducible rebuilds a cached entry from scratch, in
the same fixed build path (emptied, the project copied in again; the path
is part of what must match) with its outputs in a new temp directory, and
compares every output and object; it names what differs (files in the
wheel, ELF sections of a shared object or an object, a text diff) and
exits 1.

The full build downloads its dependencies at configure time unless
--deps-dir provides them (a clone at the pin, an unpacked archive, or the
.tar.gz whose SHA256 upstream's URL_HASH pins); --offline refuses any
download and prints the command that fetches each missing one.

Examples:
   arpatch build --plan
   arpatch build --arch 120a --jobs 32 --out dist/
   arpatch build --check --arch 120a,90a
   arpatch build --allreduce-ext --arch 90a
   arpatch build --verify-reproducible
   arpatch build --allreduce-ext --verify-reproducible --arch 90a
   arpatch build --offline --deps-dir ~/sgl-deps
   arpatch build --list`,
		Flags: append(f.buildFlagValues.flags(),
			&cli.StringFlag{Name: "out", Destination: &f.Out, Usage: "also place the built wheel (or .so) in `DIR`"},
			&cli.BoolFlag{Name: "check", Destination: &f.Check, Usage: "compile only the patched allreduce translation unit, once per arch"},
			&cli.BoolFlag{Name: "allreduce-ext", Destination: &f.AllreduceExt, Usage: "build the allreduce torch extension instead of the wheel"},
			&cli.BoolFlag{Name: "verify-reproducible", Destination: &f.VerifyReproducible, Usage: "rebuild the cached entry from scratch (outputs into a new temp directory; the same fixed build path, emptied and copied in again) and compare every output's and object's sha256 with it, naming the files, ELF sections or lines that differ; exit 1 on any difference"},
			&cli.BoolFlag{Name: "list", Destination: &f.List, Usage: "list the cache entries"},
			&cli.BoolFlag{Name: "gc", Destination: &f.GC, Usage: "remove cache entries beyond the newest --keep, damaged ones and stale temp dirs"},
			&cli.IntFlag{Name: "keep", Destination: &f.Keep, Usage: "entries --gc keeps", Value: 10},
		),
		Before: noArgs,
		Action: act(&f, buildOpts, runF),
	}
}

// buildFlagValues are the flags of buildFlags, which build and ab build
// share.
type buildFlagValues struct {
	recipeFlags
	Src string
	buildToolValues
}

// buildToolValues are the parsed build settings.
type buildToolValues struct {
	Arch                            cli.StringSlice
	Jobs                            int
	Tool, DepsDir, Python, CacheDir string
	Offline, Plan                   bool
	// LockTimeout is how long to wait for the fixed build path.
	LockTimeout time.Duration
}

// buildCmdFlags are build's parsed flags.
type buildCmdFlags struct {
	buildFlagValues
	Out                                               string
	Check, AllreduceExt, VerifyReproducible, List, GC bool
	Keep                                              int
	cmdline
}

// buildOptions are every input of buildRun.
type buildOptions struct {
	Build kernels.BuildOptions
	// The mode: at most one of Check, List, GC, Plan, Verify, except Plan
	// or Verify with Ext. None: build the wheel (the extension with Ext).
	Check, List, GC, Plan, Verify, Ext bool
	// Keep: the entries GC keeps.
	Keep int
}

// buildOpts turns build's flags and the recipe's [build] table into
// options, refusing exclusive modes and values out of range.
func buildOpts(f buildCmdFlags) (buildOptions, error) {
	modes := 0
	for _, m := range []bool{f.Check, f.AllreduceExt, f.List, f.GC, f.Plan, f.VerifyReproducible} {
		if m {
			modes++
		}
	}
	if modes > 1 && !(f.AllreduceExt && modes == 2 && (f.Plan || f.VerifyReproducible)) {
		return buildOptions{}, usagef("--check, --allreduce-ext, --list, --gc, --plan and --verify-reproducible are exclusive (except --plan or --verify-reproducible with --allreduce-ext)")
	}
	if f.Keep < 0 {
		return buildOptions{}, usagef("--keep %d: use 0 or more (0 removes every entry)", f.Keep)
	}
	if f.Given["keep"] && !f.GC {
		return buildOptions{}, usagef("--keep goes with --gc")
	}
	r, err := buildRecipe(f.buildFlagValues, f.Given)
	if err != nil {
		return buildOptions{}, err
	}
	o, err := optsFromRecipe(f.buildFlagValues, f.Out, f.Given, r)
	if err != nil {
		return buildOptions{}, err
	}
	if err := checkOutputs(outFile{flag: "out", path: expandHome(f.Out), dir: true}); err != nil {
		return buildOptions{}, err
	}
	return buildOptions{Build: o, Check: f.Check, List: f.List, GC: f.GC, Plan: f.Plan, Verify: f.VerifyReproducible, Ext: f.AllreduceExt, Keep: f.Keep}, nil
}

// optsFromRecipe is r's [build] table with the command-line flags over it
// (g: the flags given), out the directory the wheel is copied to, through
// kernels.FromRecipe as nightly builds it; a --jobs, --tool or --arch out
// of range is a usage error.
func optsFromRecipe(f buildFlagValues, out string, g given, r *recipes.Recipe) (kernels.BuildOptions, error) {
	if g["jobs"] {
		// The recipe's build.jobs range (package bounds), as the recipe
		// checks it.
		if err := bounds.Check("jobs", int64(f.Jobs)); err != nil {
			return kernels.BuildOptions{}, usagef("--jobs %v (0 is one per CPU core)", err)
		}
	}
	if f.LockTimeout < 0 {
		return kernels.BuildOptions{}, usagef("--lock-timeout %s: use 0 (refuse at once) or a wait such as 30m", f.LockTimeout)
	}
	if g["tool"] && (f.Tool == "" || !recipes.ValidTool(recipes.Tool(f.Tool))) {
		return kernels.BuildOptions{}, usagef("--tool %q: use %s", f.Tool, recipes.ToolsText)
	}
	ov := kernels.BuildOverrides{Archs: f.Arch.Value(), Offline: f.Offline, CacheDir: expandHome(f.CacheDir),
		Src: expandHome(f.Src), Out: expandHome(out), Python: f.Python, Launcher: launcher(), Version: arpatchVersion(), LockWait: &f.LockTimeout}
	if g["jobs"] {
		ov.Jobs = &f.Jobs
	}
	if g["tool"] {
		ov.Tool = recipes.Tool(f.Tool)
	}
	if g["deps-dir"] {
		ov.DepsDir = expandHome(f.DepsDir)
	}
	o, err := kernels.FromRecipe(r.Build, ov)
	var se *kernels.SettingError
	switch {
	case errors.As(err, &se) && se.Setting == "archs":
		from := "--arch"
		if len(f.Arch.Value()) == 0 {
			from = "recipe " + r.Name + " [build] archs"
		}
		return o, usagef("%s: %w", from, se.Err)
	case err != nil:
		return o, usageError{err}
	}
	if g["deps-dir"] && !o.Offline {
		// Offline, a missing deps dir is refused by the build itself, in
		// one step: the mkdir and each dependency's fetch command.
		if err := kernels.CheckDepsDir(o.DepsDir); err != nil {
			return o, usageError{err}
		}
	}
	return o, nil
}

// buildRecipe returns the recipe whose [build] options apply: the one
// named by --recipe or --recipe-file, which must be the one applied to
// --src; without either, the recipe applied to --src (its build options
// belong to its patches), else the default.
func buildRecipe(f buildFlagValues, g given) (*recipes.Recipe, error) {
	src := expandHome(f.Src)
	explicit := g["recipe"] || f.RecipeFile != ""
	var applied string
	var st *checkout.State
	if rep, err := checkout.Status(src, nil); err == nil && rep.State != nil {
		st, applied = rep.State, rep.State.Recipe
	}
	if !explicit && st != nil {
		if r, err := recipes.Embedded(applied); err == nil && st.RecipeSHA256 == r.SHA256 {
			return r, nil
		}
		// Applied from a recipe file: use that file if it is unchanged.
		if rf := st.RecipeFile(); rf != "" {
			if r, err := recipes.File(rf); err == nil && r.SHA256 == st.RecipeSHA256 {
				return r, nil
			}
		}
		return nil, usagef("%s has recipe %q applied (from %s), which this arpatch cannot read back unchanged; pass the same recipe: --recipe-file PATH or --recipe NAME", src, applied, st.RecipeSource)
	}
	r, err := f.load(g)
	if err != nil {
		return nil, err
	}
	if explicit && st != nil {
		same := shellq.Join([]string{"--recipe", applied})
		if rf := st.RecipeFile(); rf != "" {
			same = shellq.Join([]string{"--recipe-file", rf})
		}
		want := []string{"--recipe", r.Name}
		if f.RecipeFile != "" {
			want = []string{"--recipe-file", f.RecipeFile}
		}
		if r.Upstream.Commit != st.Commit {
			want = append(want, "--commit", st.Commit)
		}
		switch {
		case applied != r.Name:
			return nil, usagef("%s has recipe %q applied, but the build names %q: the build options would not match the tree; pass %s, or apply %s first (`%s`, then `%s`)",
				src, applied, r.Name, same, r.Name, shellq.Join([]string{"arpatch", "revert", "--src", src}), shellq.Join(append([]string{"arpatch", "apply", "--src", src}, want...)))
		case f.RecipeFile != "" && r.SHA256 != st.RecipeSHA256:
			return nil, usagef("%s changed since it was applied to %s (sha256 %s, applied %s): revert and apply it again, or restore it", r.Source, src, digest.Short(r.SHA256), digest.Short(st.RecipeSHA256))
		}
	}
	return r, nil
}

// launcher returns the argv prefix that runs nvcc through arpatch's
// gencode filter: this binary, found the way it was started.
func launcher() []string {
	self, err := os.Executable()
	if filepath.Base(os.Args[0]) == "arpatch" {
		if p, lerr := exec.LookPath(os.Args[0]); lerr == nil {
			self, err = filepath.Abs(p)
		}
	}
	if err != nil {
		self = "arpatch"
	}
	return []string{self, "gencode-filter"}
}

// buildRun runs build's mode: list or gc the cache, check-compile the
// allreduce unit, print the plan, verify a cached build, or build.
func buildRun(ctx context.Context, bo buildOptions, s streams) error {
	o := bo.Build
	o.Log = s.Err
	w := s.Out
	var err error
	switch {
	case bo.List:
		return listCache(w, o.Cache)
	case bo.GC:
		removed, err := o.Cache.GC(bo.Keep)
		for _, p := range removed {
			fmt.Fprintf(w, "removed %s\n", p)
		}
		if err == nil {
			fmt.Fprintf(w, "gc: %d removed, newest %d kept in %s\n", len(removed), bo.Keep, o.Cache.Dir)
		}
		return err
	case bo.Check:
		return runCheck(ctx, o, w)
	}
	var plan *kernels.Plan
	if bo.Ext {
		plan, err = kernels.PlanExt(ctx, o)
	} else {
		plan, err = kernels.PlanBuild(ctx, o)
	}
	if err != nil {
		return err
	}
	if bo.Plan {
		printPlan(w, plan, o.Cache)
		if plan.Problems != nil {
			// The plan is printed; the exit code tells a script the build
			// would be refused.
			return exitWith(exitFailure, "")
		}
		return nil
	}
	if bo.Verify {
		rep, err := kernels.VerifyReproducible(ctx, plan, o, kernels.NewProgress(s.Err, "rebuild "+strings.Join(cudaarch.Strings(o.Archs), ",")))
		if err != nil {
			return err
		}
		return printVerify(w, rep)
	}
	res, err := kernels.Build(ctx, plan, o, kernels.NewProgress(s.Err, "sgl-kernel "+strings.Join(cudaarch.Strings(o.Archs), ",")))
	if err != nil {
		return err // kernels.ErrInterrupted: run() says interrupted, exit 4
	}
	m := res.Manifest
	if res.Hit {
		fmt.Fprintf(w, "cache hit %s (%s): built %s in %s; took %s now\n", digest.Short(res.Plan.Key), m.Inputs.Kind,
			m.FinishedAt.Format("2006-01-02 15:04 UTC"), time.Duration(m.BuildSeconds*float64(time.Second)).Round(time.Second), res.Elapsed.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "built %s in %s (cache key %s)\n", m.Inputs.Kind, time.Duration(m.BuildSeconds*float64(time.Second)).Round(time.Second), digest.Short(res.Plan.Key))
	}
	for _, out := range m.Outputs {
		fmt.Fprintf(w, "  %s  sha256 %s  %d bytes\n", filepath.Join(o.Cache.EntryDir(m.Key), out.File), digest.Short(out.SHA256), out.Bytes)
	}
	fmt.Fprintf(w, "  manifest %s\n", filepath.Join(o.Cache.EntryDir(m.Key), "manifest.json"))
	if res.Copied != "" {
		fmt.Fprintf(w, "  copied to %s\n", res.Copied)
	}
	return nil
}

// printVerify prints a --verify-reproducible report and returns the
// error (exit 1) that a difference is.
func printVerify(w io.Writer, rep *kernels.VerifyReport) error {
	fmt.Fprintf(w, "verify %s %s: rebuilt from scratch in %s, %s after the cached build\n", rep.Cached.Inputs.Kind, digest.Short(rep.Key),
		rep.Rebuilt.Dir, rep.Rebuilt.StartedAt.Sub(rep.Cached.FinishedAt).Round(time.Second))
	for _, s := range rep.Same {
		fmt.Fprintf(w, "  same     %s\n", s)
	}
	for _, d := range rep.Differences {
		fmt.Fprintf(w, "  DIFFERS  %s\n", d.File)
		if d.A != "" || d.B != "" {
			fmt.Fprintf(w, "           sha256 %s (cached) vs %s (rebuilt)\n", cmp.Or(digest.Short(d.A), "(none)"), cmp.Or(digest.Short(d.B), "(none)"))
		}
		for _, l := range strings.Split(d.Detail, "\n") {
			fmt.Fprintf(w, "           %s\n", l)
		}
	}
	if rep.Reproducible() {
		fmt.Fprintln(w, "reproducible: every output and object has the cached sha256")
		return nil
	}
	return fmt.Errorf("not reproducible: %d files differ from the cached build (the first is usually the cause); the rebuild's outputs are in %s", len(rep.Differences), rep.Kept)
}

func printPlan(w io.Writer, p *kernels.Plan, cache kernels.Cache) {
	st := p.State
	fmt.Fprintf(w, "build plan (%s)\n", p.Inputs.Kind)
	fmt.Fprintf(w, "  tree      %s at %s, series %s (%d patches)\n", p.Src, st.Commit, cmp.Or(st.Series, "(none)"), len(st.Patches))
	var sms, ups []string
	for _, a := range p.Archs {
		sms = append(sms, a.SM())
	}
	for _, a := range p.Upstream {
		ups = append(ups, a.SM())
	}
	fmt.Fprintf(w, "  archs     %s\n", strings.Join(sms, " "))
	for _, a := range p.Archs {
		fmt.Fprintf(w, "            %s\n", a.Gencode())
	}
	if len(ups) > 0 {
		fmt.Fprintf(w, "  upstream  compiles %s; the gencode filter drops all but the archs above\n", strings.Join(ups, " "))
	}
	fmt.Fprintf(w, "  project   %s (%s)\n", p.Project, p.Project.Name)
	fmt.Fprintf(w, "  dir       %s\n", p.Dir)
	tmp := cache.TempPattern(p.Key)
	fmt.Fprintf(w, "  command   %s\n", shellq.Join(p.Command(tmp)))
	fmt.Fprintln(w, "  env")
	for _, e := range p.EnvIn(tmp) {
		fmt.Fprintf(w, "    %s\n", shellq.AssignKV(e))
	}
	if len(p.Deps) > 0 {
		fmt.Fprintln(w, "  deps (FetchContent)")
		for _, d := range p.Deps {
			src := "download " + d.URL
			if d.Tag != "" {
				src += " @ " + d.Tag
			}
			if d.URLHash != "" {
				src += " (" + digest.Short(d.URLHash) + ")"
			}
			switch {
			case d.Archive != "" && d.URLHash != "":
				src = "archive " + d.Archive + " (" + digest.Short(d.Commit) + ", matches URL_HASH), unpacked into the build's temp dir"
			case d.Archive != "":
				src = "archive " + d.Archive + " (" + digest.Short(d.Commit) + "; no URL_HASH: pin " + cmp.Or(d.Pin(), "(none)") + " not checked), unpacked into the build's temp dir"
			case strings.HasPrefix(d.Commit, "sha256:"):
				src = "local " + d.Dir + ", not a git checkout: files " + digest.Short(d.Commit) + " (pin " + cmp.Or(d.Pin(), "(none)") + " not checked)"
			case d.Dir != "":
				src = "local " + d.Dir + " @ " + digest.Short(d.Commit)
			}
			fmt.Fprintf(w, "    %-22s %s\n", d.Name, src)
		}
	}
	tc := p.Toolchain
	fmt.Fprintf(w, "  toolchain nvcc %s, python %s, torch %s (CUDA %s), cmake %s, ninja %s, builder %s\n",
		cmp.Or(tc.NVCC.Version, "(none)"), cmp.Or(tc.Python.Version, "(none)"), cmp.Or(tc.Torch.Version, "(none)"), cmp.Or(tc.Torch.CUDA, "(none)"),
		cmp.Or(tc.CMake.Version, "(none)"), cmp.Or(tc.Ninja.Version, "(none)"), p.Inputs.Toolchain.Builder)
	state := "miss: would build"
	if m, err := cache.Lookup(p.Key); err != nil {
		state = "DAMAGED entry: " + err.Error()
	} else if m != nil {
		state = "hit: nothing to build"
	}
	fmt.Fprintf(w, "  cache key %s (%s)\n", p.Key, state)
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note      %s\n", n)
	}
	if p.Problems != nil {
		fmt.Fprintf(w, "  REFUSED   %s\n", strings.ReplaceAll(p.Problems.Error(), "\n", "\n            "))
	}
}

func runCheck(ctx context.Context, o kernels.BuildOptions, w io.Writer) error {
	results, tc, err := kernels.Check(ctx, kernels.CheckOptions{Src: o.Src, Archs: o.Archs, Python: o.Python})
	if err != nil {
		return err
	}
	tree := "a tree without apply state"
	if st, err := checkout.Status(o.Src, nil); err == nil && st.State != nil {
		tree = fmt.Sprintf("series %s at %s", cmp.Or(st.State.Series, "(none)"), githash.Hash(st.State.Commit).Short())
		if !st.Clean() || len(st.Other) > 0 {
			tree += ", CHANGED since apply (arpatch status)"
		}
	}
	fmt.Fprintf(w, "check %s of %s (%s): nvcc %s, torch %s\n", results[0].TU, o.Src, tree, tc.NVCC.Version, tc.Torch.Version)
	failed := 0
	for _, r := range results {
		state := "ok"
		if !r.OK {
			state = "FAILED"
			failed++
		}
		fmt.Fprintf(w, "  %-8s %-6s %6.1fs\n", r.Arch.SM(), state, r.Seconds)
		for _, e := range r.Errors {
			fmt.Fprintf(w, "           %s\n", e)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d archs failed to compile %s", failed, len(results), results[0].TU)
	}
	return nil
}

func listCache(w io.Writer, cache kernels.Cache) error {
	ents, err := cache.List()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d entries in %s\n", len(ents), cache.Dir)
	for _, e := range ents {
		if e.Err != nil {
			fmt.Fprintf(w, "  %s  DAMAGED: %v\n", digest.Short(e.Key), e.Err)
			continue
		}
		in := e.Manifest.Inputs
		fmt.Fprintf(w, "  %s  %-13s %s  series %-13s archs %-10s %7.1f MB  %s\n", digest.Short(e.Key), in.Kind, githash.Hash(in.Commit).Short(), cmp.Or(in.Series, "(none)"),
			strings.Join(in.Archs, ","), float64(e.Bytes)/1e6, e.Manifest.FinishedAt.Format("2006-01-02 15:04"))
	}
	return nil
}

// newCmdGencodeFilter is the compiler launcher the wheel build runs nvcc
// and the host compiler through (kernels.Launch); it is not for users.
func newCmdGencodeFilter(runF func(context.Context, []string, streams) error) *cli.Command {
	var f gencodeFilterFlags
	return &cli.Command{
		Name:            "gencode-filter",
		Hidden:          true,
		SkipFlagParsing: true,
		Usage:           "run a compiler command keeping only the -gencode options of $" + kernels.GencodeEnv,
		Action:          act(&f, gencodeFilterOpts, runF),
	}
}

// gencodeFilterFlags is the compiler command, unparsed.
type gencodeFilterFlags struct{ cmdline }

// gencodeFilterOpts requires a compiler command.
func gencodeFilterOpts(f gencodeFilterFlags) ([]string, error) {
	if len(f.Args) == 0 {
		return nil, usagef("gencode-filter needs a compiler command")
	}
	return f.Args, nil
}

// gencodeFilterRun runs the compiler with the filtered -gencode options.
func gencodeFilterRun(_ context.Context, argv []string, _ streams) error { return kernels.Launch(argv) }

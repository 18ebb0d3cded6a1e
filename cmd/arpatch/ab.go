package main

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/progress"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/textfmt"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/recipes"
)

func newCmdAB() *cli.Command {
	return &cli.Command{
		Name:        "ab",
		Usage:       "reproducible A/B builds of two recipes",
		Subcommands: []*cli.Command{newCmdABBuild(abBuildRun)},
	}
}

// newCmdABBuild is ab build, running its options with runF (abBuildRun).
func newCmdABBuild(runF func(context.Context, abBuildOptions, streams) error) *cli.Command {
	var f abBuildFlags
	return &cli.Command{
		Name:      "build",
		Usage:     "check out one commit twice, apply recipe A and recipe B, build both with one toolchain",
		UsageText: "arpatch ab build --a NAME --b NAME [--a-file PATH] [--b-file PATH] [--dir DIR] [--repo URL|PATH] [--commit SHA] [build flags]",
		Description: `ab build makes DIR/a and DIR/b, two checkouts of the same pinned commit,
applies recipe A to the first and recipe B to the second, and plans both
builds. It refuses unless the two differ only in their patches: the same
commit, archs, builder, dependencies, build environment and toolchain
(--python-a and --python-b, if they point at different environments, are
refused here). Both are built through the cache, and DIR/ab-manifest.json
records the two arms and the inputs they share. Then it lists the files
whose bytes differ between the two builds (objects, files inside the
wheel, the wheel): a patch of one translation unit should change only
that unit's object and the files holding it; any other difference is
marked UNEXPLAINED (arpatch build --verify-reproducible finds its cause),
and ab build then exits 1: a reproducible A/B has no unexplained
difference. Units and patched files are named by their paths in the tree.

Examples:
   arpatch ab build --a baseline --b pcie --repo ~/mirrors/sglang.git
   arpatch ab build --a baseline --b pcie --repo ~/mirrors/sglang.git --arch 120a --plan`,
		Flags: append(f.buildToolValues.flags(),
			&cli.StringFlag{Name: "a", Destination: &f.A, Usage: "embedded recipe `NAME` for arm A", Value: "baseline"},
			&cli.StringFlag{Name: "b", Destination: &f.B, Usage: "embedded recipe `NAME` for arm B", Value: "pcie"},
			&cli.StringFlag{Name: "a-file", Destination: &f.AFile, Usage: "recipe `PATH` for arm A instead"},
			&cli.StringFlag{Name: "b-file", Destination: &f.BFile, Usage: "recipe `PATH` for arm B instead"},
			&cli.StringFlag{Name: "dir", Destination: &f.Dir, Usage: "`DIR` for the two checkouts and ab-manifest.json (default: ab/ in the state directory, $ARPATCH_STATE or ~/.local/state/arpatch)"},
			&cli.StringFlag{Name: "repo", Destination: &f.Repo, Usage: "clone from `URL|PATH` (e.g. a local mirror)"},
			&cli.StringFlag{Name: "commit", Destination: &f.Commit, Usage: "build this commit `SHA` in both arms instead of the recipes' pin"},
			&cli.StringFlag{Name: "python-a", Destination: &f.PythonA, Usage: "Python `INTERPRETER` for arm A only"},
			&cli.StringFlag{Name: "python-b", Destination: &f.PythonB, Usage: "Python `INTERPRETER` for arm B only"},
			patchesDirFlag(&f.PatchesDir),
		),
		Before: noArgs,
		Action: act(&f, abBuildOpts, runF),
	}
}

// abBuildFlags are ab build's parsed flags.
type abBuildFlags struct {
	buildToolValues
	A, B, AFile, BFile, Dir, Repo, Commit string
	PythonA, PythonB, PatchesDir          string
	cmdline
}

// abBuildOptions are every input of abBuildRun.
type abBuildOptions struct {
	AB kernels.ABOptions
	// Verify are the flags that the printed arpatch build
	// --verify-reproducible of an arm repeats, as given; Python is
	// --python when given, for an arm without its own.
	Verify []string
	Python string
}

// abBuildOpts turns ab build's flags into options: both arms' recipes,
// and one set of build options that their [build] tables agree on (or
// the flags decide).
func abBuildOpts(f abBuildFlags) (abBuildOptions, error) {
	load := func(flag, name, fileFlag, file string) (*recipes.Recipe, error) {
		if p := expandHome(file); p != "" {
			if f.Given[flag] {
				return nil, usagef("--%s and --%s are exclusive; pass one", flag, fileFlag)
			}
			return recipeFile(fileFlag, p)
		}
		r, err := recipes.Embedded(name)
		if err != nil {
			return nil, usagef("--%s: %w (or use --%s PATH)", flag, err, fileFlag)
		}
		return r, nil
	}
	a, err := load("a", f.A, "a-file", f.AFile)
	if err != nil {
		return abBuildOptions{}, err
	}
	b, err := load("b", f.B, "b-file", f.BFile)
	if err != nil {
		return abBuildOptions{}, err
	}
	// Both arms build with the same options: the recipes' [build]
	// tables must agree, or the flags decide.
	for _, d := range []struct {
		flag   string
		va, vb any
	}{{"tool", a.Build.Tool, b.Build.Tool}, {"jobs", a.Build.Jobs, b.Build.Jobs}, {"offline", a.Build.Offline, b.Build.Offline}, {"deps-dir", a.Build.DepsDir, b.Build.DepsDir}} {
		if fmt.Sprint(d.va) != fmt.Sprint(d.vb) && !f.Given[d.flag] {
			return abBuildOptions{}, usagef("recipe %s has [build] %s %q and recipe %s has %q; pass --%s to build both arms alike", a.Name, d.flag, fmt.Sprint(d.va), b.Name, fmt.Sprint(d.vb), d.flag)
		}
	}
	bo, err := optsFromRecipe(buildFlagValues{buildToolValues: f.buildToolValues}, "", f.Given, b)
	if err != nil {
		return abBuildOptions{}, err
	}
	if !f.Given["arch"] && fmt.Sprint(a.Build.Archs) != fmt.Sprint(b.Build.Archs) {
		return abBuildOptions{}, usagef("recipe %s builds %v and recipe %s builds %v; pass --arch to build both for the same archs", a.Name, a.Build.Archs, b.Name, b.Build.Archs)
	}
	if !f.Given["arch"] {
		if bo.Archs, err = cudaarch.Parse(a.Build.Archs); err != nil {
			return abBuildOptions{}, err
		}
	}
	cat, err := catalog(f.PatchesDir)
	if err != nil {
		return abBuildOptions{}, err
	}
	dir, err := stateDirFlag("dir", f.Dir, "ab")
	if err != nil {
		return abBuildOptions{}, err
	}
	// The flags an arm's arpatch build --verify-reproducible repeats.
	var verify []string
	for _, fl := range []struct{ name, v string }{{"arch", strings.Join(f.Arch.Value(), ",")}, {"jobs", fmt.Sprint(f.Jobs)}, {"tool", f.Tool}, {"deps-dir", f.DepsDir}, {"cache-dir", f.CacheDir}} {
		if f.Given[fl.name] {
			verify = append(verify, "--"+fl.name, fl.v)
		}
	}
	if f.Offline {
		verify = append(verify, "--offline")
	}
	python := ""
	if f.Given["python"] {
		python = f.Python
	}
	return abBuildOptions{
		AB: kernels.ABOptions{
			A: a, B: b, Catalog: cat, Dir: dir, Repo: expandHome(f.Repo), Commit: f.Commit,
			PythonA: f.PythonA, PythonB: f.PythonB, Build: bo, PlanOnly: f.Plan,
		},
		Verify: verify, Python: python,
	}, nil
}

// abBuildRun builds both arms (or prints their plans) and the files whose
// bytes differ; a difference no patch explains is a failure (exit 1).
func abBuildRun(ctx context.Context, o abBuildOptions, s streams) error {
	notePassedOver(s.Err, o.AB.Catalog)
	w, dir := s.Out, o.AB.Dir
	o.AB.Build.Log = s.Err
	if progress.IsTerminal(s.Err) {
		// As apply, and git: each arm's checkout (4,303 files take
		// seconds) counted on a terminal only.
		o.AB.CheckoutProgress = s.Err
	}
	ab, results, err := kernels.ABBuild(ctx, o.AB, func(arm string) kernels.Progress { return kernels.NewProgress(s.Err, "arm "+arm) })
	if err != nil {
		return repoRemedy(err, o.AB.A.Upstream.URL)
	}
	m := ab.Manifest
	fmt.Fprintf(w, "A/B at %s: inputs differ only in %v\n", m.Commit, m.DifferOnlyIn)
	for _, arm := range []kernels.ABArm{m.A, m.B} {
		fmt.Fprintf(w, "  %-9s series %-13s %d patches  key %s  %s\n", arm.Recipe, cmp.Or(arm.Series, "(none)"), len(arm.Patches), digest.Short(arm.Key), arm.Src)
	}
	if o.AB.PlanOnly {
		printPlan(w, ab.A, o.AB.Build.Cache)
		printPlan(w, ab.B, o.AB.Build.Cache)
		if ab.A.Problems != nil || ab.B.Problems != nil {
			return exitWith(exitFailure, "")
		}
		return nil
	}
	for i, r := range results {
		hit := "built"
		if r.Hit {
			hit = "cache hit"
		}
		fmt.Fprintf(w, "  %s: %s %s\n", []string{"a", "b"}[i], hit, r.Wheel)
	}
	fmt.Fprintf(w, "files whose bytes differ between a and b: %d (%d unexplained)\n", len(m.DifferingFiles), m.Unexplained)
	for _, f := range m.DifferingFiles {
		mark := "  "
		if !f.Explained {
			mark = "  UNEXPLAINED "
		}
		fmt.Fprintf(w, "%s%s\n      %s\n", mark, f.File, f.Why)
	}
	fmt.Fprintf(w, "comparison manifest %s\n", filepath.Join(dir, "ab-manifest.json"))
	if m.Unexplained > 0 {
		// An unexplained difference is what a reproducible A/B exists to
		// catch: a failure, with the command that finds its cause in each
		// arm.
		verify := func(arm, python string) string {
			args := append([]string{"arpatch", "build", "--verify-reproducible", "--src", filepath.Join(dir, arm)}, o.Verify...)
			if python = cmp.Or(python, o.Python); python != "" {
				args = append(args, "--python", python)
			}
			return shellq.Join(args)
		}
		fmt.Fprintf(s.Err, "arpatch: %s between the arms that no patch explains; a reproducible A/B has none. Find the cause in each arm: `%s`, then `%s`\n",
			textfmt.Plural(m.Unexplained, "file differs", "files differ"), verify("a", o.AB.PythonA), verify("b", o.AB.PythonB))
		return exitWith(exitFailure, "")
	}
	return nil
}

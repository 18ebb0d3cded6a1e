package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/progress"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// newCmdApply is apply, running its options with runF (applyRun).
func newCmdApply(runF func(context.Context, applyOptions, streams) error) *cli.Command {
	var f applyFlags
	return &cli.Command{
		Name:  "apply",
		Usage: "clone SGLang at the recipe's commit and apply its patch series",
		UsageText: `arpatch apply [--recipe NAME | --recipe-file PATH] [--src DIR] [--repo URL|PATH]
              [--commit SHA] [--series NAME] [--patches-dir DIR] [--dry-run] [--tune FILE [--force-tune]]`,
		Description: `If --src does not exist or is an empty directory, apply clones SGLang into it
(from the recipe's URL, or from --repo: a local mirror path is cloned by
hardlinking, like git clone --local) and checks out the pinned commit,
detached; a failed clone removes the parent directories it made. It then
refuses a tree with uncommitted changes or at another commit, verifies every
patch's sha256, checks every hunk in memory (exact context; offsets are
allowed and reported; no fuzz) and only then writes all files. After any
failure the tree is byte-identical to before. Applying an applied series is
a no-op.

Examples:
   arpatch apply --recipe pcie --repo ~/mirrors/sglang.git
   arpatch apply --recipe pcie --repo ~/mirrors/sglang.git --dry-run
   arpatch apply --recipe pcie --commit 8905cbd42f4a27dbecad6487cd3904278756fef8 --repo ~/mirrors/sglang.git --src sglang-b
   arpatch recipes show pcie > my.toml        # a recipe of your own to edit
   arpatch patches port --series pcie-2026-04 --to 84118acf50b3a4c74e85e9ff9033792552de1a76 --repo ~/mirrors/sglang.git --out my-series/pcie-mine --seal
   arpatch revert                             # ./sglang back to upstream's files
   arpatch apply --recipe-file my.toml --patches-dir ./my-series`,
		Flags: slices.Concat(f.recipeFlags.flags(), []cli.Flag{
			srcFlag(&f.Src), patchesDirFlag(&f.PatchesDir),
			&cli.StringFlag{Name: "repo", Destination: &f.Repo, Usage: "clone from `URL|PATH` instead of the recipe's upstream URL, e.g. --repo ~/mirrors/sglang.git"},
			&cli.StringFlag{Name: "commit", Destination: &f.Commit, Usage: "patch commit `SHA` instead of the recipe's pin (the checkout must be at it)"},
			&cli.StringFlag{Name: "series", Destination: &f.Series, Usage: "force series `NAME` instead of choosing by commit, e.g. --series pcie-2026-07"},
			&cli.BoolFlag{Name: "dry-run", Destination: &f.DryRun, Usage: "check and report, write nothing (no clone either)"},
		}, f.tuneFlags.flags("in the runtime environment apply prints")),
		Before: noArgs,
		Action: act(&f, applyOpts, runF),
	}
}

// applyFlags are apply's parsed flags.
type applyFlags struct {
	recipeFlags
	Src, PatchesDir, Repo, Commit, Series string
	DryRun                                bool
	tuneFlags
	cmdline
}

// applyOptions are every input of applyRun.
type applyOptions struct {
	Apply checkout.ApplyOptions
	// Tune is --tune's file ("" without it), checked against this host
	// (unless Force) and printed in the runtime environment.
	Tune tuneFlags
}

// applyOpts turns apply's flags into options: the recipe, the series and
// the paths (~ expanded).
func applyOpts(f applyFlags) (applyOptions, error) {
	r, err := f.load(f.Given)
	if err != nil {
		return applyOptions{}, err
	}
	cat, err := catalog(f.PatchesDir)
	if err != nil {
		return applyOptions{}, err
	}
	if f.Series != "" {
		// Before anything is cloned: a misspelt series creates nothing.
		if err := cat.CheckForce(f.Series); err != nil {
			return applyOptions{}, usageError{err}
		}
	}
	return applyOptions{
		Apply: checkout.ApplyOptions{
			Recipe: r, Catalog: cat,
			Src: expandHome(f.Src), Repo: expandHome(f.Repo), Commit: f.Commit,
			Series: f.Series, DryRun: f.DryRun,
			Version: arpatchVersion(), Progress: nil,
		},
		Tune: tuneFlags{Tune: expandHome(f.Tune), ForceTune: f.ForceTune},
	}, nil
}

// applyRun applies and prints the report and the runtime environment.
func applyRun(ctx context.Context, o applyOptions, s streams) error {
	notePassedOver(s.Err, o.Apply.Catalog)
	printed, tuned, err := tunedRecipe(ctx, o.Apply.Recipe, o.Tune, o.Apply.Src, s.Err)
	if err != nil {
		return err
	}
	if progress.IsTerminal(s.Err) {
		// As git: progress on a terminal only (the clone's, then a
		// count of the files checked out).
		o.Apply.Progress = s.Err
	}
	rep, err := checkout.Apply(ctx, o.Apply)
	if err != nil {
		return repoRemedy(err, o.Apply.Recipe.Upstream.URL)
	}
	printApply(s.Out, rep, printed, o.Apply.Repo, o.Apply.Catalog)
	if rep.WouldClone && rep.Result == nil && printed.Series != "" {
		// Nothing was checked: a dry run that exits 0 would say the
		// series applies.
		return exitWith(exitFailure, "the dry run checked nothing (no local repository to read the pinned commit from); the series above says how to check it")
	}
	if rep.Series != nil && o.Apply.Catalog.Dir == "" {
		if n := builtInCopyNote(shippedDir, rep.Series.Name); n != "" {
			fmt.Fprintln(s.Err, n)
		}
	}
	printRuntimeEnv(s.Out, rep, printed.Env, o.Tune.Tune, tuned)
	return nil
}

func printApply(w io.Writer, rep *checkout.ApplyReport, r *recipes.Recipe, repoFlag string, cat *patches.Catalog) {
	recipe, source := r.Name, r.Source
	if rep.Cloned {
		fmt.Fprintf(w, "cloned %s into %s in %s (%s), then checked out %d files in %s\n", rep.Clone.Source, rep.Src, rep.Clone.Duration.Round(time.Millisecond), rep.Clone.How(),
			rep.Clone.Files, rep.Clone.Checkout.Round(time.Millisecond))
	}
	if rep.WouldClone {
		fmt.Fprintf(w, "dry run: would clone into %s and check out %s\n", rep.Src, rep.Commit)
	}
	fmt.Fprintf(w, "recipe   %s (%s)\n", recipe, source)
	fmt.Fprintf(w, "commit   %s\n", rep.Commit)
	if rep.WouldClone && rep.Result == nil && r.Series != "" {
		from := repoFlag
		if from == "" {
			from = r.Upstream.URL
		}
		fmt.Fprintf(w, "series   not checked: %s is not a local repository, and a dry run downloads nothing.\n         Mirror it once (`%s`), then run `%s`, or apply without --dry-run\n",
			from, shellq.Join([]string{"git", "clone", "--mirror", from, "sglang.git"}), cat.CheckCommand("sglang.git", rep.Commit))
	} else if rep.Series == nil && len(rep.Patches) == 0 {
		fmt.Fprintln(w, "series   (none: the recipe applies no patches)")
	} else if rep.Series != nil {
		fmt.Fprintf(w, "series   %s (%s)\n", rep.Series.Name, rep.Reason)
	}
	for _, p := range rep.Patches {
		fmt.Fprintf(w, "  %s  sha256 %s ok\n", p.Name, digest.Short(p.SHA256))
	}
	switch {
	case rep.AlreadyApplied && rep.ByHand:
		fmt.Fprintln(w, "already applied: the tree holds every patch (no arpatch state; applied by hand or committed); nothing written")
		return
	case rep.AlreadyApplied:
		fmt.Fprintln(w, "already applied: files match the recorded state; nothing written")
		return
	}
	if rep.Result != nil {
		verb := "applied"
		if rep.DryRun {
			verb = "dry run: would apply"
		}
		fmt.Fprintf(w, "%s %d patches to %d files", verb, len(rep.Patches), len(rep.Result.Files))
		if rep.ApplyTime > 0 {
			fmt.Fprintf(w, " in %s", rep.ApplyTime.Round(time.Millisecond))
		}
		fmt.Fprintln(w)
		for _, f := range rep.Result.Files {
			fmt.Fprintf(w, "  %s %s\n", opLetter(f.Op), f.Path)
		}
		if offs := rep.Result.Offsets(); len(offs) > 0 {
			fmt.Fprintln(w, "offsets (hunks that matched exactly, at other lines than their headers say):")
			for _, h := range offs {
				fmt.Fprintf(w, "  %s %s %s: %+d lines (now at line %d)\n", h.Patch, h.Path, h.Hunk, h.Offset, h.Line)
			}
		}
		for _, n := range rep.Result.Notes {
			fmt.Fprintf(w, "note: gate rule: %s\n", n)
		}
	}
	if len(rep.Untracked) > 0 {
		fmt.Fprintf(w, "note: %s in the tree %s left alone\n", textfmt.Plural(len(rep.Untracked), "untracked file", "untracked files"), textfmt.Word(len(rep.Untracked), "was", "were"))
	}
}

// printRuntimeEnv prints the environment the server needs: the recipe's
// [env], with --tune's thresholds in it when tuned, as `export KEY=VALUE`
// lines quoted by shellq, which set exactly those values when pasted into
// a shell. It prints it after a
// fresh apply and on an already applied tree (the state a user is in when
// they come back with a tune file), not on a dry run. tunePath is --tune's
// file ("" without --tune); tuned says its thresholds were applied (the
// recipe opens the PCIe gate).
func printRuntimeEnv(w io.Writer, rep *checkout.ApplyReport, env map[string]string, tunePath string, tuned bool) {
	if len(env) == 0 || rep.DryRun {
		if tunePath != "" && !tuned && !rep.DryRun {
			fmt.Fprintf(w, "tune %s not used: the recipe's [env] does not set %s=1, so its thresholds would change nothing\n", tunePath, tune.EnvForce)
		}
		return
	}
	heading := "runtime environment from the recipe (export it for the server):"
	switch {
	case tuned:
		heading = fmt.Sprintf("runtime environment: the recipe's [env] with the thresholds of tune %s (export it for the server):", tunePath)
	case tunePath != "":
		heading = fmt.Sprintf("runtime environment from the recipe; tune %s not used: the recipe's [env] does not set %s=1 (export it for the server):", tunePath, tune.EnvForce)
	}
	fmt.Fprintln(w, heading)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(w, "  export %s\n", shellq.Assign(k, env[k]))
	}
}

func opLetter(o patches.Op) string {
	switch o {
	case patches.Create:
		return "A"
	case patches.Delete:
		return "D"
	}
	return "M"
}

package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/recipes"
)

func abCommand() *cli.Command {
	return &cli.Command{
		Name:  "ab",
		Usage: "reproducible A/B builds of two recipes",
		Subcommands: []*cli.Command{{
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
			Flags: append(buildFlags(),
				&cli.StringFlag{Name: "a", Usage: "embedded recipe `NAME` for arm A", Value: "baseline"},
				&cli.StringFlag{Name: "b", Usage: "embedded recipe `NAME` for arm B", Value: "pcie"},
				&cli.StringFlag{Name: "a-file", Usage: "recipe `PATH` for arm A instead"},
				&cli.StringFlag{Name: "b-file", Usage: "recipe `PATH` for arm B instead"},
				&cli.StringFlag{Name: "dir", Usage: "`DIR` for the two checkouts and ab-manifest.json (default: ab/ in the state directory, $ARPATCH_STATE or ~/.local/state/arpatch)"},
				&cli.StringFlag{Name: "repo", Usage: "clone from `URL|PATH` (e.g. a local mirror)"},
				&cli.StringFlag{Name: "commit", Usage: "build this commit `SHA` in both arms instead of the recipes' pin"},
				&cli.StringFlag{Name: "python-a", Usage: "Python `INTERPRETER` for arm A only"},
				&cli.StringFlag{Name: "python-b", Usage: "Python `INTERPRETER` for arm B only"},
				patchesDirFlag(),
			),
			Before: noArgs,
			Action: func(c *cli.Context) error {
				for _, f := range []string{"recipe", "recipe-file", "src"} {
					if c.IsSet(f) {
						return usagef("ab build takes its recipes from --a/--b (or --a-file/--b-file) and clones into --dir; --%s is for arpatch build", f)
					}
				}
				load := func(name, file string) (*recipes.Recipe, error) {
					if p := pathFlag(c, file); p != "" {
						if c.IsSet(name) {
							return nil, usagef("--%s and --%s are exclusive; pass one", name, file)
						}
						return recipeFile(p)
					}
					r, err := recipes.Embedded(c.String(name))
					if err != nil {
						return nil, usageError{fmt.Errorf("--%s: %w", name, err)}
					}
					return r, nil
				}
				a, err := load("a", "a-file")
				if err != nil {
					return err
				}
				b, err := load("b", "b-file")
				if err != nil {
					return err
				}
				// Both arms build with the same options: the recipes' [build]
				// tables must agree, or the flags decide.
				for _, f := range []struct {
					flag   string
					va, vb any
				}{{"tool", a.Build.Tool, b.Build.Tool}, {"jobs", a.Build.Jobs, b.Build.Jobs}, {"offline", a.Build.Offline, b.Build.Offline}, {"deps-dir", a.Build.DepsDir, b.Build.DepsDir}} {
					if fmt.Sprint(f.va) != fmt.Sprint(f.vb) && !c.IsSet(f.flag) {
						return usagef("recipe %s has [build] %s %q and recipe %s has %q; pass --%s to build both arms alike", a.Name, f.flag, fmt.Sprint(f.va), b.Name, fmt.Sprint(f.vb), f.flag)
					}
				}
				bo, err := optsFromRecipe(c, b)
				if err != nil {
					return err
				}
				if !c.IsSet("arch") && fmt.Sprint(a.Build.Archs) != fmt.Sprint(b.Build.Archs) {
					return usagef("recipe %s builds %v and recipe %s builds %v; pass --arch to build both for the same archs", a.Name, a.Build.Archs, b.Name, b.Build.Archs)
				}
				if !c.IsSet("arch") {
					if bo.Archs, err = cudaarch.Parse(a.Build.Archs); err != nil {
						return err
					}
				}
				cat, err := loadCatalog(c)
				if err != nil {
					return err
				}
				w := c.App.Writer
				dir, err := stateFlag(c, "dir", "ab")
				if err != nil {
					return err
				}
				ab, results, err := kernels.ABBuild(c.Context, kernels.ABOptions{
					A: a, B: b, Catalog: cat, Dir: dir, Repo: pathFlag(c, "repo"), Commit: c.String("commit"),
					PythonA: c.String("python-a"), PythonB: c.String("python-b"), Build: bo, PlanOnly: c.Bool("plan"),
				}, func(arm string) kernels.Progress { return kernels.NewProgress(c.App.ErrWriter, "arm "+arm) })
				if err != nil {
					return err
				}
				m := ab.Manifest
				fmt.Fprintf(w, "A/B at %s: inputs differ only in %v\n", m.Commit, m.DifferOnlyIn)
				for _, arm := range []kernels.ABArm{m.A, m.B} {
					fmt.Fprintf(w, "  %-9s series %-13s %d patches  key %s  %s\n", arm.Recipe, orNone(arm.Series), len(arm.Patches), arm.Key[:16], arm.Src)
				}
				if c.Bool("plan") {
					printPlan(w, ab.A, bo.Cache)
					printPlan(w, ab.B, bo.Cache)
					if ab.A.Problems != nil || ab.B.Problems != nil {
						return cli.Exit("", exitFailure)
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
					// An unexplained difference is what a reproducible A/B
					// exists to catch: a failure, with the command that
					// finds its cause in each arm.
					verify := func(arm string) string {
						args := []string{"arpatch", "build", "--verify-reproducible", "--src", filepath.Join(dir, arm)}
						for _, f := range []string{"arch", "jobs", "tool", "deps-dir", "cache-dir"} {
							if c.IsSet(f) {
								v := c.String(f)
								if f == "arch" {
									v = strings.Join(c.StringSlice(f), ",")
								}
								args = append(args, "--"+f, v)
							}
						}
						if c.Bool("offline") {
							args = append(args, "--offline")
						}
						if py := c.String("python-" + arm); py != "" {
							args = append(args, "--python", py)
						} else if c.IsSet("python") {
							args = append(args, "--python", c.String("python"))
						}
						return shellq.Join(args)
					}
					fmt.Fprintf(c.App.ErrWriter, "arpatch: %s between the arms that no patch explains; a reproducible A/B has none. Find the cause in each arm: `%s`, then `%s`\n",
						plural(m.Unexplained, "file differs", "files differ"), verify("a"), verify("b"))
					return cli.Exit("", exitFailure)
				}
				return nil
			},
		}},
	}
}

// plural is "1 file differs" or "2 files differ".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

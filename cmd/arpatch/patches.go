package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/internal/checkout"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
)

func patchesCommand() *cli.Command {
	return &cli.Command{
		Name:  "patches",
		Usage: "list, check and seal patch series",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list the known series with their patches",
				UsageText: "arpatch patches list [--patches-dir DIR]",
				Flags:     []cli.Flag{patchesDirFlag()},
				Before:    noArgs,
				Action: func(c *cli.Context) error {
					cat, err := loadCatalog(c)
					if err != nil {
						return err
					}
					w := c.App.Writer
					for _, s := range cat.Series {
						fmt.Fprintf(w, "%s  family %s  (%s)\n  %s\n  tested on: %s\n", s.Name, s.Family, s.Dir, s.Description, strings.Join(s.TestedOn, ", "))
						for _, p := range s.Patches {
							fmt.Fprintf(w, "    %s  sha256 %s  provides %s\n", p.File, p.SHA256[:16], strings.Join(p.Provides, ","))
						}
					}
					return nil
				},
			},
			{
				Name:      "check",
				Usage:     "report how each series fits each commit (exact, offset, applied, partial, conflict), writing nothing",
				UsageText: "arpatch patches check --repo PATH --commit REV [--commit REV...] [--series NAME...] [--strict] [--json]",
				Description: `check reads files straight from the repository's object store (a checkout or
a bare mirror), so nothing is checked out or written. Each commit may be a
hash, branch or tag (abbreviated hashes are refused: they can be ambiguous).
A family's series are one job for different upstream eras, so check exits 0
when at each commit some series of each family checked fits (exact, offset
or applied), and 1 otherwise, naming what has none; --strict exits 1 unless
every series fits every commit.

Examples:
   arpatch patches check --repo ~/mirrors/sglang.git --commit 84118acf50b3a4c74e85e9ff9033792552de1a76
   arpatch patches check --repo sglang --commit main --series pcie-2026-08 --json`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "repo", Usage: "local repository `PATH` (checkout or bare mirror)", Required: true},
					&cli.StringSliceFlag{Name: "commit", Usage: "commit `REV` to check; repeat for several", Required: true},
					&cli.StringSliceFlag{Name: "series", Usage: "check only series `NAME`; repeat for several"},
					&cli.BoolFlag{Name: "strict", Usage: "exit 1 unless every series fits every commit"},
					patchesDirFlag(), jsonFlag(),
				},
				Before: noArgs,
				Action: func(c *cli.Context) error {
					cat, err := loadCatalog(c)
					if err != nil {
						return err
					}
					for _, n := range c.StringSlice("series") {
						if _, err := cat.Get(n); err != nil {
							return usageError{fmt.Errorf("--series: %w", err)}
						}
					}
					rows, err := checkout.CheckCommits(pathFlag(c, "repo"), c.StringSlice("commit"), cat, c.StringSlice("series"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						if err := writeJSON(c.App.Writer, driftJSON(rows)); err != nil {
							return err
						}
					} else {
						printDrift(c.App.Writer, rows, c.String("repo"), cat.Dir)
					}
					if unfit := checkout.Unfit(rows, cat, c.Bool("strict")); len(unfit) > 0 {
						return cli.Exit(strings.Join(unfit, "\n"), exitFailure)
					}
					return nil
				},
			},
			portCommand(),
			{
				Name:      "seal",
				Usage:     "record the sha256 of every patch in a series directory's series.toml",
				UsageText: "arpatch patches seal DIR...",
				Description: `After editing a patch, seal writes its new sha256 into series.toml, so that
apply accepts it. Apply refuses any patch whose bytes differ from the
recorded sha256.

Example:
   arpatch patches seal patches/sglang/pcie-2026-04`,
				Action: func(c *cli.Context) error {
					if c.Args().Len() == 0 {
						return usagef("seal needs at least one series directory, e.g. patches/sglang/pcie-2026-04")
					}
					for _, a := range c.Args().Slice() {
						if strings.HasPrefix(a, "-") {
							return usagef("seal takes directories only, got %q (seal has no flags)", a)
						}
					}
					for _, dir := range c.Args().Slice() {
						changed, err := patches.Seal(os.DirFS(dir), ".", func(name string, data []byte) error {
							return safefs.WriteFile(filepath.Join(dir, name), data, 0o644)
						})
						if err != nil {
							return fmt.Errorf("%s: %w", dir, err)
						}
						if len(changed) == 0 {
							fmt.Fprintf(c.App.Writer, "%s: all sha256 up to date\n", dir)
						}
						for _, n := range changed {
							fmt.Fprintf(c.App.Writer, "%s: sealed %s\n", dir, n)
						}
					}
					return nil
				},
			},
		},
	}
}

func printDrift(w io.Writer, rows []checkout.DriftRow, repo, patchesDir string) {
	fmt.Fprintf(w, "%-14s %-20s %-9s %s\n", "SERIES", "COMMIT", "VERDICT", "PATCHES")
	for _, r := range rows {
		commit := githash.Hash(r.Commit).Short()
		if r.Rev != r.Commit && !strings.HasPrefix(r.Commit, r.Rev) {
			commit += " (" + r.Rev + ")"
		}
		if r.Err != nil {
			fmt.Fprintf(w, "%-14s %-20s %-9s %v\n", r.Series, commit, r.Verdict, r.Err)
			continue
		}
		var parts []string
		for i, f := range r.Fits {
			s := f.Patch + "=" + fitText(f)
			if movedAway(r, f) {
				// A file it changes is gone: say what became of it.
				switch why := r.Moved.Why[i]; why {
				case "moved":
					s = f.Patch + "=moved(" + fitText(r.Moved.Fits[i]) + ")"
				case "":
				default:
					s = f.Patch + "=" + strings.ReplaceAll(why, " ", "-")
				}
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(w, "%-14s %-20s %-9s %s\n", r.Series, commit, r.Verdict, strings.Join(parts, " "))
	}
	for _, r := range rows {
		if r.PortClean {
			fmt.Fprintf(w, "\n%s at %s:\n  the hunks do not fit as they are, but a port (three-way merge) is clean; write it with: %s\n", r.Series, githash.Hash(r.Commit).Short(), port.Command(r.Series, repo, r.Commit, port.DraftDir(r.Series, r.Commit), patchesDir))
		}
		if r.Moved != nil {
			fmt.Fprintf(w, "\n%s at %s:\n  %s\n", r.Series, githash.Hash(r.Commit).Short(), strings.Join(r.Moved.Explain(r.Series, repo, r.Commit, patchesDir), "\n  "))
		}
		for i, f := range r.Fits {
			if movedAway(r, f) {
				if r.Moved.Why[i] != "moved" {
					continue // the lines above say what became of its files
				}
				f = r.Moved.Fits[i] // how it fits at the new path
			}
			if f.Fit == patches.FitConflict {
				fmt.Fprintf(w, "\n%s at %s:\n  %s\n", r.Series, githash.Hash(r.Commit).Short(), strings.ReplaceAll(f.Err.Error(), "\n", "\n  "))
			}
		}
	}
}

// movedAway reports whether a patch conflicts only because a file it
// changes moved.
func movedAway(r checkout.DriftRow, f patches.PatchFit) bool {
	return r.Moved != nil && f.Fit == patches.FitConflict && errors.Is(f.Err, patches.ErrFileMissing)
}

// fitText is a patch's fit, with the largest offset for an offset fit.
func fitText(f patches.PatchFit) string {
	s := f.Fit.String()
	if f.Fit == patches.FitOffset {
		if n := f.MaxOffset(); n == 1 {
			s += "(max 1 line)"
		} else {
			s += fmt.Sprintf("(max %d lines)", n)
		}
	}
	return s
}

// driftJSONRow is the JSON shape of one series x commit check.
type driftJSONRow struct {
	Series  string           `json:"series"`
	Commit  string           `json:"commit"`
	Rev     string           `json:"rev"`
	Verdict string           `json:"verdict"`
	Error   string           `json:"error,omitempty"`
	Patches []driftJSONPatch `json:"patches"`
	// Moved: files the series changes that moved since its tested_on
	// commit, and how each patch fits at the new paths.
	Moved *driftJSONMoved `json:"moved,omitempty"`
	// PortClean: a conflict here that a port (three-way merge) resolves.
	PortClean bool `json:"port_clean,omitempty"`
}

type driftJSONMoved struct {
	Moves   []gitsrc.Rename  `json:"moves"`
	Lost    []string         `json:"lost,omitempty"`
	Patches []driftJSONPatch `json:"patches"`
}

type driftJSONPatch struct {
	Patch string               `json:"patch"`
	Fit   string               `json:"fit"`
	Hunks []patches.HunkResult `json:"hunks,omitempty"`
	Error string               `json:"error,omitempty"`
}

func driftJSON(rows []checkout.DriftRow) []driftJSONRow {
	out := []driftJSONRow{}
	for _, r := range rows {
		jr := driftJSONRow{Series: r.Series, Commit: r.Commit, Rev: r.Rev, Verdict: r.Verdict, Patches: []driftJSONPatch{}, PortClean: r.PortClean || (r.Moved != nil && r.Moved.Clean)}
		if r.Err != nil {
			jr.Error = r.Err.Error()
		}
		jr.Patches = fitsJSON(r.Fits)
		if r.Moved != nil {
			jr.Moved = &driftJSONMoved{Moves: r.Moved.Moves, Lost: r.Moved.Lost, Patches: fitsJSON(r.Moved.Fits)}
		}
		out = append(out, jr)
	}
	return out
}

func fitsJSON(fits []patches.PatchFit) []driftJSONPatch {
	out := []driftJSONPatch{}
	for _, f := range fits {
		jp := driftJSONPatch{Patch: f.Patch, Fit: f.Fit.String(), Hunks: f.Hunks}
		if f.Err != nil {
			jp.Error = f.Err.Error()
		}
		out = append(out, jp)
	}
	return out
}

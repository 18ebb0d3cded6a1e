package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
	"github.com/arpatch/arpatch/recipes"
)

// newCmdPort is patches port, running its options with runF (portRun).
func newCmdPort(runF func(context.Context, portOptions, streams) error) *cli.Command {
	var f portFlags
	return &cli.Command{
		Name:      "port",
		Usage:     "carry a series to a later upstream commit: follow renames, re-place hunks, merge three-way; write a draft series",
		UsageText: "arpatch patches port --series NAME --to REV [--repo PATH] [--from REV] [--move OLD=NEW...] [--out DIR] [--seal] [--json FILE]",
		Description: `port reads the series' tested_on commit and REV from the repository's
object store (no work tree is touched). A file the series changes that REV
lacks is followed through history (go-git rename detection); where a file
went to several identical files, port names them all and asks which one
with --move OLD=NEW. Hunks whose
context is still there are re-placed (exact, offset); where upstream changed
the context, the file is merged three-way (base = the file at tested_on,
ours = base + patch, theirs = the file at REV) and clean merges get hunks
regenerated with fresh context. Overlapping changes are conflicts: they are
printed with both sides and nothing is written. Each ported patch is applied
back to REV, and the ported series must pass arpatch's gate rule, before a
draft is offered.

With --out DIR and no conflict, DIR receives a draft series named after DIR
(series.toml with tested_on = [REV] and the same provides and requires, and
the patches); it is unsealed unless --seal is given: review every line,
then run arpatch patches seal DIR, and apply it with --patches-dir set to
DIR's parent. It exits 1 when anything conflicts.

Examples:
   arpatch patches port --series pcie-2026-07 --to main --repo ~/mirrors/sglang.git
   arpatch patches port --series pcie-2026-07 --to main --repo ~/mirrors/sglang.git --out arpatch-port/pcie-next --json pcie-next.port.json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "series", Destination: &f.Series, Usage: "series `NAME` to port, e.g. pcie-2026-07", Required: true},
			&cli.StringFlag{Name: "to", Destination: &f.To, Usage: "target commit `REV` (hash, branch or tag)", Required: true},
			&cli.StringFlag{Name: "repo", Destination: &f.Repo, Usage: "local repository `PATH` (checkout or bare mirror)", Value: "sglang"},
			&cli.StringFlag{Name: "from", Destination: &f.From, Usage: "base commit `REV` (default: the series' tested_on)"},
			&cli.StringFlag{Name: "out", Destination: &f.Out, Usage: "write the draft series into `DIR` (new or empty; its name is the series name)"},
			&cli.StringSliceFlag{Name: "move", Destination: &f.Moves, Usage: "`OLD=NEW`: the series' file OLD went to NEW at the target, where history does not settle it (a file copied to several identical ones); repeat for several"},
			&cli.BoolFlag{Name: "seal", Destination: &f.Seal, Usage: "record the patches' sha256 in the draft (only when nothing conflicts)"},
			&cli.StringFlag{Name: "json", Destination: &f.JSON, Usage: "write the report as JSON to `FILE`"},
			patchesDirFlag(&f.PatchesDir),
		},
		Before: noArgs,
		Action: act(&f, portOpts, runF),
	}
}

// portFlags are patches port's parsed flags.
type portFlags struct {
	Series     string
	To         string
	Repo       string
	From       string
	Out        string
	Moves      cli.StringSlice
	Seal       bool
	JSON       string
	PatchesDir string
}

// portOptions are every input of portRun.
type portOptions struct {
	Catalog *patches.Catalog
	Series  *patches.Series
	// Repo is the repository's path, ~ expanded; RepoArg is --repo as
	// given, for the command the report prints.
	Repo, RepoArg string
	// To and From are revisions as given (From "": the series' tested_on).
	To, From string
	// Moves maps a file of the series to its path at To (--move OLD=NEW).
	Moves map[string]string
	// Out is the draft series' directory ("": write none); JSON the
	// report's file ("": none).
	Out, JSON string
	Seal      bool
}

// portOpts turns patches port's flags into options: a --series the
// catalog lacks and a --move that is not OLD=NEW are usage errors.
func portOpts(f portFlags) (portOptions, error) {
	cat, err := catalog(f.PatchesDir)
	if err != nil {
		return portOptions{}, err
	}
	s, err := seriesFlag(cat, f.Series)
	if err != nil {
		return portOptions{}, err
	}
	moves := map[string]string{}
	for _, m := range f.Moves.Value() {
		old, np, ok := strings.Cut(m, "=")
		if !ok || old == "" || np == "" {
			return portOptions{}, usagef("--move %q: want OLD=NEW, two paths in the tree, e.g. --move sgl-kernel/csrc/x.cuh=python/sglang/kernels/aot/csrc/x.cuh", m)
		}
		moves[old] = np
	}
	o := portOptions{Catalog: cat, Series: s, Repo: expandHome(f.Repo), RepoArg: f.Repo, To: f.To, From: f.From, Moves: moves,
		Out: expandHome(f.Out), JSON: expandHome(f.JSON), Seal: f.Seal}
	if err := checkOutputs(outFile{flag: "json", path: o.JSON}); err != nil {
		return portOptions{}, err
	}
	if o.Out != "" {
		if err := port.CheckOut(o.Out); err != nil {
			return portOptions{}, usageError{err}
		}
	}
	return o, nil
}

// portRun ports the series, prints the report, writes the JSON report and
// the draft series; a conflict is a failure (exit 1) and writes no series.
func portRun(_ context.Context, o portOptions, s streams) error {
	notePassedOver(s.Err, o.Catalog)
	out, jsonOut := o.Out, o.JSON
	repo, err := gitsrc.OpenAny(o.Repo)
	if err != nil {
		return repoRemedy(fmt.Errorf("--repo: %w", err), recipes.DefaultUpstreamURL)
	}
	to, err := repo.Resolve(o.To)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	from := ""
	if o.From != "" {
		if from, err = repo.Resolve(o.From); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
	}
	rep, err := port.Run(port.Options{Repo: repo, Series: o.Series, From: from, To: to, Moves: o.Moves})
	if err != nil {
		return err
	}
	w := s.Out
	rep.WriteText(w)
	if jsonOut != "" {
		var b bytes.Buffer
		if err := writeJSON(&b, rep); err != nil {
			return err
		}
		if err := safefs.WriteFile(jsonOut, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if !rep.Clean {
		written := "no series was written"
		if jsonOut != "" {
			written += " (the report is in " + jsonOut + ")"
		}
		fmt.Fprintln(w, written+": resolve the conflicts above in a series of your own (or port from another series)")
		return exitWith(exitFailure, "")
	}
	if out == "" {
		fmt.Fprintf(w, "a clean draft exists; write it with: %s\n", port.Command(o.Series.Name, o.RepoArg, to, port.DraftDir(o.Series.Name, to), o.Catalog.Dir))
		return nil
	}
	d, err := rep.Draft(o.Series, filepath.Base(filepath.Clean(out)), o.Seal)
	if err != nil {
		return err
	}
	if err := d.Write(out); err != nil {
		return err
	}
	if d.Sealed {
		fmt.Fprintf(w, "wrote series %s in %s (sealed)\n", d.Name, out)
	} else {
		fmt.Fprintf(w, "wrote series %s in %s, unsealed: review every patch, then run `%s`\n", d.Name, out, shellq.Join([]string{"arpatch", "patches", "seal", out}))
	}
	return nil
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches/port"
)

func portCommand() *cli.Command {
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
			&cli.StringFlag{Name: "series", Usage: "series `NAME` to port, e.g. pcie-2026-07", Required: true},
			&cli.StringFlag{Name: "to", Usage: "target commit `REV` (hash, branch or tag)", Required: true},
			&cli.StringFlag{Name: "repo", Usage: "local repository `PATH` (checkout or bare mirror)", Value: "sglang"},
			&cli.StringFlag{Name: "from", Usage: "base commit `REV` (default: the series' tested_on)"},
			&cli.StringFlag{Name: "out", Usage: "write the draft series into `DIR` (new or empty; its name is the series name)"},
			&cli.StringSliceFlag{Name: "move", Usage: "`OLD=NEW`: the series' file OLD went to NEW at the target, where history does not settle it (a file copied to several identical ones); repeat for several"},
			&cli.BoolFlag{Name: "seal", Usage: "record the patches' sha256 in the draft (only when nothing conflicts)"},
			&cli.StringFlag{Name: "json", Usage: "write the report as JSON to `FILE`"},
			patchesDirFlag(),
		},
		Before: noArgs,
		Action: func(c *cli.Context) error {
			cat, err := loadCatalog(c)
			if err != nil {
				return err
			}
			s, err := cat.Get(c.String("series"))
			if err != nil {
				return usageError{fmt.Errorf("--series: %w", err)}
			}
			out, jsonOut := pathFlag(c, "out"), pathFlag(c, "json")
			if jsonOut != "" {
				if err := safefs.CanWrite(jsonOut); err != nil {
					return err
				}
			}
			if out != "" {
				if err := port.CheckOut(out); err != nil {
					return err
				}
			}
			repo, err := gitsrc.OpenAny(pathFlag(c, "repo"))
			if err != nil {
				return fmt.Errorf("--repo: %w", err)
			}
			to, err := repo.Resolve(c.String("to"))
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			from := ""
			if f := c.String("from"); f != "" {
				if from, err = repo.Resolve(f); err != nil {
					return fmt.Errorf("--from: %w", err)
				}
			}
			moves := map[string]string{}
			for _, m := range c.StringSlice("move") {
				old, np, ok := strings.Cut(m, "=")
				if !ok || old == "" || np == "" {
					return usagef("--move %q: want OLD=NEW, two paths in the tree, e.g. --move sgl-kernel/csrc/x.cuh=python/sglang/kernels/aot/csrc/x.cuh", m)
				}
				moves[old] = np
			}
			rep, err := port.Run(port.Options{Repo: repo, Series: s, From: from, To: to, Moves: moves})
			if err != nil {
				return err
			}
			w := c.App.Writer
			rep.WriteText(w)
			if jsonOut != "" {
				f, err := os.CreateTemp(filepath.Dir(jsonOut), ".port-*.json")
				if err != nil {
					return err
				}
				defer os.Remove(f.Name())
				if err := writeJSON(f, rep); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				// CreateTemp makes it 0600; a report is 0644, as the others.
				if err := os.Chmod(f.Name(), 0o644); err != nil {
					return err
				}
				if err := os.Rename(f.Name(), jsonOut); err != nil {
					return err
				}
			}
			if !rep.Clean {
				written := "no series was written"
				if jsonOut != "" {
					written += " (the report is in " + jsonOut + ")"
				}
				fmt.Fprintln(w, written+": resolve the conflicts above in a series of your own (or port from another series)")
				return cli.Exit("", exitFailure)
			}
			if out == "" {
				fmt.Fprintf(w, "a clean draft exists; write it with: %s\n", port.Command(s.Name, c.String("repo"), to, port.DraftDir(s.Name, to), cat.Dir))
				return nil
			}
			d, err := rep.Draft(s, filepath.Base(filepath.Clean(out)), c.Bool("seal"))
			if err != nil {
				return err
			}
			if err := d.Write(out); err != nil {
				return err
			}
			if d.Sealed {
				fmt.Fprintf(w, "wrote series %s in %s (sealed)\n", d.Name, out)
			} else {
				fmt.Fprintf(w, "wrote series %s in %s, unsealed: review every patch, then run `arpatch patches seal %s`\n", d.Name, out, out)
			}
			return nil
		},
	}
}

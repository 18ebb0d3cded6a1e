package main

import (
	"cmp"
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/checkout"
)

// newCmdRevert is revert, running its options with runF (revertRun).
func newCmdRevert(runF func(context.Context, checkout.RevertOptions, streams) error) *cli.Command {
	var f revertFlags
	return &cli.Command{
		Name:      "revert",
		Usage:     "restore upstream's exact bytes for every file apply changed",
		UsageText: "arpatch revert [--src DIR] [--patches-dir DIR] [--force] [--dry-run]",
		Description: `revert reads the apply state in DIR/.git/arpatch/state.json and writes back
each changed file from the pinned commit in git's object store, checking its
sha256 against the one apply recorded. The state is checked first, against
itself, the commit and the series it names (from --patches-dir when you
applied your own); a state that disagrees is refused and nothing changes.
It refuses when a patched file was edited since apply, so your edits are
never lost silently; --force discards them.

Examples:
   arpatch revert --dry-run
   arpatch revert
   arpatch revert --force`,
		Flags: []cli.Flag{
			srcFlag(&f.Src),
			patchesDirFlag(&f.PatchesDir),
			&cli.BoolFlag{Name: "force", Destination: &f.Force, Usage: "discard edits made to patched files since apply"},
			&cli.BoolFlag{Name: "dry-run", Destination: &f.DryRun, Usage: "report what would be restored, write nothing"},
		},
		Before: noArgs,
		Action: act(&f, revertOpts, runF),
	}
}

// revertFlags are revert's parsed flags.
type revertFlags struct {
	Src, PatchesDir string
	Force, DryRun   bool
	cmdline
}

// revertOpts turns revert's flags into checkout.RevertOptions.
func revertOpts(f revertFlags) (checkout.RevertOptions, error) {
	if f.Given["src"] {
		if err := checkPathFlag("src", expandHome(f.Src), true); err != nil {
			return checkout.RevertOptions{}, err
		}
	}
	cat, err := catalog(f.PatchesDir)
	if err != nil {
		return checkout.RevertOptions{}, err
	}
	return checkout.RevertOptions{Src: expandHome(f.Src), Catalog: cat, Force: f.Force, DryRun: f.DryRun}, nil
}

// revertRun reverts and prints what it restored.
func revertRun(_ context.Context, o checkout.RevertOptions, s streams) error {
	notePassedOver(s.Err, o.Catalog)
	rep, err := checkout.Revert(o)
	if err != nil {
		return err
	}
	w := s.Out
	if rep.State == nil {
		fmt.Fprintf(w, "%s: no apply state; nothing to revert\n", rep.Src)
		return nil
	}
	verb, discard := "restored", "discarded edits"
	if o.DryRun {
		verb, discard = "dry run: would restore", "dry run: would discard edits"
	}
	if len(rep.State.Files) == 0 {
		// A recipe with no series: only the record goes (at any
		// commit; checkout.Revert).
		verb = "forgot"
		if o.DryRun {
			verb = "dry run: would forget"
		}
		fmt.Fprintf(w, "%s the apply of recipe %s (series (none), at commit %s): it patched no file, so there is nothing to restore\n", verb, rep.State.Recipe, rep.State.Commit)
		return nil
	}
	fmt.Fprintf(w, "%s %d files of series %s to commit %s:\n", verb, len(rep.Restored), cmp.Or(rep.State.Series, "(none)"), rep.State.Commit)
	for _, p := range rep.Restored {
		fmt.Fprintf(w, "  %s\n", p)
	}
	for _, p := range rep.AlreadyUpstream {
		fmt.Fprintf(w, "  %s (already upstream's bytes)\n", p)
	}
	for _, d := range rep.Discarded {
		fmt.Fprintf(w, "%s: %s\n", discard, d)
	}
	return nil
}

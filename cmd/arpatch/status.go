package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/patches"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/checkout"
)

// newCmdStatus is status, running its options with runF (statusRun).
func newCmdStatus(runF func(context.Context, statusOptions, streams) error) *cli.Command {
	var f statusFlags
	return &cli.Command{
		Name:      "status",
		Usage:     "show the recipe, commit and patches applied to a checkout, and any drift",
		UsageText: "arpatch status [--src DIR] [--patches-dir DIR] [--json]",
		Description: `status reads DIR/.git/arpatch/state.json and compares every patched file with
the bytes apply wrote. It exits 1 when files drifted or HEAD moved, or
when tracked files have uncommitted changes (with or without apply state),
or while another arpatch (an apply, revert or build) holds the checkout's
lock: it then names that pid and vouches for nothing until it ends. It
notes a temp directory that a killed clone into DIR left beside it
(.NAME.arpatch-clone-PID-*), with the rm -rf that removes it, whether DIR
exists or not.

Examples:
   arpatch status
   arpatch status --json`,
		Flags:  []cli.Flag{srcFlag(&f.Src), patchesDirFlag(&f.PatchesDir), jsonFlag(&f.JSON)},
		Before: noArgs,
		Action: act(&f, statusOpts, runF),
	}
}

// statusFlags are status's parsed flags.
type statusFlags struct {
	Src, PatchesDir string
	JSON            bool
	cmdline
}

// statusOptions are every input of statusRun.
type statusOptions struct {
	Src     string
	Catalog *patches.Catalog
	JSON    bool
}

// statusOpts turns status's flags into options.
func statusOpts(f statusFlags) (statusOptions, error) {
	if f.Given["src"] {
		if err := checkPathFlag("src", expandHome(f.Src), true); err != nil {
			if n := staleClones(expandHome(f.Src)); len(n) > 0 {
				return statusOptions{}, usagef("%v\n%s", err, strings.Join(n, "\n"))
			}
			return statusOptions{}, err
		}
	}
	cat, err := catalog(f.PatchesDir)
	if err != nil {
		return statusOptions{}, err
	}
	return statusOptions{Src: expandHome(f.Src), Catalog: cat, JSON: f.JSON}, nil
}

// statusRun prints the checkout's status; a tree that drifted, or that has
// uncommitted changes, or that another arpatch is changing (its lock held),
// is a failure (exit 1).
func statusRun(_ context.Context, o statusOptions, s streams) error {
	notePassedOver(s.Err, o.Catalog)
	for _, n := range staleClones(o.Src) {
		fmt.Fprintln(s.Err, n)
	}
	rep, err := checkout.Status(o.Src, o.Catalog)
	if err != nil {
		return err
	}
	if o.JSON {
		if err := writeJSON(s.Out, rep); err != nil {
			return err
		}
	} else {
		printStatus(s.Out, rep)
	}
	if rep.Holder != 0 || (rep.State != nil && !rep.Buildable()) || (rep.State == nil && len(rep.Other) > 0) {
		return exitWith(exitFailure, "")
	}
	return nil
}

// staleClones returns a note for each temp directory a killed clone into
// src left beside it (checkout.StaleClones), with the command that
// removes it.
func staleClones(src string) []string {
	var notes []string
	for _, d := range checkout.StaleClones(src) {
		notes = append(notes, fmt.Sprintf("note: %s is what a clone into %s left when it was killed (its pid is gone); remove it with `%s`",
			d, src, shellq.Join([]string{"rm", "-rf", d})))
	}
	return notes
}

func printStatus(w io.Writer, rep *checkout.StatusReport) {
	fmt.Fprintf(w, "checkout %s\nHEAD     %s\n", rep.Src, rep.Head)
	if rep.Holder != 0 {
		// Its files and state may be changing: an apply or revert at
		// work is not an interrupted one, and its lock refuses a revert.
		fmt.Fprintf(w, "BUSY: arpatch pid %d holds this checkout's lock (.git/arpatch/lock): an apply, revert or build is in progress here; run `%s` again when it ends\n",
			rep.Holder, shellq.Join([]string{"arpatch", "status", "--src", rep.Src}))
		return
	}
	st := rep.State
	if st == nil {
		fmt.Fprintln(w, "state    none: arpatch has not applied anything here")
		for _, c := range rep.Other {
			fmt.Fprintf(w, "  uncommitted: %s\n", c)
		}
		return
	}
	fmt.Fprintf(w, "recipe   %s (%s, sha256 %s)\n", st.Recipe, st.RecipeSource, digest.Short(st.RecipeSHA256))
	fmt.Fprintf(w, "commit   %s\n", st.Commit)
	if k := rep.Kernel; k != nil {
		fmt.Fprintf(w, "kernel   %s (%s), what arpatch build reads\n", k, k.Name)
	}
	if rep.Head != st.Commit {
		fmt.Fprintf(w, "WARNING  HEAD moved since apply (was %s)\n", st.Commit)
	}
	fmt.Fprintf(w, "series   %s (%s)\n", cmp.Or(st.Series, "(none)"), st.SeriesReason)
	for _, p := range st.Patches {
		fmt.Fprintf(w, "  %s  sha256 %s\n", p.Name, digest.Short(p.SHA256))
	}
	fmt.Fprintf(w, "applied  %s by arpatch %s\n", st.AppliedAt.Format("2006-01-02 15:04:05 UTC"), st.ArpatchVersion)
	revert, save := revertLine(rep)
	if st.Reverting {
		fmt.Fprintf(w, "INTERRUPTED: a revert was killed while restoring files; some may be restored, some not. Run `%s` again to finish it%s\n", revert, save)
	}
	if st.Incomplete {
		fmt.Fprintf(w, "INTERRUPTED: this apply did not finish writing files (it was killed, or a write and its rollback both failed); some may be patched, some not. Run `%s`%s\n", revert, save)
	}
	printFiles(w, rep)
	for _, n := range rep.SeriesChanged {
		fmt.Fprintf(w, "note: %s differs from this arpatch's copy of the series; revert and apply again to take the new one\n", n)
	}
	printUnrecorded(w, rep)
	switch {
	case rep.Buildable():
		fmt.Fprintln(w, "clean: the tree is exactly what apply wrote")
	case rep.Clean():
		fmt.Fprintf(w, "NOT CLEAN: the patched files are as apply wrote them, but what is listed above would reach a build unrecorded (arpatch build refuses it). %s\n", strings.Join(rep.Remedies(), "; "))
	case rep.Head != st.Commit:
		fmt.Fprintf(w, "NOT CLEAN: HEAD is %s, not the commit the series was applied at; check that out again (`%s`)\n", rep.Head, shellq.Join([]string{"git", "-C", rep.Src, "checkout", "--detach", st.Commit}))
	default:
		fmt.Fprintf(w, "NOT CLEAN: see above; `%s` restores upstream's bytes%s\n", revert, save)
	}
}

// revertLine is the revert that restores rep's tree, with --force when
// patched files hold edits (which revert refuses to lose otherwise), and
// then save: how to save those edits first.
func revertLine(rep *checkout.StatusReport) (revert, save string) {
	revert = shellq.Join([]string{"arpatch", "revert", "--src", rep.Src})
	if len(rep.Edits()) > 0 {
		revert += " --force"
		save = fmt.Sprintf(" (patched files hold edits, which revert discards only with --force: save them first with `%s > my.diff`)",
			shellq.Join([]string{"git", "-C", rep.Src, "diff"}))
	}
	return revert, save
}

// printFiles prints each file the apply wrote, ok or how it drifted, and
// each hunk that applied at an offset.
func printFiles(w io.Writer, rep *checkout.StatusReport) {
	st := rep.State
	drifted := map[string]string{}
	for _, d := range rep.Drift {
		drifted[d.Path] = d.String()
	}
	fmt.Fprintf(w, "files    %d\n", len(st.Files))
	for _, f := range st.Files {
		state := "ok"
		if d, ok := drifted[f.Path]; ok {
			state = "DRIFT: " + d
		}
		fmt.Fprintf(w, "  %-6s %s  %s\n", f.Op, f.Path, state)
	}
	for _, o := range st.Offsets {
		fmt.Fprintf(w, "  offset %+d: %s %s %s\n", o.Offset, o.Patch, o.Path, o.Hunk)
	}
}

// printUnrecorded prints what would reach a build unrecorded: other
// uncommitted changes, untracked files under the kernel, skip-worktree
// files and files the wheel's package does not track.
func printUnrecorded(w io.Writer, rep *checkout.StatusReport) {
	if len(rep.Other) > 0 {
		fmt.Fprintf(w, "other uncommitted changes (%d):\n", len(rep.Other))
		for _, c := range rep.Other {
			fmt.Fprintf(w, "  %s\n", c)
		}
	}
	if u := rep.KernelUntracked(); len(u) > 0 {
		fmt.Fprintf(w, "untracked under %s (%d): arpatch build refuses these, as they could reach the wheel\n", rep.Kernel, len(u))
		for _, p := range u {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	for _, p := range rep.SkipWorktree {
		fmt.Fprintf(w, "skip-worktree: %s (git status cannot see edits to it)\n", p)
	}
	for _, p := range rep.PackageExtra {
		fmt.Fprintf(w, "not tracked in the wheel's package: %s\n", p)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/progress"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
	"github.com/arpatch/arpatch/recipes"
)

func newCmdPatches() *cli.Command {
	return &cli.Command{
		Name:  "patches",
		Usage: "list, check and seal patch series",
		Subcommands: []*cli.Command{
			newCmdPatchesList(patchesListRun),
			newCmdPatchesCheck(patchesCheckRun),
			newCmdPort(portRun),
			newCmdPatchesSeal(patchesSealRun),
		},
	}
}

// newCmdPatchesList is patches list, running its catalog with runF
// (patchesListRun).
func newCmdPatchesList(runF func(context.Context, *patches.Catalog, streams) error) *cli.Command {
	var f patchesListFlags
	return &cli.Command{
		Name:      "list",
		Usage:     "list the known series with their patches",
		UsageText: "arpatch patches list [--patches-dir DIR]",
		Description: `Lists each series with its family, the commits it was tested on and its
patches with their sha256: those built into arpatch, or those under
--patches-dir.

Examples:
   arpatch patches list
   arpatch patches list --patches-dir patches/sglang`,
		Flags:  []cli.Flag{patchesDirFlag(&f.PatchesDir)},
		Before: noArgs,
		Action: act(&f, patchesListOpts, runF),
	}
}

// newCmdPatchesCheck is patches check, running its options with runF
// (patchesCheckRun).
func newCmdPatchesCheck(runF func(context.Context, patchesCheckOptions, streams) error) *cli.Command {
	var f patchesCheckFlags
	return &cli.Command{
		Name:      "check",
		Usage:     "report how each series fits each commit (exact, offset, applied, partial, conflict), writing nothing",
		UsageText: "arpatch patches check --repo PATH --commit REV|A..B [--commit ...] [--series NAME...] [--strict] [--details | --summary | --json]",
		Description: `check reads files straight from the repository's object store (a checkout or
a bare mirror), so nothing is checked out or written. Each commit may be a
hash (abbreviated as git takes one, from 4 hex digits: refused when it starts
several commits), branch or tag, or a range A..B, both sides given: the
commits on B's first-parent chain after A, oldest first (git log
--first-parent --reverse A..B; A..A holds none, an error). The table has one
line per series and commit; each conflict's hunk, moved file and port
command follow it for one commit, and with --details; --summary prints one
line per series, its runs of commits with one verdict. A patch whose file
is gone reads moved(FIT), deleted, ambiguous (patches port --move picks) or
not-followed (the history to follow it is missing: a shallow clone, or no
tested_on commit). A family's series are one job for different upstream
eras, so check exits 0 when at each commit some series of each family
checked fits (exact, offset or applied), and 1 otherwise, naming what has
none; --strict exits 1 unless every series fits every commit and the gate
rule judged every fit whole (no note of something left unchecked).

Examples:
   arpatch patches check --repo ~/mirrors/sglang.git --commit 84118acf50b3a4c74e85e9ff9033792552de1a76
   arpatch patches check --repo sglang --commit main --series pcie-2026-08 --json
   arpatch patches check --repo ~/mirrors/sglang.git --commit cce5873513fe..c32c4ef79cf5 --summary`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "repo", Destination: &f.Repo, Usage: "local repository `PATH` (checkout or bare mirror)", Required: true},
			&cli.StringSliceFlag{Name: "commit", Destination: &f.Commits, Usage: "commit `REV` to check; repeat for several", Required: true},
			&cli.StringSliceFlag{Name: "series", Destination: &f.Series, Usage: "check only series `NAME`; repeat for several"},
			&cli.BoolFlag{Name: "strict", Destination: &f.Strict, Usage: "exit 1 unless every series fits every commit, each judged whole by the gate rule"},
			&cli.BoolFlag{Name: "details", Destination: &f.Details, Usage: "after the table, each conflict's hunk and each moved file (the default when one commit is checked)"},
			&cli.BoolFlag{Name: "summary", Destination: &f.Summary, Usage: "one line per series instead of the table: its runs of consecutive commits with one verdict"},
			patchesDirFlag(&f.PatchesDir), jsonFlag(&f.JSON),
		},
		Before: noArgs,
		Action: act(&f, patchesCheckOpts, runF),
	}
}

// newCmdPatchesSeal is patches seal, running its directories with runF
// (patchesSealRun).
func newCmdPatchesSeal(runF func(context.Context, []string, streams) error) *cli.Command {
	var f patchesSealFlags
	return &cli.Command{
		Name:      "seal",
		Usage:     "record the sha256 of every patch in a series directory's series.toml",
		UsageText: "arpatch patches seal DIR...",
		Description: `After editing a patch, seal writes its new sha256 into series.toml, so that
apply accepts it. Apply refuses any patch whose bytes differ from the
recorded sha256. arpatch applies the series built into it: an edited copy
of one (in a checkout of arpatch) runs with --patches-dir patches/sglang,
or once arpatch is rebuilt, and seal says so.

Examples:
   arpatch patches seal patches/sglang/pcie-2026-04`,
		Action: act(&f, patchesSealOpts, runF),
	}
}

// patchesListFlags are patches list's parsed flags.
type patchesListFlags struct{ PatchesDir string }

// patchesListOpts returns the catalog patches list prints.
func patchesListOpts(f patchesListFlags) (*patches.Catalog, error) { return catalog(f.PatchesDir) }

// patchesListRun prints every series of cat with its patches.
func patchesListRun(_ context.Context, cat *patches.Catalog, s streams) error {
	notePassedOver(s.Err, cat)
	for _, sr := range cat.Series {
		fmt.Fprintf(s.Out, "%s  family %s  (%s)\n  %s\n  tested on: %s\n", sr.Name, sr.Family, sr.Dir, sr.Description, strings.Join(sr.TestedOn, ", "))
		for _, p := range sr.Patches {
			fmt.Fprintf(s.Out, "    %s  sha256 %s  provides %s\n", p.File, digest.Short(p.SHA256), strings.Join(p.Provides, ","))
		}
	}
	return nil
}

// patchesCheckFlags are patches check's parsed flags.
type patchesCheckFlags struct {
	Repo, PatchesDir               string
	Commits, Series                cli.StringSlice
	Strict, Details, Summary, JSON bool
}

// patchesCheckOptions are every input of patchesCheckRun.
type patchesCheckOptions struct {
	// Repo is the repository's path, ~ expanded; RepoArg is --repo as
	// given, for the commands the report prints.
	Repo, RepoArg string
	Commits       []string
	Catalog       *patches.Catalog
	// Series: only these series of Catalog (nil: all).
	Series []string
	Strict bool
	JSON   bool
	// Details prints the detail blocks (conflicting hunks, moves, port
	// commands) after the table; Summary prints one line per series
	// instead (printDrift, printSummary).
	Details, Summary bool
}

// patchesCheckOpts turns patches check's flags into options; a --series
// that the catalog lacks is a usage error.
func patchesCheckOpts(f patchesCheckFlags) (patchesCheckOptions, error) {
	cat, err := catalog(f.PatchesDir)
	if err != nil {
		return patchesCheckOptions{}, err
	}
	for _, n := range f.Series.Value() {
		if _, err := seriesFlag(cat, n); err != nil {
			return patchesCheckOptions{}, err
		}
	}
	if f.JSON && (f.Details || f.Summary) {
		return patchesCheckOptions{}, usagef("--json holds every detail; --details and --summary shape the text, so pass one or the other")
	}
	if f.Details && f.Summary {
		return patchesCheckOptions{}, usagef("--summary prints one line per series and --details every hunk after the table: pass one")
	}
	return patchesCheckOptions{Repo: expandHome(f.Repo), RepoArg: f.Repo, Commits: f.Commits.Value(), Catalog: cat, Series: f.Series.Value(), Strict: f.Strict, JSON: f.JSON,
		Details: f.Details, Summary: f.Summary}, nil
}

// patchesCheckRun checks each series at each commit and prints the fits;
// a family without a fitting series at a commit (with Strict: any series
// that does not fit) is a failure (exit 1), naming it.
func patchesCheckRun(ctx context.Context, o patchesCheckOptions, s streams) error {
	notePassedOver(s.Err, o.Catalog)
	if o.Catalog.Dir == "" {
		// The built-in series are checked: say, as apply and seal do,
		// where a checkout's patches/sglang copy differs from them.
		names := o.Series
		if len(names) == 0 {
			for _, se := range o.Catalog.Series {
				names = append(names, se.Name)
			}
		}
		for _, n := range names {
			if note := builtInCopyNote(shippedDir, n); note != "" {
				fmt.Fprintln(s.Err, note)
			}
		}
	}
	var show func(done, total int)
	if progress.IsTerminal(s.Err) {
		// As git: a count on a terminal only, for a check of several
		// commits (a range may take minutes).
		c := progress.New(s.Err, "commits")
		defer c.Done(true)
		show = func(n, total int) {
			if total > 1 {
				c.Set("checking", n, total)
			}
		}
	}
	rows, err := checkout.CheckCommitsContext(ctx, o.Repo, o.Commits, o.Catalog, o.Series, show)
	if err != nil {
		return repoRemedy(err, recipes.DefaultUpstreamURL)
	}
	if o.JSON {
		if err := writeJSON(s.Out, driftJSON(rows)); err != nil {
			return err
		}
	} else if o.Summary {
		printSummary(s.Out, rows)
	} else {
		details := o.Details || commitCount(rows) == 1
		if n := printDrift(s.Out, rows, o.RepoArg, o.Catalog.Dir, details); n > 0 && !details {
			fmt.Fprintf(s.Out, "\n%s of conflicting hunks, moved files and port commands: add --details\n", textfmt.Plural(n, "detail", "details"))
		}
	}
	if unfit := checkout.Unfit(rows, o.Catalog, o.Strict); len(unfit) > 0 {
		const shown = 5
		if len(unfit) > shown+1 && !o.Details {
			unfit = append(unfit[:shown:shown], fmt.Sprintf("... and %d more (--details lists every one)", len(unfit)-shown))
		}
		return exitWith(exitFailure, strings.Join(unfit, "\n"))
	}
	return nil
}

// commitCount is how many commits rows cover.
func commitCount(rows []checkout.DriftRow) int {
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Commit] = true
	}
	return len(seen)
}

// printSummary prints one line per series, in the order the rows name
// them: how many of the commits it fits (exact, offset or applied), then
// its runs of consecutive commits (in the order checked) with one
// verdict, each as FIRST..LAST (N) VERDICT.
func printSummary(w io.Writer, rows []checkout.DriftRow) {
	type run struct {
		first, last string
		n           int
		verdict     patches.SeriesVerdict
	}
	var order []string
	runs := map[string][]run{}
	fits, total := map[string]int{}, map[string]int{}
	for _, r := range rows {
		rs, ok := runs[r.Series]
		if !ok {
			order = append(order, r.Series)
		}
		total[r.Series]++
		if r.Applies() {
			fits[r.Series]++
		}
		if k := len(rs) - 1; k >= 0 && rs[k].verdict == r.Verdict {
			rs[k].last, rs[k].n = r.Commit, rs[k].n+1
		} else {
			rs = append(rs, run{r.Commit, r.Commit, 1, r.Verdict})
		}
		runs[r.Series] = rs
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERIES\tFITS\tRUNS (first..last commit (count) verdict, in the order checked)")
	for _, s := range order {
		var parts []string
		for _, r := range runs[s] {
			span := githash.Hash(r.first).Short()
			if r.n > 1 {
				span += ".." + githash.Hash(r.last).Short()
			}
			parts = append(parts, fmt.Sprintf("%s (%d) %s", span, r.n, r.verdict))
		}
		fmt.Fprintf(tw, "%s\t%d of %d\t%s\n", s, fits[s], total[s], strings.Join(parts, "; "))
	}
	tw.Flush()
}

// patchesSealFlags are patches seal's arguments: series directories.
type patchesSealFlags struct{ cmdline }

// patchesSealOpts returns the directories to seal: at least one, none
// looking like a flag (seal has none).
func patchesSealOpts(f patchesSealFlags) ([]string, error) {
	if len(f.Args) == 0 {
		return nil, usagef("seal needs at least one series directory, e.g. patches/sglang/pcie-2026-04")
	}
	for _, a := range f.Args {
		if strings.HasPrefix(a, "-") {
			return nil, usagef("seal takes directories only, got %q (seal has no flags)", a)
		}
	}
	return f.Args, nil
}

// patchesSealRun records each patch's sha256 in each directory's
// series.toml and says what changed.
func patchesSealRun(_ context.Context, dirs []string, s streams) error {
	for _, dir := range dirs {
		// The series is read as apply reads it, its directory by name:
		// series.toml's name must match it.
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		parent, base := filepath.Split(abs)
		changed, err := patches.Seal(os.DirFS(parent), base, func(name string, data []byte) error {
			return safefs.WriteFile(filepath.Join(parent, name), data, 0o644)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if len(changed) == 0 {
			fmt.Fprintf(s.Out, "%s: all sha256 up to date\n", dir)
		}
		for _, n := range changed {
			fmt.Fprintf(s.Out, "%s: sealed %s\n", dir, n)
		}
		if n := builtInCopyNote(filepath.Dir(filepath.Clean(dir)), base); n != "" {
			fmt.Fprintln(s.Err, n)
		}
	}
	return nil
}

// printDrift prints the table, one line per series and commit, and with
// details the blocks that explain it (a clean port's command, each move,
// each conflicting hunk). It returns how many blocks there are, printed
// or not.
func printDrift(w io.Writer, rows []checkout.DriftRow, repo, patchesDir string, details bool) int {
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
				case checkout.WhyMoved:
					s = f.Patch + "=" + string(why) + "(" + fitText(r.Moved.Fits[i]) + ")"
				case checkout.WhyInPlace:
				default:
					s = f.Patch + "=" + strings.ReplaceAll(string(why), " ", "-")
				}
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(w, "%-14s %-20s %-9s %s\n", r.Series, commit, r.Verdict, strings.Join(parts, " "))
	}
	printNotes(w, rows)
	blocks := 0
	if !details {
		w = io.Discard
	}
	for _, r := range rows {
		if r.PortClean {
			blocks++
			fmt.Fprintf(w, "\n%s at %s:\n  the hunks do not fit as they are, but a port (three-way merge) is clean; write it with: %s\n", r.Series, githash.Hash(r.Commit).Short(), port.Command(r.Series, repo, r.Commit, port.DraftDir(r.Series, r.Commit), patchesDir))
		}
		if r.Moved != nil {
			blocks++
			fmt.Fprintf(w, "\n%s at %s:\n  %s\n", r.Series, githash.Hash(r.Commit).Short(), strings.Join(r.Moved.Explain(r.Series, repo, r.Commit, patchesDir), "\n  "))
		}
		for i, f := range r.Fits {
			if movedAway(r, f) {
				if r.Moved.Why[i] != checkout.WhyMoved {
					continue // the lines above say what became of its files
				}
				f = r.Moved.Fits[i] // how it fits at the new path
			}
			if f.Fit == patches.FitConflict {
				blocks++
				fmt.Fprintf(w, "\n%s at %s:\n  %s\n", r.Series, githash.Hash(r.Commit).Short(), strings.ReplaceAll(f.Err.Error(), "\n", "\n  "))
			}
		}
	}
	return blocks
}

// printNotes prints, once each, what the built-in gate rule could not
// check on this machine for the rows.
func printNotes(w io.Writer, rows []checkout.DriftRow) {
	seen := map[string]bool{}
	for _, r := range rows {
		for _, n := range r.Notes {
			if !seen[n] {
				seen[n] = true
				fmt.Fprintf(w, "note: gate rule: %s\n", n)
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
		s += "(max " + textfmt.Plural(f.MaxOffset(), "line", "lines") + ")"
	}
	return s
}

// driftJSONRow is the JSON shape of one series x commit check.
type driftJSONRow struct {
	Series  string                `json:"series"`
	Commit  string                `json:"commit"`
	Rev     string                `json:"rev"`
	Verdict patches.SeriesVerdict `json:"verdict"`
	Error   string                `json:"error,omitempty"`
	Patches []driftJSONPatch      `json:"patches"`
	// Moved: files the series changes that moved since its tested_on
	// commit, and how each patch fits at the new paths.
	Moved *driftJSONMoved `json:"moved,omitempty"`
	// PortClean: a conflict here that a port (three-way merge) resolves.
	PortClean bool `json:"port_clean,omitempty"`
	// Notes: what the built-in gate rule could not check on this machine.
	Notes []string `json:"notes,omitempty"`
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
		jr := driftJSONRow{Series: r.Series, Commit: r.Commit, Rev: r.Rev, Verdict: r.Verdict, Patches: []driftJSONPatch{}, PortClean: r.PortClean || (r.Moved != nil && r.Moved.Clean), Notes: r.Notes}
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

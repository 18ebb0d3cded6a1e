package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
)

// historyShowFlags are history show's parsed flags: the run, --db and
// --json.
type historyShowFlags struct {
	historyRunFlags
	JSON bool
}

// historyShowOptions are every input of historyShowRun.
type historyShowOptions struct {
	historyRunOptions
	JSON bool // the run as JSON (history.Detail) instead of text
}

func historyShowOpts(f historyShowFlags) (historyShowOptions, error) {
	o, err := historyRunOpts("show")(f.historyRunFlags)
	return historyShowOptions{historyRunOptions: o, JSON: f.JSON}, err
}

// historyShowRun prints one run: as text for a person, or with --json
// as history.Detail.
func historyShowRun(_ context.Context, o historyShowOptions, st streams) error {
	return withHistory(o.DB, false, st, func(s *history.Store) error {
		d, err := s.Show(o.Run)
		if err != nil {
			return err
		}
		gone, err := s.Gone([]history.Run{d.Run})
		if err != nil {
			return err
		}
		if o.JSON {
			if why := gone[d.Run.ID]; why != "" { // as history list and printRun report it
				d.Run.Status, d.Run.Verdict = history.Killed, why+"; the next nightly marks this run incomplete"
			}
			return writeJSON(st.Out, d)
		}
		printRun(st.Out, d, gone[d.Run.ID])
		return nil
	})
}

// printRun writes a run as text: the run's line and its identity, the
// environment, the drift per series, commit and patch (with each
// conflict's detail indented), the checks, and per arm its trials with
// every metric of stats.Table. gone, when not "", is why a running run's
// nightly looks dead (history.Store.Gone): the run's line says so, as
// history list does.
func printRun(w io.Writer, d *history.Detail, gone string) {
	r := d.Run
	exit := "-"
	if r.ExitCode != nil {
		exit = fmt.Sprint(*r.ExitCode)
	}
	status, verdict := string(r.Status), r.Verdict
	if gone != "" {
		status, verdict = string(history.Killed), gone+"; the next nightly marks this run incomplete"
	}
	if verdict != "" {
		verdict = ", " + verdict
	}
	fmt.Fprintf(w, "run %d: %s, exit %s%s\n", r.ID, status, exit, verdict)
	if r.Accepted {
		fmt.Fprintln(w, "  accepted as the reference of its hardware and workload")
	}
	finished := "-"
	if r.FinishedAt != nil {
		finished = r.FinishedAt.UTC().Format(time.DateTime)
	}
	for _, kv := range [][2]string{
		{"started", r.StartedAt.UTC().Format(time.DateTime) + " UTC (finished " + finished + ", pid " + fmt.Sprint(r.PID) + ")"},
		{"hardware", r.HardwareKey}, {"workload", r.Workload}, {"sglang", sglangLine(r)},
		{"series", r.SeriesHash}, {"arpatch", r.ArpatchVersion},
	} {
		if kv[1] != "" {
			fmt.Fprintf(w, "  %-9s %s\n", kv[0], kv[1])
		}
	}
	if len(r.Env) > 0 {
		fmt.Fprintln(w, "environment:")
		for _, k := range slices.Sorted(maps.Keys(r.Env)) {
			fmt.Fprintf(w, "  %s=%s\n", k, r.Env[k])
		}
	}
	printRunDrift(w, d.Drift)
	if len(d.Checks) > 0 {
		fmt.Fprintln(w, "checks:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, c := range d.Checks {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Status, c.Kind, c.Name, firstLine(c.Detail))
		}
		tw.Flush()
	}
	for _, a := range d.Arms {
		printArm(w, a)
	}
}

// printRunDrift prints the drift a run recorded: a row per series, commit
// and patch with its fit, then each conflict's detail indented.
func printRunDrift(w io.Writer, drift []history.DriftRecord) {
	if len(drift) == 0 {
		return
	}
	fmt.Fprintln(w, "drift:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SERIES\tCOMMIT\tREV\tPATCH\tFIT")
	for _, x := range drift {
		fmt.Fprintf(tw, "  %s\t%.12s\t%s\t%s\t%s\n", x.Series, x.Commit, x.Rev, x.Patch, x.Fit)
	}
	tw.Flush()
	for _, x := range drift {
		if x.Detail != "" {
			fmt.Fprintf(w, "  %s %s at %.12s:\n    %s\n", x.Series, x.Patch, x.Commit, strings.ReplaceAll(strings.TrimRight(x.Detail, "\n"), "\n", "\n    "))
		}
	}
}

// printArm prints an arm's line (its recipe, build, agreement and whether
// it is INVALID) and its trials with every metric of stats.Table ("-"
// for an INVALID arm's, "n/a" for one not recorded).
func printArm(w io.Writer, a history.ArmDetail) {
	mark := ""
	if a.Invalid {
		mark = " INVALID: its figures are no result"
	}
	agree := ""
	if a.Agreement != nil {
		agree = fmt.Sprintf(", outputs agree %.0f%%", *a.Agreement*100)
	}
	build := ", no build recorded"
	if a.BuildKey != "" {
		build = fmt.Sprintf(", build %.12s", a.BuildKey)
	}
	fmt.Fprintf(w, "arm %s (recipe %s%s%s)%s\n", a.Name, a.Recipe, build, agree, mark)
	if len(a.Trials) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	h := []string{"  trial", "conc", "wall s", "errors"}
	for _, m := range stats.Table {
		h = append(h, m.Label)
	}
	fmt.Fprintln(tw, strings.Join(h, "\t"))
	for _, t := range a.Trials {
		row := []string{fmt.Sprintf("  %d", t.Index), fmt.Sprint(t.Concurrency), fmt.Sprintf("%.2f", t.Wall), fmt.Sprint(t.Errors)}
		for _, m := range stats.Table {
			v, ok := t.Values[m.Name]
			switch {
			case a.Invalid:
				row = append(row, "-")
			case ok:
				row = append(row, fmt.Sprintf("%.*f", m.Prec, v))
			default:
				row = append(row, "n/a")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// sglangLine is the commit a run built and the upstream head it saw, as
// far as the run recorded them ("" for neither).
func sglangLine(r history.Run) string {
	if r.UpstreamHead == "" {
		return r.SGLangCommit
	}
	return strings.TrimSpace(r.SGLangCommit + " (upstream head " + r.UpstreamHead + ")")
}

// firstLine is s up to its first newline, with " ..." when more follows.
func firstLine(s string) string {
	if f, _, more := strings.Cut(s, "\n"); more {
		return f + " ..."
	}
	return s
}

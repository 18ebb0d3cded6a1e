package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/chart"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/statedir"
	"github.com/arpatch/arpatch/nightly"
	"github.com/arpatch/arpatch/recipes"
)

// newCmdNightly is nightly, running its options with runF (nightlyRun).
func newCmdNightly(runF func(context.Context, nightlyOptions, streams) error) *cli.Command {
	var f nightlyFlags
	return &cli.Command{
		Name:  "nightly",
		Usage: "drift check, cached A/B build, bench, history and regression verdict, for cron and CI",
		UsageText: `arpatch nightly --config nightly.toml [--skip-build] [--skip-bench]
                [--github-benchmark PREFIX] [--bencher FILE] [--junit FILE] [--summary FILE]`,
		Description: `Each run: (1) fetches the tracked ref into the upstream repository (when
upstream.fetch is set) and checks every series against the pinned commit and
the ref's head, recording exact / offset / applied / conflict per patch;
(2) builds arms A and B through the build cache (arpatch ab build);
(3) benches them (arpatch bench); (4) stores everything in the history
(SQLite, or a fleet's PostgreSQL when history.path is a postgres:// URL);
(5) decides regressions: each arm's metrics against the last
history.window complete runs on the same hardware key (Mann-Whitney U and a
relative threshold, 3% by default), and B against A tonight; (6) writes the
reports (output dir: nightly.json and summary.md; and the CI files).

A lock next to the history database keeps two nightlies off one history (on
PostgreSQL, one host's; the hosts of a fleet run at once). When a postgres://
history cannot be reached or written, the run is kept in history.keep, exits
4 saying so, and the next nightly that reaches the server sends it. A
run killed midway is marked incomplete by the next one and is never a
reference; so is a night that failed its checks (exit 1), until
"arpatch history accept RUN" makes a run the new reference.

Exit codes: 0 no regression, 1 regression or invalid output, 3 drift (the
series no longer applies), 4 infrastructure failure (fetch, build, server,
a history that cannot be read or written), 2 usage. On drift the verdict says whether arpatch patches port finds a
clean draft for the commit, with the command that writes it.

Examples:
   arpatch nightly --config nightly.toml
   arpatch nightly --config nightly.toml --skip-build --skip-bench      # drift only
   arpatch nightly --config nightly.toml --junit junit.xml --summary "$GITHUB_STEP_SUMMARY"`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Destination: &f.Config, Usage: "nightly `FILE` (TOML; see docs/nightly.md)", Required: true},
			&cli.BoolFlag{Name: "skip-build", Destination: &f.SkipBuild, Usage: "skip the build step"},
			&cli.BoolFlag{Name: "skip-bench", Destination: &f.SkipBench, Usage: "skip the bench step (and so the regression verdict)"},
			&cli.StringFlag{Name: "github-benchmark", Destination: &f.GithubBenchmark, Usage: "github-action-benchmark `PREFIX`: writes PREFIX-bigger.json and PREFIX-smaller.json"},
			&cli.StringFlag{Name: "bencher", Destination: &f.Bencher, Usage: "Bencher Metric Format `FILE`"},
			&cli.StringFlag{Name: "junit", Destination: &f.JUnit, Usage: "JUnit XML `FILE`"},
			&cli.StringFlag{Name: "summary", Destination: &f.Summary, Usage: "also write the markdown summary to `FILE` (e.g. $GITHUB_STEP_SUMMARY)"},
		},
		Before: noArgsExcept("summary"),
		Action: act(&f, nightlyOpts, runF),
	}
}

// nightlyFlags are nightly's parsed flags.
type nightlyFlags struct {
	Config          string
	SkipBuild       bool
	SkipBench       bool
	GithubBenchmark string
	Bencher         string
	JUnit           string
	Summary         string
	cmdline
}

// nightlyOptions are every input of nightlyRun.
type nightlyOptions struct {
	// Run is the run, but for its Log and Out, which are the streams.
	Run nightly.Options
	// ConfigPath is --config's file, ~ expanded.
	ConfigPath string
	// Notes are said on stderr before the run.
	Notes []string
}

// nightlyOpts reads --config and checks the report files (the config's
// and the flags'); a bad config or report path is a usage error.
func nightlyOpts(f nightlyFlags) (nightlyOptions, error) {
	path := expandHome(f.Config)
	cfg, err := nightly.LoadConfig(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A new user's first nightly.
		return nightlyOptions{}, usagef("%v: docs/nightly.md (Configuration) has every key with its default, and `go run ./nightly/demo -dir /tmp/nightly-demo`, in arpatch's checkout, writes a working one to start from (/tmp/nightly-demo/nightly.toml)", err)
	}
	if err != nil {
		return nightlyOptions{}, usageError{err}
	}
	if p := f.GithubBenchmark; p != "" && strings.HasSuffix(p, "/") {
		return nightlyOptions{}, usagef("--github-benchmark %s: give a file prefix, e.g. out/bench (writes out/bench-bigger.json and out/bench-smaller.json)", p)
	}
	extra := map[string]string{"github-benchmark": expandHome(f.GithubBenchmark), "bencher": expandHome(f.Bencher), "junit": expandHome(f.JUnit), "summary": f.Summary}
	if err := nightly.CheckOutputs(cfg, extra); err != nil {
		return nightlyOptions{}, usageError{err}
	}
	var notes []string
	if f.Given["summary"] && strings.TrimSpace(f.Summary) == "" {
		// "$GITHUB_STEP_SUMMARY" outside GitHub Actions: the summary
		// still goes to the reports directory.
		extra["summary"] = ""
		notes = append(notes, "note: --summary is empty ($GITHUB_STEP_SUMMARY is set inside GitHub Actions only), so the markdown summary goes only to summary.md in the reports directory")
	}
	return nightlyOptions{ConfigPath: path, Notes: notes, Run: nightly.Options{
		Config: cfg, SkipBuild: f.SkipBuild, SkipBench: f.SkipBench,
		Version: arpatchVersion(), Launcher: launcher(), Reports: extra,
	}}, nil
}

// nightlyRun runs the nightly and exits with its code: a config error
// found during the run is a usage error naming the config file.
func nightlyRun(ctx context.Context, o nightlyOptions, s streams) error {
	for _, n := range o.Notes {
		fmt.Fprintln(s.Err, n)
	}
	ro := o.Run
	ro.Log, ro.Out = s.Err, s.Out
	code, err := nightly.Execute(ctx, ro)
	var ce *nightly.ConfigError
	switch {
	case errors.As(err, &ce) && strings.HasPrefix(err.Error(), o.ConfigPath+":"):
		return usageError{err} // it names the file and line (Config.At)
	case errors.As(err, &ce):
		return usagef("%s: %w", o.ConfigPath, err)
	case err != nil:
		return exitWith(code, err.Error())
	case code != 0:
		return exitWith(code, "")
	}
	return nil
}

func newCmdHistory() *cli.Command {
	return &cli.Command{
		Name:  "history",
		Usage: "list, show, export, plot and accept nightly runs",
		Subcommands: []*cli.Command{
			newCmdHistoryList(historyListRun),
			newCmdHistoryShow(historyShowRun),
			newCmdHistoryExport(historyExportRun),
			newCmdHistoryPlot(historyPlotRun),
			newCmdHistoryAccept(historyAcceptRun),
		},
	}
}

// dbFlag is history's --db (alias --history), writing into dst.
func dbFlag(dst *string) cli.Flag {
	return &cli.StringFlag{Name: "db", Aliases: []string{"history"}, Destination: dst, Usage: "history database `FILE`, or a fleet's shared history as a postgres:// URL (default: history.db in the state directory, where a nightly writes it unless its history.path says otherwise)"}
}

// newCmdHistoryList is history list, running its options with runF (historyListRun).
func newCmdHistoryList(runF func(context.Context, historyListOptions, streams) error) *cli.Command {
	var f historyListFlags
	return &cli.Command{
		Name: "list", Usage: "list runs, newest first", UsageText: "arpatch history list [--db FILE] [--limit N]",
		Description: `Examples:
   arpatch history list
   arpatch history list --limit 1`,
		Flags: []cli.Flag{dbFlag(&f.DB), &cli.IntFlag{Name: "limit", Destination: &f.Limit, Value: 30, Usage: "list the newest `N` runs; 0 lists every run"}}, Before: noArgs,
		Action: act(&f, historyListOpts, runF),
	}
}

// newCmdHistoryShow is history show, running its options with runF (historyShowRun).
func newCmdHistoryShow(runF func(context.Context, historyShowOptions, streams) error) *cli.Command {
	var f historyShowFlags
	return &cli.Command{
		Name: "show", Usage: "show one run: environment, drift, arms, checks", UsageText: "arpatch history show RUN [--db FILE] [--json]",
		Description: `Text for a person; --json gives the run as JSON (run, drift, checks, arms
with their trials' metrics). An INVALID arm's figures are not shown.

Examples:
   arpatch history show 1
   arpatch history show 1 --json`,
		Flags:  []cli.Flag{dbFlag(&f.DB), jsonFlag(&f.JSON)},
		Action: act(&f, historyShowOpts, runF),
	}
}

// newCmdHistoryExport is history export, running its options with runF (historyExportRun).
func newCmdHistoryExport(runF func(context.Context, historyExportOptions, streams) error) *cli.Command {
	var f historyExportFlags
	return &cli.Command{
		Name: "export", Usage: "export every trial as CSV or JSON", UsageText: "arpatch history export --format csv|json [--db FILE]",
		Description: `One row per trial: the run, hardware, workload and commit, the arm, and
every metric of the bench table. An INVALID arm's rows say so.

Examples:
   arpatch history export --format csv
   arpatch history export --format json`,
		Flags: []cli.Flag{dbFlag(&f.DB), &cli.StringFlag{Name: "format", Destination: &f.Format, Value: "csv", Usage: "report `FORMAT`: csv or json"}}, Before: noArgs,
		Action: act(&f, historyExportOpts, runF),
	}
}

// newCmdHistoryPlot is history plot, running its options with runF (historyPlotRun).
func newCmdHistoryPlot(runF func(context.Context, historyPlotOptions, streams) error) *cli.Command {
	var f historyPlotFlags
	return &cli.Command{
		Name: "plot", Usage: "plot a metric over time per arm, with CI bands and drift/regression marks, or against concurrency",
		UsageText: `arpatch history plot --metric tok_s --out FILE.svg|png [--hardware KEY] [--workload KEY] [--concurrency N] [--db FILE]
arpatch history plot --x concurrency --metric tok_s --out FILE.svg|png [--run RUN] [--db FILE]`,
		Description: `One line per arm, for one hardware key, one workload and one concurrency
level (numbers from other machines, workloads or levels do not belong on one
line); by default those of the newest run, at its lowest level. With
--x concurrency: one line per arm of one run (--run, default the newest with
bench results), the metric against the concurrency levels it swept.

Examples:
   arpatch history plot --metric tok_s --out tok_s.svg
   arpatch history plot --x concurrency --metric tok_s --out conc.png`,
		Flags: []cli.Flag{dbFlag(&f.DB), &cli.StringFlag{Name: "metric", Destination: &f.Metric, Value: stats.TokS, Usage: "`METRIC`: " + stats.Known()},
			&cli.StringFlag{Name: "out", Destination: &f.Out, Usage: "`FILE` (.svg, .png or .pdf)", Required: true},
			&cli.StringFlag{Name: "hardware", Destination: &f.Hardware, Usage: "hardware `KEY` to plot (default: the newest run's)"},
			&cli.StringFlag{Name: "workload", Destination: &f.Workload, Usage: "workload `KEY` to plot (default: the newest run's on that hardware)"},
			&cli.IntFlag{Name: "concurrency", Destination: &f.Concurrency, Usage: "the concurrency level `N` to plot over time", DefaultText: "the newest run's lowest"},
			&cli.StringFlag{Name: "x", Destination: &f.X, Value: "time", Usage: "the x axis: `time` (runs) or concurrency (one run's levels)"},
			&cli.Int64Flag{Name: "run", Destination: &f.Run, Usage: "with --x concurrency: the `RUN` to plot", DefaultText: "the newest with bench results"}}, Before: noArgs,
		Action: act(&f, historyPlotOpts, runF),
	}
}

// newCmdHistoryAccept is history accept, running its options with runF (historyAcceptRun).
func newCmdHistoryAccept(runF func(context.Context, historyRunOptions, streams) error) *cli.Command {
	var f historyRunFlags
	return &cli.Command{
		Name: "accept", Usage: "take a run as the new reference after a deliberate change",
		UsageText: "arpatch history accept RUN [--db FILE]",
		Description: `A nightly compares each arm with the last history.window complete runs on
the same hardware and workload; nights that failed their checks (exit 1)
are never references, so a real slowdown keeps failing. When the change is
deliberate (a new upstream, a new toolchain), accept the first night of the
new level: later nights then compare with it and the runs after it.

Examples:
   arpatch history accept 1`,
		Flags:  []cli.Flag{dbFlag(&f.DB)},
		Action: act(&f, historyRunOpts("accept"), runF),
	}
}

// historyTarget is the history a history command reads or writes.
type historyTarget struct {
	// Path is --db's file (~ expanded) or postgres:// URL, or the
	// nightly's default history in the state directory.
	Path string
	// Flag is --db as the command line named it: db, or its alias
	// history (cmdline.name); errors about the history name it so.
	Flag string
}

// historyDB is the history --db (v, named flag on the command line)
// names, or the nightly's default history in the state directory; no
// state directory is a usage error.
func historyDB(flag, v string) (historyTarget, error) {
	if err := history.CheckTarget(v); err != nil {
		return historyTarget{}, usagef("--%s %v", flag, err)
	}
	if history.IsURL(v) {
		return historyTarget{v, flag}, nil
	}
	if p := expandHome(v); p != "" {
		// A --db that names nothing is a usage error (exit 2), as every
		// path flag's is.
		return historyTarget{p, flag}, checkPathFlag(flag, p, false)
	}
	dir, err := statedir.Dir()
	if err != nil {
		return historyTarget{}, usagef("%v", err)
	}
	return historyTarget{nightly.DefaultHistoryPath(dir), flag}, nil
}

// withHistory opens the history at path, which must exist (--db names
// it), calls f with it and closes it; a failed close is an error too
// (accept writes; an immutable read that saw the file change). Only write
// (history accept) opens it for writing (history.OpenExisting, which
// migrates an older schema and says so on st.Err), never making a history
// where there is none; the read commands open it read-only
// (history.OpenRead), so they never change the file.
func withHistory(db historyTarget, write bool, st streams, f func(*history.Store) error) (err error) {
	path := db.Path
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !history.IsURL(path) {
		// A new user's first history command.
		return fmt.Errorf("--%s %s: no history there yet: a nightly writes it on its first night (arpatch nightly --config FILE; docs/nightly.md); for a demo's, run `go run ./nightly/demo -dir /tmp/nightly-demo` in arpatch's checkout, then pass --%[1]s /tmp/nightly-demo/history.db", db.Flag, path)
	} else if err != nil && !history.IsURL(path) {
		return fmt.Errorf("--%s %s: %w", db.Flag, path, err)
	}
	open := history.OpenRead
	if write {
		open = history.OpenExisting
	}
	s, err := open(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	if v := s.MigratedFrom(); v != 0 {
		fmt.Fprintf(st.Err, "arpatch: migrated history %s from schema version %d to %d (history accept writes it; list, show, export and plot never do)\n", path, v, history.SchemaVersion)
	}
	return f(s)
}

// historyListFlags are history list's parsed flags.
type historyListFlags struct {
	DB    string
	Limit int
	cmdline
}

// historyListOptions are every input of historyListRun.
type historyListOptions struct {
	DB    historyTarget
	Limit int // runs listed, newest first; 0: all
}

// historyListOpts resolves --db and refuses a negative --limit.
func historyListOpts(f historyListFlags) (historyListOptions, error) {
	if f.Limit < 0 {
		return historyListOptions{}, usagef("--limit %d: use 1 or more, or 0 for every run", f.Limit)
	}
	db, err := historyDB(f.name("db"), f.DB)
	return historyListOptions{DB: db, Limit: f.Limit}, err
}

// historyListRun prints the newest runs.
func historyListRun(_ context.Context, o historyListOptions, st streams) error {
	return withHistory(o.DB, false, st, func(s *history.Store) error {
		runs, err := s.Runs(o.Limit)
		if err != nil {
			return err
		}
		gone, err := s.Gone(runs)
		if err != nil {
			return err
		}
		w := st.Out
		fmt.Fprintf(w, "%-5s %-20s %-10s %-4s %-24s %-12s %s\n", "RUN", "STARTED", "STATUS", "EXIT", "HARDWARE", "COMMIT", "VERDICT")
		for _, r := range runs {
			exit := "-"
			if r.ExitCode != nil {
				exit = strconv.Itoa(*r.ExitCode)
			}
			status, verdict := r.Status, r.Verdict
			if why, ok := gone[r.ID]; ok {
				// The next nightly marks it incomplete; say now.
				status, verdict = "killed?", why+"; the next nightly marks this run incomplete"
			}
			if r.Accepted {
				verdict += " (accepted reference)"
			}
			fmt.Fprintf(w, "%-5d %-20s %-10s %-4s %-24s %-12.12s %s\n", r.ID, r.StartedAt.Format("2006-01-02 15:04:05"), status, exit, r.HardwareKey, r.SGLangCommit, verdict)
		}
		return nil
	})
}

// historyRunFlags are the flags and the RUN argument of history show and
// accept.
type historyRunFlags struct {
	DB      string
	cmdline // RUN
}

// historyRunOptions are a history file and one run in it.
type historyRunOptions struct {
	DB  historyTarget
	Run int64
}

// historyRunOpts returns history cmd's options function: it reads the one
// RUN argument (a positive number) and resolves --db.
func historyRunOpts(cmd string) func(historyRunFlags) (historyRunOptions, error) {
	return func(f historyRunFlags) (historyRunOptions, error) {
		id, err := strconv.ParseInt(strings.Join(f.Args, " "), 10, 64)
		if len(f.Args) != 1 || err != nil || id < 1 {
			return historyRunOptions{}, usagef("history %s takes one run number (arpatch history list shows them)", cmd)
		}
		db, err := historyDB(f.name("db"), f.DB)
		return historyRunOptions{DB: db, Run: id}, err
	}
}

// historyAcceptRun makes the run the new reference.
func historyAcceptRun(_ context.Context, o historyRunOptions, st streams) error {
	return withHistory(o.DB, true, st, func(s *history.Store) error {
		if err := s.Accept(o.Run); err != nil {
			return err
		}
		fmt.Fprintf(st.Out, "run %d is the new reference for its hardware and workload\n", o.Run)
		return nil
	})
}

// historyExportFlags are history export's parsed flags.
type historyExportFlags struct {
	DB, Format string
	cmdline
}

// historyExportOptions are every input of historyExportRun.
type historyExportOptions struct {
	DB     historyTarget
	Format string // csv or json
}

// historyExportOpts checks --format (csv or json) and resolves --db.
func historyExportOpts(f historyExportFlags) (historyExportOptions, error) {
	if f.Format != "csv" && f.Format != "json" {
		return historyExportOptions{}, usagef("--format %q: use csv or json", f.Format)
	}
	db, err := historyDB(f.name("db"), f.DB)
	return historyExportOptions{DB: db, Format: f.Format}, err
}

// historyExportRun writes every trial as CSV or JSON.
func historyExportRun(_ context.Context, o historyExportOptions, st streams) error {
	return withHistory(o.DB, false, st, func(s *history.Store) error {
		if o.Format == "csv" {
			return s.ExportCSV(st.Out)
		}
		return s.ExportJSON(st.Out)
	})
}

// historyPlotFlags are history plot's parsed flags.
type historyPlotFlags struct {
	DB          string
	Metric      string
	Out         string
	Hardware    string
	Workload    string
	Concurrency int
	X           string
	Run         int64
	cmdline
}

// historyPlotOptions are every input of historyPlotRun.
type historyPlotOptions struct {
	DB     historyTarget
	Metric stats.Metric
	// Out is the image file (.svg, .png or .pdf).
	Out string
	// Series selects the runs plotted over time (X "time").
	Series history.Series
	// X is "time" or "concurrency"; Run the run plotted against
	// concurrency (0: the newest with bench results).
	X   string
	Run int64
}

// historyPlotOpts checks --metric, --out's format and --x, and resolves
// --db.
func historyPlotOpts(f historyPlotFlags) (historyPlotOptions, error) {
	metric, ok := stats.Lookup(f.Metric)
	if !ok {
		return historyPlotOptions{}, usagef("--metric %q: use one of %s", f.Metric, stats.Known())
	}
	out := expandHome(f.Out)
	if err := history.PlotFormat(out); err != nil {
		return historyPlotOptions{}, usagef("--out %v", err)
	}
	if f.X != "time" && f.X != "concurrency" {
		return historyPlotOptions{}, usagef("--x %q: use time or concurrency", f.X)
	}
	if err := checkOutputs(outFile{flag: "out", path: out}); err != nil {
		return historyPlotOptions{}, err
	}
	if f.Given["concurrency"] {
		// A level as a recipe's bench.concurrency bounds it.
		if err := recipes.CheckLevels([]int{f.Concurrency}); err != nil {
			return historyPlotOptions{}, usagef("--concurrency %v (leave it out for the newest run's lowest level)", err)
		}
	}
	db, err := historyDB(f.name("db"), f.DB)
	return historyPlotOptions{DB: db, Metric: metric, Out: out, X: f.X, Run: f.Run,
		Series: history.Series{HardwareKey: f.Hardware, Workload: f.Workload, Level: f.Concurrency}}, err
}

// historyPlotRun plots the metric over time per arm, or one run's against
// concurrency, and says where it wrote it.
func historyPlotRun(_ context.Context, o historyPlotOptions, st streams) error {
	return withHistory(o.DB, false, st, func(s *history.Store) error {
		if o.X == "time" {
			if err := s.Plot(o.Metric.Name, o.Out, o.Series); err != nil {
				return err
			}
		} else {
			curves, run, err := s.LevelCurves(o.Metric.Name, o.Series, o.Run)
			if err != nil {
				return err
			}
			title := fmt.Sprintf("arpatch run %d: %s against concurrency", run, o.Metric.Name)
			if err := chart.PlotConcurrency(o.Out, title, o.Metric.Axis(), curves); err != nil {
				return err
			}
		}
		fmt.Fprintf(st.Out, "wrote %s\n", o.Out)
		return nil
	})
}

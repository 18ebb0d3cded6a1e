package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/statedir"
	"github.com/arpatch/arpatch/nightly"
)

func nightlyCommand() *cli.Command {
	return &cli.Command{
		Name:  "nightly",
		Usage: "drift check, cached A/B build, bench, history and regression verdict, for cron and CI",
		UsageText: `arpatch nightly --config nightly.toml [--skip-build] [--skip-bench]
                [--github-benchmark PREFIX] [--bencher FILE] [--junit FILE] [--summary FILE]`,
		Description: `Each run: (1) fetches the tracked ref into the upstream repository (when
upstream.fetch is set) and checks every series against the pinned commit and
the ref's head, recording exact / offset / applied / conflict per patch;
(2) builds arms A and B through the build cache (arpatch ab build);
(3) benches them (arpatch bench); (4) stores everything in the SQLite
history; (5) decides regressions: each arm's metrics against the last
history.window complete runs on the same hardware key (Mann-Whitney U and a
relative threshold, 3% by default), and B against A tonight; (6) writes the
reports (output dir: nightly.json and summary.md; and the CI files).

A lock next to the history database keeps two nightlies off one history. A
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
			&cli.StringFlag{Name: "config", Usage: "nightly `FILE` (TOML; see docs/nightly.md)", Required: true},
			&cli.BoolFlag{Name: "skip-build", Usage: "skip the build step"},
			&cli.BoolFlag{Name: "skip-bench", Usage: "skip the bench step (and so the regression verdict)"},
			&cli.StringFlag{Name: "github-benchmark", Usage: "github-action-benchmark `PREFIX`: writes PREFIX-bigger.json and PREFIX-smaller.json"},
			&cli.StringFlag{Name: "bencher", Usage: "Bencher Metric Format `FILE`"},
			&cli.StringFlag{Name: "junit", Usage: "JUnit XML `FILE`"},
			&cli.StringFlag{Name: "summary", Usage: "also write the markdown summary to `FILE` (e.g. $GITHUB_STEP_SUMMARY)"},
		},
		Before: noArgs,
		Action: func(c *cli.Context) error {
			cfg, err := nightly.LoadConfig(pathFlag(c, "config"))
			if err != nil {
				return usageError{err}
			}
			if p := c.String("github-benchmark"); p != "" && strings.HasSuffix(p, "/") {
				return usagef("--github-benchmark %s: give a file prefix, e.g. out/bench (writes out/bench-bigger.json and out/bench-smaller.json)", p)
			}
			extra := map[string]string{"github-benchmark": pathFlag(c, "github-benchmark"), "bencher": pathFlag(c, "bencher"), "junit": pathFlag(c, "junit"), "summary": c.String("summary")}
			if err := nightly.CheckOutputs(cfg, extra); err != nil {
				return usageError{err}
			}
			code, err := nightly.Execute(c.Context, nightly.Options{
				Config: cfg, SkipBuild: c.Bool("skip-build"), SkipBench: c.Bool("skip-bench"),
				Version: arpatchVersion(), Log: c.App.ErrWriter, Out: c.App.Writer, Launcher: launcher(), Reports: extra,
			})
			var ce *nightly.ConfigError
			switch {
			case errors.As(err, &ce):
				return usageError{fmt.Errorf("%s: %w", pathFlag(c, "config"), err)}
			case err != nil:
				return cli.Exit(err.Error(), code)
			case code != 0:
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

func historyCommand() *cli.Command {
	db := &cli.StringFlag{Name: "db", Usage: "history database `FILE` (default: history.db in the state directory, where a nightly writes it unless its history.path says otherwise)"}
	open := func(c *cli.Context) (*history.Store, error) {
		p := pathFlag(c, "db")
		if p == "" {
			dir, err := statedir.Dir()
			if err != nil {
				return nil, usagef("%v", err)
			}
			p = nightly.DefaultHistoryPath(dir)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--db %s: %w", p, err)
		}
		return history.Open(p)
	}
	return &cli.Command{
		Name:  "history",
		Usage: "list, show, export, plot and accept nightly runs",
		Subcommands: []*cli.Command{
			{
				Name: "list", Usage: "list runs, newest first", UsageText: "arpatch history list [--db FILE] [--limit N]",
				Flags: []cli.Flag{db, &cli.IntFlag{Name: "limit", Value: 30}}, Before: noArgs,
				Action: func(c *cli.Context) error {
					s, err := open(c)
					if err != nil {
						return err
					}
					defer func() { _ = s.Close() }() // read only
					runs, err := s.Runs(c.Int("limit"))
					if err != nil {
						return err
					}
					w := c.App.Writer
					fmt.Fprintf(w, "%-5s %-20s %-10s %-4s %-24s %-12s %s\n", "RUN", "STARTED", "STATUS", "EXIT", "HARDWARE", "COMMIT", "VERDICT")
					for _, r := range runs {
						exit := "-"
						if r.ExitCode != nil {
							exit = strconv.Itoa(*r.ExitCode)
						}
						status, verdict := r.Status, r.Verdict
						if status == history.Running && !lockfile.Alive(r.PID) {
							// The next nightly marks it incomplete; say now.
							status, verdict = "killed?", fmt.Sprintf("pid %d is gone; the next nightly marks this run incomplete", r.PID)
						}
						if r.Accepted {
							verdict += " (accepted reference)"
						}
						fmt.Fprintf(w, "%-5d %-20s %-10s %-4s %-24s %-12.12s %s\n", r.ID, r.StartedAt.Format("2006-01-02 15:04:05"), status, exit, r.HardwareKey, r.SGLangCommit, verdict)
					}
					return nil
				},
			},
			{
				Name: "show", Usage: "show one run: environment, drift, arms, checks", UsageText: "arpatch history show RUN [--db FILE]",
				Flags: []cli.Flag{db},
				Action: func(c *cli.Context) error {
					s, id, err := openRun(c, open)
					if err != nil {
						return err
					}
					defer func() { _ = s.Close() }() // read only
					d, err := s.Show(id)
					if err != nil {
						return err
					}
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					enc.SetEscapeHTML(false) // conflict details hold C++'s < > &
					return enc.Encode(d)
				},
			},
			{
				Name: "export", Usage: "export every trial as CSV or JSON", UsageText: "arpatch history export --format csv|json [--db FILE]",
				Flags: []cli.Flag{db, &cli.StringFlag{Name: "format", Value: "csv", Usage: "`csv` or `json`"}}, Before: noArgs,
				Action: func(c *cli.Context) error {
					f := c.String("format")
					if f != "csv" && f != "json" {
						return usagef("--format %q: use csv or json", f)
					}
					s, err := open(c)
					if err != nil {
						return err
					}
					defer func() { _ = s.Close() }() // read only
					rows, err := s.Export()
					if err != nil {
						return err
					}
					if f == "csv" {
						return history.WriteCSV(c.App.Writer, rows)
					}
					return history.WriteJSON(c.App.Writer, rows)
				},
			},
			{
				Name: "plot", Usage: "plot a metric over time per arm, with CI bands and drift/regression marks, or against concurrency",
				UsageText: `arpatch history plot --metric tok_s --out FILE.svg|png [--hardware KEY] [--workload KEY] [--concurrency N] [--db FILE]
arpatch history plot --x concurrency --metric tok_s --out FILE.svg|png [--run RUN] [--db FILE]`,
				Description: `One line per arm, for one hardware key, one workload and one concurrency
level (numbers from other machines, workloads or levels do not belong on one
line); by default those of the newest run, at its lowest level. With
--x concurrency: one line per arm of one run (--run, default the newest with
bench results), the metric against the concurrency levels it swept.`,
				Flags: []cli.Flag{db, &cli.StringFlag{Name: "metric", Value: stats.TokS, Usage: "`METRIC`: " + stats.Known()},
					&cli.StringFlag{Name: "out", Usage: "`FILE` (.svg, .png or .pdf)", Required: true},
					&cli.StringFlag{Name: "hardware", Usage: "hardware `KEY` to plot (default: the newest run's)"},
					&cli.StringFlag{Name: "workload", Usage: "workload `KEY` to plot (default: the newest run's on that hardware)"},
					&cli.IntFlag{Name: "concurrency", Usage: "the concurrency level `N` to plot over time", DefaultText: "the newest run's lowest"},
					&cli.StringFlag{Name: "x", Value: "time", Usage: "the x axis: `time` (runs) or concurrency (one run's levels)"},
					&cli.Int64Flag{Name: "run", Usage: "with --x concurrency: the `RUN` to plot", DefaultText: "the newest with bench results"}}, Before: noArgs,
				Action: func(c *cli.Context) error {
					metric, ok := stats.Lookup(c.String("metric"))
					if !ok {
						return usagef("--metric %q: use one of %s", c.String("metric"), stats.Known())
					}
					if err := history.PlotFormat(pathFlag(c, "out")); err != nil {
						return usagef("--out %v", err)
					}
					s, err := open(c)
					if err != nil {
						return err
					}
					defer func() { _ = s.Close() }() // read only: the plot is a file of its own
					sel := history.Series{HardwareKey: c.String("hardware"), Workload: c.String("workload"), Level: c.Int("concurrency")}
					switch c.String("x") {
					case "time":
						if err := s.Plot(c.String("metric"), pathFlag(c, "out"), sel); err != nil {
							return err
						}
					case "concurrency":
						curves, run, err := s.LevelCurves(c.String("metric"), sel, c.Int64("run"))
						if err != nil {
							return err
						}
						title := fmt.Sprintf("arpatch run %d: %s against concurrency", run, c.String("metric"))
						if err := report.PlotConcurrency(pathFlag(c, "out"), title, metric.Axis(), curves); err != nil {
							return err
						}
					default:
						return usagef("--x %q: use time or concurrency", c.String("x"))
					}
					fmt.Fprintf(c.App.Writer, "wrote %s\n", pathFlag(c, "out"))
					return nil
				},
			},
			{
				Name: "accept", Usage: "take a run as the new reference after a deliberate change",
				UsageText: "arpatch history accept RUN [--db FILE]",
				Description: `A nightly compares each arm with the last history.window complete runs on
the same hardware and workload; nights that failed their checks (exit 1)
are never references, so a real slowdown keeps failing. When the change is
deliberate (a new upstream, a new toolchain), accept the first night of the
new level: later nights then compare with it and the runs after it.`,
				Flags: []cli.Flag{db},
				Action: func(c *cli.Context) error {
					s, id, err := openRun(c, open)
					if err != nil {
						return err
					}
					defer func() { _ = s.Close() }() // Accept's one write is committed or reported
					if err := s.Accept(id); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "run %d is the new reference for its hardware and workload\n", id)
					return nil
				},
			},
		},
	}
}

// openRun reads the one RUN argument of "history show|accept" and opens
// the history.
func openRun(c *cli.Context, open func(*cli.Context) (*history.Store, error)) (*history.Store, int64, error) {
	id, err := strconv.ParseInt(c.Args().First(), 10, 64)
	if c.Args().Len() != 1 || err != nil || id < 1 {
		return nil, 0, usagef("history %s takes one run number (arpatch history list shows them)", c.Command.Name)
	}
	s, err := open(c)
	return s, id, err
}

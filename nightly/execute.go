package nightly

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
)

// Execute is a whole `arpatch nightly`: it runs the nightly (Run), writes
// the reports (WriteOutputs, with o.Reports overriding the config's
// paths) and the plot of tok/s (outputs.plot), prints the run's table to
// o.Out (WriteTable) and, when the reports were written, the line
// "reports in DIR: nightly.json, summary.md" (DIR: outputs.dir, by
// default STATE/nightly/KEY/out), and returns the process's exit code.
//
// The code is the run's (ExitOK, ExitRegression, ExitDrift, ExitInfra),
// or ExitInfra with the error when the run could not start (the lock is
// held, the history will not open), could not store what it found (a
// failed write to the history: the error names the database file), or a
// report could not be written (the error names the file). The history,
// the printed table and every report that can still be written then say
// exit 4 and why (MarkExit, before the table is printed and the reports
// are written again; $GITHUB_STEP_SUMMARY is appended to once, last). A
// nightly.toml that cannot run is a *ConfigError, returned with code 0:
// the caller reports it as a usage error. A plot that cannot be drawn is
// logged to o.Log and changes nothing.
func Execute(ctx context.Context, o Options) (int, error) {
	rep, err := Run(ctx, o)
	var ce *ConfigError
	if errors.As(err, &ce) {
		return 0, err
	}
	cfg := o.Config
	if rep == nil {
		// It could not start: the reports say so as far as they can be
		// written.
		if werr := WriteOutputs(FailedToRun(cfg, err), cfg, o.Reports); werr != nil {
			o.logf("%v", werr)
		}
		return ExitInfra, err
	}
	// A report that could not be written makes the run exit 4: the
	// files are written again, so that those that can be say exit 4 and
	// why; the one that failed is named once, in why.
	reportFailed := func(why error) {
		if merr := MarkExit(cfg, rep, ExitInfra, why); merr != nil {
			o.logf("%v", merr)
		}
		_ = writeFiles(rep, cfg, o.Reports)
		err = cmp.Or(err, why)
	}
	if werr := writeFiles(rep, cfg, o.Reports); werr != nil {
		reportFailed(werr)
	}
	if serr := appendSummary(rep, o.Reports["summary"]); serr != nil {
		reportFailed(serr)
	}
	if cfg.Outputs.Plot != "" && err == nil && rep.Benched() {
		if perr := plot(cfg, rep); perr != nil {
			o.logf("outputs.plot: %v", perr)
		}
	}
	if o.Out != nil {
		WriteTable(o.Out, rep)
		if err == nil {
			// Last, as nightly/demo ends: where the reports went, which
			// by default is under the state directory.
			fmt.Fprintf(o.Out, "reports in %s: nightly.json, summary.md\n", cfg.Path(cfg.Outputs.Dir))
		}
	}
	if err != nil {
		// It could not run, store or report: infrastructure. Run has
		// made the report say so for a failed store, MarkExit for a
		// failed report.
		return ExitInfra, err
	}
	return rep.ExitCode, nil
}

// plot draws outputs.plot: tok/s over time for the run's hardware and
// workload, from the history that holds the run (history.keep for a
// night kept there).
func plot(cfg *Config, rep *Report) error {
	store, err := history.OpenRead(cmp.Or(rep.History, cfg.Path(cfg.History.Path)))
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }() // nothing written: the plot is a file of its own
	sel := history.Series{HardwareKey: rep.HardwareKey, Workload: rep.Workload}
	return store.Plot(stats.TokS, cfg.Path(cfg.Outputs.Plot), sel)
}

// logf writes one progress line to o.Log, when set.
func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "nightly: "+format+"\n", args...)
	}
}

package nightly

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/patches"
)

// Exit codes of a nightly, in increasing precedence.
const (
	ExitOK         = 0                        // no regression
	ExitRegression = history.ExitFailedChecks // a regression, or an arm's output is invalid
	ExitDrift      = 3                        // the series no longer applies to upstream
	ExitInfra      = 4                        // a fetch, build or server failed, or the history could not be read or written
)

// Options holds every input of Run.
type Options struct {
	Config    *Config
	SkipBuild bool
	SkipBench bool
	Version   string
	Log       io.Writer // progress lines; nil for none
	// Out gets the run's table (WriteTable) from Execute; nil for none.
	Out io.Writer
	// Reports are the command line's report paths, which override the
	// config's (Execute passes them to WriteOutputs as its extra).
	Reports  map[string]string
	Launcher []string // the gencode filter, for builds
	Env      []string // nil: os.Environ()
	// Probe overrides the environment discovery (tests).
	Probe func(ctx context.Context) Environment
	// Now gives the run's start time; nil is time.Now (the demo sets
	// past nights).
	Now func() time.Time
	// HTTP, when set, is the bench's HTTP client (bench.Options.HTTP:
	// tests serve the arms on an in-memory network).
	HTTP *http.Client
}

// Run does one nightly. It returns the report with its exit code, and an
// error when it could not run at all (bad config: a *ConfigError; locked
// history) or could not read or write its history (the error names the
// database file; the report then says exit 4, ExitInfra).
//
// The night runs in steps, each returning its checks: drift, build,
// bench, judge and finish; what they found is stored at the end in one
// transaction (history.Store.Record), so a failed write leaves no half
// night. A run killed midway leaves its row "running"; the next nightly
// marks it incomplete. A run whose context is cancelled is marked
// incomplete.
func Run(ctx context.Context, o Options) (*Report, error) {
	cfg := o.Config
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	rep := &Report{Schema: ReportSchema, StartedAt: now().UTC(), Ref: cfg.Upstream.Ref, ArmRecipes: map[string]string{}}
	// Everything the config decides is checked before anything runs: a
	// mistake found an hour into a build wastes the night.
	in, err := preflight(cfg, o)
	if err != nil {
		return nil, &ConfigError{err}
	}
	dbPath := cfg.Path(cfg.History.Path)
	unlock, err := history.Lock(dbPath)
	if err != nil {
		var held *lockfile.HeldError
		if errors.As(err, &held) {
			return nil, fmt.Errorf("another nightly is running on this history (%v); wait for it to finish", err)
		}
		return nil, fmt.Errorf("history.path %s: cannot take its lock: %w", dbPath, err)
	}
	defer unlock()
	store, at, kept, sent, err := openHistory(cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = store.Close() }() // every write was committed or reported
	rep.History = at
	if sent != "" {
		o.logf("%s", sent)
	}
	if stale, err := store.MarkStale(); err != nil {
		return nil, err
	} else if len(stale) > 0 {
		o.logf("marked %d runs killed midway as incomplete: %v", len(stale), stale)
	}
	rep.ArmRecipes["a"], rep.ArmRecipes["b"] = in.a.Name, in.b.Name
	// The bench's options, built once: the workload key is read off the
	// options the bench then runs with.
	bo, boErr := BenchOptions(cfg, o, in.a, in.b)
	rep.Workload = benchKey(bo)
	probe := o.Probe
	if probe == nil {
		probe = func(ctx context.Context) Environment {
			return Discover(ctx, cfg.Build.Python, !o.SkipBuild || !o.SkipBench)
		}
	}
	rep.Environment = probe(ctx)
	rep.HardwareKey = cfg.History.HardwareKey
	if rep.HardwareKey == "" {
		rep.HardwareKey = rep.Environment.HardwareKey()
	}
	rep.Pinned = in.b.Upstream.Commit
	row := history.Run{StartedAt: rep.StartedAt, HardwareKey: rep.HardwareKey, SGLangCommit: rep.Pinned, SeriesHash: seriesHash(in.cat), ArpatchVersion: o.Version, Workload: rep.Workload, Env: rep.Environment.Map()}
	id, err := store.BeginRun(row)
	if err != nil {
		return nil, err
	}
	rep.RunID = id
	o.logf("run %d on %s", id, rep.HardwareKey)
	n := &night{o: o, cfg: cfg, in: in, store: store, rep: rep, bo: bo, boErr: boErr}
	if kept != nil {
		o.logf("%v", kept)
		n.historyFailed(kept)
	}
	recorded := false
	defer func() {
		if !recorded {
			// A panic, or a history that failed below: the run is no
			// reference. Best effort: the history may be what failed.
			_ = store.FinishRun(id, history.Incomplete, rep.ExitCode, verdictInterrupted)
		}
	}()

	rep.add(n.drift(ctx))
	rep.add(n.build(ctx))
	rep.add(n.bench(ctx))
	cs, err := n.judge()
	rep.add(cs)
	if err != nil {
		n.historyFailed(err)
	}
	rep.add(n.finish(ctx))
	rep.Seconds = now().Sub(rep.StartedAt).Seconds()
	out := n.out
	out.Checks, out.Status, out.ExitCode, out.Verdict = rep.Checks, rep.Status, rep.ExitCode, rep.Verdict
	if rerr := store.Record(id, out); rerr != nil {
		// Nothing of tonight was stored; the run's row says it failed,
		// as far as the history takes writes at all.
		n.historyFailed(rerr)
		rep.add(n.finish(ctx))
		if history.IsURL(at) {
			// A shared history's night is kept locally, whole, for the
			// next nightly to send.
			out.Checks, out.Status, out.ExitCode, out.Verdict = rep.Checks, rep.Status, rep.ExitCode, rep.Verdict
			keep := cfg.Path(cfg.History.Keep)
			kid, kerr := keepRun(keep, row, out)
			if kerr != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("tonight's run could not be kept in history.keep either: %v", kerr))
			} else {
				rep.History, rep.RunID = keep, kid
				rep.Errors = append(rep.Errors, fmt.Sprintf("tonight's run is kept in %s (history.keep) as run %d and sent to %s by the next nightly that reaches it", keep, kid, at))
			}
			o.logf("%s", rep.Errors[len(rep.Errors)-1])
		}
		if ferr := store.FinishRun(id, rep.Status, rep.ExitCode, rep.Verdict); ferr == nil {
			recorded = true
		}
		return rep, rerr
	}
	recorded = true
	return rep, err
}

// night is one run in progress: its inputs, its history, its report, and
// what the steps found that the history stores at the end (out; the
// checks and the verdict are the report's).
type night struct {
	o     Options
	cfg   *Config
	in    *runInputs
	store *history.Store
	rep   *Report
	bo    bench.Options // the bench's options (BenchOptions)
	boErr error         // why bo could not be built; the bench step reports it
	res   *bench.Result // the bench's result, when it ran to one
	out   history.Outcome
}

// historyFailed makes a failed read or write of the history an
// infrastructure failure of the run (exit 4), with a failed "history"
// check (the CI test case): err names the database file. It is the first
// error: the verdict leads with it.
func (n *night) historyFailed(err error) {
	n.rep.Errors = append([]string{err.Error()}, n.rep.Errors...)
	n.rep.add([]history.Check{{Name: "history", Kind: history.KindInfra, Status: history.CheckFail, Detail: err.Error()}})
	n.rep.exit(ExitInfra)
}

func seriesHash(cat *patches.Catalog) string {
	var parts []string
	for _, s := range cat.Series {
		for _, p := range s.Patches {
			parts = append(parts, s.Name+"/"+p.File+"@"+p.SHA256)
		}
	}
	return shortHash(strings.Join(parts, "\n"))
}

// canContinue says whether the build and bench run after drift: not
// after an infrastructure failure, nor after drift at the commit they
// would build (arms.commit = "head").
func (n *night) canContinue() bool {
	code := n.rep.ExitCode
	return code < ExitDrift || (code == ExitDrift && n.cfg.Arms.Commit == CommitPinned)
}

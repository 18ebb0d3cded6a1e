package nightly

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/arpatch/arpatch/history"
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
// The night runs in steps, each in a file of its own and each returning
// its checks and what the next step needs: preflight, drift (the commit
// to build), build, bench (the result), judge, finish (the status and
// verdict) and record: what they found is stored at the end in one
// transaction (history.Store.Record), so a failed write leaves no half
// night. A run killed midway leaves its row "running"; the next nightly
// marks it incomplete. A run whose context is cancelled is marked
// incomplete. A new step is a night method in a file of its own that
// adds to the report and returns its checks and what a later step
// needs, called in its place here; what the history should keep of it
// goes into outcome (history.go).
func Run(ctx context.Context, o Options) (*Report, error) {
	started := o.now()
	// Everything the config decides is checked before anything runs: a
	// mistake found an hour into a build wastes the night.
	in, err := preflight(o.Config, o)
	if err != nil {
		return nil, &ConfigError{err}
	}
	unlock, err := lockHistory(o.Config)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// The bench's options, built once: the workload key is read off the
	// options the bench then runs with; why they cannot be built fails
	// the bench step.
	bo, boErr := BenchOptions(o.Config, o, in.a, in.b)
	n, err := begin(ctx, o, in, started, benchKey(bo))
	if err != nil {
		return nil, err
	}
	defer n.close()
	commit, cs := n.drift(ctx)
	n.rep.add(cs)
	n.rep.add(n.build(ctx, commit))
	res, cs := n.bench(ctx, bo, boErr)
	n.rep.add(cs)
	cs, err = n.judge(res)
	if err != nil && n.keep(err) == nil {
		cs, err = n.judge(res) // against history.keep
	}
	n.rep.add(cs)
	if err != nil {
		n.historyFailed(err)
	}
	if n.kept != nil {
		n.historyFailed(n.kept)
	}
	n.rep.add(n.finish(ctx))
	if rerr := n.record(ctx, res); rerr != nil {
		return n.rep, rerr
	}
	return n.rep, err
}

// night is one run in progress: its inputs, its history and the run's
// row there, and its report, which every step adds to.
type night struct {
	o     Options
	cfg   *Config
	in    *runInputs
	store *history.Store
	at    string      // store's target: history.path, or history.keep once kept
	row   history.Run // as begun (history.keep takes it again)
	begun bool        // BeginRun was called with row
	id    int64       // the row's id in store
	rep   *Report
	// recorded is set once the history holds the night's outcome or its
	// failed status; close marks a night that was not incomplete.
	recorded bool
	keeping
}

// begin opens the history (openHistory: a shared one that fails the
// night makes it go into history.keep), marks the runs killed midway
// incomplete, reads the environment and begins the run's row. The error
// is a history that could not be read or written.
func begin(ctx context.Context, o Options, in *runInputs, started time.Time, workload string) (*night, error) {
	cfg := o.Config
	n := &night{o: o, cfg: cfg, in: in}
	if err := n.openHistory(); err != nil {
		return nil, err
	}
	rep := &Report{Schema: ReportSchema, StartedAt: started, Ref: cfg.Upstream.Ref, Workload: workload,
		ArmRecipes: map[string]string{"a": in.a.Name, "b": in.b.Name}}
	n.rep = rep
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
	// The pid is set here, with the start: a night kept in history.keep
	// after it began in the shared history is then the same run in both
	// (history.Send replaces the one with the other).
	row := history.Run{StartedAt: rep.StartedAt, PID: os.Getpid(), HardwareKey: rep.HardwareKey, SGLangCommit: rep.Pinned, SeriesHash: seriesHash(in.cat), ArpatchVersion: o.Version, Workload: rep.Workload, Env: rep.Environment.Map()}
	if err := n.beginRun(row); err != nil {
		n.closeHistory()
		return nil, err
	}
	rep.RunID, rep.History = n.id, n.at
	o.logf("run %d on %s", n.id, rep.HardwareKey)
	return n, nil
}

// close ends the night: one that was not recorded (a panic, or a history
// that failed below) is marked incomplete, no reference; best effort, as
// the history may be what failed. Then the history is closed: every write
// was committed or reported.
func (n *night) close() {
	if !n.recorded {
		_ = n.store.FinishRun(n.id, history.Incomplete, n.rep.ExitCode, verdictInterrupted)
	}
	n.closeHistory()
}

// now is the clock of the run (Options.Now, else time.Now), in UTC.
func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now().UTC()
	}
	return time.Now().UTC()
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

// seriesHash fingerprints the series a night checks and builds: each
// patch's series, file and sha256 (the run's series hash in the
// history).
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

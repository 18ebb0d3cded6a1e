package nightly

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/textfmt"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/checkout"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/sglkernel"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
	"github.com/arpatch/arpatch/recipes"
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

// DriftRow is one series at one commit.
type DriftRow struct {
	Series  string                `json:"series"`
	Commit  string                `json:"commit"`
	Rev     string                `json:"rev"` // CommitPinned's word or the tracked ref
	Verdict patches.SeriesVerdict `json:"verdict"`
	Patches []history.DriftRecord `json:"patches"`
	// Note says why a conflict does not fail the run: another member of
	// the family fits this commit, or the commit is only recorded.
	Note string `json:"note,omitempty"`
}

// BuildRow is one arm's build.
type BuildRow struct {
	Arm    string `json:"arm"`
	Key    string `json:"key,omitempty"`
	Hit    bool   `json:"cache_hit"`
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Report is the outcome of a nightly: what the JSON report holds.
type Report struct {
	Schema string `json:"schema"`
	RunID  int64  `json:"run_id"`
	// History is the history that holds run RunID: history.path, or
	// history.keep for a night its shared history could not store.
	History     string            `json:"history"`
	StartedAt   time.Time         `json:"started_at"`
	Seconds     float64           `json:"seconds"`
	Status      history.RunStatus `json:"status"`
	ExitCode    int               `json:"exit_code"`
	Verdict     string            `json:"verdict"`
	HardwareKey string            `json:"hardware_key"`
	Workload    string            `json:"workload"`
	Environment Environment       `json:"environment"`
	Ref         string            `json:"ref"`
	Head        string            `json:"head"`
	Pinned      string            `json:"pinned"`
	BuildCommit string            `json:"build_commit"`
	Drift       []DriftRow        `json:"drift"`
	Builds      []BuildRow        `json:"builds,omitempty"`
	Bench       *bench.Result     `json:"bench,omitempty"`
	// BenchSettings are the workload settings the bench ran with.
	BenchSettings *report.Settings `json:"bench_settings,omitempty"`
	Regressions   []Check          `json:"regressions,omitempty"`
	Checks        []history.Check  `json:"checks"`
	Errors        []string         `json:"errors,omitempty"`
	// Warnings are problems that do not change the exit code (an
	// also_check revision that does not resolve).
	Warnings []string `json:"warnings,omitempty"`
	// EnvChange is set when tonight's environment differs from that of the
	// reference runs: the checks against history are then not judged.
	EnvChange  *EnvChange        `json:"environment_change,omitempty"`
	ArmRecipes map[string]string `json:"arm_recipes"`
	// Tune is bench.tune as the arms used it.
	Tune *TuneRecord `json:"tune,omitempty"`
	// Ports says, for each judged commit no series fits (drift), whether
	// `arpatch patches port` finds a clean draft there.
	Ports []PortHint `json:"ports,omitempty"`
	// DriftedAt names each judged revision no series of the family fits:
	// "pinned commit 84118acf50b3" or "main (0bda0b168ad5)".
	DriftedAt []string `json:"drifted_at,omitempty"`
}

// PortHint is the outcome of porting a series, in memory, to a commit the
// family no longer fits.
type PortHint struct {
	Series  string `json:"series"`
	Commit  string `json:"commit"`
	Clean   bool   `json:"clean"`
	Summary string `json:"summary"` // e.g. "clean: 4 exact, 2 offset hunks; 1 file moved"
	// Command writes the draft (clean) or prints the conflicts.
	Command string `json:"command"`
}

func (h PortHint) String() string {
	if h.Clean {
		return fmt.Sprintf("a clean draft exists (port of %s, %s); write it with `%s`", h.Series, h.Summary, h.Command)
	}
	return fmt.Sprintf("no clean draft (port of %s, %s); see the conflicts with `%s`", h.Series, h.Summary, h.Command)
}

// verdictInterrupted is the verdict of a run whose context was cancelled.
const verdictInterrupted = "interrupted"

// ReportSchema names the JSON layout.
const ReportSchema = "arpatch.nightly/v1"

func (r *Report) exit(code int) {
	if code > r.ExitCode {
		r.ExitCode = code
	}
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

// add appends a step's checks to the report. A check of a kind and name
// the report already holds goes into that check, so that each is one CI
// test case: a failure beats a skip and a skip a pass, and the details
// follow one another (the first failure's detail first).
func (r *Report) add(cs []history.Check) {
	for _, c := range cs {
		i := slices.IndexFunc(r.Checks, func(o history.Check) bool { return o.Kind == c.Kind && o.Name == c.Name })
		if i < 0 {
			r.Checks = append(r.Checks, c)
			continue
		}
		o := &r.Checks[i]
		if statusRank(c.Status) > statusRank(o.Status) {
			if o.Status != history.CheckFail && c.Status == history.CheckFail {
				o.Detail, c.Detail = c.Detail, o.Detail // the failure leads
			}
			o.Status = c.Status
		}
		o.Detail = strings.TrimSpace(o.Detail + "\n" + c.Detail)
	}
}

// statusRank orders check statuses for merging: pass < skip < fail.
func statusRank(s history.CheckStatus) int {
	return slices.Index([]history.CheckStatus{history.CheckPass, history.CheckSkip, history.CheckFail}, s)
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

// drift is step 1: fetch the tracked ref, resolve its head, and check
// every series at the pinned commit, the head and the also_check
// revisions.
func (n *night) drift(ctx context.Context) []history.Check {
	rep, cfg, repo := n.rep, n.cfg, n.in.repo
	var cs []history.Check
	repoPath := cfg.Path(cfg.Upstream.Repo)
	if cfg.Upstream.Fetch {
		if err := repo.Fetch(ctx, nil); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("upstream.fetch: fetching origin into %s: %v", repoPath, err))
			cs = append(cs, history.Check{Name: "fetch " + cfg.Upstream.Ref, Kind: history.KindDrift, Status: history.CheckFail, Detail: err.Error()})
			rep.exit(ExitInfra)
		}
	}
	var err error
	rep.Head, err = repo.Resolve(cfg.Upstream.Ref)
	if err != nil {
		rep.Errors = append(rep.Errors, "upstream.ref: "+err.Error())
		cs = append(cs, history.Check{Name: "resolve " + cfg.Upstream.Ref, Kind: history.KindDrift, Status: history.CheckFail, Detail: err.Error()})
		rep.exit(ExitInfra)
	}
	for _, l := range n.in.cat.PassedOver() {
		// An unsealed draft in [arms] patches_dir: never applied, and
		// it does not stop the other series.
		first, _, _ := strings.Cut(l, "\n")
		rep.Warnings = append(rep.Warnings, "arms.patches_dir: "+first)
	}
	checks, recs := drift(rep, repo, repoPath, n.in.cat, n.in.b, cfg.Upstream.Also)
	n.out.Drift = recs
	n.out.UpstreamHead = rep.Head
	rep.BuildCommit = rep.Pinned
	if cfg.Arms.Commit == CommitHead && rep.Head != "" {
		rep.BuildCommit = rep.Head
		n.out.SGLangCommit = rep.BuildCommit // what is built and benched
	}
	return append(cs, checks...)
}

// canContinue says whether the build and bench run after drift: not
// after an infrastructure failure, nor after drift at the commit they
// would build (arms.commit = "head").
func (n *night) canContinue() bool {
	code := n.rep.ExitCode
	return code < ExitDrift || (code == ExitDrift && n.cfg.Arms.Commit == CommitPinned)
}

// build is step 2: both arms through the build cache.
func (n *night) build(ctx context.Context) []history.Check {
	if n.o.SkipBuild {
		return []history.Check{{Name: "build", Kind: history.KindBuild, Status: history.CheckSkip, Detail: "--skip-build"}}
	}
	if !n.canContinue() || ctx.Err() != nil {
		return nil
	}
	a, b := n.in.a, n.in.b
	n.o.logf("building %s and %s at %s", a.Name, b.Name, githash.Hash(n.rep.BuildCommit).Short())
	return build(ctx, n.rep, n.cfg, n.o, a, b, n.in.cat)
}

// bench is step 3: bench arm B against arm A; the result is stored with
// the run (its arms, trials and server versions).
func (n *night) bench(ctx context.Context) []history.Check {
	rep := n.rep
	if n.o.SkipBench {
		return []history.Check{{Name: "bench", Kind: history.KindValidity, Status: history.CheckSkip, Detail: "--skip-bench"}}
	}
	if rep.ExitCode >= ExitInfra || !n.canContinue() || ctx.Err() != nil {
		return nil
	}
	a, b := n.in.a, n.in.b
	n.o.logf("benching %s against %s", b.Name, a.Name)
	res, settings, err := runBench(ctx, n.cfg, n.bo, n.boErr, n.in.tune, rep)
	rep.BenchSettings = &settings
	rep.Bench = res
	if err != nil {
		var ie *bench.InfraError
		if errors.As(err, &ie) || ctx.Err() == nil {
			rep.Errors = append(rep.Errors, "bench: "+err.Error())
			rep.exit(ExitInfra)
			return []history.Check{{Name: "bench", Kind: history.KindValidity, Status: history.CheckFail, Detail: err.Error()}}
		}
		return nil
	}
	n.res = res
	n.out.Env = benchEnv(res)
	n.out.Arms = armRecords(rep, res)
	return nil
}

// judge is step 4: each arm's output, its metrics against history, and B
// against A tonight. The error is a history that could not be read.
func (n *night) judge() ([]history.Check, error) {
	if n.res == nil {
		return nil, nil
	}
	return judge(n.rep, n.cfg, n.store, n.res, n.in.a.Name, n.in.b.Name)
}

// finish is step 5: an interrupted run and every infrastructure failure
// get a failed "run" check (the CI test case), and the run its status and
// verdict.
func (n *night) finish(ctx context.Context) []history.Check {
	rep := n.rep
	var cs []history.Check
	interrupted := ctx.Err() != nil
	switch {
	case interrupted && !hasCheck(rep.Checks, "run", history.KindInfra):
		// No verdict, never a reference; an infrastructure exit, so CI
		// does not read it as a pass.
		rep.exit(ExitInfra)
		rep.Errors = append(rep.Errors, "interrupted ("+context.Cause(ctx).Error()+"): the run stopped before its verdict")
		cs = append(cs, history.Check{Name: "run", Kind: history.KindInfra, Status: history.CheckFail, Detail: "interrupted"})
	case interrupted:
		// Already said (finish runs again when the history fails).
	case rep.ExitCode == ExitInfra && !failedCheck(rep.Checks):
		// Every infrastructure failure shows as a failed test case in CI.
		cs = append(cs, history.Check{Name: "run", Kind: history.KindInfra, Status: history.CheckFail, Detail: strings.Join(rep.Errors, "; ")})
	}
	switch {
	case interrupted:
		rep.Status, rep.Verdict = history.Incomplete, verdictInterrupted
	case rep.ExitCode == ExitInfra:
		rep.Status, rep.Verdict = history.Failed, verdictText(rep)
	default:
		rep.Status, rep.Verdict = history.Complete, verdictText(rep)
	}
	return cs
}

// failedNames lists the failed checks of the kinds given.
func failedNames(rep *Report, kinds ...history.CheckKind) string {
	var out []string
	for _, c := range rep.Checks {
		if c.Status == history.CheckFail && slices.Contains(kinds, c.Kind) {
			out = append(out, c.Name)
		}
	}
	return strings.Join(out, ", ")
}

// hasCheck reports whether cs holds a check of that name and kind.
func hasCheck(cs []history.Check, name string, kind history.CheckKind) bool {
	return slices.ContainsFunc(cs, func(c history.Check) bool { return c.Name == name && c.Kind == kind })
}

func failedCheck(cs []history.Check) bool {
	for _, c := range cs {
		if c.Status == history.CheckFail {
			return true
		}
	}
	return false
}

// ConfigError is a nightly.toml that cannot run; the CLI exits 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// runInputs is what a run starts from once preflight has read the config:
// the arms' recipes, the patch series and the upstream repository.
type runInputs struct {
	a, b *recipes.Recipe
	cat  *patches.Catalog
	repo *gitsrc.Repo
	tune *tune.File // bench.tune, nil when unset
}

// preflight checks what the config decides before anything runs: the
// recipes and patch series, and, for the steps that will run, the archs,
// the interpreters, the deps dir and what the bench needs. Errors name
// the config key.
func preflight(cfg *Config, o Options) (*runInputs, error) {
	a, b, err := loadArms(cfg)
	if err != nil {
		return nil, err
	}
	cat, err := catalog(cfg)
	if err != nil {
		return nil, err
	}
	repo, err := gitsrc.OpenAny(cfg.Path(cfg.Upstream.Repo))
	if err != nil {
		return nil, fmt.Errorf("upstream.repo %s: %w; clone a mirror there (git clone --mirror https://github.com/sgl-project/sglang.git)", cfg.Path(cfg.Upstream.Repo), err)
	}
	if b.Series != "" && len(cat.Members(b.Series)) == 0 {
		return nil, fmt.Errorf("arms.b: recipe %s names series %q, which no series has as name or family (arpatch's embedded series%s)", b.Name, b.Series, besideDir(cfg))
	}
	if !o.SkipBuild {
		bo, err := BuildOptions(cfg, o, b)
		if err != nil {
			return nil, err
		}
		// Against the pinned tree's CMake (the head's is checked by the
		// build itself, after drift).
		// The CMakeLists.txt is the sgl-kernel project's, wherever that
		// tree keeps it; a tree without a single project is refused by
		// the build itself, naming what it looked for.
		if cm := pinnedCMake(repo, b.Upstream.Commit); cm != "" {
			if err := kernels.CheckUpstreamArchs(bo.Archs, kernels.UpstreamArchs(cm)); err != nil {
				return nil, fmt.Errorf("%s: %w", cfg.At("build.archs"), err)
			}
		}
		if err := lookPython(cfg.Build.Python, o.Env); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.At("build.python"), err)
		}
		if d := bo.DepsDir; d != "" {
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				key := cfg.At("build.deps_dir")
				if cfg.Build.DepsDir == "" {
					key = fmt.Sprintf("arms.b: recipe %s's [build] deps_dir", b.Name)
				}
				return nil, fmt.Errorf("%s %s: not a directory", key, d)
			}
		}
	}
	if !o.SkipBench {
		c := cfg.Bench
		for _, arm := range []struct{ key, url, launch string }{{"a", c.URLA, c.LaunchCmdA}, {"b", c.URLB, c.LaunchCmdB}} {
			if arm.url == "" && arm.launch == "" && c.LaunchCmd == "" && cmp.Or(c.Model, b.Bench.Model) == "" {
				return nil, fmt.Errorf("bench: arm %s has no server: set bench.model (and bench.draft_model) to launch SGLang, bench.launch_cmd or bench.launch_cmd_%s, or bench.url_%s; or run with --skip-bench", arm.key, arm.key, arm.key)
			}
		}
		for _, py := range []struct{ key, v string }{{"bench.python_a", c.PythonA}, {"bench.python_b", c.PythonB}} {
			if py.v != "" {
				if err := lookPython(py.v, o.Env); err != nil {
					return nil, fmt.Errorf("%s: %w", py.key, err)
				}
			}
		}
	}
	in := &runInputs{a: a, b: b, cat: cat, repo: repo}
	if !o.SkipBench && cfg.Bench.Tune != "" {
		if in.tune, err = tune.Load(cfg.Path(cfg.Bench.Tune)); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.At("bench.tune"), err)
		}
	}
	return in, nil
}

// pinnedCMake returns the sgl-kernel project's CMakeLists.txt at rev, or
// "" when rev, its project or the file cannot be read.
func pinnedCMake(repo *gitsrc.Repo, rev string) string {
	c, err := repo.Resolve(rev)
	if err != nil {
		return ""
	}
	tree, err := repo.TreeAt(c)
	if err != nil {
		return ""
	}
	proj, err := sglkernel.AtCommit(tree)
	if err != nil {
		return ""
	}
	cm, err := tree.ReadFile(proj.Path("CMakeLists.txt"))
	if err != nil {
		return ""
	}
	return string(cm)
}

// lookPython finds an interpreter by path, or by name on env's PATH.
func lookPython(py string, env []string) error {
	if strings.Contains(py, "/") {
		if _, err := os.Stat(py); err != nil {
			return fmt.Errorf("%s: %w", py, err)
		}
		return nil
	}
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if fi, err := os.Stat(filepath.Join(dir, py)); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return nil
		}
	}
	return fmt.Errorf("%q is not on PATH; give its full path (a relative path is relative to the config file)", py)
}

// workloadKey names what the bench measures: runs compare only within one
// key, since a change of model, prompts or tokens moves every number. It
// is read off the settings the bench runs with (BenchOptions,
// report.SettingsOf), the same ones its report records, so the key cannot
// name a workload the bench did not send. Options that cannot be built
// (the bench step reports why) still give a key from what was resolved.
func workloadKey(cfg *Config, o Options, a, b *recipes.Recipe) string {
	bo, _ := BenchOptions(cfg, o, a, b) // an error fails the bench step, which reports it
	return benchKey(bo)
}

// benchKey is workloadKey of options already built.
func benchKey(bo bench.Options) string {
	s := report.SettingsOf(bo)
	return fmt.Sprintf("model=%s draft=%s tp=%d spec=%s/%d/%d/%d prompts=%s:%d max_new_tokens=%d concurrency=%s",
		s.Model, s.DraftModel, s.TP, s.SpecAlgorithm, s.SpecSteps, s.SpecTopK, s.SpecDraftTokens,
		s.Workload, s.Prompts, s.MaxNewTokens, textfmt.Ints(s.Concurrency, ","))
}

func verdictText(rep *Report) string {
	switch rep.ExitCode {
	case ExitInfra:
		first, _, _ := strings.Cut(strings.Join(rep.Errors, "; "), "\n")
		return "infrastructure failure: " + first
	case ExitDrift:
		v := "drift: the series no longer applies to " + strings.Join(rep.DriftedAt, " and ")
		for _, h := range rep.Ports {
			v += "; " + h.String()
		}
		if why := failedNames(rep, history.KindRegression, history.KindValidity); why != "" {
			v += "; and regression: " + why
		}
		return v
	case ExitRegression:
		var why []string
		for _, c := range rep.Checks {
			if c.Status == history.CheckFail {
				why = append(why, c.Name)
			}
		}
		return "regression: " + strings.Join(why, ", ") + envNote(rep)
	}
	return "no regression" + envNote(rep)
}

// envNote adds an environment change to the headline.
func envNote(rep *Report) string {
	if rep.EnvChange == nil {
		return ""
	}
	return "; " + rep.EnvChange.String()
}

func loadArms(cfg *Config) (*recipes.Recipe, *recipes.Recipe, error) {
	// load returns arm's recipe: its file (arms.X_file, relative to the
	// config), else the embedded one it names (arms.X). Errors name the
	// key and its line.
	load := func(arm, name, file string) (*recipes.Recipe, error) {
		if file != "" {
			r, err := recipes.File(cfg.Path(file))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cfg.At("arms."+arm+"_file"), err)
			}
			return r, nil
		}
		r, err := recipes.Embedded(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (or name a recipe file with arms.%s_file)", cfg.At("arms."+arm), err, arm)
		}
		return r, nil
	}
	a, err := load("a", cfg.Arms.A, cfg.Arms.AFile)
	if err != nil {
		return nil, nil, err
	}
	b, err := load("b", cfg.Arms.B, cfg.Arms.BFile)
	if err != nil {
		return nil, nil, err
	}
	if a.Upstream.Commit != b.Upstream.Commit {
		return nil, nil, fmt.Errorf("arms: recipe %s pins %s and %s pins %s; the A/B needs one commit", a.Name, a.Upstream.Commit, b.Name, b.Upstream.Commit)
	}
	if a.Name == b.Name {
		return nil, nil, fmt.Errorf("arms: A and B are both recipe %s", a.Name)
	}
	return a, b, nil
}

// catalog is the embedded series plus, beside them, those of
// [arms] patches_dir (one of the same name replaces the embedded one).
func catalog(cfg *Config) (*patches.Catalog, error) {
	cat, err := patches.Embedded()
	if err != nil || cfg.Arms.PatchesDir == "" {
		return cat, err
	}
	extra, err := patches.LoadDir(cfg.Path(cfg.Arms.PatchesDir))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.At("arms.patches_dir"), err)
	}
	return cat.With(extra), nil
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

// drift checks every series at the pinned commit and at the tracked
// ref's head, returns its checks and each patch's fit (for the history),
// and fails the run (exit 3) when no series of recipe B's family fits
// head, naming the patches, files and hunks that conflict.
func drift(rep *Report, repo *gitsrc.Repo, repoPath string, cat *patches.Catalog, b *recipes.Recipe, also []string) ([]history.Check, []history.DriftRecord) {
	var cs []history.Check
	revs := []string{rep.Pinned}
	if rep.Head != "" && rep.Head != rep.Pinned {
		revs = append(revs, rep.Head)
	}
	judged := len(revs)
	alsoName := map[string]string{}
	for _, a := range also {
		// also_check is recorded, never failing: a revision that does not
		// resolve is noted and skipped; one already checked is not checked
		// twice.
		commit, err := repo.Resolve(a)
		if err != nil {
			cs = append(cs, history.Check{Name: "also_check " + a, Kind: history.KindDrift, Status: history.CheckSkip, Detail: err.Error()})
			rep.Warnings = append(rep.Warnings, "upstream.also_check: "+err.Error())
			continue
		}
		if slices.Contains(revs, commit) {
			continue
		}
		revs = append(revs, commit)
		alsoName[commit] = a
	}
	// The series of B's family: with [arms] patches_dir beside the
	// embedded series, others are no part of this job.
	var only []string
	for _, s := range cat.Members(b.Series) {
		only = append(only, s.Name)
	}
	rows, err := checkout.CheckCommits(repoPath, revs, cat, only)
	if err != nil {
		rep.Errors = append(rep.Errors, "drift check: "+err.Error())
		rep.exit(ExitInfra)
		return cs, nil
	}
	var recs []history.DriftRecord
	fits := map[string]map[string]bool{} // commit -> series -> fits
	for _, r := range rows {
		rev := string(CommitPinned)
		switch {
		case r.Commit == rep.Head && r.Commit != rep.Pinned:
			rev = rep.Ref
		case r.Commit == rep.Head:
			rev = "pinned=" + rep.Ref
		case r.Commit != rep.Pinned:
			rev = "also " + cmp.Or(alsoName[r.Commit], githash.Hash(r.Commit).Short())
		}
		dr := DriftRow{Series: r.Series, Commit: r.Commit, Rev: rev, Verdict: r.Verdict}
		for _, f := range r.Fits {
			rec := history.DriftRecord{Series: r.Series, Commit: r.Commit, Rev: rev, Patch: f.Patch, Fit: f.Fit.Verdict()}
			if f.Err != nil {
				rec.Detail = f.Err.Error()
			}
			if r.Moved != nil && errors.Is(f.Err, patches.ErrFileMissing) {
				rec.Detail = strings.Join(r.Moved.Explain(r.Series, repoPath, r.Commit, cat.Dir), "; ")
			}
			dr.Patches = append(dr.Patches, rec)
			recs = append(recs, rec)
		}
		if r.Err != nil {
			rec := history.DriftRecord{Series: r.Series, Commit: r.Commit, Rev: rev, Patch: "(series)", Fit: checkout.VerdictError, Detail: r.Err.Error()}
			dr.Patches = append(dr.Patches, rec)
			recs = append(recs, rec)
		}
		rep.Drift = append(rep.Drift, dr)
		if fits[r.Commit] == nil {
			fits[r.Commit] = map[string]bool{}
		}
		fits[r.Commit][r.Series] = r.Applies()
	}
	members := cat.Members(b.Series)
	for i, commit := range rowsCommits(rows) {
		if i >= judged {
			// Extra revisions are recorded and reported, never judged.
			for _, s := range members {
				c := history.Check{Name: fmt.Sprintf("%s at %s", s.Name, githash.Hash(commit).Short()), Kind: history.KindDrift, Status: history.CheckPass}
				if !fits[commit][s.Name] {
					c.Status, c.Detail = history.CheckSkip, "recorded only (also_check)"
					setNote(rep.Drift, s.Name, commit, c.Detail)
				}
				cs = append(cs, c)
			}
			continue
		}
		label := "pinned commit " + githash.Hash(commit).Short()
		if commit == rep.Head && commit != rep.Pinned {
			label = rep.Ref + " (" + githash.Hash(commit).Short() + ")"
		}
		anyFit := ""
		for _, s := range members {
			if fits[commit][s.Name] {
				anyFit = s.Name
			}
		}
		for _, s := range members {
			c := history.Check{Name: fmt.Sprintf("%s at %s", s.Name, label), Kind: history.KindDrift}
			switch {
			case fits[commit][s.Name]:
				c.Status = history.CheckPass
			case anyFit != "":
				c.Status, c.Detail = history.CheckSkip, "superseded here by "+anyFit
				setNote(rep.Drift, s.Name, commit, c.Detail)
			default:
				c.Status, c.Detail = history.CheckFail, conflictDetail(rep.Drift, s.Name, commit)
			}
			cs = append(cs, c)
		}
		if anyFit == "" && len(members) > 0 {
			rep.exit(ExitDrift)
			rep.DriftedAt = append(rep.DriftedAt, label)
			hint := portHint(repo, repoPath, cat, members, commit)
			msg := fmt.Sprintf("no %q series applies to %s:", b.Series, label)
			for _, s := range members {
				first, _, _ := strings.Cut(conflictDetail(rep.Drift, s.Name, commit), "\n")
				msg += fmt.Sprintf("\n  %s: %s", s.Name, first)
			}
			if hint != nil {
				rep.Ports = append(rep.Ports, *hint)
				msg += "\n  port: " + hint.String()
				// The JUnit message of each failing drift check leads with it.
				for i := range cs {
					if c := &cs[i]; c.Kind == history.KindDrift && c.Status == history.CheckFail && strings.HasSuffix(c.Name, " at "+label) {
						c.Detail = hint.String() + "\n" + c.Detail
					}
				}
			}
			msg += fmt.Sprintf("\n  remedy: refresh the series against this commit (`%s` shows every hunk), or keep the recipe pinned to a commit it fits", cat.CheckCommand(repoPath, commit))
			rep.Errors = append(rep.Errors, msg)
		}
	}
	return cs, recs
}

// portHint ports each member of the family to commit in memory, the
// newest series (by name, which carries its date) first, and returns the
// first clean result, else the newest series' conflicts; nil when no
// member can be ported at all (no tested_on commit in the repository).
func portHint(repo *gitsrc.Repo, repoPath string, cat *patches.Catalog, members []*patches.Series, commit string) *PortHint {
	var first *PortHint
	for i := len(members) - 1; i >= 0; i-- {
		s := members[i]
		if from := port.BaseCommit(repo, s); from == "" || repo.Precedes(commit, from) {
			// No base here, or commit is older than the series: a port
			// would carry it backwards over upstream's changes; an
			// older commit is for an older series.
			continue
		}
		rep, err := port.Run(port.Options{Repo: repo, Series: s, To: commit})
		if err != nil {
			continue
		}
		h := &PortHint{Series: s.Name, Commit: commit, Clean: rep.Clean, Summary: rep.Summary()}
		if rep.Clean {
			h.Command = port.Command(s.Name, repoPath, commit, port.DraftDir(s.Name, commit), cat.Dir)
			return h
		}
		h.Command = port.Command(s.Name, repoPath, commit, "", cat.Dir)
		if first == nil {
			first = h
		}
	}
	return first
}

func setNote(rows []DriftRow, series, commit, note string) {
	for i := range rows {
		if rows[i].Series == series && rows[i].Commit == commit {
			rows[i].Note = note
		}
	}
}

// rowsCommits returns the 40-hex commits of the rows, in order.
func rowsCommits(rows []checkout.DriftRow) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Commit] {
			seen[r.Commit] = true
			out = append(out, r.Commit)
		}
	}
	return out
}

func conflictDetail(rows []DriftRow, series, commit string) string {
	for _, r := range rows {
		if r.Series != series || r.Commit != commit {
			continue
		}
		for _, p := range r.Patches {
			if p.Fit == patches.VerdictConflict || p.Fit == checkout.VerdictError {
				return p.Detail
			}
		}
		return "verdict " + string(r.Verdict)
	}
	return ""
}

func build(ctx context.Context, rep *Report, cfg *Config, o Options, a, b *recipes.Recipe, cat *patches.Catalog) []history.Check {
	bo, err := BuildOptions(cfg, o, b)
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
		rep.exit(ExitInfra)
		return []history.Check{{Name: "build", Kind: history.KindBuild, Status: history.CheckFail, Detail: err.Error()}}
	}
	commit := ""
	if cfg.Arms.Commit == CommitHead {
		commit = rep.Head
	}
	if err := refreshArms(cfg.Path(cfg.Build.WorkDir), rep.BuildCommit); err != nil {
		rep.Errors = append(rep.Errors, "build: "+err.Error())
		rep.exit(ExitInfra)
		return []history.Check{{Name: "build", Kind: history.KindBuild, Status: history.CheckFail, Detail: err.Error()}}
	}
	var cs []history.Check
	_, results, err := kernels.ABBuild(ctx, kernels.ABOptions{A: a, B: b, Catalog: cat, Dir: cfg.Path(cfg.Build.WorkDir), Repo: cfg.Path(cfg.Upstream.Repo), Commit: commit, Build: bo}, nil)
	for i, r := range results {
		arm := []string{a.Name, b.Name}[i]
		row := BuildRow{Arm: arm, Key: r.Plan.Key, Hit: r.Hit, Output: r.Wheel}
		rep.Builds = append(rep.Builds, row)
		cs = append(cs, history.Check{Name: "build " + arm, Kind: history.KindBuild, Status: history.CheckPass, Detail: fmt.Sprintf("key %s, cache hit %v", digest.Short(r.Plan.Key), r.Hit)})
	}
	if err != nil {
		rep.Errors = append(rep.Errors, "build: "+err.Error())
		cs = append(cs, history.Check{Name: "build", Kind: history.KindBuild, Status: history.CheckFail, Detail: err.Error()})
		rep.exit(ExitInfra)
	}
	return cs
}

// BuildOptions turns recipe B's [build] and nightly.toml's [build] into
// the build's options with kernels.FromRecipe, as `arpatch build` does
// with its flags: nightly.toml's archs, jobs, tool, deps_dir and offline
// over the recipe's, with its python and cache_dir (relative paths are
// relative to the config file). Both arms build with them: recipe B's
// [build] is the build the patch needs. Errors name the config key
// (build.archs, build.cache_dir, ...).
func BuildOptions(cfg *Config, o Options, b *recipes.Recipe) (kernels.BuildOptions, error) {
	c := cfg.Build
	ov := kernels.BuildOverrides{Archs: c.Archs, Tool: c.Tool, DepsDir: cfg.Path(c.DepsDir), Offline: c.Offline, CacheDir: cfg.Path(c.CacheDir),
		Python: c.Python, Env: o.Env, Launcher: o.Launcher, Version: o.Version}
	if c.Jobs != 0 {
		ov.Jobs = &c.Jobs
	}
	bo, err := kernels.FromRecipe(b.Build, ov)
	if err != nil {
		return bo, fmt.Errorf("build.%w", err)
	}
	bo.Log = o.Log // a wait for the fixed build path says so
	return bo, nil
}

// refreshArms removes the nightly's A/B checkouts (work/a, work/b) when
// they hold another commit than tonight's (arms.commit = "head" after
// upstream moved), so that they are cloned afresh. A checkout with
// anything arpatch did not put there (edits, untracked files) is kept, and
// the error names it; ignored files (build products) go with the tree.
func refreshArms(work, commit string) error {
	for _, arm := range []string{"a", "b"} {
		dir := filepath.Join(work, arm)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		st, err := checkout.Status(dir, nil)
		if err != nil || st.State == nil || st.State.Commit == commit {
			continue // not ours, or already right: ABBuild decides
		}
		if !st.Clean() || len(st.Other) > 0 || len(st.Untracked) > 0 {
			return fmt.Errorf("%s holds commit %s with changes or files arpatch did not make; tonight needs %s. Move it away (the nightly re-clones it)", dir, githash.Hash(st.State.Commit).Short(), githash.Hash(commit).Short())
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}

// BenchOptions turns recipe B's [bench] and nightly.toml's [bench] into
// the bench's options with bench.FromRecipe, as `arpatch bench` does with
// its flags: arm A (the reference) and arm B, each with its recipe's
// environment.
func BenchOptions(cfg *Config, o Options, a, b *recipes.Recipe) (bench.Options, error) {
	c := cfg.Bench
	arm := func(r *recipes.Recipe, launch, url, python string) bench.Arm {
		if launch == "" {
			launch = c.LaunchCmd
		}
		if python == "" {
			python = cfg.Build.Python
		}
		return bench.Arm{Name: r.Name, Python: python, Env: r.Env, URL: url, LaunchCmd: launch}
	}
	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	num := func(v int) *int {
		if v == 0 {
			return nil
		}
		return &v
	}
	trials, warmup := c.TrialsFor(b.Bench.Trials), c.WarmupFor(b.Bench.Warmup)
	ov := bench.Overrides{
		Arms:     []bench.Arm{arm(a, c.LaunchCmdA, c.URLA, c.PythonA), arm(b, c.LaunchCmdB, c.URLB, c.PythonB)},
		Baseline: &a.Name, Model: str(c.Model), DraftModel: str(c.DraftModel), NumPrompts: num(c.NumPrompts), MaxNewTokens: num(c.MaxNewTokens),
		Trials: &trials, Warmup: &warmup, Concurrency: c.Concurrency, Interleave: true,
		Env: o.Env, LogDir: cfg.Path(c.LogDir), ReadyTimeout: cfg.ReadyTimeout(), AgreeThreshold: c.AgreeThreshold,
	}
	bo, err := bench.FromRecipe(b.Bench, ov)
	bo.HTTP = o.HTTP
	return bo, err
}

func runBench(ctx context.Context, cfg *Config, bo bench.Options, err error, tf *tune.File, rep *Report) (*bench.Result, report.Settings, error) {
	if err != nil {
		return nil, report.Settings{}, fmt.Errorf("bench: %w", err)
	}
	s := report.SettingsOf(bo)
	if err := applyTune(cfg, tf, rep, &bo); err != nil {
		return nil, s, err
	}
	res, err := bench.Run(ctx, bo)
	return res, s, err
}

func benchEnv(res *bench.Result) map[string]string {
	m := map[string]string{}
	for _, a := range res.Arms {
		if v, ok := a.ServerInfo["version"].(string); ok {
			m["sglang_version@"+a.Arm.Name] = v
		}
	}
	return m
}

// armRecords are the bench's arms with their trials and samples, for the
// history, each with its build's key.
func armRecords(rep *Report, res *bench.Result) []history.ArmRecord {
	var out []history.ArmRecord
	keys := map[string]string{}
	for _, b := range rep.Builds {
		keys[b.Arm] = b.Key
	}
	for _, ar := range res.Arms {
		var trials []history.TrialRecord
		for i, t := range ar.Trials {
			m := ar.Metrics[i]
			tr := history.TrialRecord{Index: t.Index, Concurrency: t.Concurrency, Wall: t.Wall, Values: stats.Values(m), Errors: m.Errors}
			for _, s := range t.Samples {
				tr.Samples = append(tr.Samples, history.SampleRecord{Prompt: s.Prompt, TTFT: s.TTFT, E2E: s.E2E, CompletionTokens: s.CompletionTokens, SpecVerifyCt: s.SpecVerifyCt, Error: s.Err})
			}
			trials = append(trials, tr)
		}
		agreement := 1.0
		if ar.Agreement != nil {
			agreement = ar.Agreement.Share
		}
		// invalid in the history means "no result": an arm without a
		// verdict (against an INVALID baseline) is marked too, so that
		// export, plots and reference windows never take its figures.
		out = append(out, history.ArmRecord{Name: ar.Arm.Name, Recipe: ar.Arm.Name, BuildKey: keys[ar.Arm.Name], Invalid: !ar.Verdict.Valid(), Agreement: agreement, Trials: trials})
	}
	return out
}

// RegressionVerdict is the outcome of one regression check (Check).
type RegressionVerdict string

// Regression verdicts. Only VerdictRegression fails the check (exit 1);
// VerdictNotCompared skips it.
const (
	// VerdictRegression: significantly worse (Mann-Whitney U below
	// regression.alpha) by at least the metric's threshold.
	VerdictRegression RegressionVerdict = "regression"
	// VerdictImprovement: significantly better by at least the threshold.
	VerdictImprovement RegressionVerdict = "improvement"
	// VerdictNoChange: neither of the above.
	VerdictNoChange = RegressionVerdict(stats.NoChange)
	// VerdictNotEnoughData: no reference runs yet, or too few samples to judge.
	VerdictNotEnoughData RegressionVerdict = "not enough data"
	// VerdictNotCompared: the environment changed since the reference
	// runs, or tonight's figures (or the other arm's) are no result (an
	// arm INVALID or without a verdict).
	VerdictNotCompared RegressionVerdict = "not compared"
)

// Check is one comparison of one metric of one arm against a reference.
type Check struct {
	Arm          string            `json:"arm"`
	Metric       string            `json:"metric"`
	Against      string            `json:"against"` // "history" or the other arm's name
	Tonight      float64           `json:"tonight_median"`
	Reference    float64           `json:"reference_median"`
	Pct          float64           `json:"pct"`
	P            float64           `json:"p"`
	ThresholdPct float64           `json:"threshold_pct"`
	RefRuns      int               `json:"reference_runs,omitempty"`
	RefSamples   int               `json:"reference_samples"`
	Verdict      RegressionVerdict `json:"verdict"`
	Note         string            `json:"note,omitempty"`

	judged   bool // a test ran: Pct and P mean something
	measured bool // Tonight is a result: the arm is Valid (and so is the other arm, against one)
}

// MarshalJSON leaves pct and p out of a check that was not judged (not
// enough data): a 0 there would read as a certain result; and tonight's
// median out of one whose arm's figures are no result.
func (c Check) MarshalJSON() ([]byte, error) {
	type plain Check
	out := struct {
		plain
		Tonight *float64 `json:"tonight_median,omitempty"`
		Pct     *float64 `json:"pct,omitempty"`
		P       *float64 `json:"p,omitempty"`
	}{plain: plain(c)}
	if c.judged {
		out.Pct, out.P = &c.Pct, &c.P
	}
	if c.measured {
		out.Tonight = &c.Tonight
	}
	return json.Marshal(out)
}

// pctP formats the change and p-value, or dashes when not judged.
func (c Check) pctP() (string, string) {
	if !c.judged {
		return "-", "-"
	}
	return fmt.Sprintf("%+.1f%%", c.Pct), fmt.Sprintf("%.3f", c.P)
}

// judge decides regressions against history and B against A tonight,
// and returns its checks: each arm's output, the environment, each
// regression check. The error is a history that could not be read (it
// names the database file); the checks are then those judged before it.
func judge(rep *Report, cfg *Config, store *history.Store, res *bench.Result, aName, bName string) ([]history.Check, error) {
	var cs []history.Check
	for _, ar := range res.Arms {
		c := history.Check{Name: "output of " + ar.Arm.Name, Kind: history.KindValidity, Status: history.CheckPass}
		switch {
		case ar.Invalid:
			c.Status = history.CheckFail
			c.Detail = strings.Join(ar.Warnings, "; ")
			rep.exit(ExitRegression)
		case ar.Verdict == bench.NoReference:
			// Against an INVALID arm A nothing was checked: not a pass.
			c.Status = history.CheckSkip
			c.Detail = strings.Join(ar.Warnings, "; ")
			rep.exit(ExitRegression)
		}
		cs = append(cs, c)
	}
	metrics := slices.Sorted(maps.Keys(cfg.Regression.Metrics))
	levels := res.Levels()
	// The reference windows first: their runs must share tonight's
	// environment for a comparison to mean anything.
	type window struct {
		ref  []float64
		runs []int64
	}
	windows := map[string]window{}
	var refRuns []int64
	for _, ar := range res.Arms {
		for _, c := range levels {
			for _, m := range metrics {
				var w window
				var err error
				if w.ref, w.runs, err = store.Window(rep.HardwareKey, rep.Workload, ar.Arm.Name, m, c, cfg.History.Window, rep.RunID); err != nil {
					return cs, err
				}
				windows[fmt.Sprint(ar.Arm.Name, c, m)] = w
				refRuns = append(refRuns, w.runs...)
			}
		}
	}
	var envCheck *history.Check
	var err error
	if rep.EnvChange, envCheck, err = envChange(store, rep, refRuns, cfg.Path(cfg.History.Path)); err != nil {
		return cs, err
	}
	if envCheck != nil {
		cs = append(cs, *envCheck)
	}
	// With one level the checks keep their names; with several each
	// names its level, and compares it with the same level only.
	named := func(metric string, c int) string {
		if len(levels) > 1 {
			return fmt.Sprintf("%s@concurrency=%d", metric, c)
		}
		return metric
	}
	for _, ar := range res.Arms {
		for _, c := range levels {
			for _, m := range metrics {
				tonight := metricValues(ar.MetricsAt(c), m)
				w := windows[fmt.Sprint(ar.Arm.Name, c, m)]
				r := Check{Arm: ar.Arm.Name, Metric: named(m, c), Against: "history", ThresholdPct: cfg.Regression.Metrics[m], RefRuns: len(w.runs), RefSamples: len(w.ref), measured: true}
				switch {
				case !ar.Verdict.Valid():
					r.Reference = stats.Quantile(w.ref, 0.5)
					r.Verdict, r.Note, r.measured = VerdictNotCompared, noResult(ar), false
				case rep.EnvChange != nil && len(w.ref) > 0:
					r.Tonight, r.Reference = stats.Quantile(tonight, 0.5), stats.Quantile(w.ref, 0.5)
					r.Verdict, r.Note = VerdictNotCompared, rep.EnvChange.String()
				default:
					d, _ := stats.Lookup(m) // LoadConfig refused an unknown one
					compare(&r, w.ref, tonight, cfg.Regression.Alpha, d.HigherIsBetter)
				}
				cs = append(cs, rep.addRegression(r))
			}
		}
	}
	if a, b := res.Arm(aName), res.Arm(bName); a != nil && b != nil {
		for _, c := range levels {
			am, bm := a.MetricsAt(c), b.MetricsAt(c)
			r := Check{Arm: bName, Metric: named(stats.TokS, c), Against: aName, ThresholdPct: cfg.Regression.Metrics[stats.TokS], RefSamples: len(am), measured: true}
			if r.ThresholdPct == 0 {
				r.ThresholdPct = cfg.Regression.ThresholdPct
			}
			if bad := cmp.Or(noResult(b), noResult(a)); bad != "" {
				r.Verdict, r.Note, r.measured, r.RefSamples = VerdictNotCompared, bad, false, 0
				cs = append(cs, rep.addRegression(r))
				continue
			}
			compare(&r, metricValues(am, stats.TokS), metricValues(bm, stats.TokS), cfg.Regression.Alpha, true)
			if r.Verdict == VerdictRegression && !*cfg.Regression.RequireBFaster {
				r.Note = "B slower than A, but regression.require_b_faster is false"
				r.Verdict = VerdictNoChange
			}
			cs = append(cs, rep.addRegression(r))
		}
	}
	return cs, nil
}

// noResult says why an arm's figures are no result ("patched: INVALID
// (only 0 of 15 outputs ...); its figures are no result"), or "" when
// they are one (bench.Verdict.Valid).
func noResult(ar *bench.ArmResult) string {
	if ar.Verdict.Valid() {
		return ""
	}
	why := ""
	for _, w := range ar.Warnings {
		if r, ok := strings.CutPrefix(w, "INVALID: "); ok {
			why = " (" + r + ")"
			break
		}
		if r, ok := strings.CutPrefix(w, "no verdict: "); ok {
			why = " (" + r + ")"
			break
		}
	}
	return fmt.Sprintf("%s: %s%s; its figures are no result", ar.Arm.Name, ar.Verdict, why)
}

// addRegression adds a regression check to the report and returns its
// check for CI and the history.
func (rep *Report) addRegression(r Check) history.Check {
	rep.Regressions = append(rep.Regressions, r)
	pct, p := r.pctP()
	c := history.Check{Name: fmt.Sprintf("%s %s vs %s", r.Arm, r.Metric, r.Against), Kind: history.KindRegression, Status: history.CheckPass,
		Detail: fmt.Sprintf("%s: %s (p=%s, threshold %.1f%%, %d reference samples)", r.Verdict, pct, p, r.ThresholdPct, r.RefSamples)}
	if r.Note != "" {
		c.Detail += "; " + r.Note
	}
	switch r.Verdict {
	case VerdictRegression:
		c.Status = history.CheckFail
		rep.exit(ExitRegression)
	case VerdictNotCompared:
		c.Status = history.CheckSkip
	}
	return c
}

// EnvChange is an environment that differs from the reference runs'.
type EnvChange struct {
	// Since is the newest reference run whose environment differs;
	// Changes say how ("driver 570.172.08 -> 580.95.05").
	Since   int64    `json:"since_run"`
	Changes []string `json:"changes"`
	// Accept is the command that makes tonight the new reference.
	Accept string `json:"accept"`
}

func (e *EnvChange) String() string {
	return fmt.Sprintf("the environment changed since run %d (%s): not compared with history; if the change is intended, make this run the reference: `%s`",
		e.Since, strings.Join(e.Changes, ", "), e.Accept)
}

// envChange compares tonight's environment with each reference run's
// (newest first) over EnvKeys, and returns the first difference (nil for
// none) with the "environment" check (nil without reference runs). A
// value either run did not record is not compared. The error is a
// history that could not be read.
func envChange(store *history.Store, rep *Report, refRuns []int64, dbPath string) (*EnvChange, *history.Check, error) {
	slices.Sort(refRuns)
	refRuns = slices.Compact(refRuns)
	if len(refRuns) == 0 {
		return nil, nil, nil
	}
	now := rep.Environment.Map()
	for i := len(refRuns) - 1; i >= 0; i-- {
		old, err := store.Env(refRuns[i])
		if err != nil {
			return nil, nil, err
		}
		if ch := EnvChanges(old, now); len(ch) > 0 {
			e := &EnvChange{Since: refRuns[i], Changes: ch,
				Accept: shellq.Join([]string{"arpatch", "history", "accept", fmt.Sprint(rep.RunID), "--db", dbPath})}
			return e, &history.Check{Name: "environment vs reference runs", Kind: history.KindEnvironment, Status: history.CheckSkip, Detail: e.String()}, nil
		}
	}
	return nil, &history.Check{Name: "environment vs reference runs", Kind: history.KindEnvironment, Status: history.CheckPass,
		Detail: fmt.Sprintf("same %s as reference runs %d..%d", strings.Join(EnvKeys, ", "), refRuns[0], refRuns[len(refRuns)-1])}, nil
}

// compare fills the verdict: a regression needs both significance (Mann-
// Whitney U below alpha) and a change beyond the threshold in the worse
// direction; too few samples give "not enough data".
func compare(r *Check, ref, tonight []float64, alpha float64, higherIsBetter bool) {
	r.Tonight = stats.Quantile(tonight, 0.5)
	r.Reference = stats.Quantile(ref, 0.5)
	if len(ref) == 0 || len(tonight) == 0 {
		r.Verdict, r.Note = VerdictNotEnoughData, "no reference runs yet on this hardware"
		return
	}
	d := stats.CompareAt(ref, tonight, higherIsBetter, alpha)
	r.Pct, r.P, r.judged = d.Pct, d.P, true
	worse := r.Pct < 0
	if !higherIsBetter {
		worse = r.Pct > 0
	}
	big := math.Abs(r.Pct) >= r.ThresholdPct
	switch {
	case d.TooFew != "" && d.Verdict == stats.NoChange:
		r.Verdict, r.Note, r.judged = VerdictNotEnoughData, d.TooFew, false
	case d.Verdict != stats.NoChange && big && worse:
		r.Verdict = VerdictRegression
	case d.Verdict != stats.NoChange && big:
		r.Verdict = VerdictImprovement
	default:
		r.Verdict = VerdictNoChange
	}
}

// metricValues is metric (a stats.Table name) of each trial, in order;
// nil for an unknown name.
func metricValues(ms []stats.Metrics, metric string) []float64 {
	m, ok := stats.Lookup(metric)
	if !ok {
		return nil
	}
	out := make([]float64, 0, len(ms))
	for _, x := range ms {
		out = append(out, m.Get(x))
	}
	return out
}

// besideDir names [arms] patches_dir for messages, when one is set.
func besideDir(cfg *Config) string {
	if cfg.Arms.PatchesDir == "" {
		return ""
	}
	return " and those in " + cfg.Path(cfg.Arms.PatchesDir)
}

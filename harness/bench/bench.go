// Package bench runs an EAGLE-3 serving benchmark: for each trial and arm
// it starts (or attaches to) an SGLang server, sends the workload at each
// concurrency level, and records every request; then, per level, it
// summarizes each metric across trials, compares every arm with the
// baseline, and checks that each arm's greedy outputs match the
// baseline's, so a fast result from a broken allreduce is reported
// INVALID rather than as a win. An arm whose requests fail or abort, or a
// baseline that cannot be compared, gets no speed verdict.
//
// Each launched arm runs in the caller's environment less the variables
// the recipes and arms control (ControlledEnv and every variable an arm
// sets), plus its own: a variable exported in the shell cannot make the
// baseline run patched.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/textfmt"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/progress"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/recipes"
)

// Arm is one configuration under test.
type Arm struct {
	Name      string            `json:"name"`
	Python    string            `json:"python,omitempty"` // interpreter of the arm's build (default python3)
	Env       map[string]string `json:"env,omitempty"`
	Args      []string          `json:"args,omitempty"`       // extra server arguments
	URL       string            `json:"url,omitempty"`        // attach to this running server instead of launching
	LaunchCmd string            `json:"launch_cmd,omitempty"` // sh command template replacing the launch, e.g. "my-serve --port {port}"; {arpatch} is Options.Self
}

// Options holds every input of Run. A zero Trials, Concurrency,
// MaxNewTokens, ReadyTimeout, RequestTimeout, AgreeTokens or (unless
// AgreeOff) AgreeThreshold means its default: Resolved fills them, for
// Run and for the settings a report records (report.SettingsOf) alike.
// A zero Warmup, TP or speculative setting means none.
type Options struct {
	Arms     []Arm
	Baseline string

	Model, DraftModel string
	TP                int
	SpecAlgorithm     string // EAGLE3, or "" for no speculation
	SpecSteps         int
	SpecTopK          int
	SpecDraftTokens   int

	Prompts []string
	// Workload names where Prompts came from and their content,
	// workload.Identity ("builtin@sha256:3f1c0a9e2b7d"); FromRecipe sets
	// it, reports record it (report.Settings.Workload) and nightly keys its
	// history by it. Empty when a caller set Prompts directly.
	Workload     string
	MaxNewTokens int
	Temperature  float64
	IgnoreEOS    bool
	// Concurrency lists the levels (requests in flight) to run, in order:
	// each trial of each arm runs every level on one server start ([1]).
	// With an open Arrivals a level caps the requests in flight, as
	// vllm bench serve's --max-concurrency does.
	Concurrency []int
	// Arrivals, when Open, sends each level's requests at the times it
	// gives (an open-loop load: --request-rate, --burstiness) instead of
	// all at once; every trial of every arm gets the same times (one
	// seed), so arms meet the same load.
	Arrivals workload.Arrivals
	// Serving selects the latency metrics and percentiles of the serving
	// metrics (vLLM's --percentile-metrics, --metric-percentiles); an
	// empty one is stats.DefaultSelection.
	Serving    stats.Selection
	Warmup     int // untimed single requests after each server start (or attach), before its first timed level
	Trials     int
	Interleave bool // restart servers each trial so arms alternate A B A B

	Host           string
	Env            []string // the base environment of launched servers
	Self           string   // the arpatch binary, for {arpatch} in a launch template
	LogDir         string
	ReadyTimeout   time.Duration // wait for /health_generate after a launch (0: server.DefaultReadyTimeout)
	RequestTimeout time.Duration // give up on one request after it (0: DefaultRequestTimeout)
	AgreeThreshold float64       // share of outputs identical over the first AgreeTokens tokens, in [0, 1] (0 means DefaultAgreeThreshold unless AgreeOff)
	// AgreeTokens is how many leading tokens of each output the output
	// check compares (all of them when MaxNewTokens is fewer); 0 means
	// sglang.DefaultAgreeTokens.
	AgreeTokens int
	// AgreeOff turns the output check off (threshold 0): only an arm with
	// no output to compare at all is INVALID by it.
	AgreeOff bool

	// Preflight, when set, runs first; Force lets the run go on when it
	// finds custom allreduce slower than NCCL at the verify shape.
	Preflight func(ctx context.Context) (*allreduce.Report, error)
	Force     bool

	// Notes are what the caller's settings decided for the run that a
	// reader of its result must know (a server measured alone); Run
	// puts them first in Result.Findings.
	Notes []string

	// Progress is told about each request; nil for none.
	Progress func(p Progress)
	// HTTP, when set, is the HTTP client for every server's requests (a
	// test's in-memory network, sglangtest.Network); nil gives each server
	// start a client of its own.
	HTTP *http.Client
}

// Progress is where a run is: trial Trial of Trials, arm Arm at
// concurrency Concurrency, Done of Total requests finished.
type Progress struct {
	Trial, Trials int
	Arm           string
	Concurrency   int
	Done, Total   int
}

// ShowProgress returns a Progress function that shows each level's
// requests on w: a live bar per trial, arm and concurrency when w is a
// terminal, else a line when a level starts, every 30 s and when it is
// done ("trial 2/5 pcie concurrency 4 [32/32] requests 100% eta 0s"),
// through internal/progress.
func ShowProgress(w io.Writer) func(Progress) {
	c := progress.New(w, "requests")
	return func(p Progress) {
		c.Set(fmt.Sprintf("trial %d/%d %s concurrency %d", p.Trial, p.Trials, p.Arm, p.Concurrency), p.Done, p.Total)
	}
}

// ControlledEnv are the variables the recipes' arms set to choose the
// allreduce path. They are removed from the inherited environment of
// every launched arm that does not set them itself, as is every variable
// any arm sets: exported in the shell, SGLANG_FORCE_CUSTOM_AR_PCIE=1
// would otherwise run the baseline patched too.
// They are the variables the pcie series and sgl-kernel read (package
// tune names them).
var ControlledEnv = append([]string{tune.EnvAlgo}, tune.Variables...)

// RecordedEnvPrefixes are the prefixes of the variables the result
// records per arm (ArmResult.Env): those that change SGLang, NCCL, CUDA
// or PyTorch.
var RecordedEnvPrefixes = []string{"SGLANG_", "NCCL_", "CUDA_", "PYTORCH_"}

// ArmResult is everything measured for one arm.
type ArmResult struct {
	Arm Arm `json:"arm"`
	// Env is the arm's effective SGLANG_*, NCCL_*, CUDA_* and PYTORCH_*
	// variables, as its server was launched with them; nil for an arm
	// attached by URL, whose environment arpatch does not know.
	Env map[string]string `json:"effective_env,omitempty"`
	// Trials holds one pass of the workload per trial and level, in the
	// order they ran; Metrics is parallel to it.
	Trials  []stats.Trial   `json:"trials"`
	Metrics []stats.Metrics `json:"trial_metrics"`
	// Serving is parallel to Trials: each trial's serving metrics, as
	// vllm bench serve computes and names them (stats.Serving).
	Serving []stats.Serving `json:"serving"`
	// Levels holds the summaries and verdict per concurrency level, in
	// Options.Concurrency order.
	Levels []*Level `json:"levels"`
	// Agreement sums the output check over all levels (each level is
	// compared with the baseline at the same level).
	Agreement  *stats.Agreement `json:"agreement,omitempty"`
	Invalid    bool             `json:"invalid"`
	Verdict    Verdict          `json:"verdict"` // over all levels
	Warnings   []string         `json:"warnings,omitempty"`
	ServerInfo map[string]any   `json:"server_info,omitempty"`
}

// Level is one arm at one concurrency level.
type Level struct {
	Concurrency int `json:"concurrency"`
	// Summaries per metric of stats.Table across trials, by name (tok_s,
	// ..., tpot_ms_p99), each in the metric's unit.
	Summaries map[string]stats.Summary `json:"summaries"`
	// Deltas against the baseline at this level, per metric (absent for
	// the baseline, for an INVALID arm, and when the baseline is INVALID:
	// no figure of theirs is compared).
	Deltas    map[string]stats.Delta `json:"deltas,omitempty"`
	Agreement *stats.Agreement       `json:"agreement,omitempty"`
	Verdict   Verdict                `json:"verdict"`
}

// Level returns the arm's level at concurrency c, or nil.
func (a *ArmResult) Level(c int) *Level {
	for _, l := range a.Levels {
		if l.Concurrency == c {
			return l
		}
	}
	return nil
}

// MetricsAt returns the metrics of the arm's trials at concurrency c, in
// trial order.
func (a *ArmResult) MetricsAt(c int) []stats.Metrics {
	var out []stats.Metrics
	for i, t := range a.Trials {
		if t.Concurrency == c && i < len(a.Metrics) {
			out = append(out, a.Metrics[i])
		}
	}
	return out
}

// Verdict is an arm's verdict at a level or overall.
type Verdict string

// The verdicts. Faster, Slower and NoChange are tok/s against the
// baseline (Mann-Whitney U); TooFew is "no change" from trials too few
// for any difference to be significant.
const (
	Baseline        Verdict = "baseline"
	InvalidBaseline Verdict = "INVALID baseline"
	Invalid         Verdict = "INVALID"
	// NoReference is an arm measured against a baseline that is INVALID:
	// it has no verdict.
	NoReference Verdict = "no verdict (INVALID baseline)"
	Faster              = Verdict(stats.Faster)
	Slower              = Verdict(stats.Slower)
	NoChange            = Verdict(stats.NoChange)
	TooFew      Verdict = "too few trials to tell"
)

// Valid reports whether figures under this verdict are a result that may
// be published as one: false for INVALID (the arm's outputs or requests
// failed), INVALID baseline and no verdict (measured against an INVALID
// baseline). Every output that a person or a machine reads (JSON,
// benchfmt, github-action-benchmark, Bencher, JUnit, plots, the nightly's
// checks and history) leaves an arm that is not Valid out of its
// comparisons or marks it in its own way.
func (v Verdict) Valid() bool {
	return v != InvalidBaseline && v != Invalid && v != NoReference
}

// Fails reports whether the verdict fails a run (exit code 1).
func (v Verdict) Fails() bool {
	return v == InvalidBaseline || v == Invalid || v == NoReference || v == Slower
}

// Levels returns the concurrency levels the result holds, in run order.
func (r *Result) Levels() []int {
	var out []int
	if len(r.Arms) > 0 {
		for _, l := range r.Arms[0].Levels {
			out = append(out, l.Concurrency)
		}
	}
	return out
}

// Result is a whole run.
type Result struct {
	Baseline  string            `json:"baseline"`
	Arms      []*ArmResult      `json:"arms"`
	Preflight *allreduce.Report `json:"preflight,omitempty"`
	Findings  []string          `json:"findings,omitempty"`
	Started   time.Time         `json:"started"`
	Seconds   float64           `json:"seconds"`
}

// Arm returns the named arm's result.
func (r *Result) Arm(name string) *ArmResult {
	for _, a := range r.Arms {
		if a.Arm.Name == name {
			return a
		}
	}
	return nil
}

// PreflightError stops a run whose custom allreduce is slower than NCCL
// at the verify shape (Options.Force runs past that), or is broken: a
// wrong sum, a hang, an error or a failed run (Broken; nothing runs past
// that, since a fast number from a broken allreduce is no result).
type PreflightError struct {
	Finding string
	Broken  bool
}

func (e *PreflightError) Error() string {
	if e.Broken {
		return "preflight: " + e.Finding + "; the custom allreduce is broken, and --force does not run past a broken allreduce (a fast number from it is no result). Fix the allreduce first"
	}
	return "preflight: " + e.Finding + "; the serving run would measure a loss. Fix the allreduce first, or pass --force to run anyway"
}

// InfraError is a failure of the machinery, not of the arm: a server that
// would not start or died.
type InfraError struct{ Err error }

func (e *InfraError) Error() string { return e.Err.Error() }
func (e *InfraError) Unwrap() error { return e.Err }

// Run runs the benchmark. It returns the result so far with an error when
// the run cannot finish: *PreflightError, *InfraError (a server that
// would not start or died; the error holds its log's last lines), or the
// context's error on Ctrl-C. Every server it started is stopped before it
// returns.
func Run(ctx context.Context, o Options) (*Result, error) {
	res := &Result{Baseline: o.Baseline, Started: time.Now().UTC()}
	defer func() { res.Seconds = time.Since(res.Started).Seconds() }()
	if err := o.fill(); err != nil {
		return res, err
	}
	res.Baseline = o.Baseline
	res.Findings = append(res.Findings, o.Notes...)
	if launching(o) {
		if orphans := server.Orphans(o.LogDir); len(orphans) > 0 {
			g := orphans[0]
			return res, &InfraError{fmt.Errorf("a server of an earlier, killed run still runs (process group %d, log %s) and may hold the GPUs: stop it (kill -- -%d) and run again", g.PGID, g.Log, g.PGID)}
		}
	}
	if o.Preflight != nil {
		rep, err := o.Preflight(ctx)
		if err != nil {
			return res, &InfraError{fmt.Errorf("preflight allreduce benchmark: %w", err)}
		}
		res.Preflight = rep
		if f, broken := preflightFinding(rep); f != "" {
			res.Findings = append(res.Findings, "preflight: "+f)
			if broken || !o.Force {
				return res, &PreflightError{Finding: f, Broken: broken}
			}
		}
	}
	for _, c := range o.Concurrency {
		if c > len(o.Prompts) {
			res.Findings = append(res.Findings, fmt.Sprintf("concurrency %d is above the %d prompts of a trial: at most %d requests are in flight at that level (raise --num-prompts to fill it)", c, len(o.Prompts), len(o.Prompts)))
		}
	}
	for _, a := range o.Arms {
		ar := &ArmResult{Arm: a}
		if a.URL == "" {
			ar.Env = recordedEnv(o.armEnv(a))
		} else if len(a.Env) > 0 {
			// A recipe's arm attached by URL: its variables are the
			// server's business, and arpatch cannot see them.
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(a.Env)) {
				kv = append(kv, shellq.Assign(k, a.Env[k]))
			}
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("attached to %s, so arpatch applied none of the arm's environment (%s): the result means what it says only if that server was started with it", a.URL, strings.Join(kv, " ")))
		}
		res.Arms = append(res.Arms, ar)
	}
	type slot struct{ trial, arm int }
	var order []slot
	if o.Interleave || !launching(o) {
		for t := 1; t <= o.Trials; t++ {
			for i := range o.Arms {
				order = append(order, slot{t, i})
			}
		}
	} else {
		for i := range o.Arms {
			for t := 1; t <= o.Trials; t++ {
				order = append(order, slot{t, i})
			}
		}
	}
	running := map[int]*server.Proc{}
	// stop ends a server, and says so when the kill failed or something
	// still answers on its port: a process that left its group outlives
	// the kill.
	stop := func(p *server.Proc, ar *ArmResult) {
		if err := p.Stop(); err != nil {
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("stopping the server for arm %s: %v; something in its process group may still run and hold the GPUs", ar.Arm.Name, err))
		}
		if p.Escaped(escapeWait) {
			ar.Warnings = append(ar.Warnings, p.EscapedWarning())
		}
	}
	defer func() {
		for i, p := range running {
			stop(p, res.Arms[i])
		}
	}()
	// One client per server start (or attached server), warmed up once:
	// its connections stay open across the trials it serves.
	clients := map[int]*sglang.Client{}
	for k, s := range order {
		ar := res.Arms[s.arm]
		url := ar.Arm.URL
		if url == "" {
			p := running[s.arm]
			if p == nil {
				var err error
				if p, err = o.start(ctx, ar.Arm, s.trial); err != nil {
					if ctx.Err() != nil {
						return res, ctx.Err()
					}
					return res, &InfraError{err}
				}
				running[s.arm] = p
				delete(clients, s.arm)
			}
			url = p.URL
		}
		client := clients[s.arm]
		if client == nil {
			client = sglang.NewClient(url)
			client.AgreeTokens = o.AgreeTokens
			if o.HTTP != nil {
				client.HTTP = o.HTTP
			}
			// Every server start says how it streams: whole texts, or
			// deltas (--incremental-streaming-output).
			info := client.ServerInfo(ctx)
			if ar.ServerInfo == nil {
				ar.ServerInfo = info
			}
			client.SpecSteps = sglang.SpecSteps(info)
			if incr, ok := sglang.IncrementalStreaming(info); ok {
				client.Incremental, client.ModeKnown = incr, true
			} else if info == nil && !slices.Contains(ar.Warnings, noServerInfo) {
				ar.Warnings = append(ar.Warnings, noServerInfo)
			}
			if err := o.warmup(ctx, client); err != nil {
				return res, err
			}
			clients[s.arm] = client
		}
		for _, level := range o.Concurrency {
			trial, err := o.trial(ctx, client, ar.Arm.Name, s.trial, level)
			if err != nil {
				return res, err
			}
			// A server that died says so with its log, before its failed
			// requests are counted; so does one that stopped answering
			// while the process it was launched by lives on (a wrapper
			// shell whose server died): no request failed for the arm's
			// sake, the server is gone.
			// (An attached server is judged so only once it has answered:
			// one that never did is the "is it up?" failure below.)
			if p := running[s.arm]; !allOK(trial.Samples) && (p != nil || answeredBy(ar, trial) > 0) {
				wait := o.deathWait(ctx, client)
				if p != nil {
					if exited, werr := p.Exited(ctx, wait); exited {
						return res, &InfraError{&server.ExitError{Name: ar.Arm.Name, Log: p.Spec.LogPath,
							Why: fmt.Sprintf("died during trial %d (%s)", s.trial, server.ExitStatus(werr)), Tail: server.Tail(p.Spec.LogPath, 40)}}
					}
				} else if wait > 0 {
					sleepCtx(ctx, wait) // attached: the same time to come back
				}
				if wait > 0 && ctx.Err() == nil && !o.answers(ctx, client) {
					return res, &InfraError{stoppedAnswering(ar, p, url, trial, level)}
				}
			}
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if len(trial.Samples) > 0 && unanswered(trial.Samples) && strings.HasPrefix(trial.Samples[0].Err, sglang.ModeMismatch) {
				// The server answers, but not in the mode it declares: its
				// health is not the question.
				return res, &InfraError{fmt.Errorf("arm %s: all %d requests of trial %d (concurrency %d) failed: %s; no output of this server can be read until its stream and its /server_info agree",
					ar.Arm.Name, len(trial.Samples), s.trial, level, strings.TrimPrefix(trial.Samples[0].Err, sglang.ModeMismatch))}
			}
			if len(trial.Samples) > 0 && unanswered(trial.Samples) {
				// Not a slow arm: a server that does not serve. No number of
				// this trial may stand for the arm.
				return res, &InfraError{fmt.Errorf("arm %s: all %d requests of trial %d (concurrency %d) failed, the first with: %s; is the server at %s up and serving /generate?",
					ar.Arm.Name, len(trial.Samples), s.trial, level, trial.Samples[0].Err, url)}
			}
			ar.Trials = append(ar.Trials, trial)
		}
		// Stop the server when the next slot needs another arm's, or
		// when this arm is done.
		last := k == len(order)-1 || order[k+1].arm != s.arm
		if p := running[s.arm]; p != nil && (o.Interleave || last) {
			stop(p, ar)
			delete(running, s.arm)
		}
	}
	analyze(res, o)
	return res, nil
}

// escapeWait is how long a stopped server's port may keep answering
// before it counts as a process that escaped its group.
var escapeWait = 2 * time.Second

const noServerInfo = "neither /server_info nor /get_server_info answered: the stream is read as whole texts (a server streaming deltas fails its requests)"

// CheckArms refuses arms that cannot give a comparison: two attached to
// one server (it would be compared with itself), and a launch template
// without {port} (its server would not listen where arpatch waits).
func (o Options) CheckArms() error {
	for i, a := range o.Arms {
		for _, b := range o.Arms[i+1:] {
			if SameServer(a.URL, b.URL) {
				return fmt.Errorf("arms %s and %s attach to one server (%s): the A/B would compare it with itself; give each arm its own", a.Name, b.Name, a.URL)
			}
		}
		if a.URL == "" && a.LaunchCmd != "" && !strings.Contains(a.LaunchCmd, "{port}") {
			return fmt.Errorf("arm %s: the launch command has no {port}; its server must listen on the port arpatch gives it (e.g. --port {port})", a.Name)
		}
	}
	return nil
}

// CheckURL refuses a server URL that is not http(s)://HOST[:PORT][/PATH]:
// "notaurl" would fail only when the run reaches it, as a dead server.
// Every refusal says "is not a server URL: give http://HOST:PORT", with
// s itself behind http:// as the example when it lacks a scheme
// ("127.0.0.1:30000", which url.Parse cannot even read).
func CheckURL(s string) error {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		eg := "http://127.0.0.1:30000"
		if t := strings.TrimSpace(s); t != "" && !strings.Contains(t, "://") {
			if v, err := url.Parse("http://" + t); err == nil && v.Host != "" && v.Port() != "" {
				eg = v.String()
			}
		}
		return fmt.Errorf("%s is not a server URL: give http://HOST:PORT (e.g. %s)", s, eg)
	}
	if u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%s: port %s is not 1 to 65535", s, u.Port())
		}
	}
	return nil
}

// SameServer reports whether two server URLs name one server: scheme and
// host compared without case, localhost as 127.0.0.1, default ports and a
// trailing slash ignored.
func SameServer(a, b string) bool {
	norm := func(s string) string {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" {
			return strings.TrimRight(strings.ToLower(s), "/")
		}
		host, port := strings.ToLower(u.Hostname()), u.Port()
		if host == "localhost" || host == "::1" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
		}
		return strings.ToLower(u.Scheme) + "://" + host + ":" + port + strings.TrimRight(u.Path, "/")
	}
	return a != "" && b != "" && norm(a) == norm(b)
}

// agreeTokens is how many tokens the output check compares: the first
// AgreeTokens (as Resolved fills it), or all when a request generates
// fewer.
func (o Options) agreeTokens() int {
	n := o.AgreeTokens
	if o.MaxNewTokens > 0 && o.MaxNewTokens < n {
		return o.MaxNewTokens
	}
	return n
}

// serverDeathWait bounds how long a trial with failed requests waits for
// its launched server's process to end, when the server no longer answers
// /health_generate, to report a death (with its log) rather than failed
// requests. A server that answers is alive: no wait.
var serverDeathWait = 5 * time.Second

// deathWait returns how long to wait for a launched server with failed
// requests to exit: 0 when it still answers /health_generate within a
// second, else serverDeathWait (Proc.Exited returns as soon as it exits).
func (o *Options) deathWait(ctx context.Context, c *sglang.Client) time.Duration {
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if c.Health(hctx) == nil {
		return 0
	}
	return serverDeathWait
}

// answers reports whether the server answers /health_generate within a
// second.
func (o *Options) answers(ctx context.Context, c *sglang.Client) bool {
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Health(hctx) == nil
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// stoppedAnswering is the infrastructure failure of a server that no
// longer answers after some of a trial's requests failed: its port, how
// many of the arm's requests it had answered, the trial's failures and
// the first, and for a launched one the process that still runs and the
// log.
func stoppedAnswering(ar *ArmResult, p *server.Proc, url string, trial stats.Trial, level int) error {
	answered, failed := answeredBy(ar, trial), 0
	first := ""
	for _, x := range trial.Samples {
		if x.Err != "" {
			failed++
			if first == "" {
				first = x.Err
			}
		}
	}
	where := "the server at " + url
	if u, err := url2port(url); err == nil {
		where = "the server on port " + u
	}
	msg := fmt.Sprintf("arm %s: %s stopped answering after %s (trial %d, concurrency %d: %d of %d requests failed, the first: %s; /health_generate does not answer %s later)",
		ar.Arm.Name, where, textfmt.Plural(answered, "answered request", "answered requests"), trial.Index, level, failed, len(trial.Samples), first, serverDeathWait)
	if p != nil {
		msg += fmt.Sprintf("; its launch command (pid %d) still runs, so it outlived the server it started (a wrapper such as sh -c 'server & ...'): see %s", p.PID(), p.Spec.LogPath)
	}
	return errors.New(msg)
}

// answeredBy counts the arm's requests that were answered, in its trials
// so far and in trial.
func answeredBy(ar *ArmResult, trial stats.Trial) int {
	n := 0
	for _, t := range append(append([]stats.Trial(nil), ar.Trials...), trial) {
		for _, x := range t.Samples {
			if x.Err == "" {
				n++
			}
		}
	}
	return n
}

// url2port is the port of a server URL.
func url2port(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil || pu.Port() == "" {
		return "", fmt.Errorf("no port in %q", u)
	}
	return pu.Port(), nil
}

func allOK(ss []sglang.Sample) bool {
	for _, x := range ss {
		if x.Err != "" {
			return false
		}
	}
	return true
}

// unanswered reports whether every request failed without the server
// answering it: no output, no abort and no impossible data (an abort or
// counts no server can report are the server's answer, and make the arm
// INVALID, not the run an infrastructure failure).
func unanswered(ss []sglang.Sample) bool {
	for _, x := range ss {
		if x.Err == "" || x.Aborted() || x.Impossible() {
			return false
		}
	}
	return true
}

func launching(o Options) bool {
	for _, a := range o.Arms {
		if a.URL == "" {
			return true
		}
	}
	return false
}

func (o *Options) fill() error {
	if len(o.Arms) == 0 {
		return errors.New("no arms to run")
	}
	seen := map[string]bool{}
	for _, a := range o.Arms {
		if seen[a.Name] {
			return fmt.Errorf("arm %q is defined twice", a.Name)
		}
		seen[a.Name] = true
	}
	if err := o.CheckArms(); err != nil {
		return err
	}
	if o.Baseline == "" {
		o.Baseline = o.Arms[0].Name
	}
	if !seen[o.Baseline] {
		return fmt.Errorf("baseline arm %q is not among the arms (%s)", o.Baseline, armNames(o.Arms))
	}
	// Run the baseline first in every trial.
	sort.SliceStable(o.Arms, func(i, j int) bool { return o.Arms[i].Name == o.Baseline && o.Arms[j].Name != o.Baseline })
	*o = o.Resolved()
	if err := o.checkBounds(); err != nil {
		return err
	}
	if o.Host == "" {
		o.Host = server.DefaultHost
	}
	if len(o.Prompts) == 0 {
		return errors.New("no prompts")
	}
	if o.RequestTimeout < 0 || o.ReadyTimeout < 0 {
		return errors.New("bench: a negative timeout")
	}
	if err := o.Arrivals.Check(); err != nil {
		return err
	}
	if o.LogDir == "" {
		o.LogDir = os.TempDir()
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	for _, a := range o.Arms {
		if a.URL == "" && a.LaunchCmd == "" && o.Model == "" {
			return fmt.Errorf("arm %s needs a server: pass --model (and --draft-model) to launch SGLang, --launch-cmd, or --url", a.Name)
		}
		if a.URL == "" && a.LaunchCmd == "" && strings.EqualFold(o.SpecAlgorithm, "EAGLE3") && o.DraftModel == "" {
			return fmt.Errorf("arm %s: --speculative-algorithm EAGLE3 needs --draft-model", a.Name)
		}
	}
	if !launching(*o) {
		return nil // LogDir holds launched servers' logs: none here
	}
	return os.MkdirAll(o.LogDir, 0o755)
}

// checkBounds refuses a count out of its range (package bounds), and a
// concurrency level given twice, before anything is allocated or started.
func (o *Options) checkBounds() error {
	for _, v := range []struct {
		key string
		n   int
	}{{"trials", o.Trials}, {"warmup", o.Warmup}, {"max_new_tokens", o.MaxNewTokens}, {"num_prompts", len(o.Prompts)}} {
		if err := bounds.Check(v.key, int64(v.n)); err != nil {
			return fmt.Errorf("bench %s %v", v.key, err)
		}
	}
	if err := recipes.CheckLevels(o.Concurrency); err != nil {
		return fmt.Errorf("bench concurrency %v", err)
	}
	// A NaN threshold would pass every "share < threshold" test: the
	// output check off, and a garbage arm faster.
	if err := bounds.CheckFloat("agree_threshold", o.AgreeThreshold); err != nil {
		return fmt.Errorf("bench agree_threshold %v", err)
	}
	return nil
}

func armNames(as []Arm) string {
	var n []string
	for _, a := range as {
		n = append(n, a.Name)
	}
	return strings.Join(n, ", ")
}

// Argv returns the launch command of an arm on a port: its LaunchCmd
// template through sh, or python -m sglang.launch_server with the model,
// the speculative settings and TP.
func (o *Options) Argv(a Arm, port int) []string {
	if a.LaunchCmd != "" {
		// Values are shell-quoted: a model path with a space or a ';' is
		// one argument, never a command.
		q := shellq.Quote
		self := o.Self
		if self == "" {
			self = "arpatch"
		}
		r := strings.NewReplacer("{port}", strconv.Itoa(port), "{host}", q(o.Host), "{model}", q(o.Model),
			"{draft}", q(o.DraftModel), "{tp}", strconv.Itoa(o.TP), "{arm}", q(a.Name), "{arpatch}", q(self))
		return []string{"sh", "-c", r.Replace(a.LaunchCmd)}
	}
	py := pyenv.Or(a.Python)
	argv := []string{py, "-m", "sglang.launch_server", "--model-path", o.Model, "--host", o.Host, "--port", strconv.Itoa(port)}
	if o.TP > 0 {
		argv = append(argv, "--tp-size", strconv.Itoa(o.TP))
	}
	if o.SpecAlgorithm != "" && !strings.EqualFold(o.SpecAlgorithm, "none") {
		argv = append(argv, "--speculative-algorithm", o.SpecAlgorithm, "--speculative-draft-model-path", o.DraftModel,
			"--speculative-num-steps", strconv.Itoa(o.SpecSteps), "--speculative-eagle-topk", strconv.Itoa(o.SpecTopK),
			"--speculative-num-draft-tokens", strconv.Itoa(o.SpecDraftTokens))
	}
	return append(argv, a.Args...)
}

// armEnv is the environment a launched arm runs in: Options.Env without
// ControlledEnv and without every variable any arm sets, then the arm's
// own variables.
func (o *Options) armEnv(a Arm) []string {
	drop := map[string]bool{}
	for _, k := range ControlledEnv {
		drop[k] = true
	}
	for _, b := range o.Arms {
		for k := range b.Env {
			drop[k] = true
		}
	}
	var env []string
	for _, kv := range o.Env {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		env = append(env, k+"="+a.Env[k])
	}
	return env
}

// recordedEnv picks the variables with RecordedEnvPrefixes from env (the
// last of a repeated name wins, as exec does).
func recordedEnv(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range RecordedEnvPrefixes {
			if strings.HasPrefix(k, p) {
				m[k] = v
			}
		}
	}
	return m
}

func (o *Options) start(ctx context.Context, a Arm, trial int) (*server.Proc, error) {
	return server.StartOnFreePort(ctx, o.Host, func(port int) server.Spec {
		return server.Spec{
			Name: a.Name, Argv: o.Argv(a, port), Env: o.armEnv(a), Host: o.Host, Port: port,
			LogPath:      filepath.Join(o.LogDir, fmt.Sprintf("server-%s-trial%d.log", a.Name, trial)),
			ReadyTimeout: o.ReadyTimeout,
		}
	})
}

// warmup sends Warmup untimed requests, one at a time, cycling the
// prompts; it stops at once when ctx is cancelled.
func (o *Options) warmup(ctx context.Context, c *sglang.Client) error {
	for i := 0; i < o.Warmup; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
		c.Generate(rctx, -1, o.request(o.Prompts[i%len(o.Prompts)]))
		cancel()
	}
	return ctx.Err()
}

func (o *Options) request(p string) sglang.Request {
	return sglang.Request{Text: p, MaxNewTokens: o.MaxNewTokens, Temperature: o.Temperature, IgnoreEOS: o.IgnoreEOS}
}

// trial sends every prompt, level at a time: at most level in flight,
// each as soon as a request before it is done, or, with open Arrivals,
// each at its arrival time or as soon as one is done after that. On
// cancellation it stops sending, waits for the requests in flight (each
// bounded by ctx) and returns ctx's error.
func (o *Options) trial(ctx context.Context, c *sglang.Client, arm string, index, level int) (stats.Trial, error) {
	t := stats.Trial{Arm: arm, Index: index, Concurrency: level, Start: time.Now().UTC()}
	samples := make([]sglang.Sample, len(o.Prompts))
	due := o.Arrivals.Times(len(o.Prompts))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	start := time.Now()
	for w := 0; w < min(level, len(o.Prompts)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
				samples[i] = c.Generate(rctx, i, o.request(o.Prompts[i]))
				cancel()
				mu.Lock()
				done++
				if o.Progress != nil {
					o.Progress(Progress{Trial: index, Trials: o.Trials, Arm: arm, Concurrency: level, Done: done, Total: len(o.Prompts)})
				}
				mu.Unlock()
			}
		}()
	}
send:
	for i := range o.Prompts {
		if wait := time.Until(start.Add(due[i])); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				break send
			}
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(next)
	wg.Wait()
	t.Wall = time.Since(start).Seconds()
	t.Samples = samples
	return t, ctx.Err()
}

// preflightFinding returns why the allreduce preflight fails: a WRONG,
// hung or failed case or run (broken), or the fastest custom allreduce
// slower than NCCL at the verify shape (graph mode when measured, else
// eager).
func preflightFinding(rep *allreduce.Report) (finding string, broken bool) {
	if rep.Failed() {
		for _, f := range rep.Findings {
			if strings.HasPrefix(f, "WRONG") || strings.HasPrefix(f, "HANG") || strings.HasPrefix(f, "ERROR") || strings.HasPrefix(f, "UNSUPPORTED") {
				return f, true
			}
		}
		return "the allreduce benchmark failed: " + rep.Run.Exit, true
	}
	for _, mode := range []string{allreduce.ModeGraph, allreduce.ModeEager} {
		best, nccl, ok := rep.BestCustom(mode)
		if !ok {
			continue
		}
		if best.PerCallUS > nccl {
			return fmt.Sprintf("the fastest custom allreduce (%s/%s, %s) takes %.1f us at the verify shape, NCCL %.1f us", best.Impl, best.Branch, mode, best.PerCallUS, nccl), false
		}
		return "", false
	}
	return "", false
}

// analyze computes metrics, summaries per level, comparisons, agreement,
// warnings and verdicts.
func analyze(res *Result, o Options) {
	base := res.Arm(res.Baseline)
	tokens := o.agreeTokens()
	for _, ar := range res.Arms {
		ar.Metrics, ar.Serving = nil, nil
		for _, t := range ar.Trials {
			ar.Metrics = append(ar.Metrics, stats.Compute(t))
			ar.Serving = append(ar.Serving, stats.ComputeServing(t, o.Serving))
		}
		failures(ar)
		var toks, verify int
		for _, m := range ar.Metrics {
			toks += m.Tokens
			verify += m.VerifyCt
		}
		if acc := float64(toks) / float64(verify); o.SpecAlgorithm != "" && !strings.EqualFold(o.SpecAlgorithm, "none") && verify > 0 && acc < 1.05 {
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("accept length %.2f with speculation on: the draft is accepted almost never (is the algorithm EAGLE with an EAGLE-3 draft? use EAGLE3)", acc))
		}
	}
	if base != nil {
		baselineComparable(base, o, tokens)
	}
	for _, ar := range res.Arms {
		ar.Levels = nil
		if ar != base {
			ar.Agreement = &stats.Agreement{Threshold: o.AgreeThreshold}
		}
		for _, c := range o.Concurrency {
			lv := &Level{Concurrency: c, Summaries: map[string]stats.Summary{}}
			ms := ar.MetricsAt(c)
			for _, m := range stats.Table {
				lv.Summaries[m.Name] = stats.Summarize(values(ms, m.Get))
			}
			ar.Levels = append(ar.Levels, lv)
			if ar == base {
				continue
			}
			ag := stats.Agree(trialsAt(base.Trials, c), trialsAt(ar.Trials, c), o.AgreeThreshold, tokens)
			lv.Agreement = &ag
			ar.Agreement.Add(ag)
			if base.Invalid {
				continue // no reference: no delta means anything
			}
			lv.Deltas = map[string]stats.Delta{}
			bm := base.MetricsAt(c)
			for _, m := range stats.Table {
				lv.Deltas[m.Name] = stats.Compare(values(bm, m.Get), values(ms, m.Get), m.HigherIsBetter)
			}
		}
		if ar != base && base != nil && base.Invalid {
			// Nothing to compare with: the arm gets no verdict, whatever
			// its outputs (its own failed requests still make it INVALID).
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("no verdict: the baseline is INVALID (%s)", invalidWhy(base)))
		} else if ar != base && ar.Agreement.Invalid {
			ag := ar.Agreement
			ar.Invalid = true
			what := "prompts x trials"
			if len(o.Concurrency) > 1 {
				what = "prompts x trials x levels"
			}
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("INVALID: only %d of %d outputs (%d %s) give the baseline's output over the first %d tokens (threshold %.0f%%): the arm computes something else, so its speed means nothing",
				ag.IdenticalN, ag.Outputs, ag.Prompts, what, tokens, o.AgreeThreshold*100))
		}
	}
	for _, ar := range res.Arms {
		if ar.Invalid {
			// Its speed means nothing: no delta against the baseline is
			// kept that a reader of the JSON could take for "faster".
			for _, lv := range ar.Levels {
				lv.Deltas = nil
			}
		}
		verdicts(ar, ar == base, base != nil && base.Invalid)
	}
}

// invalidWhy is why an arm is INVALID: its first INVALID warning, without
// the word.
func invalidWhy(ar *ArmResult) string {
	for _, w := range ar.Warnings {
		if why, ok := strings.CutPrefix(w, "INVALID: "); ok {
			return why
		}
	}
	return "see its warnings"
}

// failures makes an arm with failed or aborted requests INVALID and says
// how many, with the first failure's message, and warns of empty outputs.
func failures(ar *ArmResult) {
	errs, aborts, impossible, empty, total := 0, 0, 0, 0, 0
	first := ""
	for i, m := range ar.Metrics {
		errs += m.Errors
		empty += m.Empty
		total += m.Requests
		t := ar.Trials[i]
		for _, x := range t.Samples {
			if x.Aborted() {
				aborts++
			}
			if x.Impossible() {
				impossible++
			}
			if x.Err != "" && first == "" {
				first = fmt.Sprintf("trial %d, concurrency %d, prompt %d: %s", t.Index, t.Concurrency, x.Prompt, x.Err)
			}
		}
	}
	if errs > 0 {
		// A request that fails is a result the arm did not deliver: its
		// speed over the rest means nothing.
		ar.Invalid = true
		var kinds []string
		if aborts > 0 {
			kinds = append(kinds, fmt.Sprintf("%d aborted by the server", aborts))
		}
		if impossible > 0 {
			kinds = append(kinds, fmt.Sprintf("%d with impossible data", impossible))
		}
		switch other := errs - aborts - impossible; {
		case other > 0 && len(kinds) == 0:
			kinds = append(kinds, "server errors, dropped streams or timeouts")
		case other > 0:
			kinds = append(kinds, fmt.Sprintf("%d server errors, dropped streams or timeouts", other))
		}
		ar.Warnings = append(ar.Warnings, fmt.Sprintf("INVALID: %d of %d requests failed (%s): the arm's speed leaves them out; the first: %s",
			errs, total, strings.Join(kinds, ", "), first))
	}
	if empty > 0 {
		ar.Warnings = append(ar.Warnings, fmt.Sprintf("%d requests returned no output", empty))
	}
}

// baselineComparable makes the baseline INVALID when it is no reference:
// at temperature 0 its outputs in every trial should be its first ones
// (at each level), and it must have output to compare with.
func baselineComparable(base *ArmResult, o Options, tokens int) {
	outputs := 0
	for _, t := range base.Trials {
		for _, x := range t.Samples {
			if x.Err == "" && x.CompletionTokens > 0 && x.Text != "" {
				outputs++
			}
		}
	}
	if outputs == 0 {
		base.Invalid = true
		base.Warnings = append(base.Warnings, "INVALID: the baseline has no output to compare with (every request failed, aborted or came back empty): it is no reference, and no arm can be faster or slower than it")
		return
	}
	for _, c := range o.Concurrency {
		ts := trialsAt(base.Trials, c)
		self := stats.Agree(ts, ts, o.AgreeThreshold, tokens)
		if self.Invalid && self.Outputs > 0 {
			base.Invalid = true
			base.Warnings = append(base.Warnings, fmt.Sprintf("INVALID: the baseline's own outputs differ across trials (%d of %d match its first over %d tokens%s): it is no reference, and the other arms' agreement means nothing",
				self.IdenticalN, self.Outputs, tokens, levelText(o, c)))
			return
		}
	}
}

// levelText is ", concurrency c" when the run has several levels.
func levelText(o Options, c int) string {
	if len(o.Concurrency) > 1 {
		return fmt.Sprintf(", concurrency %d", c)
	}
	return ""
}

// verdicts sets the verdict of each level and the overall one: an INVALID
// arm or baseline has no speed verdict, nor has an arm measured against
// an INVALID baseline; otherwise tok/s against the baseline per level,
// and overall slower when any level is slower, else faster when any is
// faster.
func verdicts(ar *ArmResult, isBase, baseInvalid bool) {
	level := func(lv *Level) Verdict {
		switch {
		case isBase && ar.Invalid:
			return InvalidBaseline
		case isBase:
			return Baseline
		case ar.Invalid:
			return Invalid
		case baseInvalid:
			return NoReference
		}
		d := lv.Deltas[stats.TokS]
		if d.Verdict == stats.NoChange && d.TooFew != "" {
			return TooFew
		}
		return Verdict(d.Verdict)
	}
	seen := map[Verdict]bool{}
	for _, lv := range ar.Levels {
		lv.Verdict = level(lv)
		seen[lv.Verdict] = true
	}
	switch {
	case isBase || ar.Invalid || baseInvalid:
		ar.Verdict = level(nil)
	case seen[Slower]:
		ar.Verdict = Slower
	case seen[Faster]:
		ar.Verdict = Faster
	case seen[NoChange]:
		ar.Verdict = NoChange
	default:
		ar.Verdict = TooFew
	}
}

func trialsAt(ts []stats.Trial, c int) []stats.Trial {
	var out []stats.Trial
	for _, t := range ts {
		if t.Concurrency == c {
			out = append(out, t)
		}
	}
	return out
}

func values(ms []stats.Metrics, get func(stats.Metrics) float64) []float64 {
	out := make([]float64, 0, len(ms))
	for _, m := range ms {
		out = append(out, get(m))
	}
	return out
}

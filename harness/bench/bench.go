// Package bench runs an EAGLE-3 serving benchmark: for each trial and arm
// it starts (or attaches to) an SGLang server, sends the workload, and
// records every request; then it summarizes each metric across trials,
// compares every arm with the baseline, and checks that each arm's greedy
// outputs match the baseline's, so a fast result from a broken allreduce is
// reported INVALID rather than as a win.
package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
)

// Arm is one configuration under test.
type Arm struct {
	Name      string            `json:"name"`
	Python    string            `json:"python,omitempty"` // interpreter of the arm's build (default python3)
	Env       map[string]string `json:"env,omitempty"`
	Args      []string          `json:"args,omitempty"`       // extra server arguments
	URL       string            `json:"url,omitempty"`        // attach to this running server instead of launching
	LaunchCmd string            `json:"launch_cmd,omitempty"` // sh command template replacing the launch, e.g. "my-serve --port {port}"
}

// Options holds every input of Run.
type Options struct {
	Arms     []Arm
	Baseline string

	Model, DraftModel string
	TP                int
	SpecAlgorithm     string // EAGLE3, or "" for no speculation
	SpecSteps         int
	SpecTopK          int
	SpecDraftTokens   int

	Prompts      []string
	MaxNewTokens int
	Temperature  float64
	IgnoreEOS    bool
	Concurrency  int
	Warmup       int // untimed requests after a server starts
	Trials       int
	Interleave   bool // restart servers each trial so arms alternate A B A B

	Host           string
	Env            []string // the base environment of launched servers
	LogDir         string
	ReadyTimeout   time.Duration
	RequestTimeout time.Duration
	AgreeThreshold float64 // share of prompts identical over the first tokens (0.9)

	// Preflight, when set, runs first; Force lets the run go on when it
	// finds custom allreduce slower than NCCL at the verify shape.
	Preflight func(ctx context.Context) (*allreduce.Report, error)
	Force     bool

	// Progress is told about each request; nil for none.
	Progress func(trial, trials int, arm string, done, total int)
}

// ArmResult is everything measured for one arm.
type ArmResult struct {
	Arm     Arm             `json:"arm"`
	Trials  []stats.Trial   `json:"trials"`
	Metrics []stats.Metrics `json:"trial_metrics"`
	// Summaries per metric across trials: tok_s, decode_tok_s,
	// accept_length, ttft_ms_p50, ttft_ms_p99, itl_ms_p50, tpot_ms.
	Summaries map[string]stats.Summary `json:"summaries"`
	// Deltas against the baseline, per metric (absent for the baseline).
	Deltas     map[string]stats.Delta `json:"deltas,omitempty"`
	Agreement  *stats.Agreement       `json:"agreement,omitempty"`
	Invalid    bool                   `json:"invalid"`
	Warnings   []string               `json:"warnings,omitempty"`
	ServerInfo map[string]any         `json:"server_info,omitempty"`
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

// Metric names, with the direction that is better.
var Metrics = []struct {
	Name           string
	HigherIsBetter bool
	Get            func(stats.Metrics) float64
}{
	{"tok_s", true, func(m stats.Metrics) float64 { return m.TokPerSec }},
	{"decode_tok_s", true, func(m stats.Metrics) float64 { return m.DecodeTokPerS }},
	{"accept_length", true, func(m stats.Metrics) float64 { return m.AcceptLength }},
	{"ttft_ms_p50", false, func(m stats.Metrics) float64 { return m.TTFTp50ms }},
	{"ttft_ms_p99", false, func(m stats.Metrics) float64 { return m.TTFTp99ms }},
	{"itl_ms_p50", false, func(m stats.Metrics) float64 { return m.ITLp50ms }},
	{"tpot_ms", false, func(m stats.Metrics) float64 { return m.TPOTms }},
}

// PreflightError stops a run whose custom allreduce is slower than NCCL
// at the verify shape.
type PreflightError struct{ Finding string }

func (e *PreflightError) Error() string {
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
		if f := preflightFinding(rep); f != "" {
			res.Findings = append(res.Findings, "preflight: "+f)
			if !o.Force {
				return res, &PreflightError{Finding: f}
			}
		}
	}
	for _, a := range o.Arms {
		res.Arms = append(res.Arms, &ArmResult{Arm: a})
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
	defer func() {
		for _, p := range running {
			p.Stop()
		}
	}()
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
			}
			url = p.URL
		}
		client := sglang.NewClient(url)
		if ar.ServerInfo == nil {
			ar.ServerInfo = client.ServerInfo(ctx)
		}
		trial, err := o.trial(ctx, client, ar.Arm.Name, s.trial)
		if err != nil {
			return res, err
		}
		// A server that died says so with its log, before its failed
		// requests are counted.
		if p := running[s.arm]; p != nil {
			wait := time.Duration(0)
			if !allOK(trial.Samples) {
				wait = serverDeathWait
			}
			if exited, werr := p.Exited(wait); exited {
				return res, &InfraError{&server.ExitError{Name: ar.Arm.Name, Log: p.Spec.LogPath,
					Why: fmt.Sprintf("died during trial %d (%s)", s.trial, exitText(werr)), Tail: server.Tail(p.Spec.LogPath, 40)}}
			}
		}
		if ctx.Err() == nil && len(trial.Samples) > 0 && allFailed(trial.Samples) {
			// Not a slow arm: a server that does not serve. No number of
			// this trial may stand for the arm.
			return res, &InfraError{fmt.Errorf("arm %s: all %d requests of trial %d failed, the first with: %s; is the server at %s up and serving /generate?",
				ar.Arm.Name, len(trial.Samples), s.trial, trial.Samples[0].Err, url)}
		}
		ar.Trials = append(ar.Trials, trial)
		// Stop the server when the next slot needs another arm's, or
		// when this arm is done.
		last := k == len(order)-1 || order[k+1].arm != s.arm
		if p := running[s.arm]; p != nil && (o.Interleave || last) {
			p.Stop()
			delete(running, s.arm)
		}
	}
	analyze(res, o)
	return res, nil
}

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
// sglang.AgreeTokens, or all when a request generates fewer.
func (o Options) agreeTokens() int {
	if o.MaxNewTokens > 0 && o.MaxNewTokens < sglang.AgreeTokens {
		return o.MaxNewTokens
	}
	return sglang.AgreeTokens
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// serverDeathWait is how long a trial with failed requests waits for its
// server's process to end, to report a death (with its log) rather than
// failed requests.
var serverDeathWait = 5 * time.Second

func allOK(ss []sglang.Sample) bool {
	for _, x := range ss {
		if x.Err != "" {
			return false
		}
	}
	return true
}

func allFailed(ss []sglang.Sample) bool {
	for _, x := range ss {
		if x.Err == "" {
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
	if o.Trials <= 0 {
		o.Trials = 5
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.MaxNewTokens <= 0 {
		o.MaxNewTokens = 256
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.AgreeThreshold == 0 {
		o.AgreeThreshold = 0.9
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 10 * time.Minute
	}
	if len(o.Prompts) == 0 {
		return errors.New("no prompts")
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
	return os.MkdirAll(o.LogDir, 0o755)
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
		q := shellQuote
		r := strings.NewReplacer("{port}", strconv.Itoa(port), "{host}", q(o.Host), "{model}", q(o.Model),
			"{draft}", q(o.DraftModel), "{tp}", strconv.Itoa(o.TP), "{arm}", q(a.Name))
		return []string{"sh", "-c", r.Replace(a.LaunchCmd)}
	}
	py := a.Python
	if py == "" {
		py = "python3"
	}
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

func (o *Options) start(ctx context.Context, a Arm, trial int) (*server.Proc, error) {
	port, err := server.FreePort(o.Host)
	if err != nil {
		return nil, err
	}
	env := append([]string(nil), o.Env...)
	keys := slices.Sorted(maps.Keys(a.Env))
	for _, k := range keys {
		env = append(env, k+"="+a.Env[k])
	}
	return server.Start(ctx, server.Spec{
		Name: a.Name, Argv: o.Argv(a, port), Env: env, Host: o.Host, Port: port,
		LogPath:      filepath.Join(o.LogDir, fmt.Sprintf("server-%s-trial%d.log", a.Name, trial)),
		ReadyTimeout: o.ReadyTimeout,
	})
}

// trial sends the warmup and then every prompt, Concurrency at a time.
func (o *Options) trial(ctx context.Context, c *sglang.Client, arm string, index int) (stats.Trial, error) {
	req := func(p string) sglang.Request {
		return sglang.Request{Text: p, MaxNewTokens: o.MaxNewTokens, Temperature: o.Temperature, IgnoreEOS: o.IgnoreEOS}
	}
	for i := 0; i < o.Warmup; i++ {
		rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
		c.Generate(rctx, -1, req(o.Prompts[i%len(o.Prompts)]))
		cancel()
	}
	t := stats.Trial{Arm: arm, Index: index, Start: time.Now().UTC()}
	samples := make([]sglang.Sample, len(o.Prompts))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	start := time.Now()
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
				samples[i] = c.Generate(rctx, i, req(o.Prompts[i]))
				cancel()
				mu.Lock()
				done++
				if o.Progress != nil {
					o.Progress(index, o.Trials, arm, done, len(o.Prompts))
				}
				mu.Unlock()
			}
		}()
	}
	for i := range o.Prompts {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	t.Wall = time.Since(start).Seconds()
	t.Samples = samples
	if ctx.Err() != nil {
		return t, ctx.Err()
	}
	return t, nil
}

// preflightFinding returns why the allreduce preflight fails: a WRONG or
// hung case, or the fastest custom allreduce slower than NCCL at the
// verify shape (graph mode when measured, else eager).
func preflightFinding(rep *allreduce.Report) string {
	if rep.Failed() {
		for _, f := range rep.Findings {
			if strings.HasPrefix(f, "WRONG") || strings.HasPrefix(f, "HANG") || strings.HasPrefix(f, "ERROR") {
				return f
			}
		}
		return "the allreduce benchmark failed: " + rep.Run.Exit
	}
	for _, mode := range []string{"graph", "eager"} {
		best, nccl, ok := rep.BestCustom(mode)
		if !ok {
			continue
		}
		if best.PerCallUS > nccl {
			return fmt.Sprintf("the fastest custom allreduce (%s/%s, %s) takes %.1f us at the verify shape, NCCL %.1f us", best.Impl, best.Branch, mode, best.PerCallUS, nccl)
		}
		return ""
	}
	return ""
}

// analyze computes metrics, summaries, comparisons, agreement and
// warnings.
func analyze(res *Result, o Options) {
	base := res.Arm(res.Baseline)
	for _, ar := range res.Arms {
		ar.Metrics = nil
		for _, t := range ar.Trials {
			ar.Metrics = append(ar.Metrics, stats.Compute(t))
		}
		ar.Summaries = map[string]stats.Summary{}
		for _, m := range Metrics {
			ar.Summaries[m.Name] = stats.Summarize(values(ar.Metrics, m.Get))
		}
		errs, empty := 0, 0
		for _, m := range ar.Metrics {
			errs += m.Errors
			empty += m.Empty
		}
		if errs > 0 {
			// A request that fails is a result the arm did not deliver:
			// its speed over the rest means nothing.
			total := 0
			for _, m := range ar.Metrics {
				total += m.Requests
			}
			ar.Invalid = true
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("INVALID: %d of %d requests failed (server errors, dropped streams, timeouts): the arm's speed leaves them out", errs, total))
		}
		if empty > 0 {
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("%d requests returned no output", empty))
		}
		if acc := ar.Summaries["accept_length"].Center; o.SpecAlgorithm != "" && !strings.EqualFold(o.SpecAlgorithm, "none") && acc > 0 && acc < 1.05 {
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("accept length %.2f with speculation on: the draft is accepted almost never (is the algorithm EAGLE with an EAGLE-3 draft? use EAGLE3)", acc))
		}
		if ar == base {
			// The reference must repeat itself: at temperature 0 its
			// outputs in every trial should be its first ones. If not, no
			// arm can be judged against it.
			self := stats.Agree(base.Trials, base.Trials, o.AgreeThreshold)
			if self.Invalid && self.Outputs > 0 {
				ar.Invalid = true
				ar.Warnings = append(ar.Warnings, fmt.Sprintf("INVALID: the baseline's own outputs differ across trials (%d of %d match its first over %d tokens): it is no reference, and the other arms' agreement means nothing",
					self.IdenticalN, self.Outputs, o.agreeTokens()))
			}
			continue
		}
		ar.Deltas = map[string]stats.Delta{}
		for _, m := range Metrics {
			ar.Deltas[m.Name] = stats.Compare(values(base.Metrics, m.Get), values(ar.Metrics, m.Get), m.HigherIsBetter)
		}
		ag := stats.Agree(base.Trials, ar.Trials, o.AgreeThreshold)
		ar.Agreement = &ag
		if ag.Invalid {
			ar.Invalid = true
			ar.Warnings = append(ar.Warnings, fmt.Sprintf("INVALID: only %d of %d outputs (%d prompts x trials) give the baseline's output over the first %d tokens (threshold %.0f%%): the arm computes something else, so its speed means nothing",
				ag.IdenticalN, ag.Outputs, ag.Prompts, o.agreeTokens(), o.AgreeThreshold*100))
		}
	}
}

func values(ms []stats.Metrics, get func(stats.Metrics) float64) []float64 {
	out := make([]float64, 0, len(ms))
	for _, m := range ms {
		out = append(out, get(m))
	}
	return out
}

// shellQuote quotes s for sh when it holds anything but plain characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+@%,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/shellq"
)

// Run runs the benchmark. It returns the result so far with an error when
// the run cannot finish: *PreflightError, *InfraError (a server that
// would not start or died; the error holds its log's last lines), or the
// context's error on Ctrl-C. Every server it started is stopped before it
// returns.
//
// It reads as its steps: fill the options, check the host before any
// server starts (precheck), run the slots (each arm's trials in order,
// each trial every level), and judge what was measured (analyze, in
// verdict.go).
func Run(ctx context.Context, o Options) (*Result, error) {
	res := &Result{Baseline: o.Baseline, Started: time.Now().UTC()}
	defer func() { res.Seconds = time.Since(res.Started).Seconds() }()
	if err := o.fill(); err != nil {
		return res, err
	}
	res.Baseline = o.Baseline
	res.Findings = append(res.Findings, o.Notes...)
	if err := o.precheck(ctx, res); err != nil {
		return res, err
	}
	for _, a := range o.Arms {
		res.Arms = append(res.Arms, o.armResult(a))
	}
	r := &runner{o: &o, res: res, running: map[int]*server.Proc{}, clients: map[int]*sglang.Client{}}
	defer r.stopAll()
	order := o.order()
	for k, s := range order {
		// The server stops when the next slot needs another arm's, or
		// when this arm is done.
		last := k == len(order)-1 || order[k+1].arm != s.arm
		if err := r.slot(ctx, s, last); err != nil {
			return res, err
		}
	}
	analyze(res, o)
	return res, nil
}

// precheck is what must pass before any server starts: no server of an
// earlier, killed run still holds the GPUs, and the allreduce preflight
// (Options.Preflight) finds nothing, or only a slower custom allreduce
// with Force. It also notes a level the prompts of a trial cannot fill.
func (o *Options) precheck(ctx context.Context, res *Result) error {
	if launching(*o) {
		if orphans := server.Orphans(o.LogDir); len(orphans) > 0 {
			g := orphans[0]
			return &InfraError{fmt.Errorf("a server of an earlier, killed run still runs (process group %d, log %s) and may hold the GPUs: stop it (kill -- -%d) and run again", g.PGID, g.Log, g.PGID)}
		}
	}
	if o.Preflight != nil {
		rep, err := o.Preflight(ctx)
		if err != nil {
			return &InfraError{fmt.Errorf("preflight allreduce benchmark: %w", err)}
		}
		res.Preflight = rep
		if f, broken := preflightFinding(rep); f != "" {
			res.Findings = append(res.Findings, "preflight: "+f)
			if broken || !o.Force {
				return &PreflightError{Finding: f, Broken: broken}
			}
		}
	}
	for _, c := range o.Concurrency {
		if c > len(o.Prompts) {
			res.Findings = append(res.Findings, fmt.Sprintf("concurrency %d is above the %d prompts of a trial: at most %d requests are in flight at that level (raise --num-prompts to fill it)", c, len(o.Prompts), len(o.Prompts)))
		}
	}
	return nil
}

// armResult is an arm's result before its first trial: a launched arm
// records its effective environment (armEnv, recordedEnv); an attached
// arm that sets variables is warned that arpatch applied none of them.
func (o *Options) armResult(a Arm) *ArmResult {
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
	return ar
}

// slot is one trial of one arm (indexes into Options.Arms and
// Result.Arms).
type slot struct{ trial, arm int }

// order is the slots in the order they run: arms alternating in each
// trial (A B A B) with Interleave or when every arm is attached, else
// each arm's trials together on one server start.
func (o *Options) order() []slot {
	var order []slot
	if o.Interleave || !launching(*o) {
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
	return order
}

// runner is a run in progress: the servers it started that still run and
// one client per server start (or attached server), warmed up once, whose
// connections stay open across the trials it serves; both by arm index.
type runner struct {
	o       *Options
	res     *Result
	running map[int]*server.Proc
	clients map[int]*sglang.Client
}

// slot runs trial s.trial of arm s.arm at every level, each trial
// judged by checkTrial, and then stops the arm's server when it is the
// arm's last slot in a row (last) or every trial restarts servers
// (Interleave).
func (r *runner) slot(ctx context.Context, s slot, last bool) error {
	ar := r.res.Arms[s.arm]
	url, err := r.server(ctx, s)
	if err != nil {
		return err
	}
	client, err := r.client(ctx, s.arm, url)
	if err != nil {
		return err
	}
	for _, level := range r.o.Concurrency {
		trial, err := r.o.trial(ctx, client, ar.Arm.Name, s.trial, level)
		if err != nil {
			return err
		}
		if err := r.checkTrial(ctx, s, client, url, trial, level); err != nil {
			return err
		}
		ar.Trials = append(ar.Trials, trial)
	}
	if p := r.running[s.arm]; p != nil && (r.o.Interleave || last) {
		r.stop(p, ar)
		delete(r.running, s.arm)
	}
	return nil
}

// server returns the URL of the arm's server: the attached one, the one
// it runs, or one started now (an *InfraError when it would not start,
// the context's error when it was cancelled meanwhile).
func (r *runner) server(ctx context.Context, s slot) (string, error) {
	ar := r.res.Arms[s.arm]
	if ar.Arm.URL != "" {
		return ar.Arm.URL, nil
	}
	p := r.running[s.arm]
	if p == nil {
		var err error
		if p, err = r.o.start(ctx, ar.Arm, s.trial); err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", &InfraError{err}
		}
		r.running[s.arm] = p
		delete(r.clients, s.arm)
	}
	return p.URL, nil
}

// client returns the arm's client for the server at url, made and warmed
// up on the first slot of each server start. Every server start says how
// it streams: whole texts, or deltas (--incremental-streaming-output);
// the arm keeps the first start's /server_info.
func (r *runner) client(ctx context.Context, arm int, url string) (*sglang.Client, error) {
	if c := r.clients[arm]; c != nil {
		return c, nil
	}
	ar := r.res.Arms[arm]
	client := sglang.NewClient(url)
	client.AgreeTokens = r.o.AgreeTokens
	if r.o.HTTP != nil {
		client.HTTP = r.o.HTTP
	}
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
	if err := r.o.warmup(ctx, client); err != nil {
		return nil, err
	}
	r.clients[arm] = client
	return client, nil
}

// checkTrial decides whether a trial's failed requests are the
// infrastructure's rather than the arm's, and returns an *InfraError
// when they are: no number of the trial may then stand for the arm.
// What it lets through counts against the arm (failures, verdict.go).
func (r *runner) checkTrial(ctx context.Context, s slot, client *sglang.Client, url string, trial stats.Trial, level int) error {
	ar, o := r.res.Arms[s.arm], r.o
	// A server that died says so with its log, before its failed
	// requests are counted; so does one that stopped answering
	// while the process it was launched by lives on (a wrapper
	// shell whose server died): no request failed for the arm's
	// sake, the server is gone.
	// (An attached server is judged so only once it has answered:
	// one that never did is the "is it up?" failure below.)
	if p := r.running[s.arm]; !allOK(trial.Samples) && (p != nil || answeredBy(ar, trial) > 0) {
		wait := o.deathWait(ctx, client)
		if p != nil {
			if exited, werr := p.Exited(ctx, wait); exited {
				return &InfraError{&server.ExitError{Name: ar.Arm.Name, Log: p.Spec.LogPath,
					Why: fmt.Sprintf("died during trial %d (%s)", s.trial, server.ExitStatus(werr)), Tail: server.Tail(p.Spec.LogPath, 40)}}
			}
		} else if wait > 0 {
			sleepCtx(ctx, wait) // attached: the same time to come back
		}
		if wait > 0 && ctx.Err() == nil && !o.answers(ctx, client) {
			return &InfraError{stoppedAnswering(ar, p, url, trial, level)}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(trial.Samples) > 0 && unanswered(trial.Samples) && strings.HasPrefix(trial.Samples[0].Err, sglang.ModeMismatch) {
		// The server answers, but not in the mode it declares: its
		// health is not the question.
		return &InfraError{fmt.Errorf("arm %s: all %d requests of trial %d (concurrency %d) failed: %s; no output of this server can be read until its stream and its /server_info agree",
			ar.Arm.Name, len(trial.Samples), s.trial, level, strings.TrimPrefix(trial.Samples[0].Err, sglang.ModeMismatch))}
	}
	if len(trial.Samples) > 0 && unanswered(trial.Samples) {
		// Not a slow arm: a server that does not serve. No number of
		// this trial may stand for the arm.
		return &InfraError{fmt.Errorf("arm %s: all %d requests of trial %d (concurrency %d) failed, the first with: %s; is the server at %s up and serving /generate?",
			ar.Arm.Name, len(trial.Samples), s.trial, level, trial.Samples[0].Err, url)}
	}
	return nil
}

// stop ends a server, and says so when the kill failed or something
// still answers on its port: a process that left its group outlives the
// kill.
func (r *runner) stop(p *server.Proc, ar *ArmResult) {
	if err := p.Stop(); err != nil {
		ar.Warnings = append(ar.Warnings, fmt.Sprintf("stopping the server for arm %s: %v; something in its process group may still run and hold the GPUs", ar.Arm.Name, err))
	}
	if p.Escaped(escapeWait) {
		ar.Warnings = append(ar.Warnings, p.EscapedWarning())
	}
}

// stopAll stops every server the run started that still runs.
func (r *runner) stopAll() {
	for i, p := range r.running {
		r.stop(p, r.res.Arms[i])
	}
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

const noServerInfo = "neither /server_info nor /get_server_info answered: the stream is read as whole texts (a server streaming deltas fails its requests)"

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

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
	"github.com/arpatch/arpatch/internal/shellq"
)

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

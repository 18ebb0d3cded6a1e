package nightly

import (
	"context"
	"errors"
	"fmt"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/recipes"
)

// bench is step 3: bench arm B against arm A with the options Run built
// once (BenchOptions: bo, or optsErr, why they could not be built, which
// fails the step) and bench.tune applied (applyTune). It returns the
// result when the bench ran to one, for judge and the history (its arms,
// trials and server versions), and nil when it was skipped, did not run
// or failed; and its checks.
func (n *night) bench(ctx context.Context, bo bench.Options, optsErr error) (*bench.Result, []history.Check) {
	rep := n.rep
	if n.o.SkipBench {
		return nil, []history.Check{{Name: "bench", Kind: history.KindValidity, Status: history.CheckSkip, Detail: "--skip-bench"}}
	}
	if rep.ExitCode >= ExitInfra || !n.canContinue() || ctx.Err() != nil {
		return nil, nil
	}
	a, b := n.in.a, n.in.b
	n.o.logf("benching %s against %s", b.Name, a.Name)
	res, settings, err := n.runBench(ctx, bo, optsErr)
	rep.BenchSettings = &settings
	rep.Bench = res
	if err != nil {
		var ie *bench.InfraError
		if errors.As(err, &ie) || ctx.Err() == nil {
			rep.Errors = append(rep.Errors, "bench: "+err.Error())
			rep.exit(ExitInfra)
			return nil, []history.Check{{Name: "bench", Kind: history.KindValidity, Status: history.CheckFail, Detail: err.Error()}}
		}
		return nil, nil
	}
	return res, nil
}

// runBench runs the bench with bench.tune applied, and returns the
// settings it ran with (report.SettingsOf, before the tune; none when the
// options could not be built).
func (n *night) runBench(ctx context.Context, bo bench.Options, optsErr error) (*bench.Result, report.Settings, error) {
	if optsErr != nil {
		return nil, report.Settings{}, fmt.Errorf("bench: %w", optsErr)
	}
	s := report.SettingsOf(bo)
	if err := applyTune(n.cfg, n.in.tune, n.rep, &bo); err != nil {
		return nil, s, err
	}
	res, err := bench.Run(ctx, bo)
	return res, s, err
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

// benchEnv is the server version of each benched arm, as
// "sglang_version@ARM", for the run's environment in the history.
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

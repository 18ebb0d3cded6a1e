package bench

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/stats"
)

// The rules that decide what a run's figures mean, in the order they
// apply:
//   - Before any server starts, the allreduce preflight stops a run whose
//     custom allreduce is broken (a wrong sum, a hang, an error), and one
//     whose custom allreduce is slower than NCCL at the verify shape
//     unless Options.Force (preflightFinding; Run's precheck).
//   - A trial whose requests all failed unanswered, or whose server died
//     or stopped answering, is no verdict of the arm but an InfraError
//     that stops the run (checkTrial, run.go).
//   - An arm with a failed, aborted or impossible request is INVALID
//     (failures).
//   - A baseline with no output, or whose outputs differ across trials,
//     is INVALID baseline: no arm is faster or slower than it, and every
//     other arm gets no verdict (baselineComparable, outputCheck).
//   - An arm whose outputs give the baseline's in fewer than
//     AgreeThreshold of them over the first agreeTokens tokens is INVALID
//     (outputCheck).
//   - Otherwise tok/s against the baseline per level decides Faster,
//     Slower, NoChange or TooFew (stats.Compare, Mann-Whitney U), and
//     overall Slower when any level is, else Faster when any is
//     (verdicts).
// A new metric is one entry in stats.Table: summarize summarizes and
// compares every entry; only tok/s decides the verdict.

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

// analyze judges a run's trials, rule by rule: each arm's metrics
// (stats.Compute, stats.ComputeServing), its failed requests (failures)
// and accept length (acceptLength); the baseline as a reference
// (baselineComparable); per level the summaries, agreement and deltas
// (summarize), the output check (outputCheck); and last the verdicts.
func analyze(res *Result, o Options) {
	base := res.Arm(res.Baseline)
	tokens := o.agreeTokens()
	for _, ar := range res.Arms {
		ar.Metrics, ar.Serving = nil, nil
		for _, t := range ar.Trials {
			ar.Metrics = append(ar.Metrics, stats.Compute(t))
			sv := stats.ComputeServing(t, o.Serving)
			if o.Arrivals.Open() {
				sv.RequestRate, sv.Burstiness = o.Arrivals.Rate, cmp.Or(o.Arrivals.Burstiness, 1)
			}
			if o.Uncapped {
				sv.MaxConcurrency = 0
			}
			ar.Serving = append(ar.Serving, sv)
		}
		failures(ar)
		acceptLength(ar, o)
	}
	if base != nil {
		baselineComparable(base, o, tokens)
	}
	for _, ar := range res.Arms {
		summarize(ar, base, o, tokens)
		if ar != base {
			outputCheck(ar, base, o, tokens)
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

// acceptLength warns of an accept length below 1.05 (tokens per verify
// pass) with speculation on: the draft is accepted almost never, which
// EAGLE with an EAGLE-3 draft gives.
func acceptLength(ar *ArmResult, o Options) {
	var toks, verify int
	for _, m := range ar.Metrics {
		toks += m.Tokens
		verify += m.VerifyCt
	}
	if acc := float64(toks) / float64(verify); o.SpecAlgorithm != "" && !strings.EqualFold(o.SpecAlgorithm, "none") && verify > 0 && acc < 1.05 {
		ar.Warnings = append(ar.Warnings, fmt.Sprintf("accept length %.2f with speculation on: the draft is accepted almost never (is the algorithm EAGLE with an EAGLE-3 draft? use EAGLE3)", acc))
	}
}

// summarize fills the arm's levels, in Options.Concurrency order: every
// metric of stats.Table summarized across the level's trials and, for an
// arm other than the baseline, its agreement with the baseline's outputs
// at that level (summed into ArmResult.Agreement) and, unless the
// baseline is INVALID, its deltas against the baseline per metric.
func summarize(ar, base *ArmResult, o Options, tokens int) {
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
}

// outputCheck judges an arm other than the baseline by its outputs: one
// measured against an INVALID baseline gets no verdict, whatever its
// outputs (its own failed requests still make it INVALID); one whose
// outputs give the baseline's over the first tokens tokens in fewer than
// AgreeThreshold of them, over all levels (summarize), is INVALID.
func outputCheck(ar, base *ArmResult, o Options, tokens int) {
	switch {
	case base != nil && base.Invalid:
		ar.Warnings = append(ar.Warnings, fmt.Sprintf("no verdict: the baseline is INVALID (%s)", invalidWhy(base)))
	case ar.Agreement.Invalid:
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

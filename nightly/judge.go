package nightly

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
)

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

// judge is step 4: each arm's output (outputChecks), its metrics against
// history (historyChecks, each against the reference window of its arm,
// metric and level, unless tonight's environment differs from the
// reference runs': envChange), and B against A tonight (tonightChecks).
// res is the bench's result, nil when it ran to none (nothing to judge).
// The error is a history that could not be read (it names the database
// file); the checks are then those judged before it.
func (n *night) judge(res *bench.Result) ([]history.Check, error) {
	if res == nil {
		return nil, nil
	}
	rep, cfg := n.rep, n.cfg
	cs := n.outputChecks(res)
	metrics := slices.Sorted(maps.Keys(cfg.Regression.Metrics))
	// The reference windows first: their runs must share tonight's
	// environment for a comparison to mean anything.
	windows, refRuns, err := n.windows(res, metrics)
	if err != nil {
		return cs, err
	}
	var envCheck *history.Check
	if rep.EnvChange, envCheck, err = envChange(n.store, rep, refRuns, rep.History); err != nil {
		return cs, err
	}
	if envCheck != nil {
		cs = append(cs, *envCheck)
	}
	cs = append(cs, n.historyChecks(res, metrics, windows)...)
	return append(cs, n.tonightChecks(res)...), nil
}

// outputChecks are each arm's output check: an INVALID arm fails it, as
// does an arm with no verdict (against an INVALID arm A nothing was
// checked: it is skipped, not a pass); both fail the night (exit 1).
func (n *night) outputChecks(res *bench.Result) []history.Check {
	var cs []history.Check
	for _, ar := range res.Arms {
		c := history.Check{Name: "output of " + ar.Arm.Name, Kind: history.KindValidity, Status: history.CheckPass}
		switch {
		case ar.Invalid:
			c.Status = history.CheckFail
			c.Detail = strings.Join(ar.Warnings, "; ")
			n.rep.exit(ExitRegression)
		case ar.Verdict == bench.NoReference:
			c.Status = history.CheckSkip
			c.Detail = strings.Join(ar.Warnings, "; ")
			n.rep.exit(ExitRegression)
		}
		cs = append(cs, c)
	}
	return cs
}

// window is the reference of one arm's metric at one level: the values
// of the last history.window runs like tonight's, and those runs.
type window struct {
	ref  []float64
	runs []int64
}

// windowKey names a window: its arm, level and metric.
type windowKey struct {
	arm    string
	level  int
	metric string
}

// windows reads the reference window of each arm, level and metric from
// the history, and returns them with every run they hold. The error is
// a history that could not be read.
func (n *night) windows(res *bench.Result, metrics []string) (map[windowKey]window, []int64, error) {
	rep, cfg := n.rep, n.cfg
	windows := map[windowKey]window{}
	var refRuns []int64
	for _, ar := range res.Arms {
		for _, c := range res.Levels() {
			for _, m := range metrics {
				var w window
				var err error
				if w.ref, w.runs, err = n.store.Window(rep.HardwareKey, rep.Workload, ar.Arm.Name, m, c, cfg.History.Window, rep.RunID); err != nil {
					return nil, nil, err
				}
				windows[windowKey{ar.Arm.Name, c, m}] = w
				refRuns = append(refRuns, w.runs...)
			}
		}
	}
	return windows, refRuns, nil
}

// levelMetric names a check's metric: with one level the checks keep
// their names; with several each names its level, and compares it with
// the same level only.
func levelMetric(res *bench.Result, metric string, c int) string {
	if len(res.Levels()) > 1 {
		return fmt.Sprintf("%s@concurrency=%d", metric, c)
	}
	return metric
}

// historyChecks compare each arm's metrics tonight with their reference
// windows: not compared when the arm's figures are no result or the
// environment changed since the reference runs, else judged (compare).
func (n *night) historyChecks(res *bench.Result, metrics []string, windows map[windowKey]window) []history.Check {
	rep, cfg := n.rep, n.cfg
	var cs []history.Check
	for _, ar := range res.Arms {
		for _, c := range res.Levels() {
			for _, m := range metrics {
				tonight := metricValues(ar.MetricsAt(c), m)
				w := windows[windowKey{ar.Arm.Name, c, m}]
				r := Check{Arm: ar.Arm.Name, Metric: levelMetric(res, m, c), Against: "history", ThresholdPct: cfg.Regression.Metrics[m], RefRuns: len(w.runs), RefSamples: len(w.ref), measured: true}
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
	return cs
}

// tonightChecks compare B's tok/s with A's tonight at each level: not
// compared when either arm's figures are no result; B slower than A is
// no regression when regression.require_b_faster is false.
func (n *night) tonightChecks(res *bench.Result) []history.Check {
	rep, cfg, aName, bName := n.rep, n.cfg, n.in.a.Name, n.in.b.Name
	a, b := res.Arm(aName), res.Arm(bName)
	if a == nil || b == nil {
		return nil
	}
	var cs []history.Check
	for _, c := range res.Levels() {
		am, bm := a.MetricsAt(c), b.MetricsAt(c)
		r := Check{Arm: bName, Metric: levelMetric(res, stats.TokS, c), Against: aName, ThresholdPct: cfg.Regression.Metrics[stats.TokS], RefSamples: len(am), measured: true}
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
	return cs
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

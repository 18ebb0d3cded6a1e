package nightly

import (
	"context"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/history"
)

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

// verdictInterrupted is the verdict of a run whose context was cancelled.
const verdictInterrupted = "interrupted"

// verdictText is the run's one-line headline from its exit code: the
// first infrastructure failure, where the series drifted (with the port
// hints and any regression beside it), the failed checks, or no
// regression; an environment change is noted.
func verdictText(rep *Report) string {
	switch rep.ExitCode {
	case ExitInfra:
		first, _, _ := strings.Cut(strings.Join(rep.Errors, "; "), "\n")
		v := "infrastructure failure: " + first
		// Judged all the same (a night kept in history.keep): the failed
		// judgements, but not the bench's own failure (its check "bench"),
		// which is the infrastructure failure itself.
		var judged []string
		for _, c := range rep.Checks {
			if c.Status == history.CheckFail && (c.Kind == history.KindRegression || c.Kind == history.KindValidity && c.Name != "bench") {
				judged = append(judged, c.Name)
			}
		}
		if len(judged) > 0 {
			v += "; and regression: " + strings.Join(judged, ", ")
		}
		return v
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

// failedCheck reports whether any of cs failed.
func failedCheck(cs []history.Check) bool {
	for _, c := range cs {
		if c.Status == history.CheckFail {
			return true
		}
	}
	return false
}

package history

import "strings"

// The vocabularies the checks table and the reference window share. They
// are stored as text and bound as SQL parameters, never written as
// literals in a query: renaming one renames it everywhere, and the
// reference window's rule (Window) follows.

// RunStatus is a run's state in runs.status.
type RunStatus string

// Run statuses: a run starts Running and ends Complete or Failed; one
// whose process died or was interrupted is Incomplete.
const (
	Running    RunStatus = "running"
	Complete   RunStatus = "complete"
	Failed     RunStatus = "failed"
	Incomplete RunStatus = "incomplete"
	// Killed is never stored: it is how history list, show (and its
	// --json) and export report a run still Running whose nightly's
	// process is gone (Store.Gone), until the next nightly marks it
	// Incomplete.
	Killed RunStatus = "killed?"
)

// VerdictKilled is the verdict MarkStale gives a run whose process died
// before it ended.
const VerdictKilled = "killed midway"

// CheckKind is what a check judges, in checks.kind (and JUnit's class
// name, arpatch.<kind>).
type CheckKind string

// Check kinds.
const (
	KindDrift       CheckKind = "drift"       // a series at a commit; the fetch and the ref's resolution
	KindBuild       CheckKind = "build"       // an arm's build
	KindValidity    CheckKind = "validity"    // an arm's bench output, or the bench itself
	KindRegression  CheckKind = "regression"  // a metric against history or the other arm
	KindEnvironment CheckKind = "environment" // tonight's environment against the reference runs'
	KindInfra       CheckKind = "infra"       // the run itself: interrupted, could not run
)

// CheckKinds lists every check kind.
var CheckKinds = []CheckKind{KindDrift, KindBuild, KindValidity, KindRegression, KindEnvironment, KindInfra}

// CheckStatus is a check's outcome, in checks.status.
type CheckStatus string

// Check statuses.
const (
	CheckPass CheckStatus = "pass"
	CheckFail CheckStatus = "fail"
	CheckSkip CheckStatus = "skip" // not judged: skipped by a flag, superseded, or not comparable
)

// CheckStatuses lists every check status.
var CheckStatuses = []CheckStatus{CheckPass, CheckFail, CheckSkip}

// ExitFailedChecks is the exit code of a night that failed its checks (a
// regression or an invalid arm; nightly.ExitRegression): such a night is
// no reference unless accepted, even when no check of it failed (an arm
// compared with an invalid baseline is skipped, yet exits 1).
const ExitFailedChecks = 1

// barsReference are the kinds of check whose failure makes a night no
// reference (unless accepted): a night that regressed or gave invalid
// output must not become the level later nights are held to.
var barsReference = []CheckKind{KindRegression, KindValidity}

// placeholders is n SQL parameters, "?, ?, ...", for an IN list.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

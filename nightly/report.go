package nightly

import (
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/history"
)

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

// ReportSchema names the JSON layout.
const ReportSchema = "arpatch.nightly/v1"

// exit sets the run's exit code to code unless it holds a higher one
// (the codes are in increasing precedence).
func (r *Report) exit(code int) {
	if code > r.ExitCode {
		r.ExitCode = code
	}
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

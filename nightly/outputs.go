package nightly

import (
	"bytes"
	"cmp"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/errwriter"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// GHBenchEntry is one entry of github-action-benchmark's "custom" tools
// (customBiggerIsBetter, customSmallerIsBetter): a JSON array of these.
type GHBenchEntry struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	Range string  `json:"range,omitempty"`
	Extra string  `json:"extra,omitempty"`
}

// levelName is "<arm>" for a run at one level, "<arm>/concurrency=<N>"
// for one of several: a series keeps its name while the levels stay.
func levelName(res *bench.Result, arm string, c int) string {
	if len(res.Levels()) > 1 {
		return fmt.Sprintf("%s/concurrency=%d", arm, c)
	}
	return arm
}

// GitHubBenchmark returns the customBiggerIsBetter and customSmallerIsBetter
// arrays: per arm, level and metric of stats.Table (bigger: those where
// higher is better), the median across trials in the metric's unit, with
// the confidence interval as the range. An arm whose figures are no
// result (bench.Verdict.Valid false: INVALID, INVALID baseline, no
// verdict) has no entry: the format has no mark for one, and the action
// would chart it and compare later nights with it.
func GitHubBenchmark(res *bench.Result, runID int64) (big, small []GHBenchEntry) {
	mk := func(higherIsBetter bool) []GHBenchEntry {
		out := []GHBenchEntry{}
		for _, a := range res.Arms {
			if !a.Verdict.Valid() {
				continue
			}
			for _, l := range a.Levels {
				for _, u := range stats.Table {
					if u.HigherIsBetter != higherIsBetter {
						continue
					}
					s := l.Summaries[u.Name]
					e := GHBenchEntry{Name: levelName(res, a.Arm.Name, l.Concurrency) + "/" + u.Name, Unit: u.Unit, Value: s.Center,
						Extra: fmt.Sprintf("run %d, %d trials", runID, s.N)}
					if !math.IsInf(s.Lo, 0) && !math.IsInf(s.Hi, 0) {
						e.Range = fmt.Sprintf("± %.4g", math.Max(s.Hi-s.Center, s.Center-s.Lo))
					}
					out = append(out, e)
				}
			}
		}
		return out
	}
	return mk(true), mk(false)
}

// BMFMetric is one measure in Bencher Metric Format.
type BMFMetric struct {
	Value      float64  `json:"value"`
	LowerValue *float64 `json:"lower_value,omitempty"`
	UpperValue *float64 `json:"upper_value,omitempty"`
}

// Bencher returns Bencher Metric Format: {benchmark: {measure: {value,
// lower_value, upper_value}}}, one benchmark per arm ("eagle3/<arm>"),
// a measure per metric of stats.Table named by the slug of its Name
// (tok_s: tok-s), bounds from the CI. As in GitHubBenchmark, an arm
// whose figures are no result has no benchmark: BMF has no mark for one.
func Bencher(res *bench.Result) map[string]map[string]BMFMetric {
	out := map[string]map[string]BMFMetric{}
	for _, a := range res.Arms {
		if !a.Verdict.Valid() {
			continue
		}
		for _, l := range a.Levels {
			m := map[string]BMFMetric{}
			for _, u := range stats.Table {
				s := l.Summaries[u.Name]
				v := BMFMetric{Value: s.Center}
				if !math.IsInf(s.Lo, 0) && !math.IsInf(s.Hi, 0) {
					lo, hi := s.Lo, s.Hi
					v.LowerValue, v.UpperValue = &lo, &hi
				}
				m[strings.ReplaceAll(u.Name, "_", "-")] = v
			}
			out["eagle3/"+levelName(res, a.Arm.Name, l.Concurrency)] = m
		}
	}
	return out
}

// JUnit XML, as CI systems read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Name    string       `xml:"name,attr"`
	Tests   int          `xml:"tests,attr"`
	Fails   int          `xml:"failures,attr"`
	Skipped int          `xml:"skipped,attr"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name    string      `xml:"name,attr"`
	Tests   int         `xml:"tests,attr"`
	Fails   int         `xml:"failures,attr"`
	Skipped int         `xml:"skipped,attr"`
	Time    float64     `xml:"time,attr"`
	Cases   []junitCase `xml:"testcase"`
}

type junitCase struct {
	Class   string        `xml:"classname,attr"`
	Name    string        `xml:"name,attr"`
	Failure *junitMessage `xml:"failure,omitempty"`
	Skipped *junitMessage `xml:"skipped,omitempty"`
	Output  string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// JUnit writes one test case per check: drift per series and commit, each
// build, each arm's output validity, each regression check. Failed checks
// are failures, skipped ones skipped.
func JUnit(w io.Writer, rep *Report) error {
	suite := junitSuite{Name: fmt.Sprintf("arpatch nightly run %d on %s", rep.RunID, rep.HardwareKey), Time: rep.Seconds}
	for _, c := range rep.Checks {
		tc := junitCase{Class: "arpatch." + string(c.Kind), Name: c.Name, Output: c.Detail}
		switch c.Status {
		case history.CheckFail:
			tc.Failure = &junitMessage{Message: textfmt.FirstLine(c.Detail), Text: c.Detail}
			suite.Fails++
		case history.CheckSkip:
			tc.Skipped = &junitMessage{Message: c.Detail}
			suite.Skipped++
		}
		suite.Cases = append(suite.Cases, tc)
		suite.Tests++
	}
	doc := junitSuites{Name: "arpatch nightly", Tests: suite.Tests, Fails: suite.Fails, Skipped: suite.Skipped, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// Summary writes the markdown summary for a CI job page: the verdict and
// exit code, drift per series, the bench table, and the regression checks.
// It returns w's first write error (internal/errwriter).
func Summary(out io.Writer, rep *Report) error {
	w := errwriter.New(out) // every write below: its first error is returned
	icon := map[int]string{ExitOK: "PASS", ExitRegression: "REGRESSION", ExitDrift: "DRIFT", ExitInfra: "INFRA FAILURE"}[rep.ExitCode]
	if rep.Verdict == verdictInterrupted {
		icon = "INTERRUPTED"
	}
	run := fmt.Sprintf("Run %d", rep.RunID)
	if rep.RunID == 0 {
		run = "Not recorded" // it could not start (FailedToRun)
	}
	if rep.HardwareKey != "" {
		run += fmt.Sprintf(" on `%s`", rep.HardwareKey)
	}
	fmt.Fprintf(w, "## arpatch nightly: %s\n\n%s, %s; exit code %d: %s.\n\n", icon, run, rep.StartedAt.Format("2006-01-02 15:04 UTC"), rep.ExitCode, rep.Verdict)
	fmt.Fprintf(w, "Tracking `%s` at `%s`; pinned `%s`; %s.\n\n", rep.Ref, githash.Hash(rep.Head).Short(), githash.Hash(rep.Pinned).Short(), benchedAt(rep))
	if len(rep.Drift) > 0 {
		fmt.Fprintln(w, "### Drift\n\n| series | commit | verdict | patches |\n|---|---|---|---|")
		for _, d := range rep.Drift {
			var ps []string
			for _, p := range d.Patches {
				ps = append(ps, p.Patch+": "+string(p.Fit))
			}
			v := string(d.Verdict)
			if d.Note != "" {
				v += " (" + d.Note + ")"
			}
			fmt.Fprintf(w, "| %s | `%s` (%s) | %s | %s |\n", d.Series, githash.Hash(d.Commit).Short(), d.Rev, v, strings.Join(ps, ", "))
		}
		fmt.Fprintln(w)
	}
	for _, h := range rep.Ports {
		fmt.Fprintf(w, "Port to `%s`: %s.\n\n", githash.Hash(h.Commit).Short(), h)
	}
	for _, wn := range rep.Warnings {
		fmt.Fprintf(w, "> warning: %s\n\n", wn)
	}
	if e := rep.EnvChange; e != nil {
		fmt.Fprintf(w, "> **Environment changed** since run %d: %s. The checks against history were not judged; if the change is intended, make this run the reference: `%s`\n\n",
			e.Since, strings.Join(e.Changes, ", "), e.Accept)
	}
	if rep.Benched() {
		if err := report.WriteMarkdown(w, rep.Bench, benchSettings(rep)); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if len(rep.Regressions) > 0 {
		fmt.Fprintln(w, "### Regression checks\n\n| arm | metric | against | tonight | reference | change | p | threshold | verdict |\n|---|---|---|---|---|---|---|---|---|")
		for _, r := range rep.Regressions {
			pct, p := r.pctP()
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.1f%% | %s |\n", r.Arm, r.Metric, r.Against, r.tonightText(), r.refText(), pct, p, r.ThresholdPct, r.verdictText())
		}
		fmt.Fprintln(w)
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "> %s\n", strings.ReplaceAll(e, "\n", "\n> "))
	}
	return w.Err()
}

// benchSettings gives the settings the bench ran with; a report read from
// an older JSON file without them gets what the result itself shows.
func benchSettings(rep *Report) report.Settings {
	if rep.BenchSettings != nil {
		return *rep.BenchSettings
	}
	return report.Settings{Prompts: promptsOf(rep.Bench), Trials: len(rep.Bench.Arms[0].Trials), Concurrency: rep.Bench.Levels()}
}

// Benched reports whether the bench ran to results (not skipped, not
// failed part way): only then do the bench tables and files exist.
func (r *Report) Benched() bool {
	return r.Bench != nil && len(r.Bench.Arms) > 0 && r.Bench.Arms[0].Levels != nil
}

// benchedAt says where the build and bench ran, or that they did not.
func benchedAt(rep *Report) string {
	built, benched := len(rep.Builds) > 0, rep.Benched()
	switch {
	case built && benched:
		return "built and benched at `" + githash.Hash(rep.BuildCommit).Short() + "`"
	case built:
		return "built at `" + githash.Hash(rep.BuildCommit).Short() + "`, not benched"
	case benched:
		return "benched (no build this run)"
	}
	return "nothing built or benched"
}

func promptsOf(res *bench.Result) int {
	if len(res.Arms) == 0 || len(res.Arms[0].Trials) == 0 {
		return 0
	}
	return len(res.Arms[0].Trials[0].Samples)
}

// WriteTable prints the run for a terminal: verdict, drift, the bench
// table and the regression checks.
func WriteTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "nightly run %d on %s: exit %d, %s\n", rep.RunID, rep.HardwareKey, rep.ExitCode, rep.Verdict)
	for _, d := range rep.Drift {
		note := ""
		if d.Note != "" {
			note = " (" + d.Note + ")"
		}
		fmt.Fprintf(w, "  drift %-14s %s (%s): %s%s\n", d.Series, githash.Hash(d.Commit).Short(), d.Rev, d.Verdict, note)
	}
	for _, h := range rep.Ports {
		fmt.Fprintf(w, "  port to %s: %s\n", githash.Hash(h.Commit).Short(), h)
	}
	for _, wn := range rep.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", wn)
	}
	for _, b := range rep.Builds {
		fmt.Fprintf(w, "  build %-10s key %s cache hit %v\n", b.Arm, digest.Short(b.Key), b.Hit)
	}
	if t := rep.Tune; t != nil {
		fmt.Fprintf(w, "  tune %s (%s): %s\n    dispatch per size: %s\n", t.Path, t.Host, t.Thresholds, strings.Join(t.Dispatch, ", "))
	}
	if rep.Benched() {
		report.WriteTable(w, rep.Bench, benchSettings(rep))
	}
	for _, r := range rep.Regressions {
		pct, p := r.pctP()
		fmt.Fprintf(w, "  %-10s %-13s vs %-8s %8s -> %8s  %7s  p=%-5s  %s\n", r.Arm, r.Metric, r.Against, r.refText(), r.tonightText(), pct, p, r.verdictText())
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "  error: %s\n", strings.ReplaceAll(e, "\n", "\n  "))
	}
}

// WriteOutputs writes every configured report file: the JSON report and
// markdown summary in the output directory and the CI files, each
// replaced atomically; extra["summary"], when set, gets the markdown
// summary appended. extra's keys ("github-benchmark", "bencher", "junit",
// "summary") are the command-line paths, which override the config's.
// Bench files are written only when the bench ran. Every file that can be
// is written; it returns the first write error, naming the file.
func WriteOutputs(rep *Report, cfg *Config, extra map[string]string) error {
	err := writeFiles(rep, cfg, extra)
	if serr := appendSummary(rep, extra["summary"]); err == nil {
		err = serr
	}
	return err
}

// writeFiles writes the report files WriteOutputs writes, all but the
// appended extra["summary"].
func writeFiles(rep *Report, cfg *Config, extra map[string]string) error {
	files := map[string]func(io.Writer) error{}
	dir := cfg.Path(cfg.Outputs.Dir)
	files[dir+"/nightly.json"] = jsonWriter(rep)
	files[dir+"/summary.md"] = func(w io.Writer) error { return Summary(w, rep) }
	gh := cmp.Or(extra["github-benchmark"], cfg.Path(cfg.Outputs.GitHubBenchmark))
	if gh != "" && rep.Benched() {
		big, small := GitHubBenchmark(rep.Bench, rep.RunID)
		prefix := strings.TrimSuffix(gh, ".json")
		files[prefix+"-bigger.json"] = jsonWriter(big)
		files[prefix+"-smaller.json"] = jsonWriter(small)
	}
	if b := cmp.Or(extra["bencher"], cfg.Path(cfg.Outputs.Bencher)); b != "" && rep.Benched() {
		files[b] = jsonWriter(Bencher(rep.Bench))
	}
	if j := cmp.Or(extra["junit"], cfg.Path(cfg.Outputs.JUnit)); j != "" {
		files[j] = func(w io.Writer) error { return JUnit(w, rep) }
	}
	// Every file is written that can be (JUnit above all), in a fixed
	// order; the first failure is returned, naming its file.
	paths := slices.Sorted(maps.Keys(files))
	var first error
	for _, path := range paths {
		var b bytes.Buffer
		err := files[path](&b)
		if err == nil {
			err = safefs.WriteFile(path, b.Bytes(), 0o644)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("writing report %s: %w", path, err)
		}
	}
	return first
}

// appendSummary appends the markdown summary to path (as GitHub Actions asks
// of $GITHUB_STEP_SUMMARY: other steps may have written to it); "" is none.
func appendSummary(rep *Report, s string) error {
	if s == "" {
		return nil
	}
	var b bytes.Buffer
	if err := Summary(&b, rep); err != nil {
		return err
	}
	f, err := os.OpenFile(s, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("--summary: %w", err)
	}
	_, err = f.Write(b.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--summary %s: %w", s, err)
	}
	return nil
}

// jsonWriter writes v as indented JSON.
func jsonWriter(v any) func(io.Writer) error {
	return func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
}

// CheckOutputs checks, before the run, that every report path can be
// written (WriteOutputs' files, the plot, --summary), naming the config
// key or flag of one that cannot: a typo there must not cost a night.
func CheckOutputs(cfg *Config, extra map[string]string) error {
	type out struct{ name, path string }
	gh := cmp.Or(extra["github-benchmark"], cfg.Path(cfg.Outputs.GitHubBenchmark))
	outs := []out{
		{"outputs.dir", filepath.Join(cfg.Path(cfg.Outputs.Dir), "nightly.json")},
		{"--github-benchmark / outputs.github_benchmark", gh},
		{"--bencher / outputs.bencher", cmp.Or(extra["bencher"], cfg.Path(cfg.Outputs.Bencher))},
		{"--junit / outputs.junit", cmp.Or(extra["junit"], cfg.Path(cfg.Outputs.JUnit))},
		{"outputs.plot", cfg.Path(cfg.Outputs.Plot)},
		{"--summary", extra["summary"]},
	}
	if gh != "" {
		outs[1].path = strings.TrimSuffix(gh, ".json") + "-bigger.json"
	}
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		if err := safefs.CanWrite(o.path); err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
	}
	return nil
}

// FailedToRun is the report of a nightly that could not start (the
// history's lock is held, the history cannot be opened): exit 4, one
// failed check, so that CI's JUnit and summary show it. It names the
// config's hardware_key when it sets one (cfg may be nil); it has no run
// number, since nothing was recorded.
func FailedToRun(cfg *Config, err error) *Report {
	rep := &Report{Schema: ReportSchema, StartedAt: time.Now().UTC(), Status: history.Failed, ExitCode: ExitInfra,
		Errors: []string{err.Error()}, ArmRecipes: map[string]string{}}
	if cfg != nil {
		rep.HardwareKey = cfg.History.HardwareKey
	}
	rep.Verdict = "infrastructure failure: " + err.Error()
	rep.add([]history.Check{{Name: "run", Kind: history.KindInfra, Status: history.CheckFail, Detail: err.Error()}})
	return rep
}

// MarkExit records, after the run, a failure that changed its exit code
// (its reports could not be written): rep then says code, why (an error,
// a failed "reports" check and the verdict) and a failed status, and so
// does the history, so that both agree with the process's exit code. The
// error is a history that could not be opened or written; it names the
// database file. A run that already exits with code keeps its verdict
// and gets the error and the check added.
func MarkExit(cfg *Config, rep *Report, code int, why error) error {
	if code < rep.ExitCode {
		return nil
	}
	rep.add([]history.Check{{Name: "reports", Kind: history.KindInfra, Status: history.CheckFail, Detail: why.Error()}})
	if code == rep.ExitCode {
		rep.Errors = append(rep.Errors, why.Error()) // the run's own failure leads
		return nil
	}
	rep.Errors = append([]string{why.Error()}, rep.Errors...)
	rep.ExitCode = code
	rep.Status = history.Failed
	rep.Verdict = verdictText(rep)
	if rep.RunID == 0 {
		return nil
	}
	s, err := history.Open(cmp.Or(rep.History, cfg.Path(cfg.History.Path)))
	if err != nil {
		return err
	}
	err = s.FinishRun(rep.RunID, rep.Status, rep.ExitCode, rep.Verdict)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// refText is the reference median, or "-" when there is none.
func (c Check) refText() string {
	if c.RefSamples == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", c.Reference)
}

// tonightText is tonight's median, or "-" when tonight's figures are no
// result (the arm is not Valid).
func (c Check) tonightText() string {
	if !c.measured {
		return "-"
	}
	return fmt.Sprintf("%.2f", c.Tonight)
}

// verdictText is the verdict, with its note when the note says why a
// check was not compared: "not compared (patched is INVALID: ...)".
func (c Check) verdictText() string {
	if c.Verdict == VerdictNotCompared && !c.measured && c.Note != "" {
		return fmt.Sprintf("%s (%s)", c.Verdict, c.Note)
	}
	return string(c.Verdict)
}

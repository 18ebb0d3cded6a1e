package tune

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// Options holds every input of Run.
type Options struct {
	// Bench carries the measurement settings: Python, WorldSize, Ext,
	// Warmup, Inner, Reps, Timeout, NCCLDebug, Env, Log. Impls, Branches,
	// Sizes and Modes are set by Run.
	Bench allreduce.Options
	Sizes []int    // bytes
	Modes []string // allreduce.ModeEager, allreduce.ModeGraph
	// Verify is the allreduce shape of one EAGLE-3 verify pass (reported).
	Verify allreduce.Verify
	Host   Host
	Now    func() time.Time
	// Progress, when set, hears each step ("measuring ...").
	Progress func(string)
	Version  string
	// Rebuild is the command that rebuilds the extension from its tree
	// ("arpatch build --allreduce-ext --src sglang --arch 90a"), printed
	// when the extension predates the run-time thresholds; "" when the
	// extension was given by path.
	Rebuild string
}

// Setting is one threshold setting checked by Run: custom-auto through the
// PCIe branch with Env added.
type Setting struct {
	Name string   `json:"name"` // "built-in default", "1-stage at every size", "2-stage at every size", "chosen: ..."
	Env  []string `json:"env"`
	// Thresholds are what the setting selects; custom-auto is called
	// directly, so only its 1-stage limit applies.
	Thresholds Thresholds `json:"thresholds"`
	// Report is the verification run; every sum must be exact.
	Report *allreduce.Report `json:"report"`
	// Kernel says, per timed size, which kernel custom-auto's time
	// matched (see Observe).
	Kernel []Observation `json:"kernel,omitempty"`
}

// Observation compares custom-auto's median at one size and mode with the
// forced kernels' medians of the measurement run.
type Observation struct {
	Bytes    int     `json:"bytes"`
	Mode     string  `json:"mode"`
	US       float64 `json:"us"`
	Expected string  `json:"expected"` // the kernel the thresholds select
	// Like is the forced kernel whose median is nearer, "" when the two
	// are within 25% of each other (not told apart by time).
	Like string `json:"like,omitempty"`
}

// Observe matches each timed custom-auto result of a setting against the
// forced 1-stage and 2-stage medians of measure in the same mode and size:
// the kernel the dispatch ran, as far as time tells it. Only CUDA-graph
// timings count when there are any: an eager call is host-bound (about
// 14 µs for every kernel on an H200 host, docs/allreduce-h200.md), so
// eager medians differ by noise, not by kernel. ws is the world size.
func Observe(auto []allreduce.Result, measure []allreduce.Result, th Thresholds, ws int) []Observation {
	forced := map[string]float64{}
	graph := false
	for _, r := range measure {
		if r.Timed() && r.Branch == "pcie" {
			forced[fmt.Sprintf("%s/%d/%s", r.Impl, r.Bytes, r.Mode)] = r.MedianUS
			graph = graph || r.Mode == allreduce.ModeGraph
		}
	}
	var out []Observation
	for _, r := range auto {
		if !r.Timed() || r.Impl != allreduce.CustomAuto || (graph && r.Mode != allreduce.ModeGraph) {
			continue
		}
		o := Observation{Bytes: r.Bytes, Mode: r.Mode, US: r.MedianUS, Expected: allreduce.Custom2Stage}
		if uint64(r.Bytes) <= th.OneStageLimit(ws) {
			o.Expected = allreduce.Custom1Stage
		}
		one, ok1 := forced[fmt.Sprintf("%s/%d/%s", allreduce.Custom1Stage, r.Bytes, r.Mode)]
		two, ok2 := forced[fmt.Sprintf("%s/%d/%s", allreduce.Custom2Stage, r.Bytes, r.Mode)]
		if ok1 && ok2 && math.Abs(one-two) > 0.25*min(one, two) {
			o.Like = allreduce.Custom1Stage
			if math.Abs(r.MedianUS-two) < math.Abs(r.MedianUS-one) {
				o.Like = allreduce.Custom2Stage
			}
		}
		out = append(out, o)
	}
	return out
}

// kernelSummary is "by time: 9 of 22 told apart, all as selected" or the
// sizes that ran like the other kernel.
func kernelSummary(obs []Observation) string {
	told, bad := 0, []string{}
	for _, o := range obs {
		if o.Like == "" {
			continue
		}
		told++
		if o.Like != o.Expected {
			bad = append(bad, fmt.Sprintf("%s (%s) ran like %s", allreduce.FormatBytes(o.Bytes), o.Mode, o.Like))
		}
	}
	if len(obs) == 0 {
		return "untimed"
	}
	if len(bad) == 0 {
		return fmt.Sprintf("by time: %d of %d told apart, all ran the selected kernel", told, len(obs))
	}
	return fmt.Sprintf("by time: %d of %d told apart; %s", told, len(obs), strings.Join(bad, ", "))
}

// Outcome is what Run measured and chose.
type Outcome struct {
	Schema  string            `json:"schema"`
	Measure *allreduce.Report `json:"measure"` // NCCL, custom-1stage and custom-2stage (pcie branch)
	// Settings are the verification runs, in order.
	Settings []Setting `json:"settings"`
	// File is the tune file, nil when nothing could be chosen (an
	// oversubscribed run has no timings; a failed run chooses nothing).
	File *File `json:"file,omitempty"`
	// Findings are what failed or what was not done, one line each.
	Findings []string `json:"findings,omitempty"`
	// Interrupted is true when the caller's context (a signal) ended the
	// tune: the runs hold what finished, and no tune file is chosen.
	Interrupted bool `json:"interrupted,omitempty"`
}

// OutcomeSchema names the JSON layout of an Outcome.
const OutcomeSchema = "arpatch.tune.allreduce/v1"

// Failed reports whether any run held a wrong sum, hung, errored, missed
// a case, or the extension took a bad threshold.
func (o *Outcome) Failed() bool {
	if o.Measure == nil || o.Measure.Failed() {
		return true
	}
	for _, s := range o.Settings {
		if s.Report == nil || s.Report.Failed() {
			return true
		}
	}
	if p := o.Measure.Run.ThresholdProbe; p != nil && !p.Refused {
		return true
	}
	return false
}

// Run tunes the PCIe dispatch on this host: it measures NCCL, custom
// 1-stage and custom 2-stage through the PCIe branch (full_nvlink=false)
// at every size and mode, checking every sum, and first checks that the
// extension refuses a bad threshold at init; picks thresholds (Pick, in
// graph mode when measured); then runs custom-auto through the PCIe branch
// under thresholds that force 1-stage at every size, 2-stage at every size,
// and the chosen ones, every sum checked again. An oversubscribed run
// (more ranks than GPUs) has no timings: it checks the settings and chooses
// nothing. A ctx that ends (a signal) stops it after the run in progress
// with Outcome.Interrupted set and no tune file chosen. It returns an error
// only when a run could not start.
func Run(ctx context.Context, o Options) (*Outcome, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	say := func(f string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(f, a...))
		}
	}
	out := &Outcome{Schema: OutcomeSchema}
	m := o.Bench
	m.Sizes, m.Modes, m.Branches = o.Sizes, o.Modes, []string{"pcie"}
	m.Impls = []string{allreduce.NCCL, allreduce.Custom1Stage, allreduce.Custom2Stage}
	m.ProbeThresholds = true
	m.Env = withoutThresholds(o.Bench.Env)
	say("measuring %s through the PCIe branch at %d sizes (%s) on %d ranks", strings.Join(m.Impls, ", "), len(o.Sizes), strings.Join(o.Modes, ", "), m.WorldSize)
	run, err := allreduce.Execute(ctx, m)
	if err != nil {
		return nil, err
	}
	out.Measure = allreduce.NewReport(m, o.Verify, run, o.Version)
	if p := run.ThresholdProbe; p == nil {
		out.Findings = append(out.Findings, "the extension was not asked whether it refuses a bad threshold (no custom allreduce run reached init)")
	} else if !p.Refused {
		how := "rebuild it (arpatch build --allreduce-ext) from a tree patched with the current pcie series"
		if o.Rebuild != "" {
			how = "if its tree holds the current pcie series (arpatch status), rebuild it: `" + o.Rebuild + "`"
		}
		out.Findings = append(out.Findings, fmt.Sprintf("NO RUN-TIME THRESHOLDS: init_custom_ar took %s=%q without complaint: this extension predates the pcie series' run-time thresholds; %s", p.Variable, p.Value, how))
	}
	if ctx.Err() != nil {
		out.Interrupted = true
		return out, nil
	}

	var th Thresholds
	var choices []Choice
	var verdict string
	mode := allreduce.ModeEager
	if slices.Contains(o.Modes, allreduce.ModeGraph) {
		mode = allreduce.ModeGraph
	}
	switch {
	case run.Env.Oversubscribed:
		out.Findings = append(out.Findings, fmt.Sprintf("oversubscribed (%d ranks on %d GPUs): no timings, so no thresholds are chosen and no tune file is written; the settings below are checked for correctness only", run.Env.WorldSize, run.Env.Devices))
	case out.Measure.Failed():
		out.Findings = append(out.Findings, "the measurement failed: no thresholds are chosen")
	default:
		th, choices, verdict, err = Pick(run.Results, m.WorldSize, mode)
		if err != nil {
			out.Findings = append(out.Findings, "no thresholds chosen: "+err.Error())
		}
	}

	settings := []Setting{
		{Name: "built-in default", Thresholds: Defaults()},
		{Name: "1-stage at every size", Env: []string{Env1StageMax + "=" + strconv.FormatUint(math.MaxUint64, 10)}, Thresholds: Thresholds{OneStageMax: U64(math.MaxUint64)}},
		{Name: "2-stage at every size", Env: []string{Env1StageMax + "=0"}, Thresholds: Thresholds{OneStageMax: U64(0)}},
	}
	if verdict != "" {
		settings = append(settings, Setting{Name: "chosen: " + th.String(), Env: th.Env(), Thresholds: th})
	}
	for _, s := range settings {
		if ctx.Err() != nil {
			break
		}
		v := o.Bench
		v.Sizes, v.Modes, v.Branches, v.Impls = o.Sizes, o.Modes, []string{"pcie"}, []string{allreduce.CustomAuto}
		v.Env = append(withoutThresholds(o.Bench.Env), s.Env...)
		say("checking custom-auto through the PCIe branch with %s (%s)", orText(strings.Join(s.Env, " "), "no threshold set"), s.Name)
		r, err := allreduce.Execute(ctx, v)
		if err != nil {
			return out, err
		}
		s.Report = allreduce.NewReport(v, o.Verify, r, o.Version)
		s.Kernel = Observe(r.Results, run.Results, s.Thresholds, m.WorldSize)
		out.Settings = append(out.Settings, s)
		if s.Report.Failed() {
			out.Findings = append(out.Findings, fmt.Sprintf("custom-auto with %s (%s) failed: %s", strings.Join(s.Env, " "), s.Name, strings.Join(s.Report.Findings, "; ")))
		}
	}
	if ctx.Err() != nil {
		// A setting cut short was not checked: choose no file.
		out.Interrupted = true
		return out, nil
	}
	if verdict != "" && !out.Failed() {
		h := o.Host
		if h.NCCL == "" {
			h.NCCL = run.Env.NCCL
		}
		if h.GPUModel == "" {
			h.GPUModel, h.GPUCount = run.Env.Device, run.Env.Devices
		}
		out.File = &File{Host: h, WorldSize: m.WorldSize, Date: o.Now().UTC().Truncate(time.Second), Mode: mode, Verdict: verdict, Thresholds: th, Choices: choices}
	}
	return out, nil
}

// withoutThresholds drops the pcie series' threshold variables and
// SGLANG_CUSTOM_ALLREDUCE_ALGO from env (nil: the process environment is
// taken by allreduce.Execute, so it is read here), so that each run sets
// exactly its own.
func withoutThresholds(env []string) []string {
	if env == nil {
		env = environ()
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case EnvMaxBytes, Env1StageMax, EnvAlgo:
			continue
		}
		out = append(out, kv)
	}
	return out
}

var environ = os.Environ

// Write prints the outcome: the measurement table, the threshold probe,
// each checked setting, the choice per size, the verdict and the
// environment the tune file sets.
func (o *Outcome) Write(w io.Writer) {
	if o.Measure != nil {
		o.Measure.WriteTable(w)
		if p := o.Measure.Run.ThresholdProbe; p != nil {
			verb := "refused it"
			if !p.Refused {
				verb = "TOOK IT: no run-time thresholds in this extension"
			}
			fmt.Fprintf(w, "\ninit_custom_ar with %s=%s: %s", p.Variable, p.Value, verb)
			if p.Error != "" {
				fmt.Fprintf(w, " (%s)", p.Error)
			}
			fmt.Fprintln(w)
		}
	}
	if len(o.Settings) > 0 {
		fmt.Fprintln(w, "\ncustom-auto through the PCIe branch, every sum checked, under each threshold setting:")
		for _, s := range o.Settings {
			ok, n := 0, len(s.Report.Run.Results)+len(s.Report.Missing)
			for _, r := range s.Report.Run.Results {
				if r.OK {
					ok++
				}
			}
			verdict := "all exact"
			if s.Report.Failed() {
				verdict = "FAILED"
			}
			fmt.Fprintf(w, "  %s (%s)\n    %d of %d cases exact: %s; %s\n", s.Name, orText(strings.Join(s.Env, " "), "no threshold set"), ok, n, verdict, kernelSummary(s.Kernel))
		}
	}
	if o.File != nil {
		fmt.Fprintf(w, "\nper size (%s mode, medians in µs):\n", o.File.Mode)
		WriteChoices(w, o.File.Choices)
		fmt.Fprintf(w, "\n%s\nruntime environment:\n", o.File.Verdict)
		for _, kv := range o.File.Thresholds.Env() {
			fmt.Fprintf(w, "  %s\n", kv)
		}
	}
	if len(o.Findings) > 0 {
		fmt.Fprintln(w, "\ntune findings:")
		for _, f := range o.Findings {
			fmt.Fprintf(w, "  - %s\n", f)
		}
	}
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

package tune

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// Options holds every input of Run.
type Options struct {
	// Bench carries the measurement settings: Python, WorldSize, Ext,
	// Warmup, Inner, Reps, Timeout, NCCLDebug, Env, Log, and Layouts (one
	// layout: the islands custom-island is measured with). Impls,
	// Branches, Sizes and Modes are set by Run.
	Bench allreduce.Options
	Sizes []int    // bytes
	Modes []string // allreduce.ModeEager, allreduce.ModeGraph
	// Variants are the NCCL variants measured besides NCCL as the
	// environment leaves it (allreduce.ParseVariants).
	Variants []allreduce.NCCLVariant
	// IslandsFrom says where Bench.Layouts came from (reported).
	IslandsFrom string
	// NVLink: every pair of the ranks' GPUs is joined by NVLink
	// (nvidia-smi topo -m); false where that is unknown. Off NVLink, Pick
	// never chooses a variant NCCL enables only over NVLink (LL128).
	NVLink bool
	// Verify is the allreduce shape of one EAGLE-3 verify pass (reported).
	Verify allreduce.Verify
	Host   Host
	Now    func() time.Time
	// Progress, when set, hears each step ("measuring ...").
	Progress func(string)
	Version  string
	// Rebuild is the command that rebuilds the extension from its tree
	// ("arpatch build --allreduce-ext --src sglang --arch 90a"), printed
	// when the extension predates the run-time thresholds or the push
	// algorithms; "" when the extension was given by path.
	Rebuild string
}

// Setting is one setting checked by Run: custom-auto through the PCIe
// branch, and for the chosen one NCCL too, with Env added, every sum
// checked.
type Setting struct {
	Name string   `json:"name"` // "built-in default", "chosen: ..."
	Env  []string `json:"env"`
	// Thresholds are what the setting selects.
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
	Bytes int     `json:"bytes"`
	Mode  string  `json:"mode"`
	US    float64 `json:"us"`
	// Expected is the kernel the setting selects; allreduce.CustomAuto
	// when the kernel's own constants decide (not judged).
	Expected string `json:"expected"`
	// Like is the forced kernel whose median is nearest, "" when the
	// nearest two are within 25% of each other (not told apart by time).
	Like string `json:"like,omitempty"`
}

// Observe matches each timed custom-auto result of a setting against the
// forced kernels' medians of measure (custom-1stage, custom-2stage,
// custom-push1, custom-push2, custom-island through the PCIe branch) in
// the same mode and size: the kernel the dispatch ran, as far as time
// tells it. Only CUDA-graph timings count when there are any: an eager
// call is host-bound (about 14 µs for every kernel on an H200 host,
// docs/allreduce-h200.md), so eager medians differ by noise, not by
// kernel. ws is the world size.
func Observe(auto []allreduce.Result, measure []allreduce.Result, th Thresholds, ws int) []Observation {
	forced := map[string]map[string]float64{} // size/mode -> impl -> median
	graph := false
	for _, r := range measure {
		if r.Timed() && r.Branch == "pcie" && slices.Contains(allreduce.ForcedImpls, r.Impl) {
			k := fmt.Sprintf("%d/%s", r.Bytes, r.Mode)
			if forced[k] == nil {
				forced[k] = map[string]float64{}
			}
			forced[k][r.Impl] = r.MedianUS
			graph = graph || r.Mode == allreduce.ModeGraph
		}
	}
	var out []Observation
	for _, r := range auto {
		if !r.Timed() || r.Impl != allreduce.CustomAuto || (graph && r.Mode != allreduce.ModeGraph) {
			continue
		}
		o := Observation{Bytes: r.Bytes, Mode: r.Mode, US: r.MedianUS, Expected: th.Kernel(ws, r.Bytes)}
		type cand struct {
			impl string
			us   float64
		}
		var cs []cand
		for _, impl := range allreduce.ForcedImpls {
			if v, ok := forced[fmt.Sprintf("%d/%s", r.Bytes, r.Mode)][impl]; ok {
				cs = append(cs, cand{impl, v})
			}
		}
		sort.SliceStable(cs, func(i, j int) bool { return math.Abs(cs[i].us-r.MedianUS) < math.Abs(cs[j].us-r.MedianUS) })
		if len(cs) >= 2 && math.Abs(cs[0].us-cs[1].us) > 0.25*min(cs[0].us, cs[1].us) {
			o.Like = cs[0].impl
		}
		out = append(out, o)
	}
	return out
}

// kernelSummary is "by time: 9 of 22 told apart, all as selected" or the
// sizes that ran like another kernel than the selected one; sizes where
// the kernel's own constants decide (auto) are not judged.
func kernelSummary(obs []Observation) string {
	told, judged, bad := 0, 0, []string{}
	for _, o := range obs {
		if o.Expected == allreduce.CustomAuto {
			continue
		}
		judged++
		if o.Like == "" {
			continue
		}
		told++
		if o.Like != o.Expected {
			bad = append(bad, fmt.Sprintf("%s (%s) ran like %s", allreduce.FormatBytes(o.Bytes), o.Mode, o.Like))
		}
	}
	switch {
	case len(obs) == 0:
		return "untimed"
	case judged == 0:
		return "the kernel's own constants choose (auto): not judged by time"
	case len(bad) == 0:
		return fmt.Sprintf("by time: %d of %d told apart, all ran the selected kernel", told, judged)
	}
	return fmt.Sprintf("by time: %d of %d told apart; %s", told, judged, strings.Join(bad, ", "))
}

// Outcome is what Run measured and chose.
type Outcome struct {
	Schema string `json:"schema"`
	// Measure holds NCCL and the forced custom kernels through the PCIe
	// branch, and the NCCL variants' runs.
	Measure *allreduce.Report `json:"measure"`
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
	// Expect is the traffic model's expectation for the tuned GPUs at the
	// verify shape (doctor's expect: line, with the constants of tune
	// allreduce --p2p's measurement where given), beside what was
	// measured; "" when the host's topology is unknown.
	Expect string `json:"expect,omitempty"`
}

// OutcomeSchema names the JSON layout of an Outcome.
const OutcomeSchema = "arpatch.tune.allreduce/v1"

// Failed reports whether any run held a wrong sum, hung, errored, missed
// a case, or the extension took a bad threshold or predates the push
// algorithms. A failed NCCL variant fails nothing: it is never chosen.
func (o *Outcome) Failed() bool {
	if o.Measure == nil || o.Measure.Failed() {
		return true
	}
	for _, s := range o.Settings {
		if s.Report == nil || s.Report.Failed() {
			return true
		}
	}
	for _, p := range []*allreduce.ThresholdProbe{o.Measure.Run.ThresholdProbe, o.Measure.Run.AlgoProbe} {
		if p != nil && !p.Refused {
			return true
		}
	}
	return false
}

// Run tunes the PCIe dispatch on this host. It measures NCCL and the
// forced custom kernels (custom-1stage, custom-2stage, custom-push1,
// custom-push2 and, with more than one island, custom-island) through the
// PCIe branch (full_nvlink=false) at every size and mode, checking every
// sum, after checking that the extension refuses a bad threshold and a bad
// SGLANG_PCIE_CUSTOM_AR_ALGO at init; then NCCL under each of
// o.Variants, one torchrun each. It picks the settings (Pick, in graph
// mode when measured) and checks them: custom-auto through the PCIe branch
// with no setting (the built-in default) and under the chosen one, where
// NCCL runs too, under the chosen NCCL variant, at the sizes above the
// cut and custom-auto at those below it, every sum checked again. An
// oversubscribed run (more ranks than GPUs) has no timings: it checks the
// built-in default and chooses nothing. A ctx that ends (a signal) stops
// it after the run in progress with Outcome.Interrupted set and no tune
// file chosen. It returns an error only when a run could not start.
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
	m.NVLink = o.NVLink // the reports' baseline rule is Pick's (allreduce.IsBaseline)
	m.Sizes, m.Modes, m.Branches = o.Sizes, o.Modes, []string{"pcie"}
	m.Impls = []string{allreduce.NCCL, allreduce.Custom1Stage, allreduce.Custom2Stage, allreduce.CustomPush1, allreduce.CustomPush2}
	if len(m.Layouts) > 0 && len(m.Layouts[0]) > 1 {
		m.Impls = append(m.Impls, allreduce.CustomIsland)
	} else {
		out.Findings = append(out.Findings, "custom-island not measured: the ranks form one island, where it runs as custom-push2 does")
	}
	m.ProbeThresholds = true
	m.Env = withoutThresholds(o.Bench.Env)
	say("measuring %s through the PCIe branch at %d sizes (%s) on %d ranks", strings.Join(m.Impls, ", "), len(o.Sizes), strings.Join(o.Modes, ", "), m.WorldSize)
	run, err := allreduce.Execute(ctx, m)
	if err != nil {
		return nil, err
	}
	out.Measure = allreduce.NewReport(m, o.Verify, run, o.Version)
	out.Measure.IslandsFrom = o.IslandsFrom
	how := "rebuild it (arpatch build --allreduce-ext) from a tree patched with the current pcie series"
	if o.Rebuild != "" {
		how = "if its tree holds the current pcie series (arpatch status), rebuild it: `" + o.Rebuild + "`"
	}
	if p := run.ThresholdProbe; p == nil {
		out.Findings = append(out.Findings, "the extension was not asked whether it refuses a bad threshold (no custom allreduce run reached init)")
	} else if !p.Refused {
		out.Findings = append(out.Findings, fmt.Sprintf("NO RUN-TIME THRESHOLDS: init_custom_ar took %s=%q without complaint: this extension predates the pcie series' run-time thresholds; %s", p.Variable, p.Value, how))
	}
	if p := run.AlgoProbe; p != nil && !p.Refused {
		out.Findings = append(out.Findings, fmt.Sprintf("NO PUSH ALGORITHMS: init_custom_ar took %s=%q without complaint: this extension predates the push algorithms, which were not measured; %s", p.Variable, p.Value, how))
	}
	if ctx.Err() == nil && len(o.Variants) > 0 && !run.Env.Oversubscribed && !out.Measure.Failed() {
		say("measuring NCCL under %d variants, one torchrun each", len(o.Variants))
		vs, skipped, err := allreduce.ExecuteVariants(ctx, m, run, o.Variants)
		if err != nil {
			return out, err
		}
		out.Measure.AddVariants(vs, skipped)
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
		out.Findings = append(out.Findings, fmt.Sprintf("oversubscribed (%d ranks on %d GPUs): no timings, so no settings are chosen and no tune file is written; the built-in default below is checked for correctness only", run.Env.WorldSize, run.Env.Devices))
	case out.Measure.Failed():
		out.Findings = append(out.Findings, "the measurement failed: no settings are chosen")
	default:
		th, choices, verdict, err = Pick(out.Measure.AllResults(), m.WorldSize, mode, o.NVLink)
		if !o.NVLink && slices.ContainsFunc(o.Variants, func(v allreduce.NCCLVariant) bool { return v.NVLinkOnly }) {
			out.Findings = append(out.Findings, "NCCL_PROTO=LL128 is measured but never chosen here: NCCL enables LL128 only where the GPUs are joined by NVLink (its data may be corrupt elsewhere without a wrong sum in a test), and these ranks are not, or their topology is unknown")
		}
		if err != nil {
			out.Findings = append(out.Findings, "no settings chosen: "+err.Error())
		}
	}

	settings := []Setting{{Name: "built-in default", Thresholds: Defaults()}}
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
		if s.Env != nil {
			// The chosen setting as a server runs it: NCCL under the
			// chosen variant above the cut, custom-auto below it.
			v.Impls, v.CustomMaxBytes = []string{allreduce.NCCL, allreduce.CustomAuto}, int(min(th.MaxBytes, UpstreamMaxSize))
			if th.MaxBytes == 0 {
				v.Impls = []string{allreduce.NCCL}
			}
			v.Env = append(withoutKnobs(v.Env), s.Env...)
		}
		say("checking %s through the PCIe branch with %s (%s)", strings.Join(v.Impls, " and "), orText(strings.Join(s.Env, " "), "no setting"), s.Name)
		r, err := allreduce.Execute(ctx, v)
		if err != nil {
			return out, err
		}
		s.Report = allreduce.NewReport(v, o.Verify, r, o.Version)
		s.Kernel = Observe(r.Results, run.Results, s.Thresholds, m.WorldSize)
		out.Settings = append(out.Settings, s)
		if s.Report.Failed() {
			out.Findings = append(out.Findings, fmt.Sprintf("%s with %s (%s) failed: %s", strings.Join(v.Impls, " and "), orText(strings.Join(s.Env, " "), "no setting"), s.Name, strings.Join(s.Report.Findings, "; ")))
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

// withoutKnobs drops the NCCL knobs from env.
func withoutKnobs(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(allreduce.NCCLKnobs, k) {
			out = append(out, kv)
		}
	}
	return out
}

// withoutThresholds drops the pcie series' variables and
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
		if k == EnvAlgo || slices.Contains(Variables, k) {
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
		for _, p := range []struct {
			p    *allreduce.ThresholdProbe
			took string
		}{{o.Measure.Run.ThresholdProbe, "no run-time thresholds in this extension"}, {o.Measure.Run.AlgoProbe, "no push algorithms in this extension"}} {
			if p.p == nil {
				continue
			}
			verb := "refused it"
			if !p.p.Refused {
				verb = "TOOK IT: " + p.took
			}
			fmt.Fprintf(w, "\ninit_custom_ar with %s=%s: %s", p.p.Variable, p.p.Value, verb)
			if p.p.Error != "" {
				fmt.Fprintf(w, " (%s)", p.p.Error)
			}
			fmt.Fprintln(w)
		}
	}
	if len(o.Settings) > 0 {
		fmt.Fprintln(w, "\nthrough the PCIe branch, every sum checked, under each setting:")
		for _, s := range o.Settings {
			ok, n, na := 0, len(s.Report.Missing), 0
			for _, r := range s.Report.Run.Results {
				switch {
				case r.NotApplicable:
					na++
				case r.OK:
					ok, n = ok+1, n+1
				default:
					n++
				}
			}
			verdict := "all exact"
			if s.Report.Failed() {
				verdict = "FAILED"
			}
			gate := ""
			if na > 0 {
				gate = fmt.Sprintf(" (%d custom-auto cases above the cut are NCCL's)", na)
			}
			fmt.Fprintf(w, "  %s (%s)\n    %d of %d cases exact%s: %s; %s\n", s.Name, orText(strings.Join(s.Env, " "), "no setting"), ok, n, gate, verdict, kernelSummary(s.Kernel))
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
	if o.Expect != "" {
		fmt.Fprintf(w, "\nexpect: %s\n", o.Expect)
	}
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

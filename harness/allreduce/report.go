package allreduce

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arpatch/arpatch/internal/textfmt"
)

// Schema names the JSON layout of a report.
const Schema = "arpatch.bench.allreduce/v1"

// Verify describes the EAGLE-3 verify pass whose allreduce cost is predicted.
type Verify struct {
	Count int   `json:"count"` // allreduces per verify pass
	Shape Shape `json:"shape"`
	Bytes int   `json:"bytes"`
}

// Cost is the predicted allreduce time of one verify pass for one case:
// count x median latency at the verify size.
type Cost struct {
	Impl      string  `json:"impl"`
	Branch    string  `json:"branch"`
	Mode      string  `json:"mode"`
	PerCallUS float64 `json:"per_call_us"`
	TotalUS   float64 `json:"total_us"`
	Speedup   float64 `json:"speedup_vs_nccl,omitempty"` // NCCL time / this time, same mode
}

// Report is the JSON document of `arpatch bench allreduce --json`.
type Report struct {
	Schema         string    `json:"schema"`
	CreatedAt      time.Time `json:"created_at"`
	ArpatchVersion string    `json:"arpatch_version"`
	Options        struct {
		WorldSize int      `json:"world_size"`
		Sizes     []int    `json:"sizes"`
		Impls     []string `json:"impls"`
		Branches  []string `json:"branches"`
		Modes     []string `json:"modes"`
		Ext       string   `json:"ext,omitempty"`
	} `json:"options"`
	Verify Verify `json:"verify"`
	Run    *Run   `json:"run"`
	Costs  []Cost `json:"verify_costs"`
	// Missing lists the cases asked for that never reported a result
	// ("custom-2stage/pcie at 1M (graph)"): a rank that died or hung
	// before them. A run with any is a failed run.
	Missing  []string `json:"missing,omitempty"`
	Findings []string `json:"findings"`
}

// NewReport assembles a report from a run and computes the verify costs
// and findings.
func NewReport(opts Options, v Verify, run *Run, version string) *Report {
	rep := &Report{Schema: Schema, CreatedAt: time.Now().UTC(), ArpatchVersion: version, Verify: v, Run: run}
	rep.Options.WorldSize, rep.Options.Sizes, rep.Options.Impls = opts.WorldSize, opts.Sizes, opts.Impls
	rep.Options.Branches, rep.Options.Modes, rep.Options.Ext = opts.Branches, opts.Modes, opts.Ext
	rep.Costs = VerifyCosts(run.Results, v)
	rep.Missing = MissingCases(opts, run.Results)
	rep.Findings = Findings(run, v, rep.Costs)
	if rep.Interrupted() {
		// Not a finding about allreduce: the cases after the signal were
		// not run, not lost.
		at := ""
		if p := run.Interrupted; p != nil {
			at = " during " + caseName(*p) + " at " + FormatBytes(p.Bytes) + " (" + p.Mode + ")"
		}
		rep.Findings = append(rep.Findings, fmt.Sprintf("INTERRUPTED%s: the ranks were stopped; %d of the cases asked for %s not run (no verdict on them)", at, len(rep.Missing), textfmt.Word(len(rep.Missing), "was", "were")))
		return rep
	}
	if n := len(rep.Missing); n > 0 {
		shown := rep.Missing
		if n > 5 {
			shown = append(append([]string(nil), shown[:5]...), fmt.Sprintf("and %d more", n-5))
		}
		rep.Findings = append(rep.Findings, fmt.Sprintf("MISSING %d of the cases asked for never reported a result: %s", n, strings.Join(shown, ", ")))
	}
	return rep
}

// MissingCases returns the cases of opts (implementation x branch x size
// x mode; NCCL has no branch) that results do not hold, in the order
// bench.py runs them. A skipped result without a size (NCCL on an
// oversubscribed run) covers every size and mode of its case.
func MissingCases(opts Options, results []Result) []string {
	type key struct {
		impl, branch, mode string
		bytes              int
	}
	seen := map[key]bool{}
	whole := map[[2]string]bool{}
	for _, r := range results {
		if r.Skipped && r.Bytes == 0 {
			whole[[2]string{r.Impl, r.Branch}] = true
		}
		seen[key{r.Impl, r.Branch, r.Mode, r.Bytes}] = true
	}
	var out []string
	for _, impl := range opts.Impls {
		branches := opts.Branches
		if impl == NCCL {
			branches = []string{"-"}
		}
		for _, b := range branches {
			if whole[[2]string{impl, b}] {
				continue
			}
			for _, size := range opts.Sizes {
				for _, m := range opts.Modes {
					if !seen[key{impl, b, m, size}] {
						out = append(out, fmt.Sprintf("%s at %s (%s)", caseName(Result{Impl: impl, Branch: b}), FormatBytes(size), m))
					}
				}
			}
		}
	}
	return out
}

// VerifyCosts predicts each case's verify-pass allreduce time from its
// median at v.Bytes, with the speed-up against NCCL in the same mode.
func VerifyCosts(results []Result, v Verify) []Cost {
	nccl := map[string]float64{}
	var out []Cost
	for _, r := range results {
		if r.Bytes != v.Bytes || !r.Timed() {
			continue
		}
		c := Cost{Impl: r.Impl, Branch: r.Branch, Mode: r.Mode, PerCallUS: r.MedianUS, TotalUS: r.MedianUS * float64(v.Count)}
		if r.Impl == NCCL {
			nccl[r.Mode] = r.MedianUS
		}
		out = append(out, c)
	}
	for i := range out {
		if n := nccl[out[i].Mode]; n > 0 && out[i].Impl != NCCL {
			out[i].Speedup = n / out[i].PerCallUS
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Mode != out[j].Mode {
			return out[i].Mode < out[j].Mode
		}
		return out[i].TotalUS < out[j].TotalUS
	})
	return out
}

// Findings lists what a reader must not miss: wrong sums, hangs, errors,
// NCCL transport problems, an oversubscribed run, and custom allreduce
// slower than NCCL at the verify size.
func Findings(run *Run, v Verify, costs []Cost) []string {
	var f []string
	for _, r := range run.Results {
		name := r.Impl
		if r.Branch != "-" && r.Branch != "" {
			name += "/" + r.Branch
		}
		at := fmt.Sprintf("%s at %s (%s)", name, FormatBytes(r.Bytes), r.Mode)
		switch r.Status() {
		case "WRONG":
			detail := ""
			if r.Wrong != nil {
				detail = fmt.Sprintf(": rank %d element %d is %s, want %s (%d of %d elements wrong)", r.Wrong.Rank, r.Wrong.Index, r.Wrong.Got, r.Wrong.Want, r.Wrong.Mismatches, r.Wrong.Of)
			}
			f = append(f, "WRONG "+at+detail+"; the output is not the sum over ranks: a kernel that launched nothing, or reduced the wrong data. Do not use this build")
		case "HANG":
			f = append(f, "HANG "+at+": no result before the timeout; the run was killed")
		case "ERROR":
			f = append(f, "ERROR "+at+": "+r.Error)
		}
	}
	if run.Exit != "ok" && run.Exit != ExitInterrupted && run.Hang == nil {
		f = append(f, "the run ended badly: "+run.Exit)
	}
	if run.BadLines > 0 {
		f = append(f, fmt.Sprintf("%d result lines could not be read", run.BadLines))
	}
	f = append(f, run.NCCL.Findings...)
	if run.Env.Oversubscribed {
		f = append(f, fmt.Sprintf("oversubscribed: %d ranks on %d GPUs to reach world-size branches this machine lacks; correctness only, no timings", run.Env.WorldSize, run.Env.Devices))
	}
	for _, c := range costs {
		if c.Speedup > 0 && c.Speedup < 1 {
			f = append(f, fmt.Sprintf("SLOWER %s (%s) takes %.1f us at the verify size, NCCL %.1f us: %.0f%% slower; it would lose tok/s",
				caseName(Result{Impl: c.Impl, Branch: c.Branch}), c.Mode, c.PerCallUS, c.PerCallUS*c.Speedup, (1/c.Speedup-1)*100))
		}
	}
	return f
}

// caseName is "impl" or "impl/branch".
func caseName(r Result) string {
	if r.Branch == "" || r.Branch == "-" {
		return r.Impl
	}
	return r.Impl + "/" + r.Branch
}

// WriteTable prints one size x implementation table per mode: the median
// in microseconds with [p10-p90], or WRONG, ERROR, HANG, or INTERRUPTED
// (the case a signal cut short: no verdict); custom cells add the
// speed-up against NCCL. The verify size is marked with '*'. Then the
// predicted verify-pass costs and the findings.
func (rep *Report) WriteTable(w io.Writer) {
	run := rep.Run
	e := run.Env
	if len(run.Results) == 0 && e.WorldSize == 0 {
		fmt.Fprintln(w, "allreduce: the ranks reported nothing (not even their environment)")
		return
	}
	fmt.Fprintf(w, "allreduce, world size %d on %d x %s, torch %s, CUDA %s, NCCL %s, %s; median us [p10-p90]\n",
		e.WorldSize, e.Devices, orQ(e.Device), orQ(e.Torch), orQ(e.CUDA), orQ(e.NCCL), orQ(e.DType))
	modes := map[string]bool{}
	var order []string
	cols := []string{}
	seenCol := map[string]bool{}
	cells := map[string]Result{}
	sizes := map[int]bool{}
	rows, cut := run.Results, ""
	if p := run.Interrupted; p != nil {
		// Its cell says INTERRUPTED: no verdict, not an ERROR.
		rows, cut = append(slices.Clone(rows), *p), fmt.Sprintf("%s|%s|%d", p.Mode, caseName(*p), p.Bytes)
	}
	for _, r := range rows {
		if !modes[r.Mode] && r.Mode != "" {
			modes[r.Mode] = true
			order = append(order, r.Mode)
		}
		c := caseName(r)
		if !seenCol[c] {
			seenCol[c] = true
			cols = append(cols, c)
		}
		cells[fmt.Sprintf("%s|%s|%d", r.Mode, c, r.Bytes)] = r
		if r.Bytes > 0 {
			sizes[r.Bytes] = true
		}
	}
	var sz []int
	for s := range sizes {
		sz = append(sz, s)
	}
	sort.Ints(sz)
	for _, mode := range order {
		fmt.Fprintf(w, "\nmode %s\n", mode)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "size\t%s\t\n", strings.Join(cols, "\t"))
		for _, s := range sz {
			label := FormatBytes(s)
			if s == rep.Verify.Bytes {
				label += "*"
			}
			row := []string{label}
			nccl, hasNCCL := cells[fmt.Sprintf("%s|%s|%d", mode, NCCL, s)]
			for _, c := range cols {
				r, ok := cells[fmt.Sprintf("%s|%s|%d", mode, c, s)]
				switch {
				case !ok:
					row = append(row, "-")
				case fmt.Sprintf("%s|%s|%d", mode, c, s) == cut:
					row = append(row, "INTERRUPTED")
				case r.Status() != "ok":
					row = append(row, r.Status())
				case !r.Timed():
					row = append(row, "ok (untimed)")
				default:
					cell := fmt.Sprintf("%.1f [%.1f-%.1f]", r.MedianUS, r.P10US, r.P90US)
					if hasNCCL && nccl.Timed() && r.Impl != NCCL {
						cell += fmt.Sprintf(" %.2fx", nccl.MedianUS/r.MedianUS)
					}
					row = append(row, cell)
				}
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
		}
		tw.Flush()
	}
	if len(rep.Costs) > 0 {
		v := rep.Verify
		fmt.Fprintf(w, "\npredicted allreduce time per EAGLE-3 verify pass: %d allreduces x %s (* above)\n", v.Count, v.Shape)
		for _, c := range rep.Costs {
			sp := ""
			if c.Speedup > 0 {
				sp = fmt.Sprintf("  %.2fx vs NCCL", c.Speedup)
			}
			fmt.Fprintf(w, "  %-6s %-22s %8.1f us%s\n", c.Mode, caseName(Result{Impl: c.Impl, Branch: c.Branch}), c.TotalUS, sp)
		}
	}
	if run.NCCL.Transports != nil {
		fmt.Fprintf(w, "\nNCCL transport: %s (%d channels)\n", strings.Join(run.NCCL.Details, ", "), run.NCCL.Channels)
	}
	if len(rep.Findings) > 0 {
		fmt.Fprintln(w, "\nfindings:")
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "  - %s\n", f)
		}
	}
}

func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// Interrupted reports whether the caller's context (a signal) ended the
// run: its missing cases were not run, and say nothing about allreduce.
func (rep *Report) Interrupted() bool { return rep.Run.Exit == ExitInterrupted }

// Failed reports whether any case was wrong, hung, errored or missing; an
// interrupted run fails only by a case that reported WRONG, HANG or ERROR
// before the signal.
func (rep *Report) Failed() bool {
	if len(rep.Missing) > 0 && !rep.Interrupted() {
		return true
	}
	for _, r := range rep.Run.Results {
		if s := r.Status(); s != "ok" && s != "skipped" {
			return true
		}
	}
	return rep.Run.Exit != "ok" && !rep.Interrupted()
}

// BestCustom returns the fastest custom case at the verify size in mode
// and NCCL's time there; ok is false when either is missing.
func (rep *Report) BestCustom(mode string) (best Cost, ncclUS float64, ok bool) {
	best.PerCallUS = math.Inf(1)
	for _, c := range rep.Costs {
		if c.Mode != mode {
			continue
		}
		if c.Impl == NCCL {
			ncclUS = c.PerCallUS
		} else if c.PerCallUS < best.PerCallUS {
			best = c
		}
	}
	return best, ncclUS, ncclUS > 0 && !math.IsInf(best.PerCallUS, 1)
}

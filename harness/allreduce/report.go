package allreduce

import (
	"cmp"
	"fmt"
	"io"
	"maps"
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
	Islands   string  `json:"islands,omitempty"`
	Variant   string  `json:"nccl_variant,omitempty"`
	Mode      string  `json:"mode"`
	PerCallUS float64 `json:"per_call_us"`
	TotalUS   float64 `json:"total_us"`
	// Speedup is the fastest correct NCCL's time (Baseline, same mode)
	// over this time.
	Speedup  float64 `json:"speedup_vs_nccl,omitempty"`
	Baseline string  `json:"nccl_baseline,omitempty"` // "nccl" or "nccl:LL"
}

// Report is the JSON document of `arpatch bench allreduce --json`.
type Report struct {
	Schema         string    `json:"schema"`
	CreatedAt      time.Time `json:"created_at"`
	ArpatchVersion string    `json:"arpatch_version"`
	Options        struct {
		WorldSize int      `json:"world_size"`
		Sizes     []int    `json:"sizes"`
		Cap       bool     `json:"cap,omitempty"`
		Impls     []string `json:"impls"`
		Branches  []string `json:"branches"`
		Modes     []string `json:"modes"`
		DTypes    []string `json:"dtypes,omitempty"`
		Islands   []string `json:"islands,omitempty"`
		Ext       string   `json:"ext,omitempty"`
		// NVLink: the ranks' GPUs are all joined by NVLink (Options.NVLink);
		// off NVLink no NVLinkOnly variant is a baseline (IsBaseline).
		NVLink bool `json:"nvlink"`
	} `json:"options"`
	// IslandsFrom says where the islands came from: the flag, or the host
	// topology and how it was read (allreduce.HostIslands).
	IslandsFrom string `json:"islands_from,omitempty"`
	Verify      Verify `json:"verify"`
	Run         *Run   `json:"run"`
	// NCCLVariants are the runs of NCCL under its knobs (ExecuteVariants);
	// VariantsSkipped the variants not run, with why.
	NCCLVariants    []*VariantRun `json:"nccl_variants,omitempty"`
	VariantsSkipped []string      `json:"nccl_variants_skipped,omitempty"`
	Costs           []Cost        `json:"verify_costs"`
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
	rep.Options.Cap, rep.Options.DTypes, rep.Options.NVLink = opts.Cap, opts.DTypes, opts.NVLink
	for _, l := range opts.Layouts {
		rep.Options.Islands = append(rep.Options.Islands, l.String())
	}
	rep.Missing = MissingCases(opts, run.Results)
	rep.derive()
	return rep
}

// AddVariants adds the NCCL variants' runs (and the variants not run, with
// why) and computes the costs and findings again: every speed-up then
// compares with the fastest correct NCCL at its size.
func (rep *Report) AddVariants(runs []*VariantRun, skipped []string) {
	rep.NCCLVariants, rep.VariantsSkipped = runs, skipped
	rep.derive()
}

// derive computes the costs and findings from the runs and Missing.
func (rep *Report) derive() {
	run := rep.Run
	rep.Costs = VerifyCosts(rep.AllResults(), rep.Verify, rep.Options.NVLink)
	rep.Findings = Findings(run, rep.Verify, rep.Costs)
	for _, vr := range rep.NCCLVariants {
		rep.Findings = append(rep.Findings, variantFindings(vr)...)
	}
	if rep.Interrupted() {
		// Not a finding about allreduce: the cases after the signal were
		// not run, not lost.
		at := ""
		if p := run.Interrupted; p != nil {
			at = " during " + caseName(*p) + " at " + FormatBytes(p.Bytes) + " (" + p.Mode + ")"
		}
		rep.Findings = append(rep.Findings, fmt.Sprintf("INTERRUPTED%s: the ranks were stopped; %d of the cases asked for %s not run (no verdict on them)", at, len(rep.Missing), textfmt.Word(len(rep.Missing), "was", "were")))
		return
	}
	if n := len(rep.Missing); n > 0 {
		rep.Findings = append(rep.Findings, fmt.Sprintf("MISSING %d of the cases asked for never reported a result: %s", n, shortList(rep.Missing)))
	}
}

// shortList is the first five of xs, then "and N more".
func shortList(xs []string) string {
	if len(xs) > 5 {
		xs = append(append([]string(nil), xs[:5]...), fmt.Sprintf("and %d more", len(xs)-5))
	}
	return strings.Join(xs, ", ")
}

// variantFindings are a variant run's failures, each named as the
// variant's: a wrong sum, a hang, an error (an out-of-memory among them),
// a run that ended badly or cases never reported. They do not fail the
// report: such a variant is never a baseline.
func variantFindings(vr *VariantRun) []string {
	var f []string
	name := VariantName(vr.Variant.Name) + " (" + strings.Join(vr.Variant.Env, " ") + ")"
	for _, r := range vr.Run.Results {
		switch r.Status() {
		case "WRONG":
			f = append(f, fmt.Sprintf("WRONG %s at %s: %s; never a baseline", name, at(r), wrongDetail(r)))
		case "HANG":
			f = append(f, fmt.Sprintf("HANG %s at %s: no result before the timeout; the variant's ranks were killed", name, at(r)))
		case "ERROR":
			kind := "ERROR"
			if strings.Contains(strings.ToLower(r.Error), "out of memory") {
				kind = "OOM" // NCCL's buffers, or the run's, did not fit
			}
			f = append(f, fmt.Sprintf("%s %s at %s: %s", kind, name, at(r), r.Error))
		}
	}
	if e := vr.Run.Exit; e != "ok" && e != ExitInterrupted && vr.Run.Hang == nil {
		f = append(f, fmt.Sprintf("%s: the run ended badly: %s", name, e))
	}
	if len(vr.Missing) > 0 && vr.Run.Exit != ExitInterrupted {
		f = append(f, fmt.Sprintf("%s: %d cases never reported a result: %s", name, len(vr.Missing), shortList(vr.Missing)))
	}
	for _, w := range vr.Run.NCCL.Warnings {
		f = append(f, fmt.Sprintf("%s: NCCL WARN %s", name, w))
	}
	return f
}

// AllResults are the run's results and every NCCL variant's.
func (rep *Report) AllResults() []Result {
	out := slices.Clone(rep.Run.Results)
	for _, vr := range rep.NCCLVariants {
		out = append(out, vr.Run.Results...)
	}
	return out
}

// MissingCases returns the cases of opts (implementation x branch x
// islands layout x size x dtype x mode; NCCL has no branch; custom-island
// and custom-auto on the PCIe branch run once per Options.Layouts) that
// results do not hold, in the order bench.py runs them. A result without
// a size (skipped, not applicable, unsupported, a failed init) covers
// every size, dtype and mode of its case; Options.Cap asks for one result
// marked Cap per case, dtype and mode.
func MissingCases(opts Options, results []Result) []string {
	type key struct {
		impl, branch, islands, mode, dtype string
		bytes                              int // -1: the cap
	}
	// A result without a dtype is bf16: what bench.py ran before it
	// recorded the type per case.
	dtypes := opts.DTypes
	if len(dtypes) == 0 {
		dtypes = []string{BF16}
	}
	dt := func(r Result) string { return cmp.Or(r.DType, BF16) }
	seen := map[key]bool{}
	whole := map[[3]string]bool{}
	for _, r := range results {
		if r.Bytes == 0 {
			whole[[3]string{r.Impl, r.Branch, r.Islands}] = true
		}
		seen[key{r.Impl, r.Branch, r.Islands, r.Mode, dt(r), r.Bytes}] = true
		if r.Cap {
			seen[key{r.Impl, r.Branch, r.Islands, r.Mode, dt(r), -1}] = true
		}
	}
	sizes := slices.Clone(opts.Sizes)
	if opts.Cap {
		sizes = append(sizes, -1)
	}
	var out []string
	for _, impl := range opts.Impls {
		branches := opts.Branches
		if impl == NCCL {
			branches = []string{"-"}
		}
		for _, b := range branches {
			layouts := []string{""}
			if b == "pcie" && perLayout(impl) && len(opts.Layouts) > 0 {
				layouts = nil
				for _, l := range opts.Layouts {
					layouts = append(layouts, l.String())
				}
			}
			for _, l := range layouts {
				if whole[[3]string{impl, b, l}] {
					continue
				}
				for _, size := range sizes {
					for _, d := range dtypes {
						for _, m := range opts.Modes {
							if !seen[key{impl, b, l, m, d, size}] {
								r := Result{Impl: impl, Branch: b, Islands: l, Bytes: size, Mode: m}
								if len(opts.DTypes) > 0 {
									r.DType = d
								}
								if size < 0 {
									out = append(out, fmt.Sprintf("%s at its cap (%s)", caseName(r), modeText(r)))
								} else {
									out = append(out, caseName(r)+" at "+at(r))
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// bestNCCL is the fastest correct, timed NCCL result in results at n
// bytes in mode and dtype, of the variants that may be a baseline on
// ranks joined by NVLink (nvlink) or not (IsBaseline); ok false when there
// is none.
func bestNCCL(results []Result, n int, mode, dtype string, nvlink bool) (best Result, ok bool) {
	for _, r := range results {
		if r.Impl == NCCL && IsBaseline(r.Variant, nvlink) && r.Bytes == n && r.Mode == mode && r.DType == dtype && r.Timed() && (!ok || r.MedianUS < best.MedianUS) {
			best, ok = r, true
		}
	}
	return best, ok
}

// VerifyCosts predicts each case's verify-pass allreduce time from its
// median at v.Bytes (bf16), with the speed-up against the fastest correct
// NCCL in the same mode of the variants that may be a baseline on ranks
// joined by NVLink (nvlink) or not (IsBaseline), named as Baseline.
func VerifyCosts(results []Result, v Verify, nvlink bool) []Cost {
	var out []Cost
	for _, r := range results {
		if r.Bytes != v.Bytes || !r.Timed() || r.DType != "" && r.DType != BF16 {
			continue
		}
		out = append(out, Cost{Impl: r.Impl, Branch: r.Branch, Islands: r.Islands, Variant: r.Variant, Mode: r.Mode,
			PerCallUS: r.MedianUS, TotalUS: r.MedianUS * float64(v.Count)})
	}
	for i := range out {
		if out[i].Impl == NCCL {
			continue
		}
		var best *Cost
		for j := range out {
			if out[j].Impl == NCCL && IsBaseline(out[j].Variant, nvlink) && out[j].Mode == out[i].Mode && (best == nil || out[j].PerCallUS < best.PerCallUS) {
				best = &out[j]
			}
		}
		if best != nil {
			out[i].Speedup, out[i].Baseline = best.PerCallUS/out[i].PerCallUS, VariantName(best.Variant)
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

// wrongDetail is the first wrong element of a WRONG result.
func wrongDetail(r Result) string {
	if r.Wrong == nil {
		return "the output is not the sum over ranks"
	}
	return fmt.Sprintf("rank %d element %d is %s, want %s (%d of %d elements wrong)", r.Wrong.Rank, r.Wrong.Index, r.Wrong.Got, r.Wrong.Want, r.Wrong.Mismatches, r.Wrong.Of)
}

// Findings lists what a reader must not miss: wrong sums, hangs, errors,
// an extension without the push algorithms, the cases not applicable,
// NCCL transport problems, an oversubscribed run, and custom allreduce
// slower than the fastest NCCL at the verify size.
func Findings(run *Run, v Verify, costs []Cost) []string {
	var f []string
	if p := run.AlgoProbe; p != nil && !p.Refused {
		f = append(f, fmt.Sprintf("UNSUPPORTED push algorithms: init_custom_ar took %s=%s without complaint, so this extension predates them; custom-push1, custom-push2 and custom-island were not run (they would time another kernel). Rebuild it (arpatch build --allreduce-ext) from a tree patched with the current pcie series", p.Variable, p.Value))
	}
	na := map[string]bool{}
	for _, r := range run.Results {
		switch r.Status() {
		case "WRONG":
			d := ""
			if r.Wrong != nil {
				d = ": " + wrongDetail(r)
			}
			f = append(f, "WRONG "+caseName(r)+" at "+at(r)+d+"; the output is not the sum over ranks: a kernel that launched nothing, or reduced the wrong data. Do not use this build")
		case "HANG":
			f = append(f, "HANG "+caseName(r)+" at "+at(r)+": no result before the timeout; the run was killed")
		case "ERROR":
			if r.Bytes == 0 {
				f = append(f, "ERROR "+caseName(r)+": "+r.Error)
			} else {
				f = append(f, "ERROR "+caseName(r)+" at "+at(r)+": "+r.Error)
			}
		case "n/a":
			// One line per case and size: the reason is the same across
			// dtypes and modes.
			where := caseName(r)
			if r.Bytes > 0 {
				where += " at " + FormatBytes(r.Bytes)
			}
			if !na[where] {
				na[where] = true
				f = append(f, "n/a "+where+" (not run): "+r.Error)
			}
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
			f = append(f, fmt.Sprintf("SLOWER %s (%s) takes %.1f us at the verify size, the fastest NCCL %.1f us (%s): %.0f%% slower; it would lose tok/s",
				caseName(Result{Impl: c.Impl, Branch: c.Branch, Islands: c.Islands}), c.Mode, c.PerCallUS, c.PerCallUS*c.Speedup, c.Baseline, (1/c.Speedup-1)*100))
		}
	}
	return f
}

// caseName is "impl", "impl/branch", "impl/branch[islands]", or
// "nccl:VARIANT".
func caseName(r Result) string {
	if r.Impl == NCCL {
		return VariantName(r.Variant)
	}
	s := r.Impl
	if r.Branch != "" && r.Branch != "-" {
		s += "/" + r.Branch
	}
	if r.Islands != "" {
		s += "[" + r.Islands + "]"
	}
	return s
}

// modeText is "graph", or "graph, fp16" for a dtype other than bf16.
func modeText(r Result) string {
	if r.DType != "" && r.DType != BF16 {
		return r.Mode + ", " + r.DType
	}
	return r.Mode
}

// at is "40K (graph)" or "40K (graph, fp16)".
func at(r Result) string { return FormatBytes(r.Bytes) + " (" + modeText(r) + ")" }

// WriteTable prints one size x implementation table per mode (and dtype):
// the median in microseconds with [p10-p90], or WRONG, ERROR, HANG,
// UNSUPPORTED, n/a, or INTERRUPTED (the case a signal cut short: no
// verdict); a case's cap is marked "cap". With NCCL variants, a column
// names the fastest correct NCCL at each size, and custom cells give the
// speed-up against it (else against NCCL). The verify size is marked with
// '*'. Then the predicted verify-pass costs, what NCCL chose, and the
// findings.
func (rep *Report) WriteTable(w io.Writer) {
	run := rep.Run
	e := run.Env
	if len(run.Results) == 0 && e.WorldSize == 0 {
		fmt.Fprintln(w, "allreduce: the ranks reported nothing (not even their environment)")
		return
	}
	fmt.Fprintf(w, "allreduce, world size %d on %d x %s, torch %s, CUDA %s, NCCL %s, %s; median us [p10-p90]\n",
		e.WorldSize, e.Devices, orQ(e.Device), orQ(e.Torch), orQ(e.CUDA), orQ(e.NCCL), orQ(e.DType))
	if len(rep.Options.Islands) > 0 {
		fmt.Fprintf(w, "islands (%s): %s", EnvIslands, strings.Join(rep.Options.Islands, "; "))
		if rep.IslandsFrom != "" {
			fmt.Fprintf(w, " (%s)", rep.IslandsFrom)
		}
		fmt.Fprintln(w)
	}
	g := newGrid(rep)
	for _, sec := range g.order {
		g.writeSection(w, rep, sec)
	}
	rep.writeCosts(w)
	if run.NCCL.Transports != nil {
		fmt.Fprintf(w, "\nNCCL transport: %s (%d channels)\n", strings.Join(run.NCCL.Details, ", "), run.NCCL.Channels)
	}
	writeChose(w, rep)
	if len(rep.Findings) > 0 {
		fmt.Fprintln(w, "\nfindings:")
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "  - %s\n", f)
		}
	}
}

// section is one table of WriteTable: a mode and a dtype.
type section struct{ mode, dtype string }

// grid is a report's results laid out for WriteTable: its sections in the
// order the results give them, the cases (columns) likewise, the sizes,
// and each result by section, case and size.
type grid struct {
	order     []section
	cols      []string
	cells     map[string]Result
	wholeCase map[string]Result // a case without a size (skipped, n/a, unsupported) fills its whole column
	sizes     []int
	dtypes    map[string]bool
	all       []Result // rep.AllResults(), for the fastest NCCL at each size
	cut       string   // the cell of the case a signal cut short, or ""
}

// cell is the key of a result in grid.cells.
func cell(sec section, c string, n int) string {
	return fmt.Sprintf("%s|%s|%s|%d", sec.mode, sec.dtype, c, n)
}

// newGrid lays out rep's results, the interrupted case among them (its
// cell says INTERRUPTED: no verdict, not an ERROR).
func newGrid(rep *Report) *grid {
	g := &grid{cells: map[string]Result{}, wholeCase: map[string]Result{}, dtypes: map[string]bool{}, all: rep.AllResults()}
	seenSec := map[section]bool{}
	seenCol := map[string]bool{}
	sizes := map[int]bool{}
	rows := g.all
	if p := rep.Run.Interrupted; p != nil {
		rows, g.cut = append(slices.Clone(rows), *p), cell(section{p.Mode, p.DType}, caseName(*p), p.Bytes)
	}
	for _, r := range rows {
		sec := section{r.Mode, r.DType}
		if !seenSec[sec] && r.Mode != "" {
			seenSec[sec] = true
			g.order = append(g.order, sec)
		}
		if r.Mode != "" {
			g.dtypes[r.DType] = true
		}
		c := caseName(r)
		if !seenCol[c] {
			seenCol[c] = true
			g.cols = append(g.cols, c)
		}
		g.cells[cell(sec, c, r.Bytes)] = r
		if r.Bytes > 0 {
			sizes[r.Bytes] = true
		}
	}
	for _, r := range rows {
		if r.Bytes == 0 {
			g.wholeCase[caseName(r)] = r
		}
	}
	g.sizes = slices.Sorted(maps.Keys(sizes))
	return g
}

// writeSection prints sec's table: a row per size (the verify size marked
// '*'), a column per case, and with NCCL variants the fastest NCCL.
func (g *grid) writeSection(w io.Writer, rep *Report, sec section) {
	variants := len(rep.NCCLVariants) > 0
	head := "mode " + sec.mode
	if len(g.dtypes) > 1 || sec.dtype != "" && sec.dtype != BF16 {
		head += ", " + cmp.Or(sec.dtype, orQ(rep.Run.Env.DType))
	}
	fmt.Fprintf(w, "\n%s\n", head)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := "size\t" + strings.Join(g.cols, "\t")
	if variants {
		hdr += "\tfastest NCCL"
	}
	fmt.Fprintf(tw, "%s\t\n", hdr)
	for _, s := range g.sizes {
		label := FormatBytes(s)
		if s == rep.Verify.Bytes {
			label += "*"
		}
		row := []string{label}
		best, hasBest := bestNCCL(g.all, s, sec.mode, sec.dtype, rep.Options.NVLink)
		for _, c := range g.cols {
			row = append(row, g.cellText(sec, c, s, best, hasBest))
		}
		if variants {
			if hasBest {
				row = append(row, fmt.Sprintf("%s %.1f", VariantName(best.Variant), best.MedianUS))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	tw.Flush()
}

// cellText is case c's cell at size s in sec: the median in microseconds
// with [p10-p90] (with the speed-up against best, the fastest correct
// NCCL, when hasBest, and "cap" for a capped case), or its status, "-"
// for none, INTERRUPTED for the case a signal cut short.
func (g *grid) cellText(sec section, c string, s int, best Result, hasBest bool) string {
	r, ok := g.cells[cell(sec, c, s)]
	if !ok {
		r, ok = g.wholeCase[c]
	}
	switch {
	case !ok:
		return "-"
	case cell(sec, c, s) == g.cut:
		return "INTERRUPTED"
	case r.Status() != "ok":
		return r.Status()
	case !r.Timed():
		return "ok (untimed)"
	}
	txt := fmt.Sprintf("%.1f [%.1f-%.1f]", r.MedianUS, r.P10US, r.P90US)
	if hasBest && r.Impl != NCCL {
		txt += fmt.Sprintf(" %.2fx", best.MedianUS/r.MedianUS)
	}
	if r.Cap {
		txt += " cap"
	}
	return txt
}

// writeCosts prints the predicted allreduce time per verify pass of each
// mode and case, with its speed-up against the baseline.
func (rep *Report) writeCosts(w io.Writer) {
	if len(rep.Costs) == 0 {
		return
	}
	v := rep.Verify
	fmt.Fprintf(w, "\npredicted allreduce time per EAGLE-3 verify pass: %d allreduces x %s (* above)\n", v.Count, v.Shape)
	for _, c := range rep.Costs {
		sp := ""
		if c.Speedup > 0 {
			sp = fmt.Sprintf("  %.2fx vs %s", c.Speedup, c.Baseline)
		}
		fmt.Fprintf(w, "  %-6s %-22s %8.1f us%s\n", c.Mode, caseName(Result{Impl: c.Impl, Branch: c.Branch, Islands: c.Islands, Variant: c.Variant}), c.TotalUS, sp)
	}
}

// writeChose prints, per NCCL run that logged its dispatch, the knobs NCCL
// took from the environment and what it chose at each size, and the NCCL
// variants not run.
func writeChose(w io.Writer, rep *Report) {
	type acct struct {
		name, env string
		t         NCCLTransport
	}
	accts := []acct{{name: NCCL, t: rep.Run.NCCL}}
	for _, vr := range rep.NCCLVariants {
		accts = append(accts, acct{VariantName(vr.Variant.Name), strings.Join(vr.Variant.Env, " "), vr.Run.NCCL})
	}
	head := false
	for _, a := range accts {
		if len(a.t.Chose) == 0 && a.env == "" {
			continue
		}
		if !head {
			fmt.Fprintln(w, "\nwhat NCCL chose (NCCL_DEBUG=INFO):")
			head = true
		}
		var took []string
		for _, k := range slices.Sorted(maps.Keys(a.t.Env)) {
			took = append(took, k+"="+a.t.Env[k])
		}
		line := "  " + a.name
		if a.env != "" {
			line += " (" + a.env + "; NCCL took " + cmp.Or(strings.Join(took, " "), "none of it") + ")"
		}
		var ch []string
		for _, c := range a.t.Chose {
			ch = append(ch, c.String())
		}
		if len(ch) > 0 {
			line += ": " + strings.Join(ch, ", ")
		}
		if a.t.Transports != nil {
			line += fmt.Sprintf("; %s, %d channels", strings.Join(a.t.Details, ", "), a.t.Channels)
		}
		fmt.Fprintln(w, line)
	}
	for _, s := range rep.VariantsSkipped {
		fmt.Fprintln(w, "  "+s)
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
func (rep *Report) Interrupted() bool {
	if rep.Run.Exit == ExitInterrupted {
		return true
	}
	for _, vr := range rep.NCCLVariants {
		if vr.Run.Exit == ExitInterrupted {
			return true
		}
	}
	return false
}

// Failed reports whether any case of the run was wrong, hung, errored,
// unsupported or missing; an interrupted run fails only by a case that
// reported so before the signal. An NCCL variant that failed does not fail
// the report (it is never a baseline; its findings say why).
func (rep *Report) Failed() bool {
	if len(rep.Missing) > 0 && !rep.Interrupted() {
		return true
	}
	for _, r := range rep.Run.Results {
		if s := r.Status(); s != "ok" && s != "skipped" && s != "n/a" {
			return true
		}
	}
	return rep.Run.Exit != "ok" && !rep.Interrupted()
}

// BestCustom returns the fastest custom case at the verify size in mode
// and the fastest correct NCCL's time there (of the variants that may be
// a baseline here, IsBaseline); ok is false when either is missing.
func (rep *Report) BestCustom(mode string) (best Cost, ncclUS float64, ok bool) {
	best.PerCallUS = math.Inf(1)
	for _, c := range rep.Costs {
		if c.Mode != mode {
			continue
		}
		if c.Impl == NCCL {
			if !IsBaseline(c.Variant, rep.Options.NVLink) {
				continue
			}
			if ncclUS == 0 || c.PerCallUS < ncclUS {
				ncclUS = c.PerCallUS
			}
		} else if c.PerCallUS < best.PerCallUS {
			best = c
		}
	}
	return best, ncclUS, ncclUS > 0 && !math.IsInf(best.PerCallUS, 1)
}

package doctor

import (
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/p2p"
	"github.com/arpatch/arpatch/harness/traffic"
)

// model is the traffic model of h's GPUs with the constants it uses
// (params).
func model(h *Host) (*traffic.Topology, traffic.Params, error) {
	p, _ := params(h)
	m, err := traffic.FromNVSMI(h.Topology, h.GPUs, p)
	return m, p, err
}

// params are the model's constants for h: traffic.Default ("calibrated"),
// with those a --p2p report measured in their place when it measured
// every judged GPU (p2p.ModelParams; none from a report that found
// corrupt data), and the list of those.
func params(h *Host) (traffic.Params, []p2p.Constant) {
	base := traffic.Default()
	if m := h.P2P; m != nil && m.Report != nil && m.Covers {
		return m.Report.ModelParams(base, m.File)
	}
	return base, nil
}

// ModelExpectation is expect:'s line for the GPUs gpus (in rank order)
// with topo among them (nvidia-smi topo -m), the constants those of rep
// (a host qualification report read from file; nil: calibrated) where it
// measured every one of them: what `arpatch tune allreduce --p2p FILE`
// prints beside what it measured. "" for fewer than 2 GPUs.
func ModelExpectation(gpus []nvsmi.GPU, topo *nvsmi.Topology, rep *p2p.Report, file string) string {
	h := &Host{GPUs: gpus, Topology: topo}
	if rep != nil {
		h.P2P = &Measured{File: file, Report: rep, Covers: rep.Covers(gpus)}
	}
	return expectation(h)
}

// constantsText says which constants the model used: "calibrated
// constants", or "constants measured: p2p.json (host, date): barrier_us
// 0.41 µs (calibrated 0.65), ...; not measured, adjusted to them:
// kernel_store_efficiency 1 (calibrated 0.8065), ...; the rest
// calibrated" (p2p.Constant.Derived tells the two apart).
func constantsText(h *Host) string {
	p, cs := params(h)
	if len(cs) == 0 {
		return p.Source + " constants"
	}
	var measured, derived []string
	for _, c := range cs {
		if c.Derived {
			derived = append(derived, c.String())
		} else {
			measured = append(measured, c.String())
		}
	}
	s := "constants " + p.Source + ": " + strings.Join(measured, ", ")
	if len(derived) > 0 {
		s += "; not measured, adjusted to them: " + strings.Join(derived, ", ")
	}
	return s + "; the rest calibrated"
}

// ranking is the model's estimates at the verify shape, fastest first:
// the custom algorithms the host's dispatch can run (pull1 and pull2
// under full NVLink, where the pushes are not built; the pushes too on
// the PCIe branch, island only where the host cuts into islands) and
// NCCL's best configuration over P2P (NCCL over SHM apart).
func ranking(m *traffic.Topology, p traffic.Params) []traffic.Estimate {
	var out []traffic.Estimate
	for _, e := range m.Compare(allreduce.VerifyBytes, p) {
		switch {
		case e.Algo == traffic.NCCLRingSHM || e.Algo == traffic.NCCLTree || e.Algo == traffic.NCCLRing:
			continue
		case m.FullNVLink() && e.Algo != traffic.Custom1Stage && e.Algo != traffic.Custom2Stage:
			continue
		case e.Algo == traffic.CustomIsland && e.IslandKind == "one island": // runs as push2
			continue
		}
		out = append(out, e)
	}
	nccl := m.NCCL(allreduce.VerifyBytes, p, false)
	i := 0
	for i < len(out) && out[i].US <= nccl.US {
		i++
	}
	return append(out[:i], append([]traffic.Estimate{nccl}, out[i:]...)...)
}

// label is an estimate as expect: lists it: "custom-island 5.7 µs
// (sockets 0,1,2,3/4,5,6,7)", "nccl-ring/LL 30.5 µs".
func label(e traffic.Estimate) string {
	s := fmt.Sprintf("%s %.1f µs", e.Name(), e.US)
	if e.Algo == traffic.CustomIsland {
		s += fmt.Sprintf(" (%s %s)", e.IslandKind, e.Islands)
	}
	return s
}

// expectation says what the traffic model expects at the verify shape at
// world size = the GPU count: every custom algorithm and NCCL's best
// configuration, fastest first, with the constants it used; on a PCIe
// host the schedule it suggests, its cut with NCCL and the environment
// that picks them; "" without a topology.
func expectation(h *Host) string {
	if h.Topology == nil || len(h.Topology.GPUs) < 2 {
		return ""
	}
	m, p, err := model(h)
	if err != nil {
		return "traffic model: " + err.Error()
	}
	var parts []string
	for _, e := range ranking(m, p) {
		parts = append(parts, label(e))
	}
	nccl := m.NCCL(allreduce.VerifyBytes, p, false)
	s := fmt.Sprintf("traffic model (an estimate, %s) at the verify shape (%s, world size %d): %s; NCCL's best configuration is %s (%s); NCCL over SHM, as in the published account, %.1f µs",
		constantsText(h), allreduce.FormatBytes(allreduce.VerifyBytes), m.N, strings.Join(parts, ", "), strings.TrimPrefix(nccl.Name(), "nccl-"), nccl.NCCLEnv(), m.NCCL(allreduce.VerifyBytes, p, true).US)
	if why := customAROff(h); why != "" {
		return s + "; custom allreduce does not start here: " + why + "; its figures hold only once that changes"
	}
	if m.FullNVLink() {
		return s + "; full NVLink: the PCIe dispatch is not used here"
	}
	sched, shm := m.Suggest(p, false), m.Suggest(p, true)
	return s + fmt.Sprintf("; PCIe dispatch fit: %s, custom allreduce up to %s against NCCL's best (%s against SHM NCCL); to run it: %s; measure with `arpatch tune allreduce --world-size %d`",
		steps(sched), allreduce.FormatBytes(sched.MaxBytes), allreduce.FormatBytes(shm.MaxBytes), strings.Join(sched.Env(), " "), m.N)
}

// steps says a schedule's steps in words: "push1 up to 672B, island on
// sockets (0,1,2,3/4,5,6,7) up to 3355424B (3.2M), then push2". A bound
// that is not a whole number of K, M or G is written in exact bytes (the
// figure the printed SGLANG_PCIE_CUSTOM_AR_ALGO carries), with a rounded
// reading beside it.
func steps(s traffic.Schedule) string {
	var parts []string
	for i, st := range s.Steps {
		w := traffic.EnvName(st.Algo)
		if st.Algo == traffic.CustomIsland && s.Islands != nil {
			w += fmt.Sprintf(" on %s (%s)", s.Islands.Kind, s.Islands.Islands)
		}
		switch {
		case st.Max > 0:
			w += " up to " + exactBytes(st.Max)
		case i == 0:
			w += " at every size"
		default:
			w = "then " + w
		}
		parts = append(parts, w)
	}
	return strings.Join(parts, ", ")
}

// exactBytes is allreduce.FormatBytes where that is exact ("40K", "4M",
// "672B"), else the byte count with a rounded reading: 3355424 is
// "3355424B (3.2M)", never "3276.8K", which no variable can be set to.
func exactBytes(n int) string {
	f := allreduce.FormatBytes(n)
	if back, err := allreduce.ParseBytes(f); err == nil && back == n {
		return f
	}
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dB (%.1fM)", n, float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%dB (%s)", n, f)
	}
}

// modelVerdict is the verdict's clause on a PCIe-only host, from the
// traffic model at the verify shape (as expect: lists it): which
// algorithm it expects to win, and whether all-to-all 1-stage is bound by
// contention (its busiest part a root complex, a switch uplink or the
// inter-socket link rather than its latency or one GPU's link).
func modelVerdict(h *Host) string {
	m, p, err := model(h)
	if err != nil {
		return "the traffic model cannot read this topology (" + err.Error() + ")"
	}
	best := ranking(m, p)[0]
	one := m.Estimate(traffic.Custom1Stage, allreduce.VerifyBytes, p)
	if best.Algo == traffic.Custom1Stage {
		return fmt.Sprintf("the traffic model expects custom 1-stage to win at the verify shape (%.1f µs; see expect)", best.US)
	}
	b := one.Bottleneck()
	if strings.HasSuffix(b, "root complex") || strings.Contains(b, "uplink") || strings.HasPrefix(b, "inter-socket") {
		return fmt.Sprintf("all-to-all 1-stage is contention-prone here (its reads queue at the %s): the traffic model expects %s to win at the verify shape (%.1f µs against 1-stage's %.1f; see expect)", b, best.Name(), best.US, one.US)
	}
	return fmt.Sprintf("the traffic model expects %s to win at the verify shape (%.1f µs against 1-stage's %.1f; see expect)", best.Name(), best.US, one.US)
}

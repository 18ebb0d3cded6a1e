package doctor

import (
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/traffic"
)

// VerifyBytes is the allreduce of one EAGLE-3 verify pass of the published
// account: 4 tokens x hidden 5120 x bf16 = 40 KiB.
const VerifyBytes = 4 * 5120 * 2

// expectation says which allreduce the traffic model expects to win at the
// verify shape at world size = the GPU count, and the PCIe dispatch's
// thresholds it suggests; "" without a topology.
func expectation(h *Host) string {
	if h.Topology == nil || len(h.Topology.GPUs) < 2 {
		return ""
	}
	p := traffic.Default()
	m, err := traffic.FromNVSMI(h.Topology, h.GPUs, p)
	if err != nil {
		return "traffic model: " + err.Error()
	}
	var parts []string
	for _, e := range m.Compare(VerifyBytes, p) {
		if e.Algo != traffic.NCCLRingSHM {
			parts = append(parts, fmt.Sprintf("%s %.1f µs", e.Algo, e.US))
		}
	}
	s := fmt.Sprintf("traffic model (an estimate) at the verify shape (%s, world size %d): %s; NCCL over SHM, as in the published account, %.1f µs",
		allreduce.FormatBytes(VerifyBytes), m.N, strings.Join(parts, ", "), m.NCCL(VerifyBytes, p, true).US)
	if why := customAROff(h); why != "" {
		return s + "; custom allreduce does not start here: " + why + "; its figures hold only once that changes"
	}
	if m.FullNVLink() {
		return s + "; full NVLink: the PCIe dispatch is not used here"
	}
	p2p, shm := m.Suggest(p, false), m.Suggest(p, true)
	return s + fmt.Sprintf("; PCIe dispatch fit: 1-stage up to %s, custom allreduce up to %s (%s against SHM NCCL); measure with `arpatch tune allreduce --world-size %d`",
		allreduce.FormatBytes(p2p.OneStageMax), allreduce.FormatBytes(p2p.MaxBytes), allreduce.FormatBytes(shm.MaxBytes), m.N)
}

// modelVerdict is the verdict's clause about 1-stage on a PCIe-only host,
// from the traffic model at the verify shape (NCCL over P2P, as the
// expectation line lists it): whether 1-stage is expected to win or to lose
// to contention, and to what.
func modelVerdict(h *Host) string {
	p := traffic.Default()
	m, err := traffic.FromNVSMI(h.Topology, h.GPUs, p)
	if err != nil {
		return "the traffic model cannot read this topology (" + err.Error() + ")"
	}
	var best traffic.Estimate
	var one float64
	for _, e := range m.Compare(VerifyBytes, p) {
		if e.Algo == traffic.NCCLRingSHM {
			continue
		}
		if best.Algo == "" {
			best = e
		}
		if e.Algo == traffic.Custom1Stage {
			one = e.US
		}
	}
	if best.Algo == traffic.Custom1Stage {
		return fmt.Sprintf("the traffic model expects custom 1-stage to win at the verify shape (%.1f µs; see expect)", best.US)
	}
	return fmt.Sprintf("all-to-all 1-stage is contention-prone here: the traffic model expects %s to win at the verify shape (%.1f µs against 1-stage's %.1f; see expect)", best.Algo, best.US, one)
}

package p2p

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/traffic"
)

// Constant is one traffic-model constant a report gives: measured by it,
// or (Derived) not measured but changed to keep the model consistent with
// what was (a calibrated copy-engine rate at the probe's kernel share, a
// line shifted through one measured point).
type Constant struct {
	Field      string  `json:"field"` // traffic.Params' JSON name: "barrier_us"
	Value      float64 `json:"value"`
	Calibrated float64 `json:"calibrated"` // the value it replaces
	Unit       string  `json:"unit"`       // "GB/s", "µs", "" (a share)
	From       string  `json:"from"`       // what in the report gives it
	Derived    bool    `json:"derived,omitempty"`
}

func (c Constant) String() string {
	return fmt.Sprintf("%s %s%s (calibrated %s)", c.Field, num(c.Value), unitSuffix(c.Unit), num(c.Calibrated))
}

// num prints x to 4 significant digits, without an exponent or trailing
// zeros: 0.7142, 129.7, 30, 1024.
func num(x float64) string {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	scale := math.Pow(10, 3-math.Floor(math.Log10(math.Abs(x))))
	return strconv.FormatFloat(math.Round(x*scale)/scale, 'f', -1, 64)
}

func unitSuffix(u string) string {
	if u == "" {
		return ""
	}
	return " " + u
}

// ModelParams returns base (the calibrated traffic.Params) with every
// constant this report measured in its place, the list of them, and
// Source naming the file (file: the path it was read from). Nothing is
// taken from a report that found corrupt data. The mapping, constant by
// constant (harness/traffic's Params says what each one is):
//
//   - pcie_efficiency: the median over the PCIe pairs of the lowest path
//     class measured (a single switch where there is one) of each pair's
//     write rate alone at its largest size over its link's nominal rate.
//     kernel_store_efficiency becomes 1: the probe's rates are kernel
//     stores and loads already, where the calibrated rates are a copy
//     engine's, which the model scales by 1/1.24; a copy-engine rate that
//     stays calibrated (root_complex_write_gbps, inter_socket_gbps) is
//     scaled by the calibrated share instead, so that what the model
//     charges for it does not change.
//   - nvlink_gbps: the NVLink pairs' median write rate over their NVLink
//     count and pcie_efficiency (the model scales NVLink by it); without
//     NVLink pairs, kept at its calibrated rate over the new efficiency.
//   - barrier_us: half the median flag round trip of the PCIe pairs: one
//     posted write and a poll, what the model's flag barrier is.
//   - root_complex_write_gbps and root_complex_read_gbps: the write and
//     read all-to-all of a socket (each GPU storing to, then loading from,
//     every other of its socket at once, as a push and 1-stage do): the
//     bytes that cross the root complex into the socket (pairs PHB or
//     NODE) over the slowest GPU's time; reads from the group of all GPUs
//     across the sockets where it has such pairs (the model charges a
//     read across the sockets at this rate too, and calibrated it on 8
//     GPUs across two sockets). These two are the read-against-write
//     asymmetry that decides pull against push on a host.
//   - inter_socket_gbps: the write all-to-all of all GPUs across the
//     sockets: the bytes that cross into the busier socket over the
//     slowest GPU's time.
//   - read_round4_us and read_round8_us: the round of dependent loads of
//     a PCIe group of 4 or of 8 GPUs all loading from every other at once;
//     one group of another size shifts both (the model interpolates
//     linearly in the peers), two fix the line.
//
// Each rate taken from a pattern is a lower bound where another part
// (a GPU's link, a switch uplink) was the busier; the model then charges
// that part, as the probe saw. Kept as calibrated, because the probe does
// not measure them: custom_fixed_us, nvlink_barrier_us and
// nvlink_read_us (fitted to the custom kernels' own timings, which hold
// more than a flag or a load), the NCCL constants and scratch_bytes.
func (rep *Report) ModelParams(base traffic.Params, file string) (traffic.Params, []Constant) {
	if len(rep.Corrupt) > 0 {
		return base, nil
	}
	m := modelFrom{rep: rep, p: base, base: base}
	m.links()
	m.patterns()
	if len(m.out) == 0 {
		return base, nil
	}
	m.p.Source = fmt.Sprintf("measured: %s (%s, %s)", file, cmp.Or(rep.Host.Name, "host unnamed"), rep.CreatedAt.Format("2006-01-02"))
	return m.p, m.out
}

type modelFrom struct {
	rep     *Report
	p, base traffic.Params
	out     []Constant
}

func (m *modelFrom) set(field string, dst *float64, v float64, unit, from string) {
	m.out = append(m.out, Constant{Field: field, Value: v, Calibrated: *dst, Unit: unit, From: from})
	*dst = v
}

// derive sets a constant the report did not measure (Constant.Derived).
func (m *modelFrom) derive(field string, dst *float64, v float64, unit, from string) {
	m.set(field, dst, v, unit, from)
	m.out[len(m.out)-1].Derived = true
}

// largest is the rate at the largest size of rs.
func largest(rs []Rate) (Rate, bool) {
	if len(rs) == 0 {
		return Rate{}, false
	}
	return slices.MaxFunc(rs, func(a, b Rate) int { return a.Bytes - b.Bytes }), true
}

func median(xs []float64) float64 { return stats.Quantile(xs, 0.5) }

// links sets the constants of the pairs measured alone.
func (m *modelFrom) links() {
	rep, base := m.rep, m.base
	// The PCIe pairs of the lowest class measured.
	best := traffic.SYS + 1
	for _, p := range rep.Pairs {
		if c, _, err := traffic.ParseClass(p.Link.Class); err == nil && p.Link.Kind == "PCIe" && p.Link.NominalGBps > 0 && len(p.Write) > 0 && c < best {
			best = c
		}
	}
	var eff, rtt []float64
	size := 0
	for _, p := range rep.Pairs {
		c, _, err := traffic.ParseClass(p.Link.Class)
		if err != nil || p.Link.Kind != "PCIe" {
			continue
		}
		if w, ok := largest(p.Write); ok && c == best && p.Link.NominalGBps > 0 {
			eff = append(eff, w.GBps.Median/p.Link.NominalGBps)
			size = w.Bytes
		}
		if p.FlagRTTUS != nil {
			rtt = append(rtt, p.FlagRTTUS.Median)
		}
	}
	kse := base.KernelStoreEfficiency
	if len(eff) > 0 {
		m.set("pcie_efficiency", &m.p.PCIeEfficiency, median(eff), "", fmt.Sprintf("the median over %d %s pairs of each one's writes alone at %s over its link's nominal rate", len(eff), best, allreduce.FormatBytes(size)))
		m.derive("kernel_store_efficiency", &m.p.KernelStoreEfficiency, 1, "", "the probe's rates are kernel stores and loads already")
	}
	var nv []float64
	for _, p := range rep.Pairs {
		_, links, err := traffic.ParseClass(p.Link.Class)
		if w, ok := largest(p.Write); ok && err == nil && p.Link.Kind == "NVLink" && links > 0 {
			nv = append(nv, w.GBps.Median/float64(links))
			size = w.Bytes
		}
	}
	switch {
	case len(nv) > 0:
		m.set("nvlink_gbps", &m.p.NVLinkGBps, median(nv)/m.p.PCIeEfficiency, "GB/s", fmt.Sprintf("the median over %d NVLink pairs of each one's writes alone at %s over its NVLink count, over pcie_efficiency %s (the model scales NVLink by it)", len(nv), allreduce.FormatBytes(size), num(m.p.PCIeEfficiency)))
	case len(eff) > 0:
		m.derive("nvlink_gbps", &m.p.NVLinkGBps, base.NVLinkGBps*base.PCIeEfficiency/m.p.PCIeEfficiency, "GB/s", "no NVLink pair measured: the calibrated rate, over the new pcie_efficiency")
	}
	if len(eff) > 0 {
		// The copy-engine rates the patterns do not measure keep what the
		// model charges for them (patterns() replaces them where measured).
		m.derive("root_complex_write_gbps", &m.p.RootComplexWriteGBps, base.RootComplexWriteGBps*kse, "GB/s", "not measured: the calibrated copy-engine rate x its kernel share "+num(kse))
		m.derive("inter_socket_gbps", &m.p.InterSocketGBps, base.InterSocketGBps*kse, "GB/s", "not measured: the calibrated copy-engine rate x its kernel share "+num(kse))
	}
	if len(rtt) > 0 {
		m.set("barrier_us", &m.p.BarrierUS, median(rtt)/2, "µs", fmt.Sprintf("half the median flag round trip of %d PCIe pairs (%s µs)", len(rtt)/2, num(median(rtt))))
	}
}

// replace sets a constant links() may have set already.
func (m *modelFrom) replace(field string, dst *float64, v float64, unit, from string) {
	for i, c := range m.out {
		if c.Field == field {
			m.out[i].Value, m.out[i].From, m.out[i].Derived = v, from, false
			*dst = v
			return
		}
	}
	m.set(field, dst, v, unit, from)
}

// patterns sets the constants of the all-to-all patterns.
func (m *modelFrom) patterns() {
	rep := m.rep
	t, ok := model(rep.Host.Topology, len(rep.Host.GPUs))
	if !ok {
		return
	}
	cls := t.Class
	rank := map[int]int{}
	for r, g := range rep.Host.GPUs {
		rank[g.Index] = r
	}
	_, sockets := t.Parts()
	find := func(kind, op string) (PatternReport, bool) {
		for _, p := range rep.Patterns {
			if p.Kind == kind && p.Op == op && p.Error == "" {
				return p, true
			}
		}
		return PatternReport{}, false
	}
	// into counts, per socket, the peers of each GPU in the pattern that
	// are in(c, own socket, peer's socket); it returns the busiest
	// socket's count and the pattern's pairs.
	into := func(p PatternReport, in func(c traffic.Class, same bool) bool) (int, int) {
		busiest := 0
		for _, s := range sockets {
			n := 0
			for _, a := range p.GPUs {
				for _, b := range p.GPUs {
					ra, rb := rank[a], rank[b]
					if a != b && slices.Contains(s, ra) && in(cls[ra][rb], slices.Contains(s, rb)) {
						n++
					}
				}
			}
			busiest = max(busiest, n)
		}
		return busiest, len(p.GPUs) * (len(p.GPUs) - 1)
	}
	crossesRC := func(c traffic.Class, same bool) bool { return c >= traffic.PHB && c != traffic.NV }
	rate := func(p PatternReport, n, pairs int) float64 {
		return p.AggregateGBps.Median * float64(n) / float64(pairs)
	}
	what := func(p PatternReport, n int, op string) string {
		return fmt.Sprintf("all-to-all %s, %s, %s per peer: %d %s of the root complex into the busiest socket over the slowest GPU's time", op, p.Name, allreduce.FormatBytes(p.BytesPerPeer), n, map[string]string{"write": "writes cross", "read": "reads cross"}[op])
	}
	if p, ok := find(KindSocket, OpWrite); ok && p.AggregateGBps != nil {
		if n, pairs := into(p, crossesRC); n > 0 {
			m.replace("root_complex_write_gbps", &m.p.RootComplexWriteGBps, rate(p, n, pairs), "GB/s", what(p, n, "write"))
		}
	}
	var readFrom []PatternReport
	if p, ok := find(KindCross, OpRead); ok {
		readFrom = append(readFrom, p)
	}
	if p, ok := find(KindSocket, OpRead); ok {
		readFrom = append(readFrom, p)
	}
	for _, p := range readFrom {
		if n, pairs := into(p, crossesRC); n > 0 && p.AggregateGBps != nil {
			m.set("root_complex_read_gbps", &m.p.RootComplexReadGBps, rate(p, n, pairs), "GB/s", what(p, n, "read"))
			break
		}
	}
	if p, ok := find(KindCross, OpWrite); ok && p.AggregateGBps != nil {
		if n, pairs := into(p, func(c traffic.Class, same bool) bool { return !same }); n > 0 {
			m.replace("inter_socket_gbps", &m.p.InterSocketGBps, rate(p, n, pairs), "GB/s",
				fmt.Sprintf("all-to-all write, %s, %s per peer: %d writes across the sockets into the busier one over the slowest GPU's time", p.Name, allreduce.FormatBytes(p.BytesPerPeer), n))
		}
	}
	m.rounds()
}

// rounds sets read_round4_us and read_round8_us from the PCIe groups'
// rounds of dependent loads (the largest group of each size).
func (m *modelFrom) rounds() {
	at := map[int]PatternReport{}
	for _, p := range m.rep.Patterns {
		if p.Op == OpReadLatency && p.RoundUS != nil && p.Error == "" && p.Kind != KindNVLink {
			at[len(p.GPUs)] = p
		}
	}
	from := func(p PatternReport) string {
		return fmt.Sprintf("the median round of dependent loads of %s, every GPU loading from every other at once", p.Name)
	}
	p4, ok4 := at[4]
	p8, ok8 := at[8]
	switch {
	case ok4 || ok8:
		if ok4 {
			m.set("read_round4_us", &m.p.ReadRound4US, p4.RoundUS.Median, "µs", from(p4))
		}
		if ok8 {
			m.set("read_round8_us", &m.p.ReadRound8US, p8.RoundUS.Median, "µs", from(p8))
		}
	case len(at) > 0:
		// One size other than 4 and 8: shift the line through it, keeping
		// its slope.
		n := slices.Max(slices.Collect(maps.Keys(at)))
		p := at[n]
		d := p.RoundUS.Median - m.p.ReadRoundUS(n)
		why := fmt.Sprintf("%s (%d GPUs), the calibrated line in the peers shifted through it by %+.2f µs", from(p), n, d)
		r4, r8 := m.p.ReadRound4US+d, m.p.ReadRound8US+d
		m.derive("read_round4_us", &m.p.ReadRound4US, r4, "µs", why)
		m.derive("read_round8_us", &m.p.ReadRound8US, r8, "µs", why)
	}
}

// Covers reports whether the report measured every GPU of gpus (by bus
// ID): only then do its constants describe the paths between them.
func (rep *Report) Covers(gpus []nvsmi.GPU) bool {
	have := map[string]bool{}
	for _, g := range rep.Host.GPUs {
		have[nvsmi.BusID(g.BusID)] = true
	}
	for _, g := range gpus {
		if !have[nvsmi.BusID(g.BusID)] {
			return false
		}
	}
	return true
}

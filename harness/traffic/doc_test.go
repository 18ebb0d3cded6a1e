package traffic_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/traffic"
)

// comma writes n with thousands separators: 3,342,336.
func comma(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// variants are the constants docs/pcie-dispatch.md asks "what if it were
// wrong" of, each with the root-complex read rate calibrated again
// unless the variant sets it.
var variants = []struct {
	name string
	set  func(*traffic.Params)
}{
	{"the defaults", func(*traffic.Params) {}},
	{"a PCIe barrier of 2.0 µs (a full round trip)", func(p *traffic.Params) { p.BarrierUS = 2.0 }},
	{"a PCIe barrier of 0.36 µs (the fastest write)", func(p *traffic.Params) { p.BarrierUS = 0.36 }},
	{"reads as fast as writes (no asymmetry)", func(p *traffic.Params) {
		p.RootComplexReadGBps = p.RootComplexWriteGBps * p.KernelStoreEfficiency
		p.ReadRound4US, p.ReadRound8US = p.BarrierUS, p.BarrierUS
	}},
	{"root complexes forwarding half (65 GB/s)", func(p *traffic.Params) { p.RootComplexWriteGBps = 65 }},
	{"the Gen4 inter-socket rate (38.8 GB/s)", func(p *traffic.Params) { p.InterSocketGBps = 4 * 9.70 }},
	{"kernel stores at copy-engine rate", func(p *traffic.Params) { p.KernelStoreEfficiency = 1 }},
}

// docLines are the figures docs/pcie-dispatch.md states, each derived
// from the model, in the form the page writes them.
func docLines(t *testing.T) []string {
	p := traffic.Default()
	ref := traffic.RefHost(p)
	const s = verify
	var want []string
	row := func(e traffic.Estimate) string {
		kind := fmt.Sprintf("%d barriers (%s)", len(e.Barriers), strings.Join(e.Barriers, ", "))
		switch {
		case e.NCCLSteps > 0:
			kind = fmt.Sprintf("%d NCCL steps", e.NCCLSteps)
		case e.ReadRounds > 0:
			kind += fmt.Sprintf(", %d read round", e.ReadRounds)
			if e.ReadRounds > 1 {
				kind += "s"
			}
		}
		return fmt.Sprintf("| %s | %s | %s | %.2f | %s |", e.Name(), comma(int(e.BytesPerRank)), kind, e.US, e.Bottleneck())
	}
	for _, e := range ref.Compare(s, p) {
		want = append(want, row(e))
	}
	// The constants.
	want = append(want,
		fmt.Sprintf("| `RootComplexReadGBps` | %.3f GB/s |", p.RootComplexReadGBps),
		fmt.Sprintf("gives R = %.3f GB/s", p.RootComplexReadGBps),
		fmt.Sprintf("so 1-stage took %.1f µs", traffic.Anchor1StageUS))
	// The recorded hosts at the verify shape.
	for _, h := range []struct{ name, dir string }{{"pcie8", "../doctor/testdata/pcie8"}, {"switch4", "testdata/switch4"}} {
		m := load(t, h.dir)
		var parts []string
		for _, e := range m.Compare(s, p) {
			if e.Algo == traffic.CustomIsland && e.IslandKind == "one island" {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %.1f", e.Name(), e.US))
		}
		want = append(want, h.name+": "+strings.Join(parts, ", ")+" µs")
	}
	// FlashInfer.
	fi := flashInferHost(t)
	c := traffic.IslandChoice{Kind: "sockets", Islands: allreduce.Islands{{0, 1, 2, 3}, {4, 5, 6, 7}}}
	big := p
	big.ScratchBytes = 1 << 30
	for _, pt := range []struct {
		label string
		bytes int
		us    float64
	}{{"12 KiB", 12 << 10, 5.3}, {"96 KiB", 96 << 10, 15.3}, {"384 KiB", 384 << 10, 34.6}, {"100 MiB", 100 << 20, 8500}} {
		k, is := fi.EstimateFlashInferTP8Ring(c, pt.bytes, big), fi.EstimateIslands(c, pt.bytes, big)
		want = append(want, fmt.Sprintf("| %s | %.1f | %.1f (%+.0f%%) | %.1f (%+.0f%%) |", pt.label, pt.us, k.US, 100*(k.US/pt.us-1), is.US, 100*(is.US/pt.us-1)))
	}
	// The H200 fixtures.
	for _, f := range []struct {
		m      *traffic.Topology
		report string
	}{{load(t, "../doctor/testdata/h200x2"), "h200x2-ws2-report.json"}, {matrix(t, 4, func(int, int) string { return "NV18" }), "h200x4-ws4-report.json"}} {
		got := h200Medians(t, f.report)
		want = append(want, fmt.Sprintf("%dx H200: 1-stage %.1f against %.1f µs, 2-stage %.1f against %.1f, NCCL %.1f against %.1f", f.m.N,
			f.m.Estimate(traffic.Custom1Stage, s, p).US, got[allreduce.Custom1Stage], f.m.Estimate(traffic.Custom2Stage, s, p).US, got[allreduce.Custom2Stage],
			f.m.NCCL(s, p, false).US, got[allreduce.NCCL]))
	}
	// NCCL's configurations on the reference host.
	for _, n := range []int{4096, s, 1 << 20, 8 << 20} {
		cells := []string{allreduce.FormatBytes(n)}
		for _, a := range []string{traffic.NCCLRing, traffic.NCCLTree} {
			for _, pr := range []string{"LL", "Simple"} {
				cells = append(cells, fmt.Sprintf("%.1f", ref.NCCLVariant(a, pr, n, p).US))
			}
		}
		best := ref.NCCL(n, p, false)
		cells = append(cells, best.Name())
		want = append(want, "| "+strings.Join(cells, " | ")+" |")
	}
	// The shipped defaults.
	sched := ref.Suggest(p, false)
	x := sched.Steps[0].Max
	isl := func(n int) traffic.Estimate { return ref.EstimateIslands(*sched.Islands, n, p) }
	next := x + 64
	want = append(want,
		fmt.Sprintf("`kPcieAutoPush1MaxBytes` = %d", x),
		fmt.Sprintf("`SGLANG_PCIE_CUSTOM_AR_MAX_BYTES` = %d", sched.MaxBytes),
		fmt.Sprintf("at %s B push1 takes %.3f µs and island %.3f; at %s B, %.3f against %.3f", comma(x), ref.Estimate(traffic.CustomPush1, x, p).US, isl(x).US,
			comma(next), ref.Estimate(traffic.CustomPush1, next, p).US, isl(next).US),
		fmt.Sprintf("8 x %s + %s = %s bytes", comma(sched.MaxBytes/8), comma(sched.MaxBytes), comma(ref.Estimate(traffic.CustomPush2, sched.MaxBytes, p).Scratch)),
		fmt.Sprintf("the next size scanned, %s B, needs %s", comma(sched.MaxBytes+65536), comma(ref.Estimate(traffic.CustomPush2, sched.MaxBytes+65536, p).Scratch)),
		fmt.Sprintf("above %s B it needs more than %s bytes", comma(lastFit(isl)), comma(p.ScratchBytes)))
	// At world size 6 a push2 slot is S/6 rounded up to whole 16-byte
	// packs, so push2 stops fitting just below the cut.
	six := matrix(t, 6, func(int, int) string { return "PIX" })
	push2 := func(n int) traffic.Estimate { return six.Estimate(traffic.CustomPush2, n, p) }
	cap6 := lastFit(push2)
	need := func(n int) string {
		sc := push2(n).Scratch
		return fmt.Sprintf("6 x %s + %s = %s", comma((sc-n)/6), comma(n), comma(sc))
	}
	want = append(want, fmt.Sprintf("world size 6 push2 fits up to %s B (%s bytes; at the cut, %s)", comma(cap6), need(cap6), need(sched.MaxBytes)),
		fmt.Sprintf("the last %d bytes below the cut", sched.MaxBytes-cap6))
	for _, n := range []int{4096, s, 256 << 10, 1 << 20, 3 << 20} {
		a, nc := ref.Auto(sched, n, p), ref.NCCL(n, p, false)
		want = append(want, fmt.Sprintf("| %s | %s %.1f | %s %.1f |", allreduce.FormatBytes(n), a.Name(), a.US, nc.Name(), nc.US))
	}
	a, nc := ref.Auto(sched, s, p), ref.NCCL(s, p, false)
	two := ref.Estimate(traffic.Custom2Stage, s, p)
	best := ref.Compare(s, p)[0]
	isl40 := isl(s)
	link, _, sys := rates(p)
	want = append(want, fmt.Sprintf("122 x (%.1f - %.1f) µs = %.1f ms", nc.US, a.US, 122*(nc.US-a.US)/1000),
		fmt.Sprintf("122 x (%.1f - %.1f) µs = %.1f ms more", two.US, nc.US, 122*(two.US-nc.US)/1000),
		fmt.Sprintf("The best push takes %.2f µs, %.1fx faster than the model's best NCCL", best.US, nc.US/best.US),
		fmt.Sprintf("0.7 µs + 4 barriers of %.2f + 2 x S/%.1f GB/s", p.BarrierUS, link/1e3),
		fmt.Sprintf("+ S/%.1f GB/s (the partner step, 4 x S/4 across the sockets): %.2f µs", sys/1e3, isl40.US),
		fmt.Sprintf("in the model it is %.2f µs, %.0f%% of island's %.2f µs", p.BarrierUS, 100*p.BarrierUS/isl40.US, isl40.US),
		fmt.Sprintf("where the model's root complex puts writes %.0f times above reads", p.RootComplexWriteGBps*p.KernelStoreEfficiency/p.RootComplexReadGBps))
	for _, h := range []struct {
		name string
		m    *traffic.Topology
	}{
		{"reference host", ref}, {"pcie8", load(t, "../doctor/testdata/pcie8")}, {"switch4", load(t, "testdata/switch4")},
		{"nvpairs8", load(t, "../doctor/testdata/nvpairs8")}, {"FlashInfer's host", flashInferHost(t)},
	} {
		sh := shipped(h.m, x, sched.MaxBytes)
		a, nc := h.m.Auto(sh, s, p), h.m.NCCL(s, p, false)
		want = append(want, fmt.Sprintf("| %s | %s %.1f | %s %.1f |", h.name, a.Name(), a.US, nc.Name(), nc.US))
	}
	// What would change the choice.
	varied := map[string]*traffic.Topology{}
	params := map[string]traffic.Params{}
	for _, v := range variants {
		q := p
		v.set(&q)
		if !strings.HasPrefix(v.name, "reads") {
			q.RootComplexReadGBps = traffic.Calibrate(q)
		}
		r := traffic.RefHost(q)
		varied[v.name], params[v.name] = r, q
		best := r.Compare(s, q)[0]
		sc := r.Suggest(q, false)
		want = append(want, fmt.Sprintf("| %s | %s %.1f | %.1f | %.1f | %.1f | `%s`, %s |", v.name, best.Name(), best.US,
			r.Estimate(traffic.Custom2Stage, s, q).US, r.Estimate(traffic.Custom1Stage, s, q).US, r.NCCL(s, q, false).US, sc.Algo(), comma(sc.MaxBytes)))
	}
	est := func(v, algo string) float64 { return varied[v].Estimate(algo, s, params[v]).US }
	half, gen4, ce := variants[4].name, variants[5].name, variants[6].name
	want = append(want,
		fmt.Sprintf("halved, island leads at %.1f µs, still %.1fx faster than NCCL", est(half, traffic.CustomIsland), varied[half].NCCL(s, params[half], false).US/est(half, traffic.CustomIsland)),
		fmt.Sprintf("island leads (%.1f µs against push2's %.1f)", est(gen4, traffic.CustomIsland), est(gen4, traffic.CustomPush2)),
		fmt.Sprintf("at copy-engine rate push2 takes %.1f µs at 40 KiB", est(ce, traffic.CustomPush2)))
	return want
}

// TestDocMatchesModel derives every figure docs/pcie-dispatch.md states
// from the model, so the page cannot drift from the code.
func TestDocMatchesModel(t *testing.T) {
	b, err := os.ReadFile("../../docs/pcie-dispatch.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	for _, w := range docLines(t) {
		if !strings.Contains(doc, w) {
			t.Errorf("docs/pcie-dispatch.md does not say %q (the model's figure)", w)
		}
	}
	// The README's example of doctor's environment on the reference host.
	b, err = os.ReadFile("../../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	p := traffic.Default()
	s := traffic.RefHost(p).Suggest(p, false)
	if w := "SGLANG_PCIE_CUSTOM_AR_ALGO=" + s.Algo() + " SGLANG_PCIE_CUSTOM_AR_ISLANDS=" + s.Islands.Islands.String(); !strings.Contains(strings.Join(strings.Fields(string(b)), " "), w) {
		t.Errorf("docs/usage.md does not say %q (doctor's environment on the reference host)", w)
	}
	// Its account of auto: the schedule stated, island's fall-through
	// where its scratch runs out, the cut and what sets it.
	usage := strings.Join(strings.Fields(string(b)), " ")
	for _, w := range []string{
		"`" + s.Algo() + "` is auto's on that host",
		fmt.Sprintf("island to push2, above %s bytes on two islands of four", comma(s.Steps[1].Max)),
		fmt.Sprintf("push1 up to %s bytes, then island", comma(s.Steps[0].Max)),
		fmt.Sprintf("default %d bytes, the traffic model's cut on its reference host", s.MaxBytes),
		"so the scratch, not NCCL, sets it",
	} {
		if !strings.Contains(usage, w) {
			t.Errorf("docs/usage.md does not say %q (the model's auto and cut)", w)
		}
	}
}

// lastFit is the largest size the scan tries (multiples of 16 bytes up to
// 8 MiB) at which e's algorithm fits the scratch.
func lastFit(e func(int) traffic.Estimate) int {
	last := 0
	for n := 16; n <= 8<<20; n += 16 {
		if !e(n).Fits {
			break
		}
		last = n
	}
	return last
}

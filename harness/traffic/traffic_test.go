package traffic_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/traffic"
)

// load builds the model's topology from a recorded `nvidia-smi topo -m`
// and `--query-gpu` pair.
func load(t *testing.T, dir string) *traffic.Topology {
	t.Helper()
	topo, err := os.ReadFile(filepath.Join(dir, "topo-m.txt"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := os.ReadFile(filepath.Join(dir, "query-gpu.csv"))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := nvsmi.ParseTopoMatrix(string(topo))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := nvsmi.ParseQueryGPU(string(q))
	if err != nil {
		t.Fatal(err)
	}
	m, err := traffic.FromNVSMI(tm, gpus, traffic.Default())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func resource(e traffic.Estimate, name string) traffic.Resource {
	for _, r := range e.Resources {
		if r.Name == name {
			return r
		}
	}
	return traffic.Resource{}
}

// TestCalibration: the parameters reproduce the anchors they were fitted
// to, on the reference host.
func TestCalibration(t *testing.T) {
	p := traffic.Default()
	// 38 against 54 tok/s at accept length 3, 122 allreduces per pass.
	if !near(traffic.Anchor1StageUS, 391.7, 0.05) {
		t.Errorf("Anchor1StageUS = %.2f, want 391.7", traffic.Anchor1StageUS)
	}
	// 24 reads of 42 KB into each socket's root complex in (391.7 - 0.7 -
	// 3 x 2) µs.
	if want := 24 * 42000 / ((traffic.Anchor1StageUS - 6.7) * 1e3); !near(p.RootComplexReadGBps, want, 1e-9) || !near(want, 2.618, 0.001) {
		t.Errorf("root complex reads %.4f GB/s, want %.4f (2.618)", p.RootComplexReadGBps, want)
	}
	ref := traffic.RefHost(p)
	if e := ref.Estimate(traffic.Custom1Stage, traffic.AnchorBytes, p); !near(e.US, traffic.Anchor1StageUS, 0.01) {
		t.Errorf("forced 1-stage at 42 KB on the reference host: %.2f µs, want %.2f", e.US, traffic.Anchor1StageUS)
	}
	if e := ref.NCCL(traffic.AnchorBytes, p, true); !near(e.US, 200+2.73, 0.1) {
		// 5.5 + 14 x 13.89 plus the ring's bytes over the busiest link.
		t.Errorf("NCCL over SHM at 42 KB: %.2f µs, want ~202.7 (the published ~200)", e.US)
	}
	if e := ref.NCCL(32<<10, p, false); !near(e.US, 5.5+14*1.55+3*32768/54e3, 0.01) || !near(e.US, 29.0, 0.05) {
		// The chain: 3 x 32K written into a socket through its root complex
		// at one link's 54 GB/s. The ~25 µs class of a well-tuned NCCL.
		t.Errorf("NCCL over P2P at 32K: %.2f µs, want 29.0", e.US)
	}
}

// TestEightGPUsTwoSwitchesPerSocket is the recorded 8x RTX PRO 6000 host
// (harness/doctor/testdata/pcie8): 4 PCIe switches of 2 GPUs, two per
// socket, two sockets; GPU2's link trained at gen 1 and GPU5's at x8.
func TestEightGPUsTwoSwitchesPerSocket(t *testing.T) {
	p := traffic.Default()
	m := load(t, "../doctor/testdata/pcie8")
	if m.N != 8 || m.FullNVLink() || !near(m.LinkGBps[0], 54, 0.001) || !near(m.LinkGBps[2], 54.0/16/3.938*16*0.25, 0.001) || !near(m.LinkGBps[5], 27, 0.001) {
		t.Fatalf("topology %+v", m.LinkGBps)
	}
	const s = 40960 // the verify shape: 4 tokens x hidden 5120 x bf16
	one := m.Estimate(traffic.Custom1Stage, s, p)
	two := m.Estimate(traffic.Custom2Stage, s, p)
	// Bytes in per rank: (N-1)·S against 2(N-1)/N·S, 4x less at N = 8.
	if one.BytesPerRank != 7*s || two.BytesPerRank != 7*s/4 || one.FlowsPerRank != 7 || two.FlowsPerRank != 7 {
		t.Errorf("per rank: 1-stage %.0f B in %d flows, 2-stage %.0f B in %d", one.BytesPerRank, one.FlowsPerRank, two.BytesPerRank, two.FlowsPerRank)
	}
	// Concurrent transfers: 2 GPUs x 6 outside peers through each switch
	// uplink; 4 GPUs x 6 peers beyond their switch into each socket's root
	// complex (2 over NODE, 4 over SYS); 4 x 4 over the inter-socket link.
	sw := resource(one, "switch GPU0,GPU1 uplink")
	rc := resource(one, "socket GPU0,GPU1,GPU2,GPU3 root complex")
	sys := resource(one, "inter-socket link into GPU0,GPU1,GPU2,GPU3")
	if sw.Flows != 12 || sw.Bytes != 12*s || rc.Flows != 24 || rc.Bytes != 24*s || sys.Flows != 16 || sys.Bytes != 16*s {
		t.Errorf("1-stage: switch %+v, root complex %+v, inter-socket %+v", sw, rc, sys)
	}
	if got := resource(two, "socket GPU0,GPU1,GPU2,GPU3 root complex"); got.Flows != 24 || got.Bytes != 24*s/4 {
		t.Errorf("2-stage root complex %+v, want 24 flows of S/4", got)
	}
	// Latencies: round trips plus the root complex, the bottleneck of both.
	rcUS := func(b float64) float64 { return b / (p.RootComplexReadGBps * 1e3) }
	if !near(one.US, 0.7+3*2+rcUS(24*s), 1e-6) || !near(two.US, 0.7+5*2+rcUS(6*s), 1e-6) || one.Bottleneck() != rc.Name {
		t.Errorf("1-stage %.2f µs (%s), 2-stage %.2f µs", one.US, one.Bottleneck(), two.US)
	}
	if !near(one.US, 382.2, 0.1) || !near(two.US, 104.6, 0.1) {
		t.Errorf("1-stage %.1f µs, 2-stage %.1f µs; want 382.2 and 104.6", one.US, two.US)
	}
	// The ring: GPU2's gen-1 link carries 2(N-1)/N·S in.
	ring := m.Estimate(traffic.NCCLRing, s, p)
	if got := resource(ring, "GPU2 link"); got.Flows != 1 || got.Bytes != 1.75*s || ring.Bottleneck() != "latency" || !near(ring.US, 5.5+14*1.55+1.75*s/(m.LinkGBps[2]*1e3), 1e-6) {
		t.Errorf("ring %+v", ring)
	}
	order := []string{}
	for _, e := range m.Compare(s, p) {
		order = append(order, e.Algo)
	}
	// GPU2's gen-1 link slows the ring (1.75·S through it) less than the
	// chain (2·S): ring first.
	if strings.Join(order, " ") != "nccl-ring nccl-tree custom-2stage nccl-ring-shm custom-1stage" {
		t.Errorf("order at 40K: %v", order)
	}
	// The thresholds: 1-stage only below ~600 B; custom beats a P2P NCCL
	// only below ~9 KB, and the published SHM NCCL up to ~103 KB (NCCL's
	// ring through GPU2's narrowed link widens custom's region; on the
	// reference host with every link at x16 gen 5: 7 KB and 83 KB).
	if th := m.Suggest(p, false); th.OneStageMax != 576 || th.MaxBytes != 9216 {
		t.Errorf("against P2P NCCL: %+v", th)
	}
	if th := m.Suggest(p, true); th.OneStageMax != 576 || th.MaxBytes != 105472 {
		t.Errorf("against SHM NCCL: %+v", th)
	}
	ref := traffic.RefHost(p)
	if a, b := ref.Suggest(p, false), ref.Suggest(p, true); a.OneStageMax != 576 || a.MaxBytes != 7360 || b.MaxBytes != 84992 {
		t.Errorf("reference host: %+v %+v", a, b)
	}
}

// TestFourGPUsOneSwitch: no root complex on the path, so 1-stage's extra
// bytes only cost link time, and it wins up to ~140 KiB.
func TestFourGPUsOneSwitch(t *testing.T) {
	p := traffic.Default()
	m := load(t, "testdata/switch4")
	one := m.Estimate(traffic.Custom1Stage, 40960, p)
	two := m.Estimate(traffic.Custom2Stage, 40960, p)
	if len(one.Resources) != 4 || !strings.HasSuffix(one.Resources[0].Name, "link") || one.Resources[0].Bytes != 3*40960 || two.Resources[0].Bytes != 1.5*40960 {
		t.Errorf("resources: %+v / %+v", one.Resources, two.Resources)
	}
	if !near(one.US, 0.7+6+3*40960/54e3, 1e-6) || !near(two.US, 0.7+10+1.5*40960/54e3, 1e-6) {
		t.Errorf("1-stage %.2f, 2-stage %.2f µs", one.US, two.US)
	}
	// 1-stage = 2-stage where 4 µs of round trips equal 1.5·S/54 GB/s: S = 144 KB.
	th := m.Suggest(p, false)
	if th.OneStageMax != 143360 || th.MaxBytes != 8<<20 {
		t.Errorf("suggested %+v, want 1-stage up to 140K, custom up to 8M", th)
	}
}

// TestH200NVLink checks the model against arpatch's own measurements on
// NVLink H200s (CUDA graphs, the verify shape; harness/allreduce/testdata):
// within 25% for each algorithm, same order. It cannot show PCIe
// contention: there is none on these hosts.
func TestH200NVLink(t *testing.T) {
	p := traffic.Default()
	m2 := load(t, "../doctor/testdata/h200x2")
	nv18 := func(n int) [][]string {
		l := make([][]string, n)
		for i := range l {
			l[i] = make([]string, n)
			for j := range l[i] {
				l[i][j] = "NV18"
				if i == j {
					l[i][j] = "X"
				}
			}
		}
		return l
	}
	m4, err := traffic.New(nv18(4), nil, nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if !m2.FullNVLink() || !m4.FullNVLink() || m2.N != 2 {
		t.Fatal("not full NVLink")
	}
	for _, c := range []struct {
		m      *traffic.Topology
		report string
	}{{m2, "h200x2-ws2-report.json"}, {m4, "h200x4-ws4-report.json"}} {
		b, err := os.ReadFile("../allreduce/testdata/" + c.report)
		if err != nil {
			t.Fatal(err)
		}
		var rep allreduce.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		measured := map[string]float64{}
		for _, r := range rep.Run.Results {
			if r.Bytes == 40960 && r.Mode == "graph" && r.Timed() && (r.Branch == "pcie" && r.Impl != allreduce.CustomAuto || r.Impl == allreduce.NCCL) {
				measured[r.Impl] = r.MedianUS
			}
		}
		model := map[string]float64{
			allreduce.NCCL:         c.m.NCCL(40960, p, false).US,
			allreduce.Custom1Stage: c.m.Estimate(traffic.Custom1Stage, 40960, p).US,
			allreduce.Custom2Stage: c.m.Estimate(traffic.Custom2Stage, 40960, p).US,
		}
		for alg, want := range measured {
			if got := model[alg]; math.Abs(got-want)/want > 0.25 {
				t.Errorf("%s %s: model %.1f µs, measured %.1f", c.report, alg, got, want)
			}
		}
		if len(measured) != 3 || !(model[allreduce.Custom1Stage] < model[allreduce.Custom2Stage] && model[allreduce.Custom2Stage] < model[allreduce.NCCL]) ||
			!(measured[allreduce.Custom1Stage] < measured[allreduce.Custom2Stage] && measured[allreduce.Custom2Stage] < measured[allreduce.NCCL]) {
			t.Errorf("%s: measured %v, model %v: want 1-stage < 2-stage < NCCL in both", c.report, measured, model)
		}
	}
}

func TestBadTopology(t *testing.T) {
	p := traffic.Default()
	for _, c := range []struct {
		links [][]string
		want  string
	}{
		{[][]string{{"X", "PIX"}}, "GPU0 has 2 cells for 1 GPUs"},
		{[][]string{{"X", "QPI"}, {"QPI", "X"}}, `topology cell "QPI"`},
		{[][]string{{"PIX", "PIX"}, {"PIX", "X"}}, `GPU0/GPU0 is "PIX"`},
		{[][]string{{"X", "NVx"}, {"NVx", "X"}}, "NV# wants a link count"},
	} {
		if _, err := traffic.New(c.links, nil, nil, p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.links, err, c.want)
		}
	}
}

// TestDocMatchesModel derives the figures docs/pcie-dispatch.md states
// from the model, so the page cannot drift from the code: the calibration,
// the verify-shape table on the reference host, the recorded pcie8 host
// (what doctor prints there), 4 GPUs on one switch, and the suggested
// thresholds.
func TestDocMatchesModel(t *testing.T) {
	b, err := os.ReadFile("../../docs/pcie-dispatch.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	p := traffic.Default()
	const s = 40960
	comma := func(v float64) string {
		n := int(v)
		if n < 1000 {
			return strconv.Itoa(n)
		}
		return fmt.Sprintf("%d,%03d", n/1000, n%1000)
	}
	var want []string
	ref := traffic.RefHost(p)
	for _, r := range []struct{ label, algo string }{
		{"NCCL chain (P2P)", traffic.NCCLTree}, {"NCCL ring (P2P)", traffic.NCCLRing}, {"custom 2-stage", traffic.Custom2Stage},
		{"NCCL ring over SHM", traffic.NCCLRingSHM}, {"custom 1-stage", traffic.Custom1Stage},
	} {
		e := ref.Estimate(r.algo, s, p)
		want = append(want, fmt.Sprintf("| %s | %s |", r.label, comma(e.BytesPerRank)), fmt.Sprintf("| %d | %.1f |", e.RoundTrips, e.US))
	}
	want = append(want,
		fmt.Sprintf("so 1-stage took %.1f µs", traffic.Anchor1StageUS),
		fmt.Sprintf("gives R = %.3f GB/s", p.RootComplexReadGBps),
		fmt.Sprintf("| root-complex read bandwidth | %.3f GB/s |", p.RootComplexReadGBps))
	pcie8 := load(t, "../doctor/testdata/pcie8")
	est := func(m *traffic.Topology, a string) float64 { return m.Estimate(a, s, p).US }
	want = append(want,
		fmt.Sprintf("(2-stage %.1f µs, 1-stage %.1f:", est(pcie8, traffic.Custom2Stage), est(pcie8, traffic.Custom1Stage)),
		fmt.Sprintf("ring %.1f µs, chain %.1f, ring over SHM %.1f.", est(pcie8, traffic.NCCLRing), est(pcie8, traffic.NCCLTree), est(pcie8, traffic.NCCLRingSHM)))
	sw := load(t, "testdata/switch4")
	want = append(want, fmt.Sprintf("1-stage %.1f µs, 2-stage %.1f, NCCL ring %.1f at 40 KiB; 1-stage wins up to %s,",
		est(sw, traffic.Custom1Stage), est(sw, traffic.Custom2Stage), est(sw, traffic.NCCLRing), fmt.Sprintf("%d KiB", sw.Suggest(p, false).OneStageMax/1024)))
	p2p, shm := ref.Suggest(p, false), ref.Suggest(p, true)
	kb := func(n int) string { return strconv.FormatFloat(float64(n)/1024, 'f', -1, 64) }
	want = append(want,
		fmt.Sprintf("| against NCCL over P2P (~25 µs class) | %d B | %.1f KB |", p2p.OneStageMax, float64(p2p.MaxBytes)/1024),
		fmt.Sprintf("| against NCCL over SHM (the published ~200 µs) | %d B | %s KB |", shm.OneStageMax, kb(shm.MaxBytes)))
	for _, w := range want {
		if !strings.Contains(doc, w) {
			t.Errorf("docs/pcie-dispatch.md does not say %q (the model's figure)", w)
		}
	}
}

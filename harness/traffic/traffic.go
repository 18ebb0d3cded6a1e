// Package traffic is a PCIe traffic model of allreduce on one host: for
// each algorithm (NCCL ring and tree, custom 1-stage and 2-stage) it counts
// the bytes each rank moves, the concurrent transfers through each PCIe
// switch uplink, each socket's root complex and the inter-socket link, and
// the dependent round trips, from the host's topology (`nvidia-smi topo -m`
// PIX/PXB/PHB/NODE/SYS/NV#, and each GPU's link generation and width), and
// turns them into an estimated latency in µs.
//
// It is an estimate, not a measurement: it cannot see NCCL's transport
// choice (it gives P2P and, apart, the SHM figure the published account
// implies), read-completion credits, IOMMU translation, switch firmware,
// clocks or kernel launch gaps. Its parameters are calibrated on the
// published account's figures (Anchor*: NCCL ~200 µs per ~42 KB allreduce
// on 8 PCIe GPUs; forced 1-stage at 38 tok/s against NCCL's 54), on
// FlashInfer's single-hop P2P rate at Gen5 (53.2-55.0 GB/s,
// flashinfer-ai/flashinfer#4870) and on arpatch's own H200 measurements
// (docs/allreduce-h200.md); docs/pcie-dispatch.md gives the arithmetic and
// the thresholds the pcie series ships with. `arpatch tune allreduce`
// measures what the model only estimates.
//
// Algorithms, as sgl-kernel and NCCL run them:
//   - custom 1-stage: every rank reads the whole buffer from each of its
//     N-1 peers at once ((N-1)·S bytes in per rank), between two barriers.
//     Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (cross_device_reduce_1stage).
//   - custom 2-stage: reduce-scatter then all-gather, each rank reading S/N
//     from every peer per stage (2·(N-1)/N·S in per rank), three barriers.
//     Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (cross_device_reduce_2stage).
//   - NCCL ring: 2(N-1) steps, each rank writing 2(N-1)/N·S to its ring
//     successor; NCCL tree: within one host a chain, S each way per link.
//
// Custom kernels pull from peers (P2P reads); NCCL's P2P transport pushes
// (writes). Reads that cross a CPU root complex are what collapses under
// contention, so the model charges them at a calibrated effective
// bandwidth, shared by every such read into a socket.
package traffic

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
)

// Class is the path between two GPUs, from nearest to farthest.
type Class int

// The classes of `nvidia-smi topo -m`'s legend.
const (
	Self Class = iota
	NV         // a bonded set of NVLinks
	PIX        // at most one PCIe bridge (one switch)
	PXB        // several PCIe bridges, no host bridge
	PHB        // through a PCIe host bridge (the CPU)
	NODE       // between host bridges within a NUMA node
	SYS        // across the SMP interconnect (QPI/UPI)
)

var classNames = []string{"X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"}

func (c Class) String() string { return classNames[c] }

// ParseClass reads one cell of `nvidia-smi topo -m`: "X", "NV18", "PIX",
// ... It returns the class and, for NV#, the number of links.
func ParseClass(s string) (Class, int, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutPrefix(s, "NV"); ok {
		k, err := strconv.Atoi(n)
		if err != nil || k <= 0 {
			return 0, 0, fmt.Errorf("topology cell %q: NV# wants a link count", s)
		}
		return NV, k, nil
	}
	for c, name := range classNames {
		if s == name && Class(c) != NV {
			return Class(c), 0, nil
		}
	}
	return 0, 0, fmt.Errorf("topology cell %q: want X, NV#, PIX, PXB, PHB, NODE or SYS", s)
}

// Topology is the model's view of a host: the path class and NVLink count
// between each pair of GPUs, and each GPU's PCIe link bandwidth.
type Topology struct {
	N        int
	Class    [][]Class
	NVLinks  [][]int
	LinkGBps []float64 // per GPU, GB/s per direction, effective (see Params.PCIeEfficiency)
}

// FromNVSMI builds the topology of a host from its `nvidia-smi topo -m`
// (t) and its GPUs' current PCIe generation and width (gpus, in index
// order; one missing is gen 5 x16, as in New), as harness/nvsmi parses
// them. It returns New's error for a matrix it cannot read.
func FromNVSMI(t *nvsmi.Topology, gpus []nvsmi.GPU, p Params) (*Topology, error) {
	links := make([][]string, len(t.GPUs))
	gens, widths := make([]int, len(t.GPUs)), make([]int, len(t.GPUs))
	for i, g := range t.GPUs {
		links[i] = t.Links[g]
		if i < len(gpus) {
			gens[i], widths[i] = gpus[i].PCIeGen, gpus[i].PCIeWidth
		}
	}
	return New(links, gens, widths, p)
}

// PCIeGBps is the nominal bandwidth of one PCIe lane per direction in
// GB/s, by generation (after 8b/10b or 128b/130b encoding).
var PCIeGBps = map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

// New builds a topology from the `nvidia-smi topo -m` matrix (links[i][j],
// as nvsmi.Topology holds it) and each GPU's current PCIe generation and
// width (0 when unknown: gen 5 x16 is assumed). It returns an error for a
// matrix that is not square or holds an unknown cell.
func New(links [][]string, gens, widths []int, p Params) (*Topology, error) {
	n := len(links)
	if n == 0 {
		return nil, fmt.Errorf("topology: no GPUs")
	}
	t := &Topology{N: n, Class: make([][]Class, n), NVLinks: make([][]int, n), LinkGBps: make([]float64, n)}
	for i := range links {
		if len(links[i]) != n {
			return nil, fmt.Errorf("topology: GPU%d has %d cells for %d GPUs", i, len(links[i]), n)
		}
		t.Class[i], t.NVLinks[i] = make([]Class, n), make([]int, n)
		for j, cell := range links[i] {
			c, k, err := ParseClass(cell)
			if err != nil {
				return nil, fmt.Errorf("GPU%d/GPU%d: %w", i, j, err)
			}
			if (c == Self) != (i == j) {
				return nil, fmt.Errorf("topology: GPU%d/GPU%d is %q", i, j, cell)
			}
			t.Class[i][j], t.NVLinks[i][j] = c, k
		}
		gen, width := 5, 16
		if i < len(gens) && gens[i] > 0 {
			gen = gens[i]
		}
		if i < len(widths) && widths[i] > 0 {
			width = widths[i]
		}
		t.LinkGBps[i] = PCIeGBps[gen] * float64(width) * p.PCIeEfficiency
	}
	return t, nil
}

// FullNVLink reports whether every pair is joined by NVLink.
func (t *Topology) FullNVLink() bool {
	for i := range t.N {
		for j := range t.N {
			if i != j && t.Class[i][j] != NV {
				return false
			}
		}
	}
	return true
}

// groups partitions the GPUs into the connected components of pairs whose
// class is at most c (PXB: PCIe switches; NODE: sockets).
func (t *Topology) groups(c Class) [][]int {
	seen := make([]bool, t.N)
	var out [][]int
	for s := range t.N {
		if seen[s] {
			continue
		}
		g := []int{s}
		seen[s] = true
		for k := 0; k < len(g); k++ {
			for j := range t.N {
				if !seen[j] && t.Class[g[k]][j] <= c {
					seen[j] = true
					g = append(g, j)
				}
			}
		}
		sort.Ints(g)
		out = append(out, g)
	}
	return out
}

// Params are the model's constants. Default() documents where each comes
// from.
type Params struct {
	// PCIeEfficiency scales a link's nominal bandwidth to what P2P
	// reaches: 54 of Gen5 x16's 63 GB/s, FlashInfer's single-hop P2P rate on
	// 8x sm_120 at Gen5 (53.2-55.0 GB/s, flashinfer-ai/flashinfer#4870).
	PCIeEfficiency float64
	// NVLinkGBps is one NVLink's bandwidth per direction (NVLink 4: 25 GB/s).
	NVLinkGBps float64
	// RoundTripUS is one dependent round trip of a barrier or a P2P read
	// over PCIe (2 µs, assumed, not measured) and over NVLink (NVLinkRoundTripUS,
	// fitted to custom 1-stage/2-stage on 2x and 4x H200 in CUDA graphs).
	RoundTripUS, NVLinkRoundTripUS float64
	// CustomFixedUS is a custom kernel's cost beside its round trips
	// (fitted with NVLinkRoundTripUS).
	CustomFixedUS float64
	// RootComplexReadGBps is the effective bandwidth, per socket, of P2P
	// reads that cross a CPU root complex (PHB, NODE, SYS), shared by all
	// such reads into the socket. Calibrated so that forced 1-stage at
	// 42 KB on 8 PCIe GPUs (two switches per socket) takes Anchor1StageUS
	// (391.7 µs), the published account's 38-against-54 tok/s (Calibrate).
	RootComplexReadGBps float64
	// NCCLFixedUS and NCCLStepUS: NCCL's P2P ring or chain costs
	// NCCLFixedUS + 2(N-1)·NCCLStepUS beside its bytes, fitted to NCCL in
	// CUDA graphs on 2x and 4x H200; at N = 8 this gives ~27 µs, the
	// ~25 µs NCCL takes for ≤ 32 KB on 8x RTX PRO 6000 behind switches.
	NCCLFixedUS, NCCLStepUS float64
	// NCCLSHMStepUS is a step when NCCL falls back to SHM through host
	// memory: the published ~200 µs per 42 KB at N = 8.
	NCCLSHMStepUS float64
}

// Published anchors: the published account's figures for 8 PCIe GPUs
// serving with EAGLE-3 (NCCL ~200 µs per ~42 KB allreduce, 122 per verify
// pass; forced 1-stage 38 tok/s against NCCL's 54).
const (
	// AnchorBytes is the published account's allreduce size: ~42 KB.
	AnchorBytes = 42000
	// AnchorNCCLUS is NCCL's time per allreduce there.
	AnchorNCCLUS = 200.0
	// Anchor1StageUS is forced 1-stage's time per allreduce implied by
	// 38 tok/s against NCCL's 54 with 122 allreduces per verify pass at
	// accept length 3: (3/38 - 3/54) s / 122 + 200 µs.
	Anchor1StageUS = (3.0/38-3.0/54)/122*1e6 + AnchorNCCLUS
)

// Default returns the calibrated parameters.
func Default() Params {
	p := Params{
		PCIeEfficiency:    54.0 / (16 * 3.938),
		NVLinkGBps:        25,
		RoundTripUS:       2.0,
		NVLinkRoundTripUS: 1.3,
		CustomFixedUS:     0.7,
		NCCLFixedUS:       5.5,
		NCCLStepUS:        1.55,
	}
	p.NCCLSHMStepUS = (AnchorNCCLUS - p.NCCLFixedUS) / 14
	p.RootComplexReadGBps = Calibrate(p)
	return p
}

// Algorithms the model knows.
const (
	NCCLRing     = "nccl-ring"
	NCCLTree     = "nccl-tree"
	NCCLRingSHM  = "nccl-ring-shm"
	Custom1Stage = "custom-1stage"
	Custom2Stage = "custom-2stage"
)

// Algorithms lists them in report order.
var Algorithms = []string{Custom1Stage, Custom2Stage, NCCLRing, NCCLTree, NCCLRingSHM}

// Resource is one shared part of the host and what an algorithm puts
// through it, per direction.
type Resource struct {
	Name  string  `json:"name"` // "GPU3 link", "switch GPU0,GPU1 uplink", "socket GPU0,...,GPU3 root complex", "inter-socket link into GPU0,...,GPU3"
	Bytes float64 `json:"bytes"`
	Flows int     `json:"flows"` // concurrent transfers
	GBps  float64 `json:"gbps"`
	US    float64 `json:"us"`
}

// Estimate is one algorithm at one size.
type Estimate struct {
	Algo         string     `json:"algo"`
	Bytes        int        `json:"bytes"`
	BytesPerRank float64    `json:"bytes_per_rank"` // into the busiest rank
	FlowsPerRank int        `json:"flows_per_rank"` // concurrent transfers into one rank
	RoundTrips   int        `json:"round_trips"`    // dependent steps
	Resources    []Resource `json:"resources"`      // busiest first
	US           float64    `json:"us"`
}

// Bottleneck names the busiest resource, or "latency" when round trips
// dominate.
func (e Estimate) Bottleneck() string {
	if len(e.Resources) == 0 || e.Resources[0].US < e.US/2 {
		return "latency"
	}
	return e.Resources[0].Name
}

// flows returns the transfers of algo at s bytes: flow[i][j] bytes that
// rank i pulls from j (reads) or j pushes to i (writes), and whether they
// are reads.
func (t *Topology) flows(algo string, s float64) ([][]float64, bool, int) {
	n := t.N
	f := make([][]float64, n)
	for i := range f {
		f[i] = make([]float64, n)
	}
	switch algo {
	case Custom1Stage:
		for i := range n {
			for j := range n {
				if i != j {
					f[i][j] = s
				}
			}
		}
		return f, true, 3
	case Custom2Stage:
		for i := range n {
			for j := range n {
				if i != j {
					f[i][j] = 2 * s / float64(n)
				}
			}
		}
		return f, true, 5
	case NCCLRing, NCCLRingSHM:
		for i := range n {
			f[(i+1)%n][i] = 2 * float64(n-1) / float64(n) * s
		}
		return f, false, 2 * (n - 1)
	case NCCLTree:
		for i := 0; i+1 < n; i++ {
			f[i+1][i], f[i][i+1] = s, s
		}
		return f, false, 2 * (n - 1)
	}
	return f, false, 0
}

// Estimate models algo for an allreduce of bytes on t.
func (t *Topology) Estimate(algo string, bytes int, p Params) Estimate {
	s := float64(bytes)
	f, reads, rounds := t.flows(algo, s)
	e := Estimate{Algo: algo, Bytes: bytes, RoundTrips: rounds}
	var res []Resource
	add := func(name string, gbps float64, in func(i, j int) bool) {
		r := Resource{Name: name, GBps: gbps}
		for i := range t.N {
			for j := range t.N {
				if f[i][j] > 0 && in(i, j) {
					r.Bytes += f[i][j]
					r.Flows++
				}
			}
		}
		if r.Flows > 0 {
			r.US = r.Bytes / (gbps * 1e3)
			res = append(res, r)
		}
	}
	// Each GPU's own link, inbound (PCIe peers), and each NVLink pair.
	for i := range t.N {
		add(fmt.Sprintf("GPU%d link", i), t.LinkGBps[i], func(a, b int) bool { return a == i && t.Class[a][b] != NV })
		for j := range t.N {
			if t.Class[i][j] == NV {
				add(fmt.Sprintf("GPU%d-GPU%d NVLink", j, i), float64(t.NVLinks[i][j])*p.NVLinkGBps*p.PCIeEfficiency, func(a, b int) bool { return a == i && b == j })
			}
		}
	}
	in := func(g []int, x int) bool { return slices.Contains(g, x) }
	switches := t.groups(PXB)
	if len(switches) > 1 {
		for _, g := range switches {
			up := 0.0
			for _, x := range g {
				up = math.Max(up, t.LinkGBps[x])
			}
			add("switch "+gpuList(g)+" uplink", up, func(a, b int) bool { return in(g, a) && !in(g, b) && t.Class[a][b] != NV })
		}
	}
	readGBps := func(write float64) float64 {
		if reads {
			return p.RootComplexReadGBps
		}
		return write
	}
	sockets := t.groups(NODE)
	for _, g := range sockets {
		w := 0.0
		for _, x := range g {
			w = math.Max(w, t.LinkGBps[x])
		}
		add("socket "+gpuList(g)+" root complex", readGBps(w), func(a, b int) bool {
			return in(g, a) && t.Class[a][b] >= PHB
		})
	}
	if len(sockets) > 1 {
		for _, g := range sockets {
			add("inter-socket link into "+gpuList(g), readGBps(t.LinkGBps[g[0]]), func(a, b int) bool { return in(g, a) && t.Class[a][b] == SYS })
		}
	}
	sort.SliceStable(res, func(a, b int) bool { return res[a].US > res[b].US })
	e.Resources = res
	for i := range t.N {
		in, flows := 0.0, 0
		for j := range t.N {
			if f[i][j] > 0 {
				in += f[i][j]
				flows++
			}
		}
		e.BytesPerRank = math.Max(e.BytesPerRank, in)
		e.FlowsPerRank = max(e.FlowsPerRank, flows)
	}
	wire := 0.0
	if len(res) > 0 {
		wire = res[0].US
	}
	switch algo {
	case Custom1Stage, Custom2Stage:
		rt := p.RoundTripUS
		if t.FullNVLink() {
			rt = p.NVLinkRoundTripUS
		}
		e.US = p.CustomFixedUS + float64(rounds)*rt + wire
	case NCCLRing, NCCLTree:
		e.US = p.NCCLFixedUS + float64(rounds)*p.NCCLStepUS + wire
	case NCCLRingSHM:
		e.US = p.NCCLFixedUS + float64(rounds)*p.NCCLSHMStepUS + wire
	}
	return e
}

// Compare estimates every algorithm at bytes, fastest first.
func (t *Topology) Compare(bytes int, p Params) []Estimate {
	var out []Estimate
	for _, a := range Algorithms {
		out = append(out, t.Estimate(a, bytes, p))
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].US < out[b].US })
	return out
}

// NCCL is the model's NCCL at bytes: the faster of ring and tree over P2P,
// or over SHM when shm.
func (t *Topology) NCCL(bytes int, p Params, shm bool) Estimate {
	if shm {
		return t.Estimate(NCCLRingSHM, bytes, p)
	}
	r, tr := t.Estimate(NCCLRing, bytes, p), t.Estimate(NCCLTree, bytes, p)
	if tr.US < r.US {
		return tr
	}
	return r
}

// Thresholds are the PCIe dispatch limits the model suggests for t, in
// bytes: 1-stage up to OneStageMax, custom allreduce up to MaxBytes (NCCL
// above), found by scanning multiples of 16 bytes up to 8 MiB. Both are the
// largest size below which the faster choice holds without a break.
type Thresholds struct {
	OneStageMax int  `json:"one_stage_max"`
	MaxBytes    int  `json:"max_bytes"`
	AgainstSHM  bool `json:"against_shm"` // NCCL taken as SHM (the published figure) rather than P2P
}

// Suggest scans sizes in steps of 16 bytes doubling from 16 B to 8 MiB
// (each power of two and the 16-byte steps between the last two) and
// returns the model's thresholds against NCCL over P2P, or SHM when shm.
func (t *Topology) Suggest(p Params, shm bool) Thresholds {
	th := Thresholds{AgainstSHM: shm}
	oneOK, customOK := true, true
	for _, n := range scanSizes() {
		one, two := t.Estimate(Custom1Stage, n, p).US, t.Estimate(Custom2Stage, n, p).US
		if oneOK && one <= two {
			th.OneStageMax = n
		} else {
			oneOK = false
		}
		if customOK && math.Min(one, two) < t.NCCL(n, p, shm).US {
			th.MaxBytes = n
		} else {
			customOK = false
		}
	}
	if th.OneStageMax > th.MaxBytes {
		th.OneStageMax = th.MaxBytes
	}
	return th
}

// scanSizes are 16 B .. 8 MiB: powers of two with 64 even steps between
// each and the next.
func scanSizes() []int {
	var out []int
	for lo := 16; lo < 8<<20; lo *= 2 {
		step := max(16, lo/64)
		for n := lo; n < 2*lo; n += step {
			out = append(out, n)
		}
	}
	return append(out, 8<<20)
}

// Calibrate returns the root-complex read bandwidth (GB/s) at which forced
// 1-stage at AnchorBytes on the reference host (8 GPUs, Gen5 x16, two
// PCIe switches of two GPUs per socket, two sockets: RefHost) takes
// Anchor1StageUS, with p's other constants.
func Calibrate(p Params) float64 {
	t := RefHost(p)
	p.RootComplexReadGBps = 1 // GB/s: the resource time is then bytes/1e3 µs
	e := t.Estimate(Custom1Stage, AnchorBytes, p)
	lat := p.CustomFixedUS + float64(e.RoundTrips)*p.RoundTripUS
	var rc float64
	for _, r := range e.Resources {
		if strings.HasSuffix(r.Name, "root complex") || strings.HasPrefix(r.Name, "inter-socket link") {
			rc = math.Max(rc, r.Bytes)
		}
	}
	return rc / ((Anchor1StageUS - lat) * 1e3)
}

// RefHost is the reference topology the anchors are read on: 8 GPUs
// (Gen5 x16), two PCIe switches of two GPUs per socket, two sockets
// (harness/doctor/testdata/pcie8 has this shape). The published account
// did not give its topology; this is the common layout of 8-GPU PCIe
// servers.
func RefHost(p Params) *Topology {
	links := make([][]string, 8)
	for i := range 8 {
		links[i] = make([]string, 8)
		for j := range 8 {
			switch {
			case i == j:
				links[i][j] = "X"
			case i/2 == j/2:
				links[i][j] = "PIX"
			case i/4 == j/4:
				links[i][j] = "NODE"
			default:
				links[i][j] = "SYS"
			}
		}
	}
	t, _ := New(links, nil, nil, p)
	return t
}

func gpuList(g []int) string {
	s := make([]string, len(g))
	for i, x := range g {
		s[i] = "GPU" + strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

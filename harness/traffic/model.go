package traffic

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// Algorithms the model knows: the pcie series' custom kernels
// (SGLANG_PCIE_CUSTOM_AR_ALGO names them pull1, pull2, push1, push2 and
// island; bench allreduce's impl names are the constants' values) and
// NCCL.
const (
	// Custom1Stage (pull1): upstream 1-stage; every rank reads S from each
	// of its N-1 peers at once between a start and an end barrier.
	// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (cross_device_reduce_1stage).
	Custom1Stage = "custom-1stage"
	// Custom2Stage (pull2): upstream 2-stage; reduce-scatter then
	// all-gather, each rank reading S/N from every peer per stage, a start
	// and a mid barrier.
	// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (cross_device_reduce_2stage).
	Custom2Stage = "custom-2stage"
	// CustomPush1 (push1): one-shot push; each rank writes S into its slot
	// of every peer's scratch, staged (step k: rank r writes to (r+k) mod N),
	// then reduces locally; barriers: start, data-ready (both full).
	CustomPush1 = "custom-push1"
	// CustomPush2 (push2): two-shot push; reduce-scatter by staged writes of
	// S/N, the owner reduces its chunk, all-gather by staged writes;
	// barriers: start, RS-ready, AG-ready (all full).
	CustomPush2 = "custom-push2"
	// CustomIsland (island): K islands of M ranks; island reduce-scatter by
	// writes (S/M), the island-partial chunk written to the K-1 partners,
	// island all-gather by writes; barriers: start (full), island, partners,
	// island.
	CustomIsland = "custom-island"
	// NCCLRing: 2(N-1) steps, each rank writing 2(N-1)/N·S to its ring
	// successor in GPU index order.
	NCCLRing = "nccl-ring"
	// NCCLTree: within one host a chain, S each way per link.
	NCCLTree = "nccl-tree"
	// NCCLRingSHM: the ring through host memory (NCCL's SHM transport), at
	// the step cost the published ~200 µs implies.
	NCCLRingSHM = "nccl-ring-shm"
	// FlashInferTP8Ring is not an arpatch algorithm: it is FlashInfer's
	// staged TP8 kernel, which the tests hold to its published figures. The
	// data moves as in CustomIsland on 4+4 islands, but a barrier follows
	// every staged pass (3 island barriers in the reduce-scatter, the
	// owner-pair barrier, 3 in the all-gather and a final island barrier)
	// and there is no start barrier (a double-buffered epoch instead).
	// Upstream: flashinfer-ai/flashinfer include/flashinfer/comm/pcie_ipc_all_reduce.cuh@2aa8be70cdaa2cc0f52e2cf4cb90ac05538c131f
	// (ipc_topo_rsag8_ring_push_param_kernel).
	FlashInferTP8Ring = "flashinfer-tp8-ring"
)

// Algorithms lists them in report order.
var Algorithms = []string{Custom1Stage, Custom2Stage, CustomPush1, CustomPush2, CustomIsland, NCCLRing, NCCLTree, NCCLRingSHM}

// Custom lists the custom kernels, pulls first.
var Custom = []string{Custom1Stage, Custom2Stage, CustomPush1, CustomPush2, CustomIsland}

// EnvName is the name SGLANG_PCIE_CUSTOM_AR_ALGO gives a custom
// algorithm (pull1, pull2, push1, push2, island), "" for NCCL.
func EnvName(algo string) string {
	switch algo {
	case Custom1Stage:
		return "pull1"
	case Custom2Stage:
		return "pull2"
	case CustomPush1:
		return "push1"
	case CustomPush2:
		return "push2"
	case CustomIsland:
		return "island"
	}
	return ""
}

// Barrier spans: which ranks a flag barrier waits for.
const (
	SpanFull     = "full"     // every rank
	SpanIsland   = "island"   // the ranks of one island
	SpanPartners = "partners" // the rank at the same position in every island
)

// Resource is one shared part of the host and what an algorithm puts
// through it, per direction, summed over its steps.
type Resource struct {
	Name  string  `json:"name"`  // "GPU3 link in", "switch GPU0,GPU1 uplink out", "socket GPU0,...,GPU3 root complex", "inter-socket link into GPU0,...,GPU3"
	Bytes float64 `json:"bytes"` // in all steps
	Flows int     `json:"flows"` // concurrent transfers, at most, in one step
	GBps  float64 `json:"gbps"`  // what it carries for this algorithm (kernel share applied)
	US    float64 `json:"us"`    // time it is busy, summed over the steps
}

// Phase is one part of an algorithm, in order: a barrier, or a data
// stage (staged writes or a round of reads) with its time.
type Phase struct {
	Name  string  `json:"name"`            // "start", "island reduce-scatter", ...
	Kind  string  `json:"kind"`            // "barrier", "write" or "read"
	Span  string  `json:"span,omitempty"`  // a barrier's: full, island or partners
	Steps int     `json:"steps,omitempty"` // staged steps of a write phase
	US    float64 `json:"us"`
}

// Estimate is one algorithm at one size.
type Estimate struct {
	Algo       string `json:"algo"`
	Proto      string `json:"proto,omitempty"`       // NCCL's protocol: LL, LL128 or Simple
	Islands    string `json:"islands,omitempty"`     // island: as SGLANG_PCIE_CUSTOM_AR_ISLANDS writes them
	IslandKind string `json:"island_kind,omitempty"` // island: "sockets", "switches" or "one island"
	Bytes      int    `json:"bytes"`
	// BytesPerRank is what the busiest rank receives, all steps together;
	// FlowsPerRank the most transfers into one rank at once.
	BytesPerRank float64 `json:"bytes_per_rank"`
	FlowsPerRank int     `json:"flows_per_rank"`
	// Barriers are the spans of the flag barriers, in order; ReadRounds
	// the rounds of P2P reads; NCCLSteps NCCL's dependent steps.
	Barriers   []string   `json:"barriers,omitempty"`
	ReadRounds int        `json:"read_rounds,omitempty"`
	NCCLSteps  int        `json:"nccl_steps,omitempty"`
	Phases     []Phase    `json:"phases,omitempty"`
	Resources  []Resource `json:"resources"` // busiest first
	// LatencyUS is the part that does not grow with the bytes: the fixed
	// cost, barriers and read rounds (NCCL: its protocol's latency).
	LatencyUS float64 `json:"latency_us"`
	US        float64 `json:"us"`
	// Scratch is the IPC scratch the algorithm needs on each rank
	// (docs/pcie-dispatch.md, "The algorithms"); Fits says it is within
	// Params.ScratchBytes.
	Scratch int  `json:"scratch"`
	Fits    bool `json:"fits"`
}

// Name is the algorithm with NCCL's protocol: "nccl-ring/LL",
// "custom-island".
func (e Estimate) Name() string {
	if e.Proto != "" {
		return e.Algo + "/" + e.Proto
	}
	return e.Algo
}

// Bottleneck names the busiest resource, or "latency" when the barriers,
// read rounds and fixed costs dominate.
func (e Estimate) Bottleneck() string {
	if len(e.Resources) == 0 || e.Resources[0].US < e.US/2 {
		return "latency"
	}
	return e.Resources[0].Name
}

// flow is data moving from src to dst.
type flow struct {
	src, dst int
	bytes    float64
}

// stage is a barrier (span set, no steps) or a data stage: steps run one
// after another, the flows of a step at once.
type stage struct {
	name  string
	span  string
	read  bool
	steps [][]flow
}

func barrier(name, span string) stage { return stage{name: name, span: span} }

// staged is a write stage of steps: in step k (1..n-1 over the ranks of
// each group) the rank at position m sends bytes to the rank at (m+k) mod
// n of its group.
func staged(name string, groups [][]int, bytes float64) stage {
	s := stage{name: name}
	n := len(groups[0])
	for k := 1; k < n; k++ {
		var step []flow
		for _, g := range groups {
			for m, r := range g {
				step = append(step, flow{r, g[(m+k)%n], bytes})
			}
		}
		s.steps = append(s.steps, step)
	}
	return s
}

// allPairs is one round of reads: every rank reads bytes from every peer.
func allPairs(name string, n int, bytes float64) stage {
	var step []flow
	for i := range n {
		for j := range n {
			if i != j {
				step = append(step, flow{j, i, bytes})
			}
		}
	}
	return stage{name: name, read: true, steps: [][]flow{step}}
}

func (t *Topology) all() [][]int {
	g := make([]int, t.N)
	for i := range g {
		g[i] = i
	}
	return [][]int{g}
}

// stages are the custom algorithm's barriers and data movement at s bytes
// (islands is for CustomIsland only).
func (t *Topology) stages(algo string, s float64, is allreduce.Islands) []stage {
	n := float64(t.N)
	switch algo {
	case Custom1Stage:
		return []stage{barrier("start", SpanFull), allPairs("reads", t.N, s), barrier("end", SpanFull)}
	case Custom2Stage:
		return []stage{barrier("start", SpanFull), allPairs("reduce-scatter reads", t.N, s/n),
			barrier("mid", SpanFull), allPairs("all-gather reads", t.N, s/n)}
	case CustomPush1:
		return []stage{barrier("start", SpanFull), staged("push", t.all(), s), barrier("data-ready", SpanFull)}
	case CustomPush2:
		return []stage{barrier("start", SpanFull), staged("reduce-scatter", t.all(), s/n), barrier("RS-ready", SpanFull),
			staged("all-gather", t.all(), s/n), barrier("AG-ready", SpanFull)}
	case CustomIsland:
		m := float64(is.Size())
		out := []stage{barrier("start", SpanFull)}
		if is.Size() > 1 {
			out = append(out, staged("island reduce-scatter", is, s/m), barrier("island", SpanIsland))
		}
		if len(is) > 1 {
			out = append(out, staged("partners", partners(is), s/m), barrier("partners", SpanPartners))
		}
		if is.Size() > 1 {
			out = append(out, staged("island all-gather", is, s/m), barrier("island", SpanIsland))
		}
		return out
	case FlashInferTP8Ring:
		m := float64(is.Size())
		var out []stage
		passes := func(name string) {
			for _, step := range staged(name, is, s/m).steps {
				out = append(out, stage{name: name, steps: [][]flow{step}}, barrier("island", SpanIsland))
			}
		}
		passes("island reduce-scatter pass")
		out = append(out, staged("owner-pair exchange", partners(is), s/m), barrier("owner pair", SpanPartners))
		passes("island all-gather pass")
		return append(out, barrier("final", SpanIsland))
	}
	panic("traffic: no stages for " + algo)
}

// scratch is what algo needs on each rank at s bytes, in 16-byte packed
// elements as the pcie series' pcie_scratch_needed counts them: a slot of
// push2 or island is ceil(s / N) or ceil(s / M) rounded up to whole packs
// (docs/pcie-dispatch.md, "The algorithms").
func scratch(algo string, s, n int, is allreduce.Islands) int {
	ceil := func(a, b int) int { return (a + b - 1) / b }
	slot := func(parts int) int { return 16 * ceil(s, 16*parts) }
	switch algo {
	case Custom2Stage:
		return ceil(s, n) + s%n
	case CustomPush1:
		return n * s
	case CustomPush2:
		return n*slot(n) + s
	case CustomIsland, FlashInferTP8Ring:
		return (is.Size()+len(is))*slot(is.Size()) + s
	}
	return 0
}

// Estimate models algo for an allreduce of bytes on t. CustomIsland uses
// the island choice the model finds fastest at this size (BestIslands);
// NCCLRing and NCCLTree the fastest protocol NCCL can be set to there.
func (t *Topology) Estimate(algo string, bytes int, p Params) Estimate {
	switch algo {
	case CustomIsland:
		c := t.BestIslands(bytes, p)
		return t.EstimateIslands(c, bytes, p)
	case NCCLRing, NCCLTree:
		return t.ncclBest(algo, bytes, p)
	case NCCLRingSHM:
		return t.NCCLVariant(NCCLRingSHM, "", bytes, p)
	}
	return t.custom(algo, bytes, nil, p)
}

// EstimateIslands models the island algorithm (CustomIsland) on the
// given islands.
func (t *Topology) EstimateIslands(c IslandChoice, bytes int, p Params) Estimate {
	return t.estimateIslands(CustomIsland, c, bytes, p)
}

// EstimateFlashInferTP8Ring models FlashInfer's staged TP8 kernel on two
// islands of four (FlashInferTP8Ring).
func (t *Topology) EstimateFlashInferTP8Ring(c IslandChoice, bytes int, p Params) Estimate {
	return t.estimateIslands(FlashInferTP8Ring, c, bytes, p)
}

func (t *Topology) estimateIslands(algo string, c IslandChoice, bytes int, p Params) Estimate {
	e := t.custom(algo, bytes, c.Islands, p)
	e.Islands, e.IslandKind = c.Islands.String(), c.Kind
	return e
}

// BestIslands is the island choice (IslandChoices, or one island when
// there is none) under which the island algorithm is fastest at bytes.
func (t *Topology) BestIslands(bytes int, p Params) IslandChoice {
	best, us := IslandChoice{"one island", t.all()}, math.Inf(1)
	for _, c := range t.IslandChoices() {
		if e := t.custom(CustomIsland, bytes, c.Islands, p); e.US < us {
			best, us = c, e.US
		}
	}
	return best
}

// custom models a custom kernel: its fixed cost, a barrier per barrier
// stage, a read round per read stage, and each step's data through the
// host's shared parts.
func (t *Topology) custom(algo string, bytes int, is allreduce.Islands, p Params) Estimate {
	nv := t.FullNVLink()
	bar, read := p.BarrierUS, p.ReadRoundUS(t.N)
	if nv {
		bar, read = p.NVLinkBarrierUS, p.NVLinkReadUS
	}
	e := Estimate{Algo: algo, Bytes: bytes, LatencyUS: p.CustomFixedUS}
	e.Scratch = scratch(algo, bytes, t.N, is)
	e.Fits = e.Scratch <= p.ScratchBytes
	acc := newAccount(t)
	for _, st := range t.stages(algo, float64(bytes), is) {
		switch {
		case st.span != "":
			e.Barriers = append(e.Barriers, st.span)
			e.LatencyUS += bar
			e.Phases = append(e.Phases, Phase{Name: st.name, Kind: "barrier", Span: st.span, US: bar})
		case st.read:
			e.ReadRounds++
			e.LatencyUS += read
			us := read
			for _, step := range st.steps {
				us += acc.step(step, true, p)
			}
			e.Phases = append(e.Phases, Phase{Name: st.name, Kind: "read", US: us})
		default:
			us := 0.0
			for _, step := range st.steps {
				us += acc.step(step, false, p)
			}
			e.Phases = append(e.Phases, Phase{Name: st.name, Kind: "write", Steps: len(st.steps), US: us})
		}
	}
	acc.fill(&e)
	e.US = e.LatencyUS + acc.dataUS
	return e
}

// Kinds of resource: what bounds their bandwidth.
const (
	resLink   = iota // a GPU's PCIe link, one direction
	resNVLink        // an NVLink pair, one direction
	resUplink        // a PCIe switch's uplink, one direction
	resRC            // a socket's root complex, into its GPUs
	resSYS           // the inter-socket link, into one socket
)

// resources is the host's shared parts and, for data moving from GPU j to
// GPU i, the parts it passes (route[j][i]), computed once per topology.
type resources struct {
	names []string
	kind  []int
	base  []float64 // GB/s for links and uplinks; NVLink count for NVLink pairs
	route [][][]int
}

func (t *Topology) resources() *resources {
	if t.res != nil {
		return t.res
	}
	r := &resources{route: make([][][]int, t.N)}
	ids := map[string]int{}
	id := func(name string, kind int, base float64) int {
		if k, ok := ids[name]; ok {
			return k
		}
		ids[name] = len(r.names)
		r.names, r.kind, r.base = append(r.names, name), append(r.kind, kind), append(r.base, base)
		return ids[name]
	}
	in := func(g []int, x int) bool { return slices.Contains(g, x) }
	switches, sockets := t.parts()
	for j := range t.N {
		r.route[j] = make([][]int, t.N)
		for i := range t.N {
			if i == j {
				continue
			}
			var rs []int
			if t.Class[i][j] == NV {
				rs = append(rs, id(fmt.Sprintf("GPU%d-GPU%d NVLink", j, i), resNVLink, float64(t.NVLinks[i][j])))
				r.route[j][i] = rs
				continue
			}
			rs = append(rs, id(fmt.Sprintf("GPU%d link in", i), resLink, t.LinkGBps[i]), id(fmt.Sprintf("GPU%d link out", j), resLink, t.LinkGBps[j]))
			if len(switches) > 1 {
				for _, g := range switches {
					up := 0.0
					for _, x := range g {
						up = math.Max(up, t.LinkGBps[x])
					}
					if in(g, i) && !in(g, j) {
						rs = append(rs, id("switch "+gpuList(g)+" uplink in", resUplink, up))
					}
					if in(g, j) && !in(g, i) {
						rs = append(rs, id("switch "+gpuList(g)+" uplink out", resUplink, up))
					}
				}
			}
			for _, g := range sockets {
				if !in(g, i) {
					continue
				}
				if t.Class[i][j] >= PHB {
					rs = append(rs, id("socket "+gpuList(g)+" root complex", resRC, 0))
				}
				if len(sockets) > 1 && t.Class[i][j] == SYS {
					rs = append(rs, id("inter-socket link into "+gpuList(g), resSYS, 0))
				}
			}
			r.route[j][i] = rs
		}
	}
	t.res = r
	return r
}

// gbps is what resource k carries for kernel-driven reads or writes:
// copy-engine rates at Params.KernelStoreEfficiency, NVLink at its link
// rate, and reads through a root complex or across the sockets at the
// calibrated RootComplexReadGBps.
func (r *resources) gbps(k int, read bool, p Params) float64 {
	eff := p.KernelStoreEfficiency
	switch r.kind[k] {
	case resNVLink:
		return r.base[k] * p.NVLinkGBps * p.PCIeEfficiency
	case resRC:
		if read {
			return p.RootComplexReadGBps
		}
		return p.RootComplexWriteGBps * eff
	case resSYS:
		if read {
			return p.RootComplexReadGBps
		}
		return p.InterSocketGBps * eff
	}
	return r.base[k] * eff
}

// account sums what the steps of an algorithm put through each resource.
type account struct {
	t       *Topology
	r       *resources
	sum     []Resource // by resource, summed over the steps
	used    []int      // resources in the order first used
	bytes   []float64  // this step's load, by resource
	flows   []int
	in      []float64 // bytes into each rank
	perRank []int
	flowsIn int // most flows into one rank in one step
	dataUS  float64
}

func newAccount(t *Topology) *account {
	r := t.resources()
	n := len(r.names)
	return &account{t: t, r: r, sum: make([]Resource, n), bytes: make([]float64, n), flows: make([]int, n),
		in: make([]float64, t.N), perRank: make([]int, t.N)}
}

// step charges one step's flows (all at once) and returns its time: the
// busiest resource's bytes over its bandwidth.
func (a *account) step(fs []flow, read bool, p Params) float64 {
	clear(a.bytes)
	clear(a.flows)
	clear(a.perRank)
	for _, f := range fs {
		a.in[f.dst] += f.bytes
		a.perRank[f.dst]++
		for _, k := range a.r.route[f.src][f.dst] {
			a.bytes[k] += f.bytes
			a.flows[k]++
		}
	}
	a.flowsIn = max(a.flowsIn, slices.Max(a.perRank))
	us := 0.0
	for k, b := range a.bytes {
		if a.flows[k] == 0 {
			continue
		}
		gbps := a.r.gbps(k, read, p)
		lus := b / (gbps * 1e3)
		us = math.Max(us, lus)
		r := &a.sum[k]
		if r.Name == "" {
			r.Name, r.GBps = a.r.names[k], gbps
			a.used = append(a.used, k)
		}
		r.Bytes += b
		r.Flows = max(r.Flows, a.flows[k])
		r.US += lus
	}
	a.dataUS += us
	return us
}

// fill writes the sums into e, busiest resource first.
func (a *account) fill(e *Estimate) {
	for _, k := range a.used {
		e.Resources = append(e.Resources, a.sum[k])
	}
	sort.SliceStable(e.Resources, func(x, y int) bool { return e.Resources[x].US > e.Resources[y].US })
	e.BytesPerRank = slices.Max(a.in)
	e.FlowsPerRank = a.flowsIn
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

// Describe writes an estimate's phases for docs and doctor: "start
// barrier 0.65, push (7 steps) 8.86, data-ready barrier 0.65".
func (e Estimate) Describe() string {
	var s []string
	for _, ph := range e.Phases {
		switch ph.Kind {
		case "barrier":
			s = append(s, fmt.Sprintf("%s barrier (%s) %.2f", ph.Name, ph.Span, ph.US))
		case "write":
			s = append(s, fmt.Sprintf("%s (%d steps) %.2f", ph.Name, ph.Steps, ph.US))
		default:
			s = append(s, fmt.Sprintf("%s %.2f", ph.Name, ph.US))
		}
	}
	return strings.Join(s, ", ")
}

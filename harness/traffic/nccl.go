package traffic

// Protocol is one of NCCL's protocols and what the model takes from
// NCCL's own tuning model for it: its base latency and per-step latency as
// multiples of LL's (the protocol the fitted NCCLFixedUS and NCCLStepUS describe) and
// the bytes it puts on the wire per byte of data.
//
// Upstream: NVIDIA/nccl src/graph/tuning.cc@b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2
// (baseLat, hwLat, ncclTopoTuneModel): base latency Ring {LL 6.6, LL128 14.0,
// Simple 8.4} µs, Tree {LL 6.8, LL128 14.0, Simple 0}; per step over PCI
// Ring {LL 1.0, LL128 2.5, Simple 5.7}, Tree {LL 1.0, LL128 1.9, Simple 28}
// and over NVLink Ring {0.6, 1.9, 3.4}, Tree {0.6, 1.25, 28}; LL128 is on
// by default only where the GPUs are joined by NVLink ("Other cases are not
// tested and may cause silent data corruption"). LL sends 8-byte lines of
// 4 data bytes and a 4-byte flag: half the bandwidth (the tuning model
// discounts LL's ring bus bandwidth further, to 1/4, which the model does
// not); LL128 puts 120 data bytes in 128.
type Protocol struct {
	Name string
	// Wire is bytes on the wire per data byte.
	Wire float64
	// Base and Step are NCCL's tuning-table latencies for the ring and the
	// tree, over PCIe and over NVLink: [ring, tree].
	Base       [2]float64
	StepPCI    [2]float64
	StepNVL    [2]float64
	NVLinkOnly bool
}

// Protocols are NCCL's three, in NCCL's order.
var Protocols = []Protocol{
	{Name: "LL", Wire: 2, Base: [2]float64{6.6, 6.8}, StepPCI: [2]float64{1.0, 1.0}, StepNVL: [2]float64{0.6, 0.6}},
	{Name: "LL128", Wire: 128.0 / 120, Base: [2]float64{14.0, 14.0}, StepPCI: [2]float64{2.5, 1.9}, StepNVL: [2]float64{1.9, 1.25}, NVLinkOnly: true},
	{Name: "Simple", Wire: 1, Base: [2]float64{8.4, 0}, StepPCI: [2]float64{5.7, 28}, StepNVL: [2]float64{3.4, 28}},
}

// protocol returns the named protocol; it panics on a name NCCL does not
// have (a caller's bug: the names are Protocols').
func protocol(name string) Protocol {
	for _, pr := range Protocols {
		if pr.Name == name {
			return pr
		}
	}
	panic("traffic: no NCCL protocol " + name)
}

// NCCLEnv is the environment that sets NCCL to an estimate's algorithm
// and protocol: "NCCL_ALGO=Ring NCCL_PROTO=LL".
func (e Estimate) NCCLEnv() string {
	algo := "Ring"
	if e.Algo == NCCLTree {
		algo = "Tree"
	}
	return "NCCL_ALGO=" + algo + " NCCL_PROTO=" + e.Proto
}

// ncclBest is algo under the fastest protocol NCCL can be set to on t:
// LL or Simple over PCIe, and LL128 too where every pair is NVLink.
func (t *Topology) ncclBest(algo string, bytes int, p Params) Estimate {
	var best Estimate
	for _, pr := range Protocols {
		if pr.NVLinkOnly && !t.FullNVLink() {
			continue
		}
		if e := t.NCCLVariant(algo, pr.Name, bytes, p); best.Algo == "" || e.US < best.US {
			best = e
		}
	}
	return best
}

// NCCL is the model's NCCL at bytes: over P2P the best configuration NCCL
// can be set to (ring or tree, and protocol; Estimate.Name says which), or
// the ring over SHM when shm.
func (t *Topology) NCCL(bytes int, p Params, shm bool) Estimate {
	if shm {
		return t.NCCLVariant(NCCLRingSHM, "", bytes, p)
	}
	r, tr := t.ncclBest(NCCLRing, bytes, p), t.ncclBest(NCCLTree, bytes, p)
	if tr.US < r.US {
		return tr
	}
	return r
}

// NCCLVariant models one NCCL configuration: algo NCCLRing or NCCLTree
// under proto (LL, LL128 or Simple; another name panics), or NCCLRingSHM
// (proto ""). Over P2P that is the protocol's latency (NCCLFixedUS and
// 2(N-1) steps of NCCLStepUS, scaled by NCCL's tuning tables from LL's to
// proto's) plus its wire bytes through the host's shared parts; the ring
// writes 2(N-1)/N·S to its successor in GPU index order, the tree (a
// chain within one host) S each way over each link.
func (t *Topology) NCCLVariant(algo, proto string, bytes int, p Params) Estimate {
	n := t.N
	s := float64(bytes)
	var fs []flow
	if algo == NCCLTree {
		for i := 0; i+1 < n; i++ {
			fs = append(fs, flow{i, i + 1, s}, flow{i + 1, i, s})
		}
	} else {
		for i := range n {
			fs = append(fs, flow{i, (i + 1) % n, 2 * float64(n-1) / float64(n) * s})
		}
	}
	steps := 2 * (n - 1)
	e := Estimate{Algo: algo, Proto: proto, Bytes: bytes, NCCLSteps: steps, Fits: true}
	wire := 1.0
	switch algo {
	case NCCLRingSHM:
		e.LatencyUS = p.NCCLFixedUS + float64(steps)*p.NCCLSHMStepUS
	default:
		pr, ll := protocol(proto), Protocols[0]
		a := 0
		if algo == NCCLTree {
			a = 1
		}
		step, llStep := pr.StepPCI[a], ll.StepPCI[0]
		if t.FullNVLink() {
			step, llStep = pr.StepNVL[a], ll.StepNVL[0]
		}
		e.LatencyUS = p.NCCLFixedUS*pr.Base[a]/ll.Base[0] + float64(steps)*p.NCCLStepUS*step/llStep
		wire = pr.Wire
	}
	acc := newAccount(t)
	data := acc.step(fs, false, p) * wire
	acc.fill(&e)
	for i := range e.Resources {
		e.Resources[i].US *= wire
	}
	e.US = e.LatencyUS + data
	return e
}

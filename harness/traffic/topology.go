package traffic

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
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

	switches, sockets [][]int    // groups(PXB) and groups(NODE), once
	res               *resources // the shared parts, once
}

// parts are the GPUs behind each PCIe switch (or NVLink-joined) and on
// each socket, computed once.
func (t *Topology) parts() (switches, sockets [][]int) {
	if t.sockets == nil {
		t.switches, t.sockets = t.groups(PXB), t.groups(NODE)
	}
	return t.switches, t.sockets
}

// Parts are the GPUs behind each PCIe switch (pairs up to PXB, or joined
// by NVLink) and on each socket (pairs up to NODE), each ascending, in the
// order of their first GPU: the groups the model charges uplinks and root
// complexes for, and those harness/p2p measures all-to-all.
func (t *Topology) Parts() (switches, sockets [][]int) { return t.parts() }

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
// Gen 6 and 7 (64 and 128 GT/s, PAM4) carry 242 bytes of each 256-byte
// FLIT.
var PCIeGBps = map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563, 7: 15.125}

// New builds a topology from the `nvidia-smi topo -m` matrix (links[i][j],
// as nvsmi.Topology holds it) and each GPU's current PCIe generation and
// width (0 when unknown: gen 5 x16 is assumed). It returns an error for a
// matrix that is not square or holds an unknown cell, and for a
// generation PCIeGBps does not know.
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
		if _, ok := PCIeGBps[gen]; !ok {
			return nil, fmt.Errorf("topology: GPU%d's PCIe link is at gen %d, which the model does not know (gens 1 to %d)", i, gen, slices.Max(slices.Collect(maps.Keys(PCIeGBps))))
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

// partners are the groups of ranks at the same position in every island
// of is: the rank at position m of island k exchanges with position m of
// the others.
func partners(is allreduce.Islands) [][]int {
	out := make([][]int, is.Size())
	for m := range out {
		for _, g := range is {
			out[m] = append(out[m], g[m])
		}
	}
	return out
}

// IslandChoice is one way to cut a host into islands.
type IslandChoice struct {
	Kind    string            `json:"kind"` // "sockets": GPUs within one NUMA node (no SYS between them); "switches": GPUs behind one PCIe switch or bridge (PIX/PXB) or joined by NVLink
	Islands allreduce.Islands `json:"islands"`
}

// IslandChoices are the ways the topology cuts into at least two islands
// of equal size, at least two GPUs each (an island of one makes island
// push1): by socket (the islands 0002 derives from NVML), then by switch,
// when that differs. None when neither gives such islands.
func (t *Topology) IslandChoices() []IslandChoice {
	var out []IslandChoice
	for _, c := range []struct {
		kind  string
		class Class
	}{{"sockets", NODE}, {"switches", PXB}} {
		g := t.groups(c.class)
		if len(g) < 2 || len(g[0]) < 2 || slices.ContainsFunc(g, func(x []int) bool { return len(x) != len(g[0]) }) {
			continue
		}
		is := allreduce.Islands(g)
		if !slices.ContainsFunc(out, func(o IslandChoice) bool { return o.Islands.String() == is.String() }) {
			out = append(out, IslandChoice{c.kind, is})
		}
	}
	return out
}

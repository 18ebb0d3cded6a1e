package p2p

import (
	"slices"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/traffic"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// Pattern kinds: what a group of GPUs shares.
const (
	KindNVLink = "nvlink"       // every pair joined by NVLink
	KindSwitch = "switch"       // one PCIe switch (or a tree of them): pairs PIX/PXB
	KindSocket = "socket"       // one CPU socket: pairs up to NODE
	KindAll    = "all"          // every GPU, within one socket
	KindCross  = "cross-socket" // every GPU, across sockets (SYS pairs)
)

// Pattern is one group for the all-to-all tests: every rank of it reads
// from (then writes to) every other at once.
type Pattern struct {
	Name  string `json:"name"` // "switch GPU0,GPU1"
	Kind  string `json:"kind"`
	Ranks []int  `json:"ranks"` // torchrun ranks, ascending
}

// Patterns are the groups the kernels' traffic crosses on a host of n
// ranks whose GPUs (in rank order) and `nvidia-smi topo -m` among them
// are gpus and t: each PCIe switch island (pairs PIX or PXB) and each
// socket (pairs up to NODE) that holds two or more GPUs, as harness/traffic
// groups them (Topology.Parts), then all of them (across sockets when
// there are several); a group already listed is not repeated. With t nil,
// or not n rows, it is the one group of all. None below 2 ranks.
func Patterns(t *nvsmi.Topology, n int) []Pattern {
	if n < 2 {
		return nil
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	m, ok := model(t, n)
	if !ok {
		return []Pattern{{Name: "all " + rankList(nil, all), Kind: KindAll, Ranks: all}}
	}
	var out []Pattern
	add := func(kind string, g []int) {
		if len(g) < 2 || slices.ContainsFunc(out, func(p Pattern) bool { return slices.Equal(p.Ranks, g) }) {
			return
		}
		if everyPair(m.Class, g, func(c traffic.Class) bool { return c == traffic.NV }) {
			kind = KindNVLink
		}
		out = append(out, Pattern{Name: kind + " " + rankList(t, g), Kind: kind, Ranks: g})
	}
	switches, sockets := m.Parts()
	for _, g := range switches {
		add(KindSwitch, g)
	}
	for _, g := range sockets {
		add(KindSocket, g)
	}
	kind := KindAll
	if len(sockets) > 1 {
		kind = KindCross
	}
	add(kind, all)
	return out
}

// model is harness/traffic's view of t (rows in rank order; n of them),
// for its path classes and groups; false when t is nil, has not n rows,
// or holds a cell traffic cannot read.
func model(t *nvsmi.Topology, n int) (*traffic.Topology, bool) {
	if t == nil || len(t.GPUs) != n {
		return nil, false
	}
	m, err := traffic.FromNVSMI(t, nil, traffic.Default())
	return m, err == nil
}

func everyPair(cls [][]traffic.Class, g []int, ok func(traffic.Class) bool) bool {
	for _, a := range g {
		for _, b := range g {
			if a != b && !ok(cls[a][b]) {
				return false
			}
		}
	}
	return true
}

// rankList names ranks by t's GPU names ("GPU0,GPU1", or "GPU0-GPU3" for
// a run of consecutive GPUs), or "rank 0,1" without t.
func rankList(t *nvsmi.Topology, ranks []int) string {
	if t == nil || len(t.GPUs) == 0 {
		return "rank " + textfmt.Ints(ranks, ",")
	}
	names := make([]string, len(ranks))
	idx := make([]int, len(ranks))
	consecutive := len(ranks) > 2
	for k, r := range ranks {
		names[k] = t.GPUs[r]
		n, err := strconv.Atoi(strings.TrimPrefix(t.GPUs[r], "GPU"))
		idx[k] = n
		if err != nil || (k > 0 && n != idx[k-1]+1) {
			consecutive = false
		}
	}
	if consecutive {
		return names[0] + "-" + names[len(names)-1]
	}
	return strings.Join(names, ",")
}

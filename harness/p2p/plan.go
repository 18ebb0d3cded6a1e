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
// ranks whose `nvidia-smi topo -m` among them is t (rows in rank order):
// each PCIe switch island (pairs PIX or PXB) and each socket (pairs up to
// NODE) that holds two or more GPUs, then all of them (across sockets
// when there are several); a group already listed is not repeated. With
// t nil, or not n rows, it is the one group of all. None below 2 ranks.
func Patterns(t *nvsmi.Topology, n int) []Pattern {
	if n < 2 {
		return nil
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	cls, ok := classes(t, n)
	if !ok {
		return []Pattern{{Name: "all " + rankList(nil, all), Kind: KindAll, Ranks: all}}
	}
	var out []Pattern
	add := func(kind string, g []int) {
		if len(g) < 2 || slices.ContainsFunc(out, func(p Pattern) bool { return slices.Equal(p.Ranks, g) }) {
			return
		}
		if everyPair(cls, g, func(c traffic.Class) bool { return c == traffic.NV }) {
			kind = KindNVLink
		}
		out = append(out, Pattern{Name: kind + " " + rankList(t, g), Kind: kind, Ranks: g})
	}
	sockets := components(cls, traffic.NODE)
	for _, g := range components(cls, traffic.PXB) {
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

// classes reads t's cells as traffic.Class, n x n; false when t is nil,
// has not n rows, or holds a cell it cannot read.
func classes(t *nvsmi.Topology, n int) ([][]traffic.Class, bool) {
	if t == nil || len(t.GPUs) != n {
		return nil, false
	}
	out := make([][]traffic.Class, n)
	for i, g := range t.GPUs {
		out[i] = make([]traffic.Class, n)
		for j, cell := range t.Links[g] {
			c, _, err := traffic.ParseClass(cell)
			if err != nil || j >= n {
				return nil, false
			}
			out[i][j] = c
		}
	}
	return out, true
}

// components partitions the ranks into the connected components of pairs
// whose class is at most c, each ascending, in order of their first rank.
func components(cls [][]traffic.Class, c traffic.Class) [][]int {
	n := len(cls)
	seen := make([]bool, n)
	var out [][]int
	for s := range n {
		if seen[s] {
			continue
		}
		g := []int{s}
		seen[s] = true
		for k := 0; k < len(g); k++ {
			for j := range n {
				if !seen[j] && cls[g[k]][j] <= c {
					seen[j] = true
					g = append(g, j)
				}
			}
		}
		slices.Sort(g)
		out = append(out, g)
	}
	return out
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

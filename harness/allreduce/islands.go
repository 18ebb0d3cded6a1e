package allreduce

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/patches/sglenv"
)

// Islands is a partition of a group's ranks 0..N-1 into K islands of equal
// size M (N = K*M), as the pcie series' island algorithm takes it from
// SGLANG_PCIE_CUSTOM_AR_ISLANDS (0001 reads it in
// CustomAllreduce::pcie_parse_islands, 0002 checks it in
// _pcie_parse_islands; the patches hold both): ranks of
// one island share a PCIe switch or a CPU socket; the island algorithm
// reduces inside each island by writes and sends only one 1/M share per
// rank across islands. Each island lists its ranks in ascending order, and
// the islands are ordered by their first rank, so that one partition has
// one spelling.
type Islands [][]int

// EnvIslands is the variable the pcie series reads islands from.
const EnvIslands = sglenv.Islands

// String is the variable's spelling: ranks joined by ',', islands by '/',
// e.g. "0,1,2,3/4,5,6,7".
func (is Islands) String() string {
	parts := make([]string, len(is))
	for i, isl := range is {
		r := make([]string, len(isl))
		for j, n := range isl {
			r[j] = strconv.Itoa(n)
		}
		parts[i] = strings.Join(r, ",")
	}
	return strings.Join(parts, "/")
}

// Size is M, the ranks per island (0 for no islands).
func (is Islands) Size() int {
	if len(is) == 0 {
		return 0
	}
	return len(is[0])
}

// OneIsland is the partition with every rank of a group of ws in one
// island: the island algorithm then runs as push2 does.
func OneIsland(ws int) Islands {
	isl := make([]int, ws)
	for i := range isl {
		isl[i] = i
	}
	return Islands{isl}
}

// ParseIslands reads "0,1,2,3/4,5,6,7" for a group of ws ranks (ws <= 0:
// any size, the ranks read must still be 0..N-1). It refuses, naming s,
// a rank that is not a number or is out of range, a rank given twice or
// left out, an empty island, and islands of unequal sizes, each with an
// example that works at ws.
func ParseIslands(s string, ws int) (Islands, error) {
	example := "0,1,2,3/4,5,6,7"
	if ws > 0 {
		example = OneIsland(ws).String()
		if ws%2 == 0 && ws > 2 {
			example = Consecutive(ws, ws/2).String()
		}
	}
	bad := func(f string, a ...any) (Islands, error) {
		return nil, fmt.Errorf("%q: %s; want ranks joined by ',' and islands by '/', every rank once, islands of equal size (e.g. %s)", s, fmt.Sprintf(f, a...), example)
	}
	var is Islands
	seen := map[int]bool{}
	for _, part := range strings.Split(s, "/") {
		if part == "" {
			return bad("an island is empty")
		}
		var isl []int
		for _, f := range strings.Split(part, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 || f != strconv.Itoa(n) {
				return bad("%q is not a rank", f)
			}
			if ws > 0 && n >= ws {
				return bad("rank %d is out of range (world size %d: ranks 0 to %d)", n, ws, ws-1)
			}
			if seen[n] {
				return bad("rank %d is in more than one place", n)
			}
			seen[n] = true
			isl = append(isl, n)
		}
		slices.Sort(isl)
		is = append(is, isl)
	}
	if ws <= 0 {
		ws = len(seen)
	}
	for r := range ws {
		if !seen[r] {
			return bad("rank %d is missing (world size %d)", r, ws)
		}
	}
	for _, isl := range is[1:] {
		if len(isl) != len(is[0]) {
			return bad("islands of %d and %d ranks: the island algorithm needs islands of equal size", len(is[0]), len(isl))
		}
	}
	slices.SortFunc(is, func(a, b []int) int { return a[0] - b[0] })
	return is, nil
}

// Consecutive is the partition of ws ranks into islands of m consecutive
// ranks: Consecutive(8, 4) is 0,1,2,3/4,5,6,7. m must divide ws.
func Consecutive(ws, m int) Islands {
	var is Islands
	for s := 0; s < ws; s += m {
		var isl []int
		for r := s; r < s+m; r++ {
			isl = append(isl, r)
		}
		is = append(is, isl)
	}
	return is
}

// Strided is the partition of ws ranks into ws/m islands of m ranks each
// where rank r is in island r mod (ws/m): Strided(8, 4) is
// 0,2,4,6/1,3,5,7. Its partners (the ranks of equal position in each
// island) are consecutive ranks, the opposite of Consecutive's.
func Strided(ws, m int) Islands {
	k := ws / m
	is := make(Islands, k)
	for r := range ws {
		is[r%k] = append(is[r%k], r)
	}
	return is
}

// AllLayouts lists every consecutive and strided partition of ws ranks
// into equal islands, one island of all ranks first, then by island size
// m from ws/2 down to 1, without repeats: what `--islands all` runs, so
// that one run checks the island algorithm with every island count K the
// world size allows and with partners both near and far in rank order.
func AllLayouts(ws int) []Islands {
	out := []Islands{OneIsland(ws)}
	seen := map[string]bool{out[0].String(): true}
	for m := ws / 2; m >= 1; m-- {
		if ws%m != 0 {
			continue
		}
		for _, is := range []Islands{Consecutive(ws, m), Strided(ws, m)} {
			if s := is.String(); !seen[s] {
				seen[s] = true
				out = append(out, is)
			}
		}
	}
	return out
}

// ParseLayouts reads an --islands flag's values for a group of ws ranks:
// each value one partition (ParseIslands), or "all" (AllLayouts). The
// same partition given twice is kept once. Errors name the value.
func ParseLayouts(values []string, ws int) ([]Islands, error) {
	var out []Islands
	seen := map[string]bool{}
	for _, v := range values {
		var is []Islands
		if v == "all" {
			is = AllLayouts(ws)
		} else {
			one, err := ParseIslands(v, ws)
			if err != nil {
				return nil, err
			}
			is = []Islands{one}
		}
		for _, x := range is {
			if !seen[x.String()] {
				seen[x.String()] = true
				out = append(out, x)
			}
		}
	}
	return out, nil
}

// HostIslands derives the islands of a group of ws ranks on this host, as
// the pcie series' 0002 does from NVML at init (its
// _pcie_islands_from_nvml: ranks whose GPUs' common ancestor is below
// NVML_TOPOLOGY_SYSTEM share an island): rank r
// runs on CUDA device r, the nvidia-smi GPU visible[r] (doctor's
// ResolveVisible); GPUs joined by any link but SYS (NVML_TOPOLOGY_SYSTEM:
// across the CPU sockets' interconnect) are in one island, transitively.
// Islands of unequal size, a topology that does not name a rank's GPU, or
// more ranks than visible GPUs (an oversubscribed run) give one island.
// why says where the islands came from, e.g. "from nvidia-smi topo -m:
// GPUs joined by SYS are in different islands" or the reason for one
// island.
func HostIslands(t *nvsmi.Topology, visible []int, ws int) (is Islands, why string) {
	switch {
	case ws <= 1:
		return OneIsland(max(ws, 1)), "one rank"
	case t == nil || visible == nil:
		return OneIsland(ws), "the host topology is unknown (nvidia-smi topo -m): one island"
	case ws > len(visible):
		return OneIsland(ws), fmt.Sprintf("%d ranks on %d GPUs (oversubscribed): one island", ws, len(visible))
	}
	col := map[string]int{}
	for i, g := range t.GPUs {
		col[g] = i
	}
	idx := make([]int, ws)
	for r := range ws {
		i, ok := col["GPU"+strconv.Itoa(visible[r])]
		if !ok {
			return OneIsland(ws), fmt.Sprintf("nvidia-smi topo -m has no row GPU%d for rank %d: one island", visible[r], r)
		}
		idx[r] = i
	}
	joined := func(a, b int) bool { return t.Links[t.GPUs[idx[a]]][idx[b]] != "SYS" }
	seen := make([]bool, ws)
	for s := range ws {
		if seen[s] {
			continue
		}
		isl := []int{s}
		seen[s] = true
		for k := 0; k < len(isl); k++ {
			for r := range ws {
				if !seen[r] && joined(isl[k], r) {
					seen[r] = true
					isl = append(isl, r)
				}
			}
		}
		slices.Sort(isl)
		is = append(is, isl)
	}
	for _, isl := range is[1:] {
		if len(isl) != len(is[0]) {
			return OneIsland(ws), fmt.Sprintf("nvidia-smi topo -m splits the %d GPUs by SYS into islands of unequal size (%s): one island", ws, is)
		}
	}
	if len(is) == 1 {
		return is, fmt.Sprintf("nvidia-smi topo -m: no SYS link between the %d GPUs: one island", ws)
	}
	return is, fmt.Sprintf("nvidia-smi topo -m: GPUs joined by SYS (across CPU sockets) are in different islands: %d islands of %d", len(is), is.Size())
}

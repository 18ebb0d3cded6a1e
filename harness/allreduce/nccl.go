package allreduce

import (
	"fmt"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/internal/lazyre"
)

// NCCLTransport is what NCCL_DEBUG=INFO said about how ranks talk and
// what it chose: the one reading of NCCL's log in arpatch (bench
// allreduce, tune allreduce and their NCCL variants use it; a check of
// NCCL's transport by policy belongs here too).
type NCCLTransport struct {
	// Transports counts channel connections by transport: "P2P", "SHM",
	// "NET", "NVLS", "CollNet".
	Transports map[string]int `json:"transports,omitempty"`
	// Details keeps one example line per transport kind, e.g.
	// "P2P/CUMEM/read".
	Details  []string `json:"details,omitempty"`
	Channels int      `json:"channels,omitempty"` // "NCCL INFO N coll channels"
	Version  string   `json:"version,omitempty"`
	// Env is what NCCL says it took from the environment
	// ("NCCL_PROTO set by environment to LL"; NCCL_DEBUG_SUBSYS ENV):
	// proof that a variant's knob reached it.
	Env map[string]string `json:"env,omitempty"`
	// Chose is, per allreduce size, the algorithm, protocol and channels
	// NCCL dispatched ("AllReduce: 40960 Bytes -> Algo RING proto LL
	// channel{Lo..Hi}={0..1}", rank 0, NCCL_DEBUG_SUBSYS TUNING), once per
	// distinct choice, by size.
	Chose []NCCLChoice `json:"chose,omitempty"`
	// Warnings are NCCL's WARN lines, once each (the first 10).
	Warnings []string `json:"warnings,omitempty"`
	// Ranks are each rank's device, from its init line ("rank 0 nranks 2
	// cudaDev 0 nvmlDev 0 busId 60"), by rank.
	Ranks map[int]NCCLRank `json:"ranks,omitempty"`
	// Links are the connections between ranks, once per pair and
	// transport, in the order logged ("Channel 00/0 : 0[0] -> 1[1] via
	// SHM/direct/direct").
	Links []NCCLLink `json:"links,omitempty"`
	// P2PDisabled are the GPU pairs (NVML indexes, as nvidia-smi numbers
	// them) NCCL found P2P disabled between: NVML reported their P2P
	// read or write not OK ("P2P is disabled between connected GPUs 1 and
	// 0").
	P2PDisabled [][2]int `json:"p2p_disabled,omitempty"`
	Findings    []string `json:"findings,omitempty"`
}

// NCCLRank is one rank's device as NCCL's init line names it.
type NCCLRank struct {
	CUDADev int    `json:"cuda_dev"`
	NVMLDev int    `json:"nvml_dev"` // nvidia-smi's index
	BusID   string `json:"bus_id"`   // as NCCL prints it: hex, no separators ("18000")
}

// NCCLLink is one connection from rank From to rank To.
type NCCLLink struct {
	From int    `json:"from"`
	To   int    `json:"to"`
	Via  string `json:"via"` // "P2P/CUMEM/read", "SHM/direct/direct", "NET/Socket/0"
}

// Transport is the link's transport: "P2P", "SHM", "NET", ...
func (l NCCLLink) Transport() string {
	t, _, _ := strings.Cut(l.Via, "/")
	return t
}

// NCCLChoice is one dispatch NCCL logged for an allreduce.
type NCCLChoice struct {
	Bytes    int    `json:"bytes"`
	Algo     string `json:"algo"`     // "RING", "TREE", "NVLS", ...
	Proto    string `json:"proto"`    // "LL", "LL128", "SIMPLE"
	Channels string `json:"channels"` // "0..1"
}

func (c NCCLChoice) String() string {
	return fmt.Sprintf("%s %s/%s channels %s", FormatBytes(c.Bytes), c.Algo, c.Proto, c.Channels)
}

// At returns what NCCL chose for an allreduce of n bytes: one choice, or
// several joined by "; " (it changed during the run), "" when not logged.
func (t NCCLTransport) At(n int) string {
	var out []string
	for _, c := range t.Chose {
		if c.Bytes == n {
			out = append(out, c.Algo+"/"+c.Proto+" channels "+c.Channels)
		}
	}
	return strings.Join(out, "; ")
}

var (
	// "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"
	viaRe      = lazyre.New(`NCCL INFO Channel \d+/\d+ : .* via ([A-Za-z0-9]+)(/[A-Za-z0-9/]*)?`)
	channelsRe = lazyre.New(`NCCL INFO (\d+) coll channels`)
	versionRe  = lazyre.New(`NCCL version (\d+\.\d+\.\d+)`)
	envRe      = lazyre.New(`NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S*?)\.?\s*$`)
	choseRe    = lazyre.New(`NCCL INFO AllReduce: (\d+) Bytes -> Algo (\S+) proto (\S+) channel\{Lo\.\.Hi\}=\{(\d+\.\.\d+)\}`)
	warnRe     = lazyre.New(`NCCL WARN (.*\S)`)
	// "NCCL INFO ncclCommInitRankConfig comm 0x3f1d5150 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId ..."
	rankRe = lazyre.New(`NCCL INFO .*\brank (\d+) nranks \d+ cudaDev (\d+) nvmlDev (\d+) busId ([0-9a-fA-F]+)`)
	linkRe = lazyre.New(`NCCL INFO Channel \d+/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\].* via ([A-Za-z0-9]+(?:/[A-Za-z0-9/]*)?)`)
	// Upstream: NVIDIA/nccl src/graph/paths.cc@5067397c2676 (ncclTopoCheckP2p).
	p2pOffRe = lazyre.New(`P2P is disabled between (?:NVLINK )?connected GPUs (\d+) and (\d+)`)
)

// ParseNCCLTransport reads NCCL_DEBUG=INFO output (from any rank, with or
// without torchrun's "[rank0]:" prefixes). It flags SHM and NET between
// ranks of one host: P2P is then blocked (ACS, IOMMU), disabled
// (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL), or left out by NCCL's own policy,
// which by default takes P2P only within PCIe switches (PIX, PXB) and
// uses SHM past a CPU host bridge though P2P works there (Upstream:
// NVIDIA/nccl src/graph/paths.cc@5067397c2676 (ncclTopoCheckP2p:
// p2pLevel = PATH_PXB)). arpatch doctor --nccl-log tells which from the
// log and the host's topology. A ~200 us NCCL allreduce of 42 KB on a PCIe
// host, as in the published account, points there, where a well-tuned P2P
// ring takes ~25 us.
func ParseNCCLTransport(lines []string) NCCLTransport {
	t := NCCLTransport{Transports: map[string]int{}, Env: map[string]string{}}
	seen := map[string]bool{}
	chose := map[NCCLChoice]bool{}
	warned := map[string]bool{}
	linked := map[NCCLLink]bool{}
	off := map[[2]int]bool{}
	for _, l := range lines {
		if m := rankRe().FindStringSubmatch(l); m != nil {
			if t.Ranks == nil {
				t.Ranks = map[int]NCCLRank{}
			}
			t.Ranks[atoi(m[1])] = NCCLRank{CUDADev: atoi(m[2]), NVMLDev: atoi(m[3]), BusID: m[4]}
		}
		if m := linkRe().FindStringSubmatch(l); m != nil {
			k := NCCLLink{From: atoi(m[1]), To: atoi(m[2]), Via: m[3]}
			if !linked[k] {
				linked[k] = true
				t.Links = append(t.Links, k)
			}
		}
		if m := p2pOffRe().FindStringSubmatch(l); m != nil {
			k := [2]int{atoi(m[1]), atoi(m[2])}
			if !off[k] {
				off[k] = true
				t.P2PDisabled = append(t.P2PDisabled, k)
			}
		}
		if m := envRe().FindStringSubmatch(l); m != nil {
			t.Env[m[1]] = m[2]
		}
		if m := choseRe().FindStringSubmatch(l); m != nil {
			c := NCCLChoice{Bytes: atoi(m[1]), Algo: m[2], Proto: m[3], Channels: m[4]}
			if !chose[c] {
				chose[c] = true
				t.Chose = append(t.Chose, c)
			}
		}
		if m := warnRe().FindStringSubmatch(l); m != nil && !warned[m[1]] && len(t.Warnings) < 10 {
			warned[m[1]] = true
			t.Warnings = append(t.Warnings, m[1])
		}
		if m := viaRe().FindStringSubmatch(l); m != nil {
			t.Transports[m[1]]++
			d := m[1] + m[2]
			if !seen[d] {
				seen[d] = true
				t.Details = append(t.Details, d)
			}
		}
		if m := channelsRe().FindStringSubmatch(l); m != nil && t.Channels == 0 {
			t.Channels = atoi(m[1])
		}
		if m := versionRe().FindStringSubmatch(l); m != nil && t.Version == "" {
			t.Version = m[1]
		}
	}
	sort.Strings(t.Details)
	sort.SliceStable(t.Chose, func(i, j int) bool { return t.Chose[i].Bytes < t.Chose[j].Bytes })
	if len(t.Env) == 0 {
		t.Env = nil
	}
	if t.Transports["SHM"] > 0 {
		t.Findings = append(t.Findings, "NCCL uses SHM (host memory) between GPUs of this host: P2P is blocked (ACS, IOMMU), disabled (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL), or left out by NCCL's policy past a PCIe switch; arpatch doctor --nccl-log with this run's --log tells which; expect ~200 us allreduces where P2P gives ~25 us")
	}
	if t.Transports["NET"] > 0 {
		t.Findings = append(t.Findings, "NCCL uses NET (network/socket) between ranks of one host: the ring leaves the host's P2P paths; check NCCL_P2P_DISABLE and NCCL_SHM_DISABLE")
	}
	if t.Channels == 1 {
		t.Findings = append(t.Findings, "NCCL built a single channel: a degenerate ring that serializes every allreduce")
	}
	if len(t.Transports) == 0 {
		t.Transports = nil
	}
	return t
}

func atoi(s string) int {
	n := 0
	for _, c := range strings.TrimSpace(s) {
		n = n*10 + int(c-'0')
	}
	return n
}

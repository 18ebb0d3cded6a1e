package allreduce

import (
	"sort"
	"strings"

	"github.com/arpatch/arpatch/internal/lazyre"
)

// NCCLTransport is what NCCL_DEBUG=INFO said about how ranks talk.
type NCCLTransport struct {
	// Transports counts channel connections by transport: "P2P", "SHM",
	// "NET", "NVLS", "CollNet".
	Transports map[string]int `json:"transports,omitempty"`
	// Details keeps one example line per transport kind, e.g.
	// "P2P/CUMEM/read".
	Details  []string `json:"details,omitempty"`
	Channels int      `json:"channels,omitempty"` // "NCCL INFO N coll channels"
	Version  string   `json:"version,omitempty"`
	Findings []string `json:"findings,omitempty"`
}

var (
	// "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"
	viaRe      = lazyre.New(`NCCL INFO Channel \d+/\d+ : .* via ([A-Za-z0-9]+)(/[A-Za-z0-9/]*)?`)
	channelsRe = lazyre.New(`NCCL INFO (\d+) coll channels`)
	versionRe  = lazyre.New(`NCCL version (\d+\.\d+\.\d+)`)
)

// ParseNCCLTransport reads NCCL_DEBUG=INFO output (from any rank, with or
// without torchrun's "[rank0]:" prefixes). It flags SHM and NET between
// ranks of one host, which mean P2P is off or blocked (a mis-set
// NCCL_P2P_DISABLE, ACS or IOMMU): a ~200 us NCCL allreduce of 42 KB on a
// PCIe host, as in the published account, points there, where a well-tuned
// P2P ring takes ~25 us.
func ParseNCCLTransport(lines []string) NCCLTransport {
	t := NCCLTransport{Transports: map[string]int{}}
	seen := map[string]bool{}
	for _, l := range lines {
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
	if t.Transports["SHM"] > 0 {
		t.Findings = append(t.Findings, "NCCL uses SHM (host memory) between GPUs of this host: GPU P2P is off or blocked (NCCL_P2P_DISABLE, ACS, IOMMU); expect ~200 us allreduces where P2P gives ~25 us")
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

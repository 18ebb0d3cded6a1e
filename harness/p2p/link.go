package p2p

import (
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/traffic"
)

// SlowFraction is what "far below its link" means: a median under this
// share of the link's nominal rate per direction. P2P over a healthy link
// reaches well above it (54 of Gen5 x16's 63 GB/s single-hop,
// flashinfer-ai/flashinfer#4870, as harness/traffic's PCIeEfficiency
// records); a rate under half points at the path (a narrowed link, ACS
// redirecting through the root complex, translated DMA, a slow socket
// link), not at the kernel.
const SlowFraction = 0.5

// Link is the path a measured pair (or a GPU and host memory) shares, as
// nvidia-smi describes it, and its nominal rate.
type Link struct {
	Kind  string `json:"kind"`            // "NVLink", "PCIe"
	Class string `json:"class,omitempty"` // nvidia-smi topo -m's cell: "NV18", "PIX", ...; "" for a GPU's own link to the host
	Label string `json:"label"`           // "NVLink NV18", "PCIe SYS (across sockets)", "PCIe Gen5 x16"
	// NominalGBps is the link's rate per direction in GB/s (0: unknown,
	// then no rate is judged against it); Basis says how it was reached.
	NominalGBps float64 `json:"nominal_gbps"`
	Basis       string  `json:"basis,omitempty"`
}

var classWords = map[string]string{
	"PIX":  "one switch",
	"PXB":  "several switches, no host bridge",
	"PHB":  "through a CPU host bridge",
	"NODE": "between host bridges of one socket",
	"SYS":  "across sockets",
}

// PairLink is the link between ranks a and b: nvidia-smi's cell of t
// (rows in rank order; nil: unknown) and the GPUs' links (in rank order).
// An NVLink pair's nominal rate is its link count x traffic's NVLinkGBps;
// a PCIe pair's is the narrower of the two GPUs' links (PCIeLink), which
// every PCIe path between them crosses.
func PairLink(t *nvsmi.Topology, gpus []nvsmi.GPU, a, b int) Link {
	cell := ""
	if t != nil && a < len(t.GPUs) && b < len(t.Links[t.GPUs[a]]) {
		cell = strings.TrimSpace(t.Links[t.GPUs[a]][b])
	}
	c, links, err := traffic.ParseClass(cell)
	if err != nil || c == traffic.Self {
		l := Link{Kind: "PCIe", Label: "path unknown (no nvidia-smi topo -m)"}
		if a < len(gpus) && b < len(gpus) {
			l.NominalGBps, l.Basis = narrower(gpus[a], gpus[b])
		}
		return l
	}
	if c == traffic.NV {
		per := traffic.Default().NVLinkGBps
		return Link{Kind: "NVLink", Class: cell, Label: "NVLink " + cell, NominalGBps: float64(links) * per,
			Basis: fmt.Sprintf("%d NVLinks x %g GB/s per direction (NVLink 4)", links, per)}
	}
	l := Link{Kind: "PCIe", Class: cell, Label: fmt.Sprintf("PCIe %s (%s)", cell, classWords[cell])}
	if a < len(gpus) && b < len(gpus) {
		l.NominalGBps, l.Basis = narrower(gpus[a], gpus[b])
	}
	return l
}

// narrower is the nominal rate of the narrower of two GPUs' PCIe links.
func narrower(a, b nvsmi.GPU) (float64, string) {
	ra, la := PCIeLink(a)
	rb, lb := PCIeLink(b)
	switch {
	case ra == 0 || rb == 0:
		return 0, "a GPU's PCIe generation or width is unknown"
	case rb < ra:
		ra, la = rb, lb
	}
	return ra, la + ", the narrower of the two GPUs' links"
}

// PCIeLink is a GPU's own PCIe link: its nominal rate per direction
// (traffic.PCIeGBps per lane x lanes) at the generation and width
// nvidia-smi gives as the most "possible with this GPU and system
// configuration" (pcie.link.gen.max, pcie.link.width.max: an idle link
// trains down, so the current values read low), and how it reads
// ("PCIe Gen5 x16 (63.0 GB/s)"). 0 when either is unknown.
func PCIeLink(g nvsmi.GPU) (float64, string) {
	gen, width := g.PCIeGenMax, g.PCIeWidthMax
	if gen == 0 {
		gen = g.PCIeGen
	}
	if width == 0 {
		width = g.PCIeWidth
	}
	lane, ok := traffic.PCIeGBps[gen]
	if !ok || width == 0 {
		return 0, ""
	}
	r := lane * float64(width)
	return r, fmt.Sprintf("PCIe Gen%d x%d (%.1f GB/s)", gen, width, r)
}

// HostLink is a GPU's link to pinned host memory: its own PCIe link.
func HostLink(g nvsmi.GPU) Link {
	r, label := PCIeLink(g)
	if r == 0 {
		return Link{Kind: "PCIe", Label: "PCIe, generation or width unknown"}
	}
	return Link{Kind: "PCIe", Label: label, NominalGBps: r, Basis: "the GPU's PCIe link (nvidia-smi's gen and width max)"}
}

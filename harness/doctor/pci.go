package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// PCIDevice is one device of `lspci -D -vvv`, as far as doctor reads it.
type PCIDevice struct {
	BDF  string `json:"bdf"`  // "0000:17:00.0"
	Desc string `json:"desc"` // "PCI bridge: Broadcom / LSI Device c040 (rev 01) ..."
	// Port is the PCI Express port type: "Root Port", "Upstream Port",
	// "Downstream Port", "Endpoint", ... ("" without an Express
	// capability).
	Port string `json:"port,omitempty"`
	// Secondary and Subordinate are a bridge's bus range (the buses behind
	// it); -1 for a device that is not a bridge.
	Secondary   int `json:"secondary"`
	Subordinate int `json:"subordinate"`
	// ACSCtl is the ACS control register's flags as lspci prints them
	// ("ReqRedir": true for ReqRedir+); nil without an ACS capability.
	ACSCtl map[string]bool `json:"acs_ctl,omitempty"`
	// Denied is set when lspci could not read the capabilities (not root).
	Denied bool `json:"denied,omitempty"`
}

var (
	// "0000:17:00.0 PCI bridge: ..." (lspci -D), or "17:00.0 ..." without a domain.
	pciHeadRe = lazyre.New(`^((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$`)
	pciBusRe  = lazyre.New(`^\s+Bus: primary=[0-9a-f]+, secondary=([0-9a-f]+), subordinate=([0-9a-f]+)`)
	pciPortRe = lazyre.New(`^\s+Capabilities: \[[0-9a-f]+\] Express \([^)]*\) ((?:Root|Upstream|Downstream) Port|[A-Za-z ]*Endpoint|[A-Za-z ]*Bridge)`)
	pciACSRe  = lazyre.New(`^\s+ACSCtl:\s+(.*)$`)
)

// ParseLSPCI reads `lspci -D -vvv`: each device's address, description,
// Express port type, bus range and ACS control. The field formats are
// pciutils' (Upstream: pciutils/pciutils lspci.c@0f5b941aa5cf (show_htype1:
// "Bus: primary=%02x, secondary=%02x, subordinate=%02x"), ls-caps.c
// (cap_express: "Express (v2) Downstream Port (Slot+)"), ls-ecaps.c
// (cap_acs: "ACSCtl:\tSrcValid%c TransBlk%c ReqRedir%c CmpltRedir%c
// UpstreamFwd%c EgressCtrl%c DirectTrans%c")).
func ParseLSPCI(out string) []PCIDevice {
	var devs []PCIDevice
	for _, l := range strings.Split(out, "\n") {
		if m := pciHeadRe().FindStringSubmatch(l); m != nil {
			bdf := strings.ToLower(m[1])
			if strings.Count(bdf, ":") == 1 {
				bdf = "0000:" + bdf
			}
			devs = append(devs, PCIDevice{BDF: bdf, Desc: m[2], Secondary: -1, Subordinate: -1})
			continue
		}
		if len(devs) == 0 {
			continue
		}
		d := &devs[len(devs)-1]
		switch {
		case strings.Contains(l, "Capabilities: <access denied>"):
			d.Denied = true
		case pciBusRe().MatchString(l):
			m := pciBusRe().FindStringSubmatch(l)
			sec, _ := strconv.ParseInt(m[1], 16, 32)
			sub, _ := strconv.ParseInt(m[2], 16, 32)
			d.Secondary, d.Subordinate = int(sec), int(sub)
		case pciPortRe().MatchString(l):
			d.Port = pciPortRe().FindStringSubmatch(l)[1]
		case pciACSRe().MatchString(l):
			d.ACSCtl = map[string]bool{}
			for _, f := range strings.Fields(pciACSRe().FindStringSubmatch(l)[1]) {
				if name, ok := strings.CutSuffix(f, "+"); ok {
					d.ACSCtl[name] = true
				} else if name, ok := strings.CutSuffix(f, "-"); ok {
					d.ACSCtl[name] = false
				}
			}
		}
	}
	return devs
}

// busOf is a bus ID's domain and bus number: "00000000:1A:00.0" and
// "0000:1a:00.0" give ("0000", 0x1a).
func busOf(id string) (string, int, bool) {
	parts := strings.Split(nvsmi.BusID(id), ":")
	if len(parts) != 3 {
		return "", 0, false
	}
	bus, err := strconv.ParseUint(parts[1], 16, 8)
	return parts[0], int(bus), err == nil
}

// ACSRedirect is one switch downstream port above judged GPUs whose ACS
// redirects peer requests or completions upstream.
type ACSRedirect struct {
	Port  string   `json:"port"`  // its BDF
	GPUs  []int    `json:"gpus"`  // nvidia-smi indexes behind it
	Flags []string `json:"flags"` // "ReqRedir", "CmpltRedir" (the ones set)
}

// acsRedirects lists, in lspci's order, the PCIe switch downstream ports
// above the GPUs gpus whose ACS control has request or completion
// redirection on, for GPUs that share a switch with another of gpus
// (nvidia-smi's PIX or PXB: there P2P would stay in the switch; with
// redirection it goes up to the root complex and back, and through the
// IOMMU where it translates).
func acsRedirects(devs []PCIDevice, gpus []nvsmi.GPU, t *nvsmi.Topology) []ACSRedirect {
	shares := func(g nvsmi.GPU) bool {
		if t == nil {
			return false
		}
		name := fmt.Sprintf("GPU%d", g.Index)
		for j, cell := range t.Links[name] {
			if j < len(t.GPUs) && t.GPUs[j] != name && (cell == "PIX" || cell == "PXB") {
				return true
			}
		}
		return false
	}
	var out []ACSRedirect
	for _, d := range devs {
		if d.Port != "Downstream Port" || d.ACSCtl == nil {
			continue
		}
		var flags []string
		for _, f := range []string{"ReqRedir", "CmpltRedir"} {
			if d.ACSCtl[f] {
				flags = append(flags, f)
			}
		}
		if len(flags) == 0 {
			continue
		}
		dom, _, _ := strings.Cut(d.BDF, ":")
		r := ACSRedirect{Port: d.BDF, Flags: flags}
		for _, g := range gpus {
			gd, bus, ok := busOf(g.BusID)
			if ok && gd == dom && bus >= d.Secondary && bus <= d.Subordinate && shares(g) {
				r.GPUs = append(r.GPUs, g.Index)
			}
		}
		if len(r.GPUs) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// PCIScan is what `lspci -D -vvv` showed, or why it could not run.
type PCIScan struct {
	Devices []PCIDevice `json:"devices,omitempty"`
	Error   string      `json:"error,omitempty"`
}

// acsFindings judges what lspci showed of the judged GPUs' paths.
func acsFindings(h *Host) []Finding {
	p := h.PCI
	if p == nil {
		return nil
	}
	if p.Error != "" {
		return []Finding{{ID: "pci.unread", Severity: Info, Title: "ACS on the PCIe switches was not checked", Detail: p.Error,
			Remedy: "install pciutils (lspci) and run doctor as root to have it read"}}
	}
	if slices.ContainsFunc(p.Devices, func(d PCIDevice) bool { return d.Denied }) {
		return []Finding{{ID: "pci.unread", Severity: Info, Title: "ACS on the PCIe switches was not read: lspci -vvv shows capabilities to root only",
			Remedy: "run doctor as root to have it read ACS"}}
	}
	rs := acsRedirects(p.Devices, h.GPUs, h.Topology)
	if len(rs) == 0 {
		return nil
	}
	var ports, cmds, gpus []string
	for _, r := range rs {
		ports = append(ports, fmt.Sprintf("%s (%s; behind it %s)", r.Port, strings.Join(r.Flags, ", "), gpuNames(r.GPUs)))
		cmds = append(cmds, "`setpci -s "+r.Port+" ECAP_ACS+0x6.w=0000`")
		for _, g := range r.GPUs {
			gpus = append(gpus, fmt.Sprintf("GPU%d", g))
		}
	}
	var list []string
	for _, r := range rs {
		list = append(list, r.Port)
	}
	return []Finding{{ID: "pci.acs-redirect", Severity: Warn,
		Title: fmt.Sprintf("ACS redirects P2P through the root complex at %d PCIe switch %s above %s", len(rs), textfmt.Word(len(rs), "port", "ports"), strings.Join(gpus, ", ")),
		Detail: "nvidia-smi still says PIX/PXB, but peer requests and completions go up to the root complex and back (and through the IOMMU where it translates): " +
			strings.Join(ports, "; ") + ". NCCL and custom allreduce are slower there, and NCCL hangs on some hosts (local-inference-lab/rtx6kpro#15)",
		Remedy: "as root, turn ACS off on those ports: " + strings.Join(cmds, ", ") + " (NCCL's troubleshooting guide, PCI Access Control Services; it lasts until a reboot: " +
			"to keep it, boot with pci=disable_acs_redir=" + strings.Join(list, ";") + " or turn ACS off in the BIOS), then check every byte P2P moves with " + measureP2P(h)}}
}

// gpuNames names nvidia-smi indexes: "GPU0, GPU1".
func gpuNames(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = "GPU" + strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

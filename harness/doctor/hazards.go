package doctor

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/p2p"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// IOMMUGroup is one /sys/kernel/iommu_groups/N: its type and devices.
// The types are the kernel's: "DMA" and "DMA-FQ" translate the devices'
// DMA, "identity" passes it through (Upstream: torvalds/linux
// Documentation/ABI/testing/sysfs-kernel-iommu_groups, "type").
type IOMMUGroup struct {
	Group   string   `json:"group"`
	Type    string   `json:"type"`
	Devices []string `json:"devices,omitempty"` // BDFs, "0000:18:00.0"
}

// readIOMMU reads the groups' types and devices under fsys's
// sys/kernel/iommu_groups; a group without a readable type is left out.
func readIOMMU(fsys fs.FS) (count int, groups []IOMMUGroup) {
	ents, err := fs.ReadDir(fsys, "sys/kernel/iommu_groups")
	if err != nil {
		return 0, nil
	}
	for _, e := range ents {
		dir := path.Join("sys/kernel/iommu_groups", e.Name())
		b, err := fs.ReadFile(fsys, path.Join(dir, "type"))
		if err != nil {
			continue
		}
		g := IOMMUGroup{Group: e.Name(), Type: strings.TrimSpace(string(b))}
		devs, _ := fs.ReadDir(fsys, path.Join(dir, "devices"))
		for _, d := range devs {
			g.Devices = append(g.Devices, strings.ToLower(d.Name()))
		}
		groups = append(groups, g)
	}
	return len(ents), groups
}

// passthroughArgs are the kernel arguments that leave DMA untranslated:
// passthrough, or no IOMMU (Upstream: torvalds/linux
// Documentation/admin-guide/kernel-parameters.txt: iommu=pt,
// iommu.passthrough=1, intel_iommu=off, amd_iommu=off, iommu=off).
var passthroughArgs = []string{"iommu=pt", "iommu.passthrough=1", "iommu.passthrough=y", "intel_iommu=off", "amd_iommu=off", "iommu=off"}

func passthrough(cmdline string) bool {
	for _, a := range strings.Fields(cmdline) {
		if slices.Contains(passthroughArgs, a) {
			return true
		}
	}
	return false
}

// translating lists the groups of type DMA or DMA-FQ that hold a GPU of
// gpus, each as "group N (DMA-FQ: GPU0)"; when no group lists its devices
// (unreadable), every such group, as "group N (DMA-FQ)".
func translating(groups []IOMMUGroup, gpus []nvsmi.GPU) []string {
	of := map[string]int{}
	for _, g := range gpus {
		of[nvsmi.BusID(g.BusID)] = g.Index
	}
	var withGPU, all []string
	listed := false // some group lists its devices
	for _, g := range groups {
		var names []int
		for _, d := range g.Devices {
			listed = true
			if i, ok := of[nvsmi.BusID(d)]; ok {
				names = append(names, i)
			}
		}
		if g.Type != "DMA" && g.Type != "DMA-FQ" {
			continue
		}
		all = append(all, fmt.Sprintf("group %s (%s)", g.Group, g.Type))
		if len(names) > 0 {
			withGPU = append(withGPU, fmt.Sprintf("group %s (%s: %s)", g.Group, g.Type, gpuNames(names)))
		}
	}
	if listed {
		return withGPU
	}
	return all
}

// iommuFindings judges the IOMMU: groups that translate the judged GPUs'
// DMA with no passthrough on the kernel command line; without the groups'
// types (kernels before 5.11), an IOMMU turned on there without iommu=pt.
func iommuFindings(h *Host) []Finding {
	c := h.Cmdline
	remedy := "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub, or grub2-mkconfig -o /boot/grub2/grub.cfg, and reboot; the GPUs' groups then read identity), then check every byte P2P moves with " + measureP2P(h)
	var f []Finding
	if len(h.IOMMU) > 0 {
		if ts := translating(h.IOMMU, h.GPUs); len(ts) > 0 && !passthrough(c) {
			f = append(f, Finding{ID: "iommu.translate", Severity: Warn, Title: "the IOMMU translates the GPUs' DMA: " + strings.Join(ts, ", "),
				Detail: "kernel command line: " + c + " (no iommu=pt or equivalent). P2P then goes through IOMMU translation: slower, and on some hosts (the IOMMU is on by default on AMD) P2P that reports OK drops or corrupts writes (CAPS-UMU/FIDESlib#28)",
				Remedy: remedy})
		}
	} else if c != "" && (strings.Contains(c, "intel_iommu=on") || strings.Contains(c, "amd_iommu=on")) && !passthrough(c) {
		f = append(f, Finding{ID: "iommu.translate", Severity: Warn, Title: "the IOMMU translates DMA", Detail: "kernel command line: " + c, Remedy: remedy})
	}
	if h.IOMMUGroups > 0 {
		f = append(f, Finding{ID: "iommu.groups", Severity: Info, Title: fmt.Sprintf("%d IOMMU groups", h.IOMMUGroups), Remedy: "if P2P is blocked, check that ACS does not isolate the GPUs behind one switch"})
	}
	return f
}

// Measured is a host qualification report doctor was given (--p2p).
type Measured struct {
	File   string      `json:"file"`
	Report *p2p.Report `json:"-"`
	// Covers is false when the report did not measure every judged GPU:
	// its constants are then not used.
	Covers bool `json:"covers"`
}

// measureP2P is the command that measures P2P on this host: given a --p2p
// file, one that writes a new file beside it (never over the file doctor
// read) and the doctor that reads that one.
func measureP2P(h *Host) string {
	if h.P2P != nil {
		out := safefs.Beside(h.P2P.File, "new")
		return "`" + shellq.Join([]string{"arpatch", "bench", "p2p", "--json", out}) + "`, then `" + shellq.Join([]string{"arpatch", "doctor", "--p2p", out}) + "`"
	}
	return "`arpatch bench p2p`"
}

// measuredFindings judges a --p2p report on the judged GPUs: every
// corruption between them (or in their links to host memory) is an error,
// a rate far below its link a warning, and a report of other GPUs says
// its constants are not used.
func measuredFindings(h *Host) []Finding {
	m := h.P2P
	if m == nil || m.Report == nil {
		return nil
	}
	judged := map[int]bool{}
	for _, g := range h.GPUs {
		judged[g.Index] = true
	}
	rep := m.Report
	var f []Finding
	if !m.Covers {
		var have []int
		for _, g := range rep.Host.GPUs {
			have = append(have, g.Index)
		}
		f = append(f, Finding{ID: "p2p.other-gpus", Severity: Warn, Title: fmt.Sprintf("%s measured other GPUs than those judged", m.File),
			Detail: fmt.Sprintf("it measured %s (by PCI bus); the traffic model keeps its calibrated constants", gpuNames(have)),
			Remedy: "measure the GPUs the job uses: " + measureP2P(h)})
	}
	for _, c := range rep.Corrupt {
		if !judged[c.GPU] || (c.Peer != p2p.HostPeer && !judged[c.Peer]) {
			continue
		}
		title := fmt.Sprintf("%s between GPU%d and GPU%d (measured: %s)", p2p.CorruptText, c.GPU, c.Peer, m.File)
		if c.Peer == p2p.HostPeer {
			title = fmt.Sprintf("GPU%d's link to pinned host memory corrupts data (measured: %s)", c.GPU, m.File)
		}
		f = append(f, Finding{ID: "p2p.corrupt", Severity: Error, Title: title,
			Detail: fmt.Sprintf("%s %s, %s: %d bad words of %d checked", c.Test, c.Op, c.Link, c.BadWords, c.CheckedBytes/4),
			Remedy: "custom allreduce must not run there: serve with --disable-custom-all-reduce; fix the path (the iommu and pci findings name translated DMA and ACS redirection), then measure again with " + measureP2P(h)})
	}
	var slow []string
	for _, p := range rep.Pairs {
		if judged[p.GPU] && judged[p.Peer] {
			for _, s := range p.Slow {
				slow = append(slow, fmt.Sprintf("GPU%d %s GPU%d %s", p.GPU, map[bool]string{true: "<-", false: "->"}[strings.HasPrefix(s, "read")], p.Peer, s))
			}
		}
	}
	if len(slow) > 0 {
		f = append(f, Finding{ID: "p2p.slow", Severity: Warn, Title: fmt.Sprintf("%s far below %s link (measured: %s)", textfmt.Plural(len(slow), "P2P rate", "P2P rates"), textfmt.Word(len(slow), "its", "their"), m.File),
			Detail: strings.Join(slow, "; "), Remedy: "look at the links (nvidia-smi -q -d PCIE) and the paths (the iommu and pci findings); measure again with " + measureP2P(h)})
	}
	return f
}

// corruptBetween says which judged pair a --p2p report found corrupting
// ("" for none), for the verdict.
func corruptBetween(h *Host) string {
	for _, x := range measuredFindings(h) {
		if x.ID == "p2p.corrupt" {
			return x.Title
		}
	}
	return ""
}

// NCCLLog is an NCCL_DEBUG=INFO log doctor was given (--nccl-log: the
// --log of arpatch bench allreduce), as allreduce.ParseNCCLTransport reads
// it.
type NCCLLog struct {
	File      string                  `json:"file"`
	Transport allreduce.NCCLTransport `json:"transport"`
}

// ncclPair is one pair of judged GPUs NCCL connected through SHM: the
// nvidia-smi indexes, their topo -m cell.
type ncclPair struct {
	a, b int
	cell string
}

func (p ncclPair) String() string { return fmt.Sprintf("GPU%d-GPU%d (%s)", p.a, p.b, p.cell) }

// ncclFindings tells why NCCL took SHM between judged GPUs where its log
// says so: P2P blocked there (nvidia-smi's P2P status, or NCCL's own "P2P
// is disabled" line), disabled by NCCL_P2P_DISABLE or NCCL_P2P_LEVEL, or
// left out by NCCL's default policy, which takes P2P only up to PXB (one
// or more PCIe switches) and SHM past a CPU host bridge though P2P works
// there (Upstream: NVIDIA/nccl src/graph/paths.cc@5067397c2676
// (ncclTopoCheckP2p: p2pLevel = PATH_PXB, PATH_SYS on AMD CPUs with two
// GPUs at most; NCCL_P2P_LEVEL overrides)).
func ncclFindings(h *Host, j *Judged) []Finding {
	lg := h.NCCL
	if lg == nil || h.Topology == nil {
		return nil
	}
	t := lg.Transport
	judged := map[int]bool{}
	for _, g := range h.GPUs {
		judged[g.Index] = true
	}
	offByNCCL := map[[2]int]bool{}
	for _, p := range t.P2PDisabled {
		offByNCCL[p], offByNCCL[[2]int{p[1], p[0]}] = true, true
	}
	seen := map[[2]int]bool{}
	var blocked, policy, other []ncclPair
	unmapped := 0
	for _, l := range t.Links {
		if l.Transport() != "SHM" {
			continue
		}
		ra, oka := t.Ranks[l.From]
		rb, okb := t.Ranks[l.To]
		if !oka || !okb {
			unmapped++
			continue
		}
		a, b := min(ra.NVMLDev, rb.NVMLDev), max(ra.NVMLDev, rb.NVMLDev)
		if !judged[a] || !judged[b] || seen[[2]int{a, b}] {
			continue
		}
		seen[[2]int{a, b}] = true
		cell := topoCell(h.Topology, a, b)
		p := ncclPair{a, b, cell}
		switch {
		case offByNCCL[[2]int{a, b}] || !p2pOK(h, a, b):
			blocked = append(blocked, p)
		case cell == "PHB" || cell == "NODE" || cell == "SYS":
			policy = append(policy, p)
		default:
			other = append(other, p)
		}
	}
	var f []Finding
	names := func(ps []ncclPair) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.String()
		}
		return strings.Join(s, ", ")
	}
	if v, ok := t.Env["NCCL_P2P_DISABLE"]; ok && len(blocked)+len(policy)+len(other) > 0 {
		f = append(f, Finding{ID: "nccl.p2p-disabled", Severity: Warn, Title: "NCCL uses SHM between GPUs: NCCL_P2P_DISABLE=" + v + " was set for the run of " + lg.File,
			Detail: "the pairs: " + names(append(append(blocked, policy...), other...)), Remedy: "unset NCCL_P2P_DISABLE; if P2P hangs without it, fix the path (the iommu and pci findings) instead"})
		return f
	}
	if len(blocked) > 0 {
		f = append(f, Finding{ID: "nccl.p2p-blocked", Severity: Warn, Title: "NCCL uses SHM between " + names(blocked) + ": P2P is blocked there",
			Detail: "nvidia-smi's P2P status, or NCCL's own line (\"P2P is disabled between connected GPUs\"), says P2P does not work between them (" + lg.File + ")",
			Remedy: "fix the path (ACS in the BIOS or kernel, the IOMMU: iommu=pt; the iommu and pci findings), then check P2P with " + measureP2P(h)})
	}
	if len(policy) > 0 {
		level := t.Env["NCCL_P2P_LEVEL"]
		title := "NCCL chose SHM by policy between " + names(policy) + ", though P2P works there"
		detail := "NCCL takes P2P by default only within PCIe switches (PIX, PXB) and SHM through host memory past a CPU host bridge (ncclTopoCheckP2p, NVIDIA/nccl src/graph/paths.cc); nvidia-smi reports P2P OK for these pairs (" + lg.File + ")"
		if level != "" {
			title = "NCCL_P2P_LEVEL=" + level + " leaves " + names(policy) + " on SHM, though P2P works there"
			detail = "NCCL takes P2P only up to NCCL_P2P_LEVEL (" + lg.File + ")"
		}
		f = append(f, Finding{ID: "nccl.shm-policy", Severity: Warn, Title: title, Detail: detail, Remedy: ncclLevelRemedy(h, j)})
	}
	if len(other) > 0 {
		f = append(f, Finding{ID: "nccl.shm", Severity: Warn, Title: "NCCL uses SHM between " + names(other) + ", though P2P works there and NCCL's default takes it",
			Detail: "within PCIe switches NCCL's default is P2P (" + lg.File + ")",
			Remedy: "look for NCCL_P2P_LEVEL or NCCL_P2P_DISABLE in /etc/nccl.conf and ~/.nccl.conf, and run containers with --ipc=host (NCCL needs the peer's process for P2P)"})
	}
	if unmapped > 0 && len(f) == 0 {
		f = append(f, Finding{ID: "nccl.shm", Severity: Info, Title: "NCCL used SHM, but its log does not say which GPUs each rank ran on (" + lg.File + ")",
			Remedy: "log a run with arpatch bench allreduce --log FILE (it sets NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,GRAPH) and give that to --nccl-log"})
	}
	return f
}

// ncclLevelRemedy is the remedy for SHM by policy: NCCL_P2P_LEVEL=SYS,
// and the run that shows its effect, on the judged GPUs.
func ncclLevelRemedy(h *Host, j *Judged) string {
	s := "let NCCL use P2P there: NCCL_P2P_LEVEL=SYS in the server's environment"
	n := len(h.GPUs)
	if bounds.WorldSizeError(n) != nil {
		return s
	}
	log := "nccl-sys.log"
	if h.NCCL != nil && safefs.SamePath(log, h.NCCL.File) {
		log = safefs.Beside(log, "new") // never over the log doctor read
	}
	run := shellq.Assign("NCCL_P2P_LEVEL", "SYS") + " arpatch bench allreduce --world-size " + strconv.Itoa(n) + " --impl nccl --log " + shellq.Quote(log)
	if j.Visible.Set {
		run = shellq.Assign("CUDA_VISIBLE_DEVICES", j.Visible.Spec) + " " + run
	}
	return s + "; first see NCCL take P2P and what it gains: `" + run + "`, then `arpatch doctor --nccl-log " + shellq.Quote(log) + "`"
}

// topoCell is nvidia-smi topo -m's cell between GPUa and GPUb.
func topoCell(t *nvsmi.Topology, a, b int) string {
	row := t.Links[fmt.Sprintf("GPU%d", a)]
	for k, g := range t.GPUs {
		if g == fmt.Sprintf("GPU%d", b) && k < len(row) {
			return row[k]
		}
	}
	return "?"
}

// p2pOK reports whether nvidia-smi's P2P read and write status (where
// read) are OK between GPUa and GPUb, both ways.
func p2pOK(h *Host, a, b int) bool {
	for _, m := range []*nvsmi.P2PMatrix{h.P2PRead, h.P2PWrite} {
		if m == nil {
			continue
		}
		for _, pr := range [][2]int{{a, b}, {b, a}} {
			row := m.Status[fmt.Sprintf("GPU%d", pr[0])]
			for k, g := range m.GPUs {
				if g == fmt.Sprintf("GPU%d", pr[1]) && k < len(row) && row[k] != "OK" && row[k] != "U" {
					return false
				}
			}
		}
	}
	return true
}

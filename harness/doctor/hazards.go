package doctor

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/p2p"
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

// measureP2P is the command that measures P2P on this host, writing the
// --p2p file doctor was given, if any.
func measureP2P(h *Host) string {
	if h.P2P != nil {
		return "`" + shellq.Join([]string{"arpatch", "bench", "p2p", "--json", h.P2P.File}) + "`"
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

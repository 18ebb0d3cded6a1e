package doctor

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/kernels"
)

// findings turns what was read into findings with remedies. h holds only
// the judged GPUs (see judge); env is the server's environment.
func findings(h *Host, j *Judged, env []string) []Finding {
	var f []Finding
	add := func(id string, s Severity, title, detail, remedy string) {
		f = append(f, Finding{ID: id, Severity: s, Title: title, Detail: detail, Remedy: remedy})
	}
	if h.DriverHung != "" {
		add("driver.hung", Error, "the NVIDIA driver does not answer", h.DriverHung+"; nothing else was asked of nvidia-smi",
			"look for Xid errors (sudo dmesg | grep -i xid) and stuck processes (fuser -v /dev/nvidia*); a GPU in this state needs its processes killed, a GPU reset (nvidia-smi -r) or a reboot, and any benchmark run now would hang")
	}
	if h.NoNvidiaSMI {
		add("driver.missing", Error, "nvidia-smi is not on PATH", "without it nothing about the GPUs can be read, and without a driver nothing can run on them",
			"install the NVIDIA driver (nvidia-smi comes with it), or run doctor on the GPU host")
	}
	for _, e := range h.Errors {
		add("read.error", Warn, "could not read part of the host", e, "run doctor where nvidia-smi works, or check the driver")
	}
	if h.ToolchainError != "" {
		add("read.toolchain", Warn, "could not read the CUDA toolchain and torch", h.ToolchainError,
			"pass --python with the interpreter of the serving environment")
	}
	// GPUs and PCIe links.
	for _, g := range h.GPUs {
		if g.PCIeWidth > 0 && g.PCIeWidth < g.PCIeWidthMax {
			add("gpu.pcie-width", Warn, fmt.Sprintf("GPU%d runs PCIe x%d of x%d", g.Index, g.PCIeWidth, g.PCIeWidthMax),
				"a narrowed link cuts P2P bandwidth for every allreduce", "reseat the card or check the slot and riser; nvidia-smi -q -d PCIE shows the link")
		}
		if g.PCIeGen > 0 && g.PCIeGen < g.PCIeGenMax {
			add("gpu.pcie-gen", Info, fmt.Sprintf("GPU%d's PCIe link is at gen %d of %d", g.Index, g.PCIeGen, g.PCIeGenMax),
				"idle GPUs lower their link generation to save power; it rises under load", "check again under load before acting")
		}
	}
	// Topology.
	if t := h.Topology; t != nil && len(t.GPUs) > 1 {
		desc := t.PairsByLink()
		switch {
		case t.FullNVLink():
			add("topo.full-nvlink", Info, fmt.Sprintf("full NVLink between all %d GPUs", len(t.GPUs)), "GPU pairs by link: "+desc,
				"conclusions about PCIe contention need a PCIe-only host with more than two GPUs")
		case t.PCIeOnly() && len(t.GPUs) > 2:
			add("topo.pcie-only", Warn, fmt.Sprintf("PCIe-only host with %d GPUs", len(t.GPUs)),
				"GPU pairs by link: "+desc+". Upstream SGLang turns custom allreduce off here and every allreduce goes to NCCL",
				fmt.Sprintf("apply the pcie series (`arpatch apply --recipe pcie`), then measure 1-stage vs 2-stage with `arpatch bench allreduce --world-size %d --src sglang` before serving", len(t.GPUs)))
		case !t.PCIeOnly():
			add("topo.mixed", Warn, "some GPU pairs lack NVLink", "GPU pairs by link: "+desc+"; SGLang's is_full_nvlink is False, so this counts as PCIe",
				"treat it as a PCIe host")
		}
		if numa := t.NUMANodes(); len(numa) > 1 {
			add("topo.numa-split", Warn, fmt.Sprintf("GPUs span %d NUMA nodes (%s)", len(numa), strings.Join(numa, ", ")),
				"SYS pairs cross the inter-socket link; an all-to-all 1-stage allreduce sends every rank's data across it at once",
				"prefer 2-stage (SGLANG_CUSTOM_ALLREDUCE_ALGO=2stage) or NCCL there, and measure both")
		}
	}
	for _, m := range []struct {
		name string
		p    *P2PMatrix
	}{{"read", h.P2PRead}, {"write", h.P2PWrite}} {
		if m.p == nil {
			continue
		}
		if b := m.p.Blocked(); len(b) > 0 {
			add("p2p.blocked", Error, fmt.Sprintf("P2P %s is not supported between %d GPU pairs", m.name, len(b)), strings.Join(b, "; "),
				"custom allreduce needs P2P and NCCL falls back to SHM without it; check ACS in the BIOS or kernel, IOMMU (iommu=pt), and that the GPUs share a root complex")
		}
	}
	if c := h.Cmdline; c != "" {
		if (strings.Contains(c, "intel_iommu=on") || strings.Contains(c, "amd_iommu=on")) && !strings.Contains(c, "iommu=pt") {
			add("iommu.translate", Warn, "the IOMMU translates DMA", "kernel command line: "+c,
				"add iommu=pt (passthrough) to the kernel command line; translated P2P is slower and can fail")
		}
	}
	if h.IOMMUGroups > 0 {
		add("iommu.groups", Info, fmt.Sprintf("%d IOMMU groups", h.IOMMUGroups), "", "if P2P is blocked, check that ACS does not isolate the GPUs behind one switch")
	}
	// Toolchain and torch.
	hasArch := func(cc string) bool {
		for _, g := range h.GPUs {
			if g.ComputeCap == cc {
				return true
			}
		}
		return false
	}
	if tc := h.Toolchain; tc != nil {
		if !tc.NVCC.Found() {
			add("toolchain.nvcc", Warn, "nvcc not found", "arpatch build needs the CUDA toolkit", "install it and set CUDA_HOME")
		} else {
			v := kernels.ParseVersion(tc.NVCC.Version)
			ok120 := v.Major() > 12 || (v.Major() == 12 && len(v) > 1 && v[1] >= 8)
			sev, title := Info, "nvcc "+tc.NVCC.Version+" supports sm_120a"
			if !ok120 {
				sev, title = Info, "nvcc "+tc.NVCC.Version+" cannot compile sm_120a (needs 12.8)"
				if hasArch("12.0") {
					sev = Error
				}
			}
			add("toolchain.nvcc", sev, title, tc.NVCC.Path, "sm_120a needs CUDA 12.8+, FlashInfer on sm_120 needs 12.9+")
		}
		switch {
		case tc.Torch.Version == "":
			add("toolchain.torch", Warn, "torch not importable", tc.Torch.Error, "pass --python with the serving environment's interpreter")
		default:
			sev := Info
			detail := ""
			if tc.NVCC.Found() && kernels.ParseVersion(tc.Torch.CUDA).Major() != kernels.ParseVersion(tc.NVCC.Version).Major() {
				sev, detail = Warn, "torch's CUDA major differs from nvcc's: kernels built here will not load in this torch"
			}
			add("toolchain.torch", sev, fmt.Sprintf("torch %s (CUDA %s)", tc.Torch.Version, tc.Torch.CUDA), detail, "")
		}
	}
	// Installed kernels.
	if h.SGLKernel == "" {
		add("sgl-kernel.missing", Info, "sgl-kernel is not installed for this Python", "", "arpatch build produces a wheel; pip install it")
	} else {
		need := map[string]bool{}
		for _, g := range h.GPUs {
			if g.ComputeCap != "" { // unreadable: no finding (Judged.Unreadable names it)
				need[strings.ReplaceAll(g.ComputeCap, ".", "")] = true
			}
		}
		all := map[string]bool{}
		for _, archs := range h.KernelArchs {
			for _, a := range archs {
				all[strings.TrimRight(a, "af")] = true
			}
		}
		for cc := range need {
			if len(h.KernelArchs) > 0 && !all[cc] {
				add("sgl-kernel.arch", Error, fmt.Sprintf("installed sgl-kernel has no sm_%s code", cc),
					fmt.Sprintf("%s holds %s; kernels fail with 'no kernel image is available' on these GPUs", h.SGLKernel, archList(h.KernelArchs)),
					fmt.Sprintf("arpatch build --arch %sa and install that wheel", cc))
			}
		}
	}
	// Environment hazards.
	get := func(k string) string { v, _ := lookupEnv(env, k); return v }
	if v := get("NCCL_P2P_DISABLE"); v == "1" || strings.EqualFold(v, "true") {
		add("env.nccl-p2p-disable", Error, "NCCL_P2P_DISABLE="+v, "NCCL goes through host memory (SHM): ~200 us per 42 KB allreduce instead of ~25 us",
			"unset NCCL_P2P_DISABLE; if P2P hangs without it, fix ACS/IOMMU instead")
	}
	pcieOnly := h.Topology != nil && !h.Topology.FullNVLink()
	if v := get("NCCL_PROTO"); strings.Contains(strings.ToUpper(v), "LL128") && !strings.HasPrefix(v, "^") && pcieOnly {
		add("env.nccl-proto-ll128", Warn, "NCCL_PROTO="+v+" on a host without full NVLink",
			"NCCL enables LL128 only where the path is known safe; forcing it over PCIe risks corrupt or slow allreduces", "unset NCCL_PROTO")
	}
	if v := get("PYTORCH_CUDA_ALLOC_CONF"); strings.Contains(v, "expandable_segments:True") {
		add("env.expandable-segments", Warn, "PYTORCH_CUDA_ALLOC_CONF="+v,
			"expandable segments are not plain cudaMalloc blocks: CUDA-graph capture with the PCIe custom allreduce registers their IPC handles and fails",
			"remove expandable_segments:True when serving with custom allreduce")
	}
	if j.ServerArgs != nil {
		f = append(f, serverFindings(j, get("SGLANG_FORCE_CUSTOM_AR_PCIE"))...)
	}
	return f
}

// serverFindings checks an SGLang launch command line as argparse read it
// (j.ServerArgs), against the GPUs the job can see.
func serverFindings(j *Judged, forcePCIe string) []Finding {
	a := j.ServerArgs
	var f []Finding
	written := func(name string) string {
		if w := a.Written[name]; w != "" && w != name {
			return w + " (" + name + ")"
		}
		return name
	}
	if len(a.Problems) > 0 {
		f = append(f, Finding{ID: "server.args", Severity: Error, Title: "SGLang's argument parser would refuse this command line",
			Detail: strings.Join(a.Problems, "; ") + " (read with " + j.OptionsFrom + ")",
			Remedy: "write each option in full, as python -m sglang.launch_server --help lists it"})
	}
	algo := strings.ToUpper(a.Values["--speculative-algorithm"])
	draft, hasDraft := a.Values["--speculative-draft-model-path"]
	if algo == "EAGLE" && strings.Contains(strings.ToLower(draft), "eagle3") {
		f = append(f, Finding{ID: "server.eagle-vs-eagle3", Severity: Error,
			Title:  written("--speculative-algorithm") + " EAGLE with an EAGLE-3 draft model (" + draft + ")",
			Detail: "SGLang then accepts almost nothing: accept length 1.00, and tok/s below no speculation",
			Remedy: "use --speculative-algorithm EAGLE3"})
	}
	if (algo == "EAGLE3" || algo == "EAGLE") && (!hasDraft || draft == "") {
		f = append(f, Finding{ID: "server.no-draft", Severity: Error, Title: written("--speculative-algorithm") + " " + algo + " without --speculative-draft-model-path (or its alias --speculative-draft-model)", Remedy: "pass the draft model"})
	}
	if _, off := a.Values["--disable-custom-all-reduce"]; off && forcePCIe == "1" {
		f = append(f, Finding{ID: "server.custom-ar-off", Severity: Warn, Title: written("--disable-custom-all-reduce") + " with SGLANG_FORCE_CUSTOM_AR_PCIE=1",
			Detail: "the flag wins: every allreduce goes to NCCL", Remedy: "drop one of them"})
	}
	if s, ok := a.Values["--tp-size"]; ok && j.Visible.Unknown == "" {
		n, err := strconv.Atoi(s)
		base, _ := strconv.Atoi(a.Values["--base-gpu-id"])
		step, serr := strconv.Atoi(a.Values["--gpu-id-step"])
		if serr != nil || step < 1 {
			step = 1
		}
		vis := len(j.Visible.Indexes)
		last := base + (n-1)*step // the CUDA device of the last TP rank
		switch {
		case err != nil || n < 1:
		case n > vis:
			f = append(f, Finding{ID: "server.tp", Severity: Error,
				Title:  fmt.Sprintf("%s %d but the job sees %d GPUs", written("--tp-size"), n, vis),
				Detail: j.Why, Remedy: fmt.Sprintf("lower --tp-size to at most %d, or make more GPUs visible (CUDA_VISIBLE_DEVICES)", vis)})
		case last >= vis:
			f = append(f, Finding{ID: "server.tp", Severity: Error,
				Title:  fmt.Sprintf("%s %d from --base-gpu-id %d with --gpu-id-step %d needs CUDA devices up to %d, but the job sees %d GPUs", written("--tp-size"), n, base, step, last, vis),
				Detail: j.Why, Remedy: "lower --base-gpu-id, --gpu-id-step or --tp-size"})
		}
	}
	return f
}

func archList(m map[string][]string) string {
	seen := map[string]bool{}
	var out []string
	for _, archs := range m {
		for _, a := range archs {
			if !seen[a] {
				seen[a] = true
				out = append(out, "sm_"+a)
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "no CUDA code"
	}
	return strings.Join(out, ", ")
}

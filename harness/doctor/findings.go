package doctor

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/textfmt"
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
		// What nvidia-smi could not give was not judged: an error, so that
		// doctor's exit says the host is not known good.
		add("read.error", Error, "could not read part of the host, so the GPUs are not fully judged", e, "run doctor where nvidia-smi works, or check the driver")
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
			remedy := fmt.Sprintf("apply the pcie series (`arpatch apply --recipe pcie`): with %s=1 its auto dispatch runs %s; build its extension (`arpatch build --allreduce-ext --src sglang`), then measure it against NCCL here with `arpatch tune allreduce --world-size %d` before serving",
				tune.EnvForce, tune.AutoText(len(t.GPUs)), len(t.GPUs))
			if why := customAROff(h); why != "" {
				remedy = "the pcie series cannot help: " + why
			}
			add("topo.pcie-only", Warn, fmt.Sprintf("PCIe-only host with %d GPUs", len(t.GPUs)),
				"GPU pairs by link: "+desc+". Upstream SGLang turns custom allreduce off here and every allreduce goes to NCCL", remedy)
		case !t.PCIeOnly():
			add("topo.mixed", Warn, "some GPU pairs lack NVLink", "GPU pairs by link: "+desc+"; SGLang's is_full_nvlink is False, so this counts as PCIe",
				"treat it as a PCIe host")
		}
		if numa := t.NUMANodes(); len(numa) > 1 {
			add("topo.numa-split", Warn, fmt.Sprintf("GPUs span %d NUMA nodes (%s)", len(numa), strings.Join(numa, ", ")),
				"SYS pairs cross the inter-socket link; an all-to-all 1-stage allreduce sends every rank's data across it at once",
				numaRemedy(h, len(t.GPUs)))
		}
	}
	for _, m := range h.blockedP2P() {
		add("p2p.blocked", Error, fmt.Sprintf("P2P %s is not supported between %s", m.name, textfmt.Plural(len(m.pairs), "GPU pair", "GPU pairs")), strings.Join(m.pairs, "; "),
			"custom allreduce needs P2P and NCCL falls back to SHM without it; check ACS in the BIOS or kernel, IOMMU (iommu=pt), and that the GPUs share a root complex")
	}
	f = append(f, iommuFindings(h)...)
	f = append(f, acsFindings(h)...)
	f = append(f, measuredFindings(h)...)
	f = append(f, ncclFindings(h, j)...)
	// Toolchain and torch.
	if tc := h.Toolchain; tc != nil {
		if !tc.NVCC.Found() {
			add("toolchain.nvcc", Warn, "nvcc not found", "arpatch build needs the CUDA toolkit", "install it and set CUDA_HOME")
		} else {
			add(nvccFinding(tc.NVCC.Version, tc.NVCC.Path, gpuArchs(h.GPUs)))
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
		need := map[string]string{} // compute capability digits ("120") -> as nvidia-smi prints it ("12.0")
		for _, g := range h.GPUs {
			if g.ComputeCap != "" { // unreadable: no finding (Judged.Unreadable names it)
				need[cudaarch.CCDigits(g.ComputeCap)] = g.ComputeCap
			}
		}
		all := map[string]bool{}
		for _, archs := range h.KernelArchs {
			for _, a := range archs {
				all[cudaarch.Arch(a).CC()] = true
			}
		}
		for digits, cc := range need {
			if len(h.KernelArchs) > 0 && !all[digits] {
				remedy := fmt.Sprintf("arpatch builds for no arch of compute capability %s (it knows %s)", cc, strings.Join(cudaarch.Strings(cudaarch.Known()), ", "))
				if a, ok := cudaarch.ForComputeCap(cc); ok {
					remedy = fmt.Sprintf("arpatch build --arch %s and install that wheel", a)
				}
				add("sgl-kernel.arch", Error, fmt.Sprintf("installed sgl-kernel has no sm_%s code", digits),
					fmt.Sprintf("%s holds %s; kernels fail with 'no kernel image is available' on these GPUs", h.SGLKernel, archList(h.KernelArchs)),
					remedy)
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
		f = append(f, serverFindings(j, get(tune.EnvForce))...)
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
	problems := append(slices.Clip(a.Problems), valueProblems(a)...)
	if len(problems) > 0 {
		f = append(f, Finding{ID: "server.args", Severity: Error, Title: "SGLang's argument parser would refuse this command line",
			Detail: strings.Join(problems, "; ") + " (read with " + j.OptionsFrom + ")",
			Remedy: "fix each argument named; write each option in full, as python -m sglang.launch_server --help lists it"})
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
	if _, off := a.Values["--disable-custom-all-reduce"]; off && tune.Forced(forcePCIe) {
		f = append(f, Finding{ID: "server.custom-ar-off", Severity: Warn, Title: written("--disable-custom-all-reduce") + " with " + tune.EnvForce + "=" + forcePCIe,
			Detail: "the flag wins: every allreduce goes to NCCL", Remedy: "drop one of them"})
	}
	if l, ok := layoutOf(a); ok && j.Visible.Unknown == "" && len(j.Visible.Indexes) > 0 && l.nnodes == 1 {
		vis := len(j.Visible.Indexes)
		need := l.tp * l.pp
		if l.dp > 1 && !l.dpAttention {
			need *= l.dp
		}
		what := written("--tp-size") + " " + strconv.Itoa(l.tp)
		if need != l.tp {
			what = l.name()
		}
		switch {
		case need > vis:
			f = append(f, Finding{ID: "server.tp", Severity: Error,
				Title:  fmt.Sprintf("%s but the job sees %d GPUs", what, vis),
				Detail: j.Why, Remedy: fmt.Sprintf("lower --tp-size to at most %d, or make more GPUs visible (CUDA_VISIBLE_DEVICES)", vis/(need/l.tp))})
		case l.last() >= vis:
			var off []string
			for _, g := range l.tpGroups() {
				for _, c := range g {
					if c >= vis {
						off = append(off, strconv.Itoa(c))
					}
				}
			}
			from := fmt.Sprintf("from --base-gpu-id %d", l.base)
			if l.step != 1 {
				from += fmt.Sprintf(" with --gpu-id-step %d", l.step)
			}
			seen := "only devices 0-" + strconv.Itoa(vis-1) + " are"
			if vis == 1 {
				seen = "only device 0 is"
			}
			f = append(f, Finding{ID: "server.tp", Severity: Error,
				Title:  fmt.Sprintf("%s %s uses CUDA devices %s, but %s visible", what, from, l.devices(), seen),
				Detail: fmt.Sprintf("%s; CUDA device %s does not exist for the job", j.Why, strings.Join(off, ", ")),
				Remedy: "lower --base-gpu-id, --gpu-id-step or --tp-size"})
		}
	}
	return f
}

// valueProblems are the layout values SGLang refuses: one that is not an
// int (argparse's type=int), and those its checks assert against.
//
// Upstream: python/sglang/srt/server_args.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (add_cli_args: type=int; ServerArgs.check_server_args: "base_gpu_id must
// be non-negative", "gpu_id_step must be positive"), the same at 0bda0b168ad5.
func valueProblems(a *ServerArgs) []string {
	var out []string
	for _, c := range []struct {
		name string
		min  int
		why  string
	}{
		{"--tp-size", 1, "SGLang launches no TP rank with fewer than 1"},
		{"--dp-size", 1, "SGLang launches no DP rank with fewer than 1"},
		{"--pp-size", 1, "SGLang launches no PP stage with fewer than 1"},
		{"--nnodes", 1, "SGLang needs at least 1 node"},
		{"--base-gpu-id", 0, "base_gpu_id must be non-negative (ServerArgs.check_server_args)"},
		{"--gpu-id-step", 1, "gpu_id_step must be positive (ServerArgs.check_server_args)"},
	} {
		v, ok := a.Values[c.name]
		if !ok {
			continue
		}
		w := a.Written[c.name]
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("argument %s: invalid int value: '%s'", w, v))
		case n < c.min:
			out = append(out, fmt.Sprintf("%s %d: %s", w, n, c.why))
		}
	}
	return out
}

func archList(m map[string][]string) string {
	seen := map[string]bool{}
	var out []string
	for _, archs := range m {
		for _, a := range archs {
			if !seen[a] {
				seen[a] = true
				out = append(out, cudaarch.Arch(a).SM())
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "no CUDA code"
	}
	return strings.Join(out, ", ")
}

// gpuArchs returns the archs arpatch builds for the GPUs' compute
// capabilities (cudaarch.ForComputeCap), unique and sorted; GPUs whose
// capability is unreadable or has no arch in the table give none.
func gpuArchs(gpus []nvsmi.GPU) []cudaarch.Arch {
	var out []cudaarch.Arch
	for _, g := range gpus {
		if a, ok := cudaarch.ForComputeCap(g.ComputeCap); ok && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// nvccFinding judges nvcc version against the archs of the GPUs (onGPU),
// or, with none known, against sm_120a, what a recipe builds by default:
// an arch this nvcc cannot compile is an Error on a host with such GPUs,
// else Info. The detail gives each arch's minimum from cudaarch's table.
func nvccFinding(version, path string, onGPU []cudaarch.Arch) (id string, sev Severity, title, detail, remedy string) {
	v := kernels.ParseVersion(version)
	archs := onGPU
	if len(archs) == 0 {
		archs = []cudaarch.Arch{"120a"}
	}
	var ok, cannot, needs []string
	for _, a := range archs {
		major, minor, _ := a.MinNVCC()
		needs = append(needs, fmt.Sprintf("%s needs CUDA %d.%d+", a.SM(), major, minor))
		if a.NVCCSupports(v.Major(), v.Minor()) {
			ok = append(ok, a.SM())
		} else {
			cannot = append(cannot, fmt.Sprintf("%s (needs %d.%d)", a.SM(), major, minor))
		}
	}
	if slices.Contains(archs, "120a") {
		needs = append(needs, "FlashInfer on sm_120 needs 12.9+")
	}
	detail = path
	remedy = strings.Join(needs, ", ")
	if len(cannot) == 0 {
		return "toolchain.nvcc", Info, "nvcc " + version + " supports " + strings.Join(ok, ", "), detail, remedy
	}
	sev = Info
	if len(onGPU) > 0 {
		sev = Error
	}
	return "toolchain.nvcc", sev, "nvcc " + version + " cannot compile " + strings.Join(cannot, ", "), detail, remedy
}

// numaRemedy is the NUMA split's remedy for h's n GPUs: the pcie series' auto
// dispatch (tune.AutoText), which above two GPUs pushes and cuts the
// group into islands on the sockets, so only one slice per rank crosses
// the link; and the measurement that decides; where custom allreduce
// cannot start (customAROff), why.
func numaRemedy(h *Host, n int) string {
	if why := customAROff(h); why != "" {
		return "custom allreduce does not run here (" + why + "): NCCL carries every allreduce across the sockets"
	}
	return fmt.Sprintf("leave the schedule to the pcie series' auto (%s); measure it against NCCL here with `arpatch tune allreduce --world-size %d`", tune.AutoText(n), n)
}

package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/p2p"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/kernels"
)

// Severity orders findings.
type Severity string

const (
	Info  Severity = "info"
	Warn  Severity = "warn"
	Error Severity = "error"
)

// Finding is one observation with what to do about it.
type Finding struct {
	ID       string   `json:"id"` // stable, e.g. "p2p.blocked"
	Severity Severity `json:"severity"`
	Title    string   `json:"title"`
	Detail   string   `json:"detail,omitempty"`
	Remedy   string   `json:"remedy,omitempty"`
}

// Host is what doctor read.
type Host struct {
	GPUs        []nvsmi.GPU      `json:"gpus,omitempty"`
	Topology    *nvsmi.Topology  `json:"topology,omitempty"`
	P2PRead     *nvsmi.P2PMatrix `json:"p2p_read,omitempty"`
	P2PWrite    *nvsmi.P2PMatrix `json:"p2p_write,omitempty"`
	IOMMUGroups int              `json:"iommu_groups"`
	// IOMMU are the groups whose type could be read, with their devices.
	IOMMU   []IOMMUGroup `json:"iommu,omitempty"`
	Cmdline string       `json:"kernel_cmdline,omitempty"`
	// PCI is `lspci -D -vvv` (the switch ports' ACS).
	PCI *PCIScan `json:"pci,omitempty"`
	// P2P is the host qualification report given with --p2p.
	P2P *Measured `json:"p2p,omitempty"`
	// NCCL is the NCCL_DEBUG=INFO log given with --nccl-log.
	NCCL        *NCCLLog            `json:"nccl,omitempty"`
	Toolchain   *kernels.Toolchain  `json:"toolchain,omitempty"`
	SGLKernel   string              `json:"sgl_kernel_dir,omitempty"`
	KernelArchs map[string][]string `json:"sgl_kernel_archs,omitempty"` // .so file -> archs
	Errors      []string            `json:"errors,omitempty"`           // what nvidia-smi could not read
	// ToolchainError says why the toolchain probe failed.
	ToolchainError string `json:"toolchain_error,omitempty"`
	// DriverHung names the nvidia-smi call that did not answer in time;
	// the later ones were not tried.
	DriverHung string `json:"driver_hung,omitempty"`
	// NoNvidiaSMI is set when nvidia-smi is not on PATH: no driver, or
	// not this machine's GPUs.
	NoNvidiaSMI bool `json:"no_nvidia_smi,omitempty"`
}

// Report is doctor's output.
type Report struct {
	Schema  string    `json:"schema"`
	Created time.Time `json:"created_at"`
	Host    Host      `json:"host"`
	// Judged says which GPUs, flags and environment the findings and the
	// verdict describe.
	Judged   Judged    `json:"judged"`
	Findings []Finding `json:"findings"`
	Verdict  string    `json:"verdict"`
	// Expect is the traffic model's estimate at the verify shape (harness/traffic).
	Expect string `json:"expect,omitempty"`
	// Groups holds each TP group's verdict when the server runs several
	// (Verdict then joins them and Expect is empty).
	Groups []GroupReport `json:"groups,omitempty"`
	// Interrupted is true when ctx ended (a signal) during the checks:
	// the commands still running were stopped, the findings are
	// incomplete, and Verdict says so instead of judging the host.
	Interrupted bool `json:"interrupted,omitempty"`
}

// InterruptedVerdict is Report.Verdict of an interrupted doctor.
const InterruptedVerdict = "interrupted: the checks still running were stopped; the findings are incomplete and no verdict is drawn"

// Judged is what the findings describe: the GPUs the job uses (those
// CUDA_VISIBLE_DEVICES leaves visible, narrowed to the TP group when the
// server command gives a TP size), the server's flags as SGLang reads
// them, and what could not be read.
type Judged struct {
	Visible Visibility `json:"visible"`
	// GPUs are the nvidia-smi indexes judged, in CUDA's order; Why says
	// how they were chosen.
	GPUs []int  `json:"gpus"`
	Why  string `json:"why"`
	// Groups are the TP groups among GPUs (one, all of them, unless the
	// server runs several: --dp-size, --pp-size); each is judged alone.
	Groups [][]int `json:"groups"`
	// Server is the --server-cmd as split and parsed; OptionsFrom names
	// the option table it was read with.
	Server      *ServerCommand `json:"server,omitempty"`
	ServerArgs  *ServerArgs    `json:"server_args,omitempty"`
	OptionsFrom string         `json:"options_from,omitempty"`
	// Unreadable lists every value nvidia-smi could not read among the
	// judged GPUs ("GPU1 compute_cap: [N/A]", "P2P read GPU0->GPU1: U");
	// no finding is drawn from them.
	Unreadable []string `json:"unreadable,omitempty"`
}

// Runner runs a command and returns its combined output.
type Runner func(ctx context.Context, name string, args ...string) (string, error)

// ErrTimedOut marks a command that did not finish within its time.
var ErrTimedOut = errors.New("timed out")

// CommandTimeout bounds each command ExecRunner runs. nvidia-smi answers
// in well under a second with persistence mode on, and in a few seconds
// on 8 GPUs without it; one that takes longer is stuck in the driver.
const CommandTimeout = 20 * time.Second

// ExecRunner runs real commands, each bounded by CommandTimeout; one that
// runs longer is killed with its process group (internal/procgroup, 2 s
// from SIGTERM to SIGKILL) and its error wraps ErrTimedOut.
func ExecRunner(env []string) Runner {
	return func(ctx context.Context, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
		defer cancel()
		cmd := procgroup.Command(ctx, 2*time.Second, name, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return string(out), fmt.Errorf("%s did not answer in %s: %w", name, CommandTimeout, ErrTimedOut)
		}
		return string(out), err
	}
}

// Options holds every input of Inspect.
type Options struct {
	Run    Runner
	Env    []string // the environment to check for hazards
	Python string
	// ServerCmd is a server command line to check (EAGLE vs EAGLE3 and
	// other flags), e.g. "python -m sglang.launch_server --model-path ...".
	// Leading VAR=value words are the server's environment.
	ServerCmd string
	// ServerOptions is the option table ServerCmd is read with; nil uses
	// BuiltinServerOptions. ParseServerArgsPy reads a tree's.
	ServerOptions *ServerOptions
	FS            fs.FS // the host's root file system, for /proc and /sys
	// P2P is a host qualification report (`arpatch bench p2p --json
	// FILE`), P2PFile the FILE it was read from: its corrupt pairs are
	// errors, and the traffic model takes its constants (p2p.ModelParams).
	P2P     *p2p.Report
	P2PFile string
	// NCCLLog is the output of a run with NCCL_DEBUG=INFO (arpatch bench
	// allreduce --log FILE), NCCLLogFile the FILE: where NCCL took SHM
	// between judged GPUs, doctor says why (ncclFindings).
	NCCLLog     []string
	NCCLLogFile string
	// Probe reads the toolchain; nil uses kernels.Probe.
	Probe func(ctx context.Context) (*kernels.Toolchain, error)
}

// Inspect reads the host and returns the findings. Missing tools are
// findings, not errors.
func Inspect(ctx context.Context, o Options) *Report {
	rep := &Report{Schema: "arpatch.doctor/v1", Created: time.Now().UTC()}
	defer func() {
		if ctx.Err() != nil {
			rep.Interrupted, rep.Verdict, rep.Expect, rep.Groups = true, InterruptedVerdict, "", nil
		}
	}()
	h := &rep.Host
	// nvidia-smi: a call that hangs means the driver is stuck; the other
	// calls would hang too, so doctor stops asking and says so.
	// A missing nvidia-smi is reported once, not once per call.
	missing := false
	smi := func(args ...string) (string, bool) {
		if h.DriverHung != "" || missing {
			return "", false
		}
		label := "nvidia-smi " + strings.Join(args, " ")
		if strings.HasPrefix(args[0], "--query-gpu") {
			label = "nvidia-smi --query-gpu"
		}
		out, err := o.Run(ctx, "nvidia-smi", args...)
		switch {
		case errors.Is(err, ErrTimedOut):
			h.DriverHung = label + ": " + err.Error()
			return "", false
		case errors.Is(err, exec.ErrNotFound) || strings.Contains(fmt.Sprint(err), "executable file not found"):
			missing, h.NoNvidiaSMI = true, true
			return "", false
		case err != nil:
			h.Errors = append(h.Errors, label+": "+cmp.Or(textfmt.FirstLine(out), err.Error()))
			return "", false
		}
		return out, true
	}
	if out, ok := smi("--query-gpu="+nvsmi.QueryGPUFields, "--format=csv"); ok {
		var err error
		if h.GPUs, err = nvsmi.ParseQueryGPU(out); err != nil {
			h.Errors = append(h.Errors, err.Error())
		}
	}
	if out, ok := smi("topo", "-m"); ok {
		var err error
		if h.Topology, err = nvsmi.ParseTopoMatrix(out); err != nil {
			h.Errors = append(h.Errors, err.Error())
		}
	}
	// The outputs describe one host: as many GPUs in each as topo -m
	// has. (A count that differs would have the model judge some GPUs
	// without their links, or links without their GPUs.)
	sameGPUs := func(what string, n int) bool {
		if h.Topology == nil || n == len(h.Topology.GPUs) {
			return true
		}
		h.Errors = append(h.Errors, fmt.Sprintf("nvidia-smi %s lists %d GPUs, nvidia-smi topo -m %d: the two should describe the same GPUs", what, n, len(h.Topology.GPUs)))
		return false
	}
	if h.GPUs != nil && !sameGPUs("--query-gpu", len(h.GPUs)) {
		h.GPUs, h.Topology = nil, nil
	}
	for _, m := range []struct {
		flag string
		dst  **nvsmi.P2PMatrix
	}{{"r", &h.P2PRead}, {"w", &h.P2PWrite}} {
		if out, ok := smi("topo", "-p2p", m.flag); ok {
			var err error
			if *m.dst, err = nvsmi.ParseP2P(out); err != nil {
				h.Errors = append(h.Errors, err.Error())
			} else if !sameGPUs("topo -p2p "+m.flag, len((*m.dst).GPUs)) {
				*m.dst = nil
			}
		}
	}
	if o.FS != nil {
		h.IOMMUGroups, h.IOMMU = readIOMMU(o.FS)
		if b, err := fs.ReadFile(o.FS, "proc/cmdline"); err == nil {
			h.Cmdline = strings.TrimSpace(string(b))
		}
	}
	if out, err := o.Run(ctx, "lspci", "-D", "-vvv"); err == nil {
		h.PCI = &PCIScan{Devices: ParseLSPCI(out)}
	} else if errors.Is(err, exec.ErrNotFound) || strings.Contains(err.Error(), "executable file not found") {
		h.PCI = &PCIScan{Error: "lspci is not on PATH"}
	} else if !errors.Is(err, ErrTimedOut) {
		h.PCI = &PCIScan{Error: "lspci -D -vvv: " + cmp.Or(textfmt.FirstLine(out), err.Error())}
	}
	if o.P2P != nil {
		h.P2P = &Measured{File: o.P2PFile, Report: o.P2P}
	}
	if o.NCCLLog != nil {
		h.NCCL = &NCCLLog{File: o.NCCLLogFile, Transport: allreduce.ParseNCCLTransport(o.NCCLLog)}
	}
	if o.Probe != nil {
		if tc, err := o.Probe(ctx); err == nil {
			h.Toolchain = tc
		} else {
			h.ToolchainError = err.Error()
		}
	}
	python := pyenv.Or(o.Python)
	if out, err := o.Run(ctx, python, "-c", "import importlib.util, os; s = importlib.util.find_spec('sgl_kernel'); print(os.path.dirname(s.origin) if s and s.origin else '')"); err == nil {
		h.SGLKernel = textfmt.LastLine(out)
	}
	if h.SGLKernel != "" {
		h.KernelArchs = map[string][]string{}
		sos, _ := filepath.Glob(filepath.Join(h.SGLKernel, "*.so"))
		more, _ := filepath.Glob(filepath.Join(h.SGLKernel, "*", "*.so"))
		for _, so := range append(sos, more...) {
			if out, err := o.Run(ctx, "cuobjdump", "--list-elf", so); err == nil {
				h.KernelArchs[filepath.Base(so)] = ParseListELF(out)
			}
		}
	}
	env := o.Env
	var extra []Finding
	j := &rep.Judged
	if o.ServerCmd != "" {
		sc, err := SplitServerCmd(o.ServerCmd, func(k string) string { v, _ := lookupEnv(env, k); return v })
		if err != nil {
			extra = append(extra, Finding{ID: "server.cmd", Severity: Error, Title: "cannot read the server command", Detail: err.Error(),
				Remedy: "pass --server-cmd the command line as you would type it in a shell, quoted once"})
		} else {
			table := o.ServerOptions
			if table == nil {
				table = BuiltinServerOptions()
			}
			j.Server, j.ServerArgs, j.OptionsFrom = sc, table.Parse(sc.Args), table.Source
			env = append(slices.Clip(env), sc.Env...)
		}
	}
	spec, set := lookupEnv(env, "CUDA_VISIBLE_DEVICES")
	j.Visible = ResolveVisible(spec, set, h.GPUs)
	hosts := judge(h, j)
	if h.P2P != nil {
		var judged []nvsmi.GPU
		for _, gh := range hosts {
			judged = append(judged, gh.GPUs...)
		}
		h.P2P.Covers = h.P2P.Report.Covers(judged)
	}
	extra = append(extra, visibleFindings(h, j)...)
	for i, gh := range hosts {
		for _, f := range findings(gh, j, env) {
			if len(hosts) > 1 && (strings.HasPrefix(f.ID, "topo.") || strings.HasPrefix(f.ID, "p2p.")) {
				f.Title = groupLabel(j.Groups[i]) + ": " + f.Title
			}
			if !slices.Contains(rep.Findings, f) {
				rep.Findings = append(rep.Findings, f)
			}
		}
	}
	rep.Findings = append(rep.Findings, extra...)
	sort.SliceStable(rep.Findings, func(i, j int) bool { return rank(rep.Findings[i].Severity) > rank(rep.Findings[j].Severity) })
	if len(hosts) == 1 {
		rep.Verdict = verdict(hosts[0], j)
		rep.Expect = expectation(hosts[0])
		return rep
	}
	var vs []string
	for i, gh := range hosts {
		g := GroupReport{GPUs: j.Groups[i], Verdict: verdict(gh, j), Expect: expectation(gh)}
		rep.Groups = append(rep.Groups, g)
		vs = append(vs, groupLabel(g.GPUs)+": "+g.Verdict)
	}
	rep.Verdict = fmt.Sprintf("%d TP groups, judged one by one: %s", len(hosts), strings.Join(vs, " | "))
	return rep
}

// GroupReport is the verdict on one TP group when the server runs several
// (DP or PP): each group's allreduce runs among its own GPUs only.
type GroupReport struct {
	GPUs    []int  `json:"gpus"` // nvidia-smi indexes, in rank order
	Verdict string `json:"verdict"`
	Expect  string `json:"expect,omitempty"`
}

func groupLabel(g []int) string { return "TP group GPUs " + textfmt.Ints(g, ",") }

// visibleFindings says when the job sees no GPU, or when which GPUs it
// sees cannot be worked out.
func visibleFindings(h *Host, j *Judged) []Finding {
	v := j.Visible
	switch {
	case v.Unknown != "":
		return []Finding{{ID: "visible.unknown", Severity: Error, Title: "which GPUs the job uses cannot be judged",
			Detail: v.Unknown + "; no finding is drawn about its GPUs, topology or TP size",
			Remedy: "to have doctor judge them, run it with CUDA_VISIBLE_DEVICES naming whole GPUs by index or by the UUIDs `nvidia-smi -L` prints"}}
	case v.Set && len(v.Indexes) == 0 && len(h.GPUs) > 0:
		return []Finding{{ID: "visible.none", Severity: Error, Title: "no GPU is visible to the job", Detail: j.Why,
			Remedy: fmt.Sprintf("set CUDA_VISIBLE_DEVICES to GPU indexes nvidia-smi lists (%s), each once and comma-separated, or unset it to use all %d", indexRange(h.GPUs), len(h.GPUs))}}
	}
	return nil
}

func indexRange(gpus []nvsmi.GPU) string {
	idx := make([]int, len(gpus))
	for i, g := range gpus {
		idx[i] = g.Index
	}
	return textfmt.Ints(idx, ",")
}

// lookupEnv returns the last value of k in env and whether it is set.
func lookupEnv(env []string, k string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if a, b, ok := strings.Cut(env[i], "="); ok && a == k {
			return b, true
		}
	}
	return "", false
}

// judge picks the GPUs the job uses and returns the host restricted to
// each TP group on them: the visible GPUs in CUDA's order, then, when the
// server command gives a TP size (on one node), the TP groups SGLang
// places on them (tpGroups). It fills j.GPUs (every judged GPU), j.Groups
// (nvidia-smi indexes per TP group), j.Why and j.Unreadable.
func judge(h *Host, j *Judged) []*Host {
	v := j.Visible
	vis := v.Indexes
	switch {
	case v.Unknown != "":
		j.Why = v.Unknown
	case !v.Set:
		j.Why = fmt.Sprintf("CUDA_VISIBLE_DEVICES unset: all %d GPUs", len(vis))
	default:
		j.Why = fmt.Sprintf("CUDA_VISIBLE_DEVICES=%s: %d visible", v.Spec, len(vis))
		if v.Note != "" {
			j.Why += " (" + v.Note + ")"
		}
	}
	groups := [][]int{vis}
	if l, ok := layoutOf(j.ServerArgs); ok && v.Unknown == "" {
		if l.nnodes > 1 {
			j.Why += fmt.Sprintf("; --nnodes %d: doctor judges this node's visible GPUs as one group", l.nnodes)
		} else if devs := l.tpGroups(); l.last() < len(vis) {
			groups = nil
			for _, d := range devs {
				var g []int
				for _, c := range d {
					g = append(g, vis[c])
				}
				groups = append(groups, g)
			}
			if len(groups) > 1 || len(groups[0]) != len(vis) {
				j.Why += "; " + l.describe()
			}
		}
	}
	j.GPUs = []int{}
	for _, g := range groups {
		j.GPUs = append(j.GPUs, g...)
	}
	j.Groups = groups
	var out []*Host
	for _, g := range groups {
		out = append(out, restrict(h, g, j))
	}
	return out
}

// restrict returns h with only the GPUs in group, and adds what nvidia-smi
// could not read about them to j.Unreadable (once per value).
func restrict(h *Host, group []int, j *Judged) *Host {
	out := *h
	out.GPUs = nil
	var names []string
	note := func(s string) {
		if !slices.Contains(j.Unreadable, s) {
			j.Unreadable = append(j.Unreadable, s)
		}
	}
	if h.P2P != nil {
		m := *h.P2P
		out.P2P = &m
	}
	for _, i := range group {
		for _, g := range h.GPUs {
			if g.Index == i {
				out.GPUs = append(out.GPUs, g)
				for _, u := range g.Unreadable {
					note(fmt.Sprintf("GPU%d %s (nvidia-smi --query-gpu)", i, u))
				}
			}
		}
		names = append(names, fmt.Sprintf("GPU%d", i))
	}
	if h.Topology != nil {
		out.Topology = h.Topology.Sub(names)
		for _, g := range out.Topology.GPUs {
			if n := out.Topology.NUMA[g]; unreadableValue(n) {
				note(fmt.Sprintf("%s NUMA Affinity: %s (nvidia-smi topo -m)", g, n))
			}
		}
	}
	for _, m := range []struct {
		name     string
		src, dst **nvsmi.P2PMatrix
	}{{"read", &h.P2PRead, &out.P2PRead}, {"write", &h.P2PWrite, &out.P2PWrite}} {
		if *m.src != nil {
			*m.dst = (*m.src).Sub(names)
			for _, p := range (*m.dst).Unknown() {
				note(fmt.Sprintf("P2P %s %s: U (nvidia-smi topo -p2p)", m.name, p))
			}
		}
	}
	if out.P2P != nil {
		out.P2P.Covers = out.P2P.Report.Covers(out.GPUs)
	}
	return &out
}

// unreadableValue reports a value nvidia-smi prints when it cannot read one.
func unreadableValue(s string) bool {
	s = strings.TrimSpace(s)
	return s == "N/A" || strings.HasPrefix(s, "[")
}

func rank(s Severity) int {
	switch s {
	case Error:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// OSFS is the host's root file system for Options.FS.
func OSFS() fs.FS { return os.DirFS("/") }

// verdict sums the judged GPUs' topology up in one line.
func verdict(h *Host, j *Judged) string {
	t := h.Topology
	if j.Visible.Unknown != "" && len(h.GPUs) == 0 && t != nil {
		return "the GPUs the job sees are unknown: " + j.Visible.Unknown
	}
	if len(h.GPUs) == 0 && len(h.Errors) > 0 && h.DriverHung == "" {
		// Not "no GPU": nvidia-smi's GPU list could not be read.
		return "the GPUs are not judged: " + h.Errors[0]
	}
	if t != nil && len(t.GPUs) == 0 {
		return "no GPU is visible to the job (" + j.Why + ")"
	}
	if t == nil {
		if h.DriverHung != "" {
			return "the NVIDIA driver does not answer (nvidia-smi hung): fix that before anything else"
		}
		if len(h.GPUs) == 0 {
			return "no NVIDIA GPU found (nvidia-smi did not answer)"
		}
		return fmt.Sprintf("%d GPUs; topology unknown (nvidia-smi topo -m failed)", len(h.GPUs))
	}
	n := len(t.GPUs)
	if n == 1 {
		return fmt.Sprintf("1 GPU (%s): no allreduce between GPUs, custom allreduce is not used", j.Why)
	}
	if c := corruptBetween(h); c != "" {
		return c + ": custom allreduce must not run here; serve with --disable-custom-all-reduce until a new measurement is exact (see findings)"
	}
	numa := len(t.NUMANodes())
	split := ""
	if numa > 1 {
		split = fmt.Sprintf(", NUMA-split across %d nodes", numa)
	}
	if why := customAROff(h); why != "" {
		kind := "PCIe"
		switch {
		case t.FullNVLink():
			kind = "full NVLink"
		case t.PCIeOnly() && n > 2:
			kind = "PCIe-only"
		case !t.PCIeOnly():
			kind = "mixed NVLink and PCIe"
		}
		return fmt.Sprintf("%s, %d GPUs%s: %s, so every allreduce goes to NCCL; there is nothing for custom allreduce or the pcie series to measure here", kind, n, split, why)
	}
	switch {
	case t.FullNVLink():
		return fmt.Sprintf("full NVLink, %d GPUs%s: upstream custom allreduce runs as is; the pcie series changes nothing here", n, split)
	case n <= 2:
		return fmt.Sprintf("PCIe, %d GPUs%s: upstream runs custom allreduce at world size 2 already; the pcie series matters above 2 GPUs", n, split)
	case t.PCIeOnly():
		return fmt.Sprintf("PCIe-only, %d GPUs%s: %s; %s", n, split, modelVerdict(h), measure(n))
	}
	return fmt.Sprintf("mixed NVLink and PCIe, %d GPUs%s: SGLang reports full_nvlink=False, so this is the PCIe case; %s", n, split, measure(n))
}

// customAROff says why SGLang's custom allreduce cannot start among the
// GPUs of h ("" when it can, with the pcie series where upstream needs
// it): a world size it does not support, or a pair without P2P read or
// write (its P2P check, can_p2p, then disables it; SGLANG_SKIP_P2P_CHECK
// only trusts the driver's same report instead).
//
// Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (can_use_custom_all_reduce_with_nvlink, can_p2p), the same at 8905cbd42f4a and 0bda0b168ad5.
func customAROff(h *Host) string {
	n := len(h.GPUs)
	if h.Topology != nil {
		n = len(h.Topology.GPUs)
	}
	if n < 2 {
		return ""
	}
	if bounds.WorldSizeError(n) != nil {
		return fmt.Sprintf("SGLang's custom allreduce does not run at world size %d (it supports %s and disables itself otherwise)", n, bounds.WorldSizesText)
	}
	if b := h.blockedP2P(); len(b) > 0 {
		return fmt.Sprintf("P2P %s is not supported between %s (%s), and SGLang's P2P check disables custom allreduce without it", b[0].name, textfmt.Plural(len(b[0].pairs), "GPU pair", "GPU pairs"), b[0].pairs[0])
	}
	return ""
}

// blockedP2P lists the P2P matrices (read, then write) that nvidia-smi
// gave and that block some GPU pair, with the pairs they block.
func (h *Host) blockedP2P() []blockedP2P {
	var out []blockedP2P
	for _, m := range []struct {
		name string
		p    *nvsmi.P2PMatrix
	}{{"read", h.P2PRead}, {"write", h.P2PWrite}} {
		if m.p == nil {
			continue
		}
		if b := m.p.Blocked(); len(b) > 0 {
			out = append(out, blockedP2P{m.name, b})
		}
	}
	return out
}

// blockedP2P is one P2P matrix's blocked GPU pairs: name is "read" or
// "write", pairs as P2PMatrix.Blocked gives them.
type blockedP2P struct {
	name  string
	pairs []string
}

// measure is the verdict's remedy: the allreduce benchmark at world size
// n on the checkout arpatch apply makes by default (./sglang), whose
// extension `arpatch build --allreduce-ext` builds first.
func measure(n int) string {
	return fmt.Sprintf("measure with `arpatch bench allreduce --world-size %d --src sglang` first (after `arpatch build --allreduce-ext --src sglang`)", n)
}

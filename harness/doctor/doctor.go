package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

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
	GPUs        []GPU               `json:"gpus,omitempty"`
	Topology    *Topology           `json:"topology,omitempty"`
	P2PRead     *P2PMatrix          `json:"p2p_read,omitempty"`
	P2PWrite    *P2PMatrix          `json:"p2p_write,omitempty"`
	IOMMUGroups int                 `json:"iommu_groups"`
	Cmdline     string              `json:"kernel_cmdline,omitempty"`
	Toolchain   *kernels.Toolchain  `json:"toolchain,omitempty"`
	SGLKernel   string              `json:"sgl_kernel_dir,omitempty"`
	KernelArchs map[string][]string `json:"sgl_kernel_archs,omitempty"` // .so file -> archs
	Errors      []string            `json:"errors,omitempty"`           // what could not be read
	// DriverHung names the nvidia-smi call that did not answer in time;
	// the later ones were not tried.
	DriverHung string `json:"driver_hung,omitempty"`
	// NoNvidiaSMI is set when nvidia-smi is not on PATH: no driver, or
	// not this machine's GPUs.
	NoNvidiaSMI bool `json:"no_nvidia_smi,omitempty"`
}

// Report is doctor's output.
type Report struct {
	Schema   string    `json:"schema"`
	Created  time.Time `json:"created_at"`
	Host     Host      `json:"host"`
	Findings []Finding `json:"findings"`
	Verdict  string    `json:"verdict"`
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
// runs longer is killed and its error wraps ErrTimedOut.
func ExecRunner(env []string) Runner {
	return func(ctx context.Context, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = env
		cmd.WaitDelay = 2 * time.Second // a child that keeps the pipes open
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		err := cmd.Run()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return b.String(), fmt.Errorf("%s did not answer in %s: %w", name, CommandTimeout, ErrTimedOut)
		}
		return b.String(), err
	}
}

// Options holds every input of Inspect.
type Options struct {
	Run    Runner
	Env    []string // the environment to check for hazards
	Python string
	// ServerCmd is a server command line to check (EAGLE vs EAGLE3 and
	// other flags), e.g. "python -m sglang.launch_server --model-path ...".
	ServerCmd string
	FS        fs.FS // the host's root file system, for /proc and /sys
	// Probe reads the toolchain; nil uses kernels.Probe.
	Probe func(ctx context.Context) (*kernels.Toolchain, error)
}

// Inspect reads the host and returns the findings. Missing tools are
// findings, not errors.
func Inspect(ctx context.Context, o Options) *Report {
	rep := &Report{Schema: "arpatch.doctor/v1", Created: time.Now().UTC()}
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
			h.Errors = append(h.Errors, label+": "+firstLine(out, err))
			return "", false
		}
		return out, true
	}
	if out, ok := smi("--query-gpu="+QueryGPUFields, "--format=csv"); ok {
		var err error
		if h.GPUs, err = ParseQueryGPU(out); err != nil {
			h.Errors = append(h.Errors, err.Error())
		}
	}
	if out, ok := smi("topo", "-m"); ok {
		var err error
		if h.Topology, err = ParseTopoMatrix(out); err != nil {
			h.Errors = append(h.Errors, err.Error())
		}
	}
	for _, m := range []struct {
		flag string
		dst  **P2PMatrix
	}{{"r", &h.P2PRead}, {"w", &h.P2PWrite}} {
		if out, ok := smi("topo", "-p2p", m.flag); ok {
			var err error
			if *m.dst, err = ParseP2P(out); err != nil {
				h.Errors = append(h.Errors, err.Error())
			}
		}
	}
	if o.FS != nil {
		if ents, err := fs.ReadDir(o.FS, "sys/kernel/iommu_groups"); err == nil {
			h.IOMMUGroups = len(ents)
		}
		if b, err := fs.ReadFile(o.FS, "proc/cmdline"); err == nil {
			h.Cmdline = strings.TrimSpace(string(b))
		}
	}
	if o.Probe != nil {
		if tc, err := o.Probe(ctx); err == nil {
			h.Toolchain = tc
		} else {
			h.Errors = append(h.Errors, "toolchain: "+err.Error())
		}
	}
	python := o.Python
	if python == "" {
		python = "python3"
	}
	if out, err := o.Run(ctx, python, "-c", "import importlib.util, os; s = importlib.util.find_spec('sgl_kernel'); print(os.path.dirname(s.origin) if s and s.origin else '')"); err == nil {
		h.SGLKernel = strings.TrimSpace(lastLine(out))
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
	rep.Findings = findings(h, o.Env, o.ServerCmd)
	sort.SliceStable(rep.Findings, func(i, j int) bool { return rank(rep.Findings[i].Severity) > rank(rep.Findings[j].Severity) })
	rep.Verdict = verdict(h)
	return rep
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

func firstLine(out string, err error) string {
	if l := strings.TrimSpace(strings.SplitN(strings.TrimSpace(out), "\n", 2)[0]); l != "" {
		return l
	}
	return err.Error()
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// OSFS is the host's root file system for Options.FS.
func OSFS() fs.FS { return os.DirFS("/") }

// verdict sums the topology up in one line.
func verdict(h *Host) string {
	t := h.Topology
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
	numa := len(t.NUMANodes())
	split := ""
	if numa > 1 {
		split = fmt.Sprintf(", NUMA-split across %d nodes", numa)
	}
	switch {
	case t.FullNVLink():
		return fmt.Sprintf("full NVLink, %d GPUs%s: upstream custom allreduce runs as is; the pcie series changes nothing here", n, split)
	case n <= 2:
		return fmt.Sprintf("PCIe, %d GPUs%s: upstream runs custom allreduce at world size 2 already; the pcie series matters above 2 GPUs", n, split)
	case t.PCIeOnly():
		return fmt.Sprintf("PCIe-only, %d GPUs%s: all-to-all 1-stage is contention-prone; measure with `arpatch bench allreduce --world-size %d` first", n, split, n)
	}
	return fmt.Sprintf("mixed NVLink and PCIe, %d GPUs%s: SGLang reports full_nvlink=False, so this is the PCIe case; measure with `arpatch bench allreduce` first", n, split)
}

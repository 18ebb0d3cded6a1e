package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/doctor"
	"github.com/arpatch/arpatch/harness/p2p"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/kernels"
)

// newCmdDoctor is doctor, running its options with runF (doctorRun).
func newCmdDoctor(runF func(context.Context, doctorOptions, streams) error) *cli.Command {
	var f doctorFlags
	return &cli.Command{
		Name:      "doctor",
		Usage:     "check the GPU host before a long run: topology, P2P, toolchain, installed kernels, hazards",
		UsageText: `arpatch doctor [--python PY] [--server-cmd "python -m sglang.launch_server ..." [--src DIR]] [--p2p FILE] [--nccl-log FILE] [--json]`,
		Description: `doctor reads nvidia-smi (GPUs, PCIe links, topo -m, topo -p2p r/w), the kernel
command line and IOMMU groups, the CUDA toolchain and torch, the archs compiled
into the installed sgl-kernel (cuobjdump --list-elf), and environment
variables known to hurt custom allreduce. It judges only the GPUs the job
uses: those CUDA_VISIBLE_DEVICES leaves visible (by index or UUID, in its
order), narrowed to the TP group when --server-cmd gives a TP size. A value
nvidia-smi cannot read ([N/A], [Not Supported], ...) is listed as
unreadable and draws no finding.

It names what stops P2P on PCIe hosts: IOMMU groups that translate the GPUs'
DMA (/sys/kernel/iommu_groups/*/type DMA or DMA-FQ) with no iommu=pt on the
kernel command line, ACS redirection on the PCIe switch ports above GPUs
that share a switch (lspci -D -vvv, read as root), and, given --p2p with the
JSON of arpatch bench p2p, a pair whose bytes came back wrong (an error:
custom allreduce must not run there). The traffic model behind expect: then
takes the constants that measurement gives, and expect: says which. Given
--nccl-log with the --log of arpatch bench allreduce (NCCL_DEBUG=INFO; the
run of NCCL as the environment leaves it, before its variants), it says why
NCCL took SHM between GPUs: P2P blocked, NCCL_P2P_DISABLE, or NCCL's policy
past a CPU host bridge though P2P works (NCCL_P2P_LEVEL=SYS).
$ARPATCH_SYSROOT, when set, is read in place of / for /proc and /sys (a copy
taken on another host); $ARPATCH_RECORDED_HOST=DIR answers nvidia-smi and
lspci from a recorded host's outputs (query-gpu.csv, topo-m.txt,
topo-p2p-r.txt, topo-p2p-w.txt, lspci-vvv.txt), as the hosts in
harness/doctor/testdata are recorded: doctor then judges that host. --server-cmd is read as SGLang's argparse
reads it (aliases, unique prefixes, --opt=value, VAR=value before the
program), with the options of --src's server_args.py when given, else a
built-in table. Each finding has a severity and a remedy; the verdict sums
up the judged GPUs' topology. It exits 1 when a finding is an error, and GPUs
it could not judge are one (nvidia-smi unreadable or malformed,
CUDA_VISIBLE_DEVICES naming GPUs it cannot match, such as MIG instances);
4 when a signal stopped it.

Examples:
   arpatch doctor
   CUDA_VISIBLE_DEVICES=0,1 arpatch doctor --server-cmd "python -m sglang.launch_server --model-path m --tp 2"
   arpatch doctor --server-cmd "python -m sglang.launch_server --speculative-algorithm EAGLE --speculative-draft-model-path my-eagle3"
   arpatch doctor --src sglang --server-cmd "python -m sglang.launch_server --speculative-algo EAGLE3 --speculative-draft-model d"
   arpatch doctor --p2p p2p.json
   arpatch doctor --nccl-log nccl.log
   arpatch doctor --json > doctor.json
   ARPATCH_RECORDED_HOST=harness/doctor/testdata/pcie8 arpatch doctor
   ARPATCH_RECORDED_HOST=harness/doctor/testdata/ref8 arpatch doctor`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "python", Destination: &f.Python, Usage: "Python `INTERPRETER` of the serving environment", Value: pyenv.Default},
			&cli.StringFlag{Name: "server-cmd", Destination: &f.ServerCmd, Usage: "an SGLang server `COMMAND` line to check, as typed in a shell"},
			&cli.StringFlag{Name: "src", Destination: &f.Src, Usage: "read --server-cmd with the options of the SGLang checkout `DIR` (its python/sglang/srt/server_args.py)"},
			&cli.StringFlag{Name: "p2p", Destination: &f.P2P, Usage: "the host's P2P measurement `FILE` (arpatch bench p2p --json FILE): its corrupt pairs, and its constants for the traffic model"},
			&cli.StringFlag{Name: "nccl-log", Destination: &f.NCCLLog, Usage: "a `FILE` of NCCL_DEBUG=INFO output (arpatch bench allreduce --log FILE): why NCCL took SHM"},
			jsonFlag(&f.JSON),
		},
		Before: noArgs,
		Action: act(&f, doctorOpts, runF),
	}
}

// doctorFlags are doctor's parsed flags.
type doctorFlags struct {
	Python    string
	ServerCmd string
	Src       string
	P2P       string
	NCCLLog   string
	JSON      bool
}

// doctorOptions are every input of doctorRun.
type doctorOptions struct {
	Inspect doctor.Options
	JSON    bool
}

// doctorOpts turns doctor's flags into options: it reads --src's
// server_args.py, whose options --server-cmd is read with. --src without
// --server-cmd, or a --src without that file, is a usage error.
func doctorOpts(f doctorFlags) (doctorOptions, error) {
	env := os.Environ()
	var table *doctor.ServerOptions
	if f.Src != "" && f.ServerCmd == "" {
		return doctorOptions{}, usagef("--src reads a --server-cmd with the checkout's options; pass --server-cmd too, or drop --src")
	}
	if f.Src != "" {
		p := filepath.Join(expandHome(f.Src), "python", "sglang", "srt", "server_args.py")
		b, err := os.ReadFile(p)
		if err != nil {
			return doctorOptions{}, usagef("--src %s: %v; pass the SGLang checkout the server runs from (arpatch apply's --src)", f.Src, err)
		}
		if table, err = doctor.ParseServerArgsPy(p, b); err != nil {
			return doctorOptions{}, err
		}
	}
	var measured *p2p.Report
	if f.P2P != "" {
		var err error
		if measured, err = p2p.Load(expandHome(f.P2P)); err != nil {
			return doctorOptions{}, loadError("p2p", err)
		}
	}
	var nccl []string
	if f.NCCLLog != "" {
		b, err := os.ReadFile(expandHome(f.NCCLLog))
		if err != nil {
			return doctorOptions{}, usagef("--nccl-log: %v", err)
		}
		nccl = allreduce.MainRun(strings.Split(string(b), "\n"))
	}
	fsys := doctor.OSFS()
	if root := os.Getenv("ARPATCH_SYSROOT"); root != "" {
		fsys = os.DirFS(root)
	}
	python := f.Python
	run := doctor.ExecRunner(env)
	if dir := os.Getenv("ARPATCH_RECORDED_HOST"); dir != "" {
		var err error
		if run, err = doctor.RecordedRunner(dir, run); err != nil {
			return doctorOptions{}, usagef("ARPATCH_RECORDED_HOST=%s: %v", dir, err)
		}
	}
	return doctorOptions{JSON: f.JSON, Inspect: doctor.Options{
		Run: run, Env: env, Python: python, ServerCmd: f.ServerCmd, FS: fsys,
		ServerOptions: table, P2P: measured, P2PFile: f.P2P, NCCLLog: nccl, NCCLLogFile: f.NCCLLog,
		Probe: func(ctx context.Context) (*kernels.Toolchain, error) {
			return kernels.Probe(ctx, kernels.ProbeOptions{Python: python})
		},
	}}, nil
}

// doctorRun inspects the host and prints the report; an error finding is
// a failure (exit 1).
func doctorRun(ctx context.Context, o doctorOptions, s streams) error {
	rep := doctor.Inspect(ctx, o.Inspect)
	if o.JSON {
		if err := writeJSON(s.Out, rep); err != nil {
			return err
		}
	} else {
		printDoctor(s.Out, rep)
	}
	if rep.Interrupted {
		return exitWith(exitInfra, "interrupted: doctor's commands still running were stopped; it changes nothing on the host, so nothing was left")
	}
	for _, f := range rep.Findings {
		if f.Severity == doctor.Error {
			return exitWith(exitFailure, "")
		}
	}
	return nil
}

func printDoctor(w io.Writer, rep *doctor.Report) {
	h, j := rep.Host, rep.Judged
	for _, g := range h.GPUs {
		mark := " "
		if slices.Contains(j.GPUs, g.Index) {
			mark = "*"
		}
		fmt.Fprintf(w, "%s GPU%d  %s  sm_%s  driver %s  PCIe gen %d/%d x%d/%d  %d MiB  %s\n", mark, g.Index, g.Name,
			cmp.Or(cudaarch.CCDigits(g.ComputeCap), "?"), cmp.Or(g.Driver, "?"), g.PCIeGen, g.PCIeGenMax, g.PCIeWidth, g.PCIeWidthMax, g.MemoryMiB, g.BusID)
	}
	if len(h.GPUs) > 0 {
		fmt.Fprintf(w, "judged (*): GPUs %s: %s\n", cmp.Or(textfmt.Ints(j.GPUs, ","), "none"), j.Why)
	}
	if j.ServerArgs != nil {
		fmt.Fprintf(w, "server flags read with %s", j.OptionsFrom)
		if len(j.ServerArgs.NotJudged) > 0 {
			fmt.Fprintf(w, "; not judged: %s", strings.Join(j.ServerArgs.NotJudged, " "))
		}
		fmt.Fprintln(w)
	}
	for _, u := range j.Unreadable {
		fmt.Fprintf(w, "unreadable: %s\n", u)
	}
	if t := h.Topology; t != nil {
		fmt.Fprintln(w, "topology (nvidia-smi topo -m):")
		for _, g := range t.GPUs {
			fmt.Fprintf(w, "  %-5s %s  NUMA %s\n", g, strings.Join(t.Links[g], " "), t.NUMA[g])
		}
	}
	if tc := h.Toolchain; tc != nil {
		fmt.Fprintf(w, "toolchain: nvcc %s, python %s, torch %s (CUDA %s)\n", cmp.Or(tc.NVCC.Version, "(none)"), cmp.Or(tc.Python.Version, "(none)"), cmp.Or(tc.Torch.Version, "(none)"), cmp.Or(tc.Torch.CUDA, "(none)"))
	}
	if h.SGLKernel != "" {
		for so, archs := range h.KernelArchs {
			fmt.Fprintf(w, "sgl-kernel: %s: %s\n", so, strings.Join(archs, " "))
		}
	}
	fmt.Fprintln(w, "findings:")
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "  [%s] %s\n", f.Severity, f.Title)
		if f.Detail != "" {
			fmt.Fprintf(w, "         %s\n", f.Detail)
		}
		if f.Remedy != "" {
			fmt.Fprintf(w, "         remedy: %s\n", f.Remedy)
		}
	}
	if len(rep.Groups) > 0 {
		fmt.Fprintf(w, "verdict: %d TP groups, judged one by one:\n", len(rep.Groups))
		for _, g := range rep.Groups {
			fmt.Fprintf(w, "  TP group GPUs %s: %s\n", cmp.Or(textfmt.Ints(g.GPUs, ","), "none"), g.Verdict)
			if g.Expect != "" {
				fmt.Fprintf(w, "  expect: %s\n", g.Expect)
			}
		}
		return
	}
	fmt.Fprintf(w, "verdict: %s\n", rep.Verdict)
	if rep.Expect != "" {
		fmt.Fprintf(w, "expect: %s\n", rep.Expect)
	}
}

// loadError is the error of a file that --flag names: a usage error (exit
// 2) when it cannot be read (a wrong path), a failure (exit 1) when it was
// read and its data is bad: the invocation was right, the data is not.
func loadError(flag string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return usagef("--%s: %v", flag, err)
	}
	return fmt.Errorf("--%s: %w", flag, err)
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/doctor"
	"github.com/arpatch/arpatch/kernels"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:      "doctor",
		Usage:     "check the GPU host before a long run: topology, P2P, toolchain, installed kernels, hazards",
		UsageText: `arpatch doctor [--python PY] [--server-cmd "python -m sglang.launch_server ..."] [--json]`,
		Description: `doctor reads nvidia-smi (GPUs, PCIe links, topo -m, topo -p2p r/w), the kernel
command line and IOMMU groups, the CUDA toolchain and torch, the archs compiled
into the installed sgl-kernel (cuobjdump --list-elf), and environment
variables known to hurt custom allreduce. Each finding has a severity and a
remedy; the verdict sums up the topology. It exits 1 when a finding is an
error.

Examples:
   arpatch doctor
   arpatch doctor --server-cmd "python -m sglang.launch_server --speculative-algorithm EAGLE --speculative-draft-model-path my-eagle3"
   arpatch doctor --json > doctor.json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "python", Usage: "Python `INTERPRETER` of the serving environment", Value: "python3"},
			&cli.StringFlag{Name: "server-cmd", Usage: "an SGLang server `COMMAND` line to check"},
			jsonFlag(),
		},
		Before: noArgs,
		Action: func(c *cli.Context) error {
			env := os.Environ()
			rep := doctor.Inspect(c.Context, doctor.Options{
				Run: doctor.ExecRunner(env), Env: env, Python: c.String("python"), ServerCmd: c.String("server-cmd"), FS: doctor.OSFS(),
				Probe: func(ctx context.Context) (*kernels.Toolchain, error) {
					return kernels.Probe(ctx, kernels.ProbeOptions{Python: c.String("python")})
				},
			})
			if c.Bool("json") {
				if err := writeJSON(c.App.Writer, rep); err != nil {
					return err
				}
			} else {
				printDoctor(c.App.Writer, rep)
			}
			for _, f := range rep.Findings {
				if f.Severity == doctor.Error {
					return cli.Exit("", exitFailure)
				}
			}
			return nil
		},
	}
}

func printDoctor(w io.Writer, rep *doctor.Report) {
	h := rep.Host
	for _, g := range h.GPUs {
		fmt.Fprintf(w, "GPU%d  %s  sm_%s  driver %s  PCIe gen %d/%d x%d/%d  %d MiB  %s\n", g.Index, g.Name,
			strings.ReplaceAll(g.ComputeCap, ".", ""), g.Driver, g.PCIeGen, g.PCIeGenMax, g.PCIeWidth, g.PCIeWidthMax, g.MemoryMiB, g.BusID)
	}
	if t := h.Topology; t != nil {
		fmt.Fprintln(w, "topology (nvidia-smi topo -m):")
		for _, g := range t.GPUs {
			fmt.Fprintf(w, "  %-5s %s  NUMA %s\n", g, strings.Join(t.Links[g], " "), t.NUMA[g])
		}
	}
	if tc := h.Toolchain; tc != nil {
		fmt.Fprintf(w, "toolchain: nvcc %s, python %s, torch %s (CUDA %s)\n", orNone(tc.NVCC.Version), orNone(tc.Python.Version), orNone(tc.Torch.Version), orNone(tc.Torch.CUDA))
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
	fmt.Fprintf(w, "verdict: %s\n", rep.Verdict)
}

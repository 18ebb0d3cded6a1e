package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/doctor"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/p2p"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// newCmdBenchP2P is bench p2p, running its options with runF (benchP2PRun).
func newCmdBenchP2P(runF func(context.Context, benchP2POptions, streams) error) *cli.Command {
	var f benchP2PFlags
	return &cli.Command{
		Name:  "p2p",
		Usage: "measure P2P between the GPUs as custom allreduce uses it (CUDA IPC mappings), checking every byte",
		UsageText: `arpatch bench p2p [--sizes 256K,8M,64M] [--pattern-bytes 4M] [--reps 10] [--python PY]
                  [--json FILE] [--log FILE] [--timeout 10m]`,
		Description: `Go starts p2p.py on one rank per GPU with torchrun (the GPUs CUDA_VISIBLE_DEVICES
leaves visible, numbered as nvidia-smi numbers them). Each rank shares a
buffer from the driver's cuMemAlloc through CUDA IPC (cuIpcGetMemHandle,
cuIpcOpenMemHandle), as custom allreduce does, and kernels of its own (NVRTC,
through the CUDA driver API) load from and store to the peers' buffers
through the mappings. torch in --python is needed only for torchrun and
torch.distributed (gloo), which pass the handles and results between the
ranks; no transfer is torch's. Every byte that moves is checked
against a seeded pattern: a pair whose bytes come back wrong is an error,
"P2P reports OK but corrupts data", and custom allreduce must not run there.

Measured, in order: each GPU's link to pinned host memory (loads and stores,
one stream, alone); per ordered pair, alone: read and write bandwidth at
each of --sizes, a round trip of flags and a dependent load; then the
all-to-all patterns of the kernels, every GPU of a group reading (as custom
1-stage pulls), then writing (as a push does), --pattern-bytes per peer at
once: within each PCIe switch, within each socket, and across sockets. It
prints the read, write and latency matrices with each pair's link
(nvidia-smi topo -m: NVLink, or the PCIe path), the host links and the
patterns, names each rate below half its link's nominal rate with the link,
and writes --json. With one GPU there is no peer: it says what cannot be
measured and measures the GPU's link to host memory.

arpatch doctor --p2p FILE reads the JSON and names a pair that corrupts;
doctor and arpatch tune allreduce --p2p FILE give the traffic model the
constants it measured, and their expect: line names each.

It exits 1 when bytes came back wrong, a case errs or hangs (--timeout); 4
when interrupted.

Examples:
   arpatch bench p2p
   arpatch bench p2p --json p2p.json
   CUDA_VISIBLE_DEVICES=0,1 arpatch bench p2p --sizes 8M --reps 5 --json p2p.json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "sizes", Destination: &f.Sizes, Usage: "transfer `SIZES` in bytes of the pair and host-link tests: list and ranges of powers of two", Value: p2p.DefaultSizes},
			&cli.StringFlag{Name: "pattern-bytes", Destination: &f.PatternBytes, Usage: "`BYTES` each GPU moves to or from each peer in the all-to-all patterns", Value: allreduce.FormatBytes(p2p.DefaultPatternBytes)},
			&cli.IntFlag{Name: "reps", Destination: &f.Reps, Usage: "timed reps `N` per case", Value: p2p.DefaultReps},
			&cli.StringFlag{Name: "python", Destination: &f.Python, Usage: "Python `INTERPRETER` with torch", Value: pyenv.Default},
			&cli.DurationFlag{Name: "timeout", Destination: &f.Timeout, Usage: "kill the run after `DURATION` and report the case in progress as a hang", Value: p2p.DefaultTimeout},
			&cli.StringFlag{Name: "json", Destination: &f.JSON, Usage: "write the report to `FILE`"},
			&cli.StringFlag{Name: "log", Destination: &f.Log, Usage: "write the ranks' output to `FILE`"},
		},
		Before: noArgs,
		Action: act(&f, benchP2POpts, runF),
	}
}

// benchP2PFlags are bench p2p's parsed flags.
type benchP2PFlags struct {
	Sizes        string
	PatternBytes string
	Reps         int
	Python       string
	Timeout      time.Duration
	JSON         string
	Log          string
}

// benchP2POptions are every input of benchP2PRun.
type benchP2POptions struct {
	// Probe is the run but for its GPUs and topology, which benchP2PRun
	// reads from nvidia-smi, and its log.
	Probe     p2p.Options
	JSON, Log string
}

// benchP2POpts turns bench p2p's flags into options, refusing sizes,
// counts and outputs the probe cannot use.
func benchP2POpts(f benchP2PFlags) (benchP2POptions, error) {
	var o benchP2POptions
	sizes, err := allreduce.ParseSizes(f.Sizes)
	if err != nil {
		return o, usagef("--sizes: %w", err)
	}
	pb, err := allreduce.ParseBytes(f.PatternBytes)
	if err != nil {
		return o, usagef("--pattern-bytes: %w", err)
	}
	if f.Reps < 1 {
		return o, usagef("--reps %d: use 1 or more", f.Reps)
	}
	if f.Timeout <= 0 {
		return o, usagef("--timeout %s: use a positive duration, e.g. 10m", f.Timeout)
	}
	o.Probe = p2p.Options{Python: f.Python, Sizes: sizes, PatternBytes: (pb + 15) / 16 * 16, Reps: f.Reps, Timeout: f.Timeout}
	o.JSON, o.Log = expandHome(f.JSON), expandHome(f.Log)
	if err := checkOutputs(outFile{flag: "json", path: o.JSON}, outFile{flag: "log", path: o.Log}); err != nil {
		return o, err
	}
	return o, nil
}

// benchP2PRun reads the visible GPUs, runs the probe, prints the report
// and writes its JSON; corrupt bytes, an error or a hang is a failure
// (exit 1), an interrupted run infrastructure (exit 4).
func benchP2PRun(ctx context.Context, o benchP2POptions, s streams) (err error) {
	opts := o.Probe
	if opts.GPUs, opts.Topology, err = visibleGPUs(ctx); err != nil {
		return err
	}
	if err := checkTorch(ctx, opts.Python, opts.Env); err != nil {
		return err
	}
	if o.Log != "" {
		lw, closeLog, lerr := openLog(o.Log)
		if lerr != nil {
			return lerr
		}
		defer closeLog(&err) // err: the result, not a shadow
		opts.Log = lw
	}
	fmt.Fprintf(s.Err, "measuring P2P on %s (timeout %s)...\n", textfmt.Plural(len(opts.GPUs), "GPU", "GPUs"), opts.Timeout)
	run, err := p2p.Execute(ctx, opts)
	if err != nil {
		return err
	}
	rep := p2p.NewReport(opts, run, arpatchVersion())
	rep.Command = commandLine(os.Args)
	rep.Host.Name, _ = os.Hostname()
	rep.WriteTable(s.Out)
	if o.JSON != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := safefs.WriteFile(o.JSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if rep.Interrupted() {
		return exitWith(exitInfra, "interrupted: the ranks were stopped (torchrun's process group); the cases that finished are above")
	}
	if len(run.Results) == 0 && run.Env == nil {
		tail := run.Output
		if len(tail) > 30 {
			tail = tail[len(tail)-30:]
		}
		return fmt.Errorf("the probe produced no result (%s); is torch installed for --python %s? last lines of its output:\n%s", run.Exit, opts.Python, strings.Join(tail, "\n"))
	}
	if rep.Failed() {
		return exitWith(exitFailure, "")
	}
	return nil
}

// visibleGPUs reads nvidia-smi's GPUs and topology and returns those
// CUDA_VISIBLE_DEVICES leaves visible, in CUDA's order, with the topology
// among them (nil when topo -m could not be read).
func visibleGPUs(ctx context.Context) ([]nvsmi.GPU, *nvsmi.Topology, error) {
	run := doctor.ExecRunner(os.Environ())
	out, err := run(ctx, "nvidia-smi", "--query-gpu="+nvsmi.QueryGPUFields, "--format=csv")
	if errors.Is(err, exec.ErrNotFound) {
		return nil, nil, fmt.Errorf("nvidia-smi is not on PATH: the probe needs the NVIDIA driver and its GPUs (`arpatch doctor` says what is missing)")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("nvidia-smi --query-gpu: %v: %s; `arpatch doctor` says more", err, textfmt.FirstLine(out))
	}
	all, err := nvsmi.ParseQueryGPU(out)
	if err != nil {
		return nil, nil, err
	}
	spec, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	v := doctor.ResolveVisible(spec, set, all)
	switch {
	case v.Unknown != "":
		return nil, nil, fmt.Errorf("which GPUs the probe would use cannot be told: %s; set CUDA_VISIBLE_DEVICES to GPU indexes nvidia-smi lists", v.Unknown)
	case len(v.Indexes) == 0:
		return nil, nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%s leaves no GPU visible; set it to GPU indexes nvidia-smi lists, or unset it", spec)
	}
	var gpus []nvsmi.GPU
	var names []string
	for _, i := range v.Indexes {
		for _, g := range all {
			if g.Index == i {
				gpus = append(gpus, g)
				names = append(names, fmt.Sprintf("GPU%d", i))
			}
		}
	}
	var topo *nvsmi.Topology
	if out, err := run(ctx, "nvidia-smi", "topo", "-m"); err == nil {
		if t, err := nvsmi.ParseTopoMatrix(out); err == nil {
			topo = t.Sub(names)
		}
	}
	return gpus, topo, nil
}

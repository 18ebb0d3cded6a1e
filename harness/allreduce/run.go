package allreduce

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/internal/torchrun"
)

//go:embed bench.py
var benchScript []byte

// environ is the process environment, taken where Options.Env is nil.
var environ = os.Environ

// The defaults of a run's counts and timeout: the one place each lives.
// Execute passes every count to bench.py, which has no defaults of its
// own; `arpatch bench allreduce` and `arpatch tune allreduce` show them as
// their flags' defaults.
const (
	DefaultWarmup  = 10               // untimed calls per case
	DefaultInner   = 20               // allreduces per timed batch or graph
	DefaultReps    = 30               // timed batches per case
	DefaultTimeout = 10 * time.Minute // the whole run
)

// Options holds every input of Execute.
type Options struct {
	Python    string // interpreter with torch
	WorldSize int    // ranks; above the GPU count the run is oversubscribed (correctness only)
	Sizes     []int  // bytes, multiples of 16
	// Cap adds each implementation's cap: the largest size that fits its
	// communicator (bench.py's cap_size: 8 MiB for NCCL and the pull
	// algorithms, less for the push algorithms' scratch).
	Cap      bool
	Impls    []string
	Branches []string // "nvlink", "pcie"
	Modes    []string // ModeEager, ModeGraph
	// DTypes are the element types, KnownDTypes (nil: bf16 alone).
	DTypes []string
	// Layouts are the islands for the PCIe branch
	// (SGLANG_PCIE_CUSTOM_AR_ISLANDS): custom-island and custom-auto run
	// once per layout, every other custom implementation with the first.
	// nil sets none (the kernel then sees one island).
	Layouts []Islands
	// CustomMaxBytes > 0 reports every custom case above it n/a, as 0002's
	// SGLANG_PCIE_CUSTOM_AR_MAX_BYTES gate sends it to NCCL (0: no gate).
	CustomMaxBytes int
	Ext            string        // the allreduce extension (.so) from `arpatch build --allreduce-ext`
	Warmup         int           // untimed calls per case (0: none)
	Inner          int           // allreduces per timed batch (eager) or per graph (0: DefaultInner)
	Reps           int           // timed batches per case (0: DefaultReps)
	Timeout        time.Duration // the whole run's (0: DefaultTimeout)
	NCCLDebug      bool          // run with NCCL_DEBUG=INFO and record what NCCL chose (Run.NCCL)
	// NVLink: every pair of the ranks' GPUs is joined by NVLink
	// (nvidia-smi topo -m); false where that is unknown. Not passed to
	// the ranks: it decides which NCCL variants may be the baseline of
	// the report (IsBaseline).
	NVLink bool
	// ProbeThresholds first checks that init_custom_ar refuses a bad
	// SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES (Run.ThresholdProbe).
	ProbeThresholds bool
	Env             []string
	// Log receives the ranks' combined output as it comes; nil for none.
	// A write error from it stops the copying of the output and so ends
	// the run with that error as Run.Exit: give a log that keeps going,
	// as --log does (internal/errwriter.NewLog).
	Log io.Writer
	// Progress, when set, is told how many of the cases asked for
	// (MissingCases with no results) have reported, as rank 0 records
	// them; nil for none.
	Progress func(done, total int)
}

// Impl names. The pull and push implementations each force one of the
// pcie series' algorithms, named as SGLANG_PCIE_CUSTOM_AR_ALGO names them
// (Algo: pull1, pull2, push1, push2, island); custom-auto
// runs the kernel's own dispatch.
const (
	NCCL         = "nccl"
	Custom1Stage = "custom-1stage" // pull1: upstream's 1-stage
	Custom2Stage = "custom-2stage" // pull2: upstream's 2-stage
	CustomAuto   = "custom-auto"
	CustomPush1  = "custom-push1" // push1: one-shot push
	CustomPush2  = "custom-push2" // push2: two-shot push
	CustomIsland = "custom-island"
)

// KnownImpls lists the implementations bench.py understands.
var KnownImpls = []string{NCCL, Custom1Stage, Custom2Stage, CustomAuto, CustomPush1, CustomPush2, CustomIsland}

// ForcedImpls are the implementations that force one algorithm, in the
// order tune breaks ties: the pull algorithms, then the push ones.
var ForcedImpls = []string{Custom2Stage, Custom1Stage, CustomPush2, CustomPush1, CustomIsland}

// algos maps each forced implementation to the pcie series' name of its
// algorithm (SGLANG_PCIE_CUSTOM_AR_ALGO's ALGO).
var algos = map[string]string{Custom1Stage: "pull1", Custom2Stage: "pull2", CustomPush1: "push1", CustomPush2: "push2", CustomIsland: "island"}

// Algo is the pcie series' algorithm name of a forced implementation
// ("pull1" for custom-1stage), "" for any other.
func Algo(impl string) string { return algos[impl] }

// ImplOf is the implementation that forces algo ("custom-push1" for
// "push1"), "" for a name the pcie series does not have.
func ImplOf(algo string) string {
	for impl, a := range algos {
		if a == algo {
			return impl
		}
	}
	return ""
}

// PushOnly reports whether impl exists on the PCIe branch only (the push
// algorithms): on the nvlink branch bench.py reports it not applicable.
func PushOnly(impl string) bool {
	return impl == CustomPush1 || impl == CustomPush2 || impl == CustomIsland
}

// perLayout reports whether impl runs once per islands layout.
func perLayout(impl string) bool { return impl == CustomIsland || impl == CustomAuto }

// Element types (Options.DTypes, Result.DType): bench.py's names for
// torch.bfloat16, float16 and float32.
const (
	BF16 = "bf16"
	FP16 = "fp16"
	FP32 = "fp32"
)

// KnownDTypes lists the element types bench.py understands.
var KnownDTypes = []string{BF16, FP16, FP32}

// DTypesError is ModesError for --dtype: nil when dtypes is non-empty and
// every one is in KnownDTypes.
func DTypesError(dtypes []string) error { return oneOfError(dtypes, KnownDTypes) }

// Mode names: how a case is timed, one launch per allreduce (ModeEager)
// or Inner allreduces captured in one CUDA graph (ModeGraph). The words
// are bench.py's --modes values and Result.Mode in the JSON report.
const (
	ModeEager = "eager"
	ModeGraph = "graph"
)

// KnownModes lists the modes bench.py understands.
var KnownModes = []string{ModeEager, ModeGraph}

// ModesError returns nil when modes is non-empty and every mode is in
// KnownModes, else an error to follow the flag's name ("is empty: use
// eager, graph" or "\"x\": use eager, graph"), as cmd/arpatch's --modes
// of bench allreduce and tune print it.
func ModesError(modes []string) error { return oneOfError(modes, KnownModes) }

// oneOfError is nil when vals is non-empty and every value is in known,
// else "is empty: use A, B" or "\"x\": use A, B".
func oneOfError(vals, known []string) error {
	if len(vals) == 0 {
		return fmt.Errorf("is empty: use %s", strings.Join(known, ", "))
	}
	for _, v := range vals {
		if !slices.Contains(known, v) {
			return fmt.Errorf("%q: use %s", v, strings.Join(known, ", "))
		}
	}
	return nil
}

// Wrong describes the first element whose sum was wrong.
type Wrong struct {
	Rank       int    `json:"rank"`
	Index      int    `json:"index"`
	Got        string `json:"got"` // Python repr: "nan", "3.0"
	Want       string `json:"want"`
	Mismatches int    `json:"mismatches"`
	Of         int    `json:"of"`
}

// Result is one implementation x branch x islands layout x size x dtype
// x mode. A result without Bytes stands for every size, dtype and mode of
// its case (one that never ran: skipped, not applicable, unsupported, or
// an init that failed).
type Result struct {
	Impl   string `json:"impl"`
	Branch string `json:"branch"` // "nvlink", "pcie", or "-" for NCCL
	// Islands is the layout of a custom-island or custom-auto case on
	// the PCIe branch when the run set layouts ("" otherwise).
	Islands string `json:"islands,omitempty"`
	// Variant is the NCCL variant of an NCCL result ("" for NCCL as the
	// environment leaves it); set by ExecuteVariants, not by bench.py.
	Variant string `json:"nccl_variant,omitempty"`
	Bytes   int    `json:"bytes"`
	// Cap marks the case's cap (Options.Cap).
	Cap  bool   `json:"cap,omitempty"`
	Mode string `json:"mode"` // ModeEager or ModeGraph
	// DType is one of KnownDTypes; "" in reports from before the type was
	// recorded per case (RunEnv.DType then names the one type).
	DType   string `json:"dtype,omitempty"`
	OK      bool   `json:"ok"` // the output held the exact sum
	Wrong   *Wrong `json:"wrong,omitempty"`
	Error   string `json:"error,omitempty"`
	Skipped bool   `json:"skipped,omitempty"`
	// NotApplicable: a push algorithm on the nvlink branch, or a size
	// that does not fit the communicator; Error says which. Never run.
	NotApplicable bool `json:"not_applicable,omitempty"`
	// Unsupported: the extension took SGLANG_PCIE_CUSTOM_AR_ALGO=bogus,
	// so it predates the push algorithms (Run.AlgoProbe). Never run.
	Unsupported bool      `json:"unsupported,omitempty"`
	MedianUS    float64   `json:"median_us,omitempty"`
	P10US       float64   `json:"p10_us,omitempty"`
	P90US       float64   `json:"p90_us,omitempty"`
	Samples     []float64 `json:"samples_us,omitempty"`
}

// Timed reports whether the result has a latency.
func (r Result) Timed() bool { return r.OK && r.MedianUS > 0 }

// Status is "ok", "WRONG", "ERROR", "HANG", "UNSUPPORTED" (each a
// failure), "skipped" or "n/a" (neither).
func (r Result) Status() string {
	switch {
	case r.Unsupported:
		return "UNSUPPORTED"
	case r.NotApplicable:
		return "n/a"
	case r.Skipped:
		return "skipped"
	case r.Error == "hang":
		return "HANG"
	case r.Error != "":
		return "ERROR"
	case !r.OK:
		return "WRONG"
	}
	return "ok"
}

// ThresholdProbe is rank 0's record of init_custom_ar given Variable=Value
// on the PCIe branch: Run.ThresholdProbe (a bad 1-stage limit) and
// Run.AlgoProbe (SGLANG_PCIE_CUSTOM_AR_ALGO=bogus, refused only by an
// error that names the variable).
type ThresholdProbe struct {
	Variable string `json:"variable"`
	Value    string `json:"value"`
	Refused  bool   `json:"refused"`
	Error    string `json:"error,omitempty"`
}

// RunEnv is what the ranks reported about themselves.
type RunEnv struct {
	WorldSize      int    `json:"world_size"`
	Devices        int    `json:"devices"`
	Oversubscribed bool   `json:"oversubscribed"`
	Device         string `json:"device"`
	Torch          string `json:"torch"`
	CUDA           string `json:"cuda"`
	NCCL           string `json:"nccl"`
	DType          string `json:"dtype"` // the dtypes, comma-separated
	// Islands are the layouts bench.py set (SGLANG_PCIE_CUSTOM_AR_ISLANDS).
	Islands []string `json:"islands,omitempty"`
	MaxSize int      `json:"max_size,omitempty"` // bytes of input and of scratch per communicator
}

// Run is the outcome of one benchmark run.
type Run struct {
	Command []string      `json:"command"`
	Env     RunEnv        `json:"env"`
	Results []Result      `json:"results"`
	NCCL    NCCLTransport `json:"nccl_transport"`
	Hang    *Result       `json:"hang,omitempty"` // the case in progress when the timeout fired
	// Interrupted is the case in progress when the caller's context
	// ended (Exit "interrupted": a signal, not a fault of the case); it
	// is not among Results.
	Interrupted *Result `json:"interrupted,omitempty"`
	// ThresholdProbe is what init_custom_ar did with a bad 1-stage limit
	// (Options.ProbeThresholds): refused, as the pcie series does, or not.
	ThresholdProbe *ThresholdProbe `json:"threshold_probe,omitempty"`
	// AlgoProbe is what init_custom_ar did with
	// SGLANG_PCIE_CUSTOM_AR_ALGO=bogus, asked before any push
	// implementation runs: not refused, they are Unsupported.
	AlgoProbe *ThresholdProbe `json:"algo_probe,omitempty"`
	Seconds   float64         `json:"seconds"`
	Exit      string          `json:"exit"` // "ok", "timeout", "interrupted", or the error
	// BadLines counts result lines that did not parse (cut by a kill).
	BadLines int      `json:"bad_lines,omitempty"`
	Output   []string `json:"-"`
}

// torchrunArgs builds the command that starts bench.py on every rank.
func torchrunArgs(opts Options, script, out string) []string {
	sizes := textfmt.Ints(opts.Sizes, ",")
	if opts.Cap {
		sizes = strings.TrimPrefix(sizes+",cap", ",")
	}
	args := []string{opts.Python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", strconv.Itoa(opts.WorldSize),
		script, "--out", out, "--sizes", sizes, "--impls", strings.Join(opts.Impls, ","),
		"--branches", strings.Join(opts.Branches, ","), "--modes", strings.Join(opts.Modes, ",")}
	if len(opts.DTypes) > 0 {
		args = append(args, "--dtypes", strings.Join(opts.DTypes, ","))
	}
	for _, l := range opts.Layouts {
		args = append(args, "--islands", l.String())
	}
	if opts.CustomMaxBytes > 0 {
		args = append(args, "--custom-max-bytes", strconv.Itoa(opts.CustomMaxBytes))
	}
	if opts.Ext != "" {
		args = append(args, "--ext", opts.Ext)
	}
	if opts.ProbeThresholds {
		args = append(args, "--probe-thresholds")
	}
	return append(args, "--warmup", strconv.Itoa(opts.Warmup), "--inner", strconv.Itoa(opts.Inner), "--reps", strconv.Itoa(opts.Reps))
}

// resolved returns opts with the zeros that mean a default filled in: the
// interpreter pyenv.Default, Inner, Reps and Timeout their Default*.
func (opts Options) resolved() Options {
	opts.Python = pyenv.Or(opts.Python)
	if opts.Inner == 0 {
		opts.Inner = DefaultInner
	}
	if opts.Reps == 0 {
		opts.Reps = DefaultReps
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	return opts
}

// ExitInterrupted is Run.Exit when the caller's context ended the run.
const ExitInterrupted = torchrun.ExitInterrupted

// Execute runs the benchmark. It returns the results read so far even when
// the run fails: a timeout marks the case that was in progress as a hang
// (Run.Hang, Exit "timeout"), the caller's context ending names it
// without a verdict (Run.Interrupted, Exit "interrupted"), and a rank that
// dies leaves Exit with its error. It returns an error only when nothing could be started.
func Execute(ctx context.Context, opts Options) (*Run, error) {
	opts = opts.resolved()
	env := opts.Env
	if env == nil {
		env = environ()
	}
	if opts.NCCLDebug {
		// INIT and GRAPH: the transport and channels; ENV: the knobs NCCL
		// took; TUNING: per dispatch, its algorithm and protocol (rank 0,
		// one buffered line per eager call, about a microsecond; a CUDA
		// graph's replay logs nothing).
		env = append(env[:len(env):len(env)], "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING")
	}
	spec := torchrun.Spec{
		Script: benchScript, Name: "bench.py", Env: env, Timeout: opts.Timeout, Log: opts.Log,
		Argv: func(script, out string) []string { return torchrunArgs(opts, script, out) },
	}
	if opts.Progress != nil {
		total := len(MissingCases(opts, nil))
		opts.Progress(0, total)
		spec.Watch = func(records []byte) {
			so := Run{Exit: torchrun.ExitOK} // a case started is not done
			_ = readResults(records, &so)    // a partial file: what parses counts
			opts.Progress(total-len(MissingCases(opts, so.Results)), total)
		}
	}
	tr, err := torchrun.Run(ctx, spec)
	if err != nil {
		return nil, err
	}
	run := &Run{Command: tr.Argv, Exit: tr.Exit, Seconds: tr.Seconds, Output: tr.Output}
	run.NCCL = ParseNCCLTransport(run.Output)
	if err := readResults(tr.Records, run); err != nil {
		return run, err
	}
	if opts.Progress != nil {
		total := len(MissingCases(opts, nil))
		opts.Progress(total-len(MissingCases(opts, run.Results)), total)
	}
	return run, nil
}

// readResults reads bench.py's JSON lines (nil: rank 0 wrote none). A
// "start" without its "result" is the case that hung.
func readResults(records []byte, run *Run) error {
	var pending *Result
	sc := bufio.NewScanner(bytes.NewReader(records))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		var head struct {
			Event string `json:"event"`
		}
		if json.Unmarshal(line, &head) != nil {
			run.BadLines++ // a line cut by a kill
			continue
		}
		switch head.Event {
		case "env":
			if json.Unmarshal(line, &run.Env) != nil {
				run.BadLines++
			}
		case "threshold_probe", "algo_probe":
			// A probe that does not decode is no probe: an empty one would
			// read as "took it" (Refused false).
			var p ThresholdProbe
			if json.Unmarshal(line, &p) != nil {
				run.BadLines++
				continue
			}
			if head.Event == "algo_probe" {
				run.AlgoProbe = &p
			} else {
				run.ThresholdProbe = &p
			}
		case "start":
			var r Result
			if json.Unmarshal(line, &r) != nil {
				run.BadLines++
			}
			pending = &r
		case "result":
			var r Result
			if json.Unmarshal(line, &r) != nil {
				run.BadLines++
				continue
			}
			run.Results = append(run.Results, r)
			pending = nil
		}
	}
	if pending != nil && run.Exit == ExitInterrupted {
		run.Interrupted = pending
		return sc.Err()
	}
	if pending != nil && run.Exit != torchrun.ExitOK {
		pending.Error = "hang"
		if run.Exit != torchrun.ExitTimeout {
			pending.Error = "the run ended during this case: " + run.Exit
		}
		run.Hang = pending
		run.Results = append(run.Results, *pending)
	}
	return sc.Err()
}

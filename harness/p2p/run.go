package p2p

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/internal/torchrun"
)

//go:embed p2p.py
var script []byte

// The defaults of a run: the one place each lives; `arpatch bench p2p`
// shows them as its flags' defaults.
const (
	// DefaultSizes are the transfer sizes of the pair and host-link tests:
	// an allreduce-sized one, 8 MiB (custom allreduce's cap) and one large
	// enough that launch costs vanish.
	DefaultSizes = "256K,8M,64M"
	// DefaultPatternBytes is what each rank moves to or from each peer in
	// the all-to-all patterns.
	DefaultPatternBytes = 4 << 20
	DefaultReps         = 10
	// DefaultMinRepBytes: a timed rep of small transfers launches enough
	// of them to move this much (at most 64), so launch costs vanish.
	DefaultMinRepBytes = 32 << 20
	// DefaultDeviceTimeout bounds a kernel's wait for a peer's flag, so
	// that a peer whose stores never arrive is an error, not a hung GPU.
	DefaultDeviceTimeout = 5 * time.Second
	DefaultTimeout       = 10 * time.Minute
)

// Options holds every input of Execute.
type Options struct {
	Python string // interpreter with torch (torchrun and torch.distributed)
	// GPUs are the GPUs to measure, in CUDA's order: rank r runs on CUDA
	// device r, which is GPUs[r]. Their count is the world size.
	GPUs []nvsmi.GPU
	// Topology is `nvidia-smi topo -m` among GPUs (their rows, in rank
	// order); nil when unknown (Patterns then has one group of all).
	Topology     *nvsmi.Topology
	Sizes        []int // bytes per transfer, multiples of 16
	PatternBytes int   // bytes per peer in the all-to-all patterns, a multiple of 16
	Reps         int   // timed reps per case (0: DefaultReps)
	MinRepBytes  int   // 0: DefaultMinRepBytes
	// DeviceTimeout bounds a kernel's wait for a peer (0: DefaultDeviceTimeout).
	DeviceTimeout time.Duration
	Timeout       time.Duration // the whole run's (0: DefaultTimeout)
	// Env is the ranks' environment (nil: this process's); Execute adds
	// CUDA_DEVICE_ORDER=PCI_BUS_ID, so that CUDA numbers the GPUs as
	// nvidia-smi does.
	Env []string
	// Log receives the ranks' combined output as it comes; nil for none.
	Log io.Writer
}

// resolved fills in the zeros that mean a default.
func (o Options) resolved() Options {
	o.Python = pyenv.Or(o.Python)
	if o.Reps == 0 {
		o.Reps = DefaultReps
	}
	if o.MinRepBytes == 0 {
		o.MinRepBytes = DefaultMinRepBytes
	}
	if o.DeviceTimeout == 0 {
		o.DeviceTimeout = DefaultDeviceTimeout
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// argv is the command line that starts p2p.py on every rank.
func (o Options) argv(script, out string) []string {
	var pats []string
	for _, p := range Patterns(o.Topology, len(o.GPUs)) {
		pats = append(pats, p.Name+":"+textfmt.Ints(p.Ranks, ","))
	}
	return []string{o.Python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", strconv.Itoa(len(o.GPUs)),
		script, "--out", out, "--sizes", textfmt.Ints(o.Sizes, ","), "--pattern-bytes", strconv.Itoa(o.PatternBytes),
		"--patterns", strings.Join(pats, ";"), "--reps", strconv.Itoa(o.Reps), "--min-rep-bytes", strconv.Itoa(o.MinRepBytes),
		"--device-timeout", strconv.FormatFloat(o.DeviceTimeout.Seconds(), 'g', -1, 64)}
}

// Rank is what one rank said about its GPU.
type Rank struct {
	Device     string `json:"device"`
	BusID      string `json:"bus_id"` // the driver's, "0000:18:00.0"
	ComputeCap string `json:"compute_cap"`
	SMs        int    `json:"sms"`
	DriverAPI  int    `json:"driver_api"` // cuDriverGetVersion: 12080 is CUDA 12.8
	NVRTC      string `json:"nvrtc"`
	PTXArch    string `json:"ptx_arch"` // what the kernels were compiled for: "compute_90"
	// SelfCheck is "" when the kernels' pattern matched p2p.py's and the
	// checker found a planted wrong word; else why not (nothing is
	// measured then).
	SelfCheck string `json:"self_check"`
}

// RunEnv is the probe's "env" record.
type RunEnv struct {
	WorldSize    int    `json:"world_size"`
	Ranks        []Rank `json:"ranks"`
	Sizes        []int  `json:"sizes"`
	PatternBytes int    `json:"pattern_bytes"`
	Reps         int    `json:"reps"`
}

// HostPeer is Check.Peer and Result.Peer for pinned host memory.
const HostPeer = -1

// Mismatch is the first word a check found wrong.
type Mismatch struct {
	Index int64  `json:"index"` // word (4 bytes) index in the transfer; -1 for a chain of loads that ended elsewhere
	Got   string `json:"got"`   // the word as read, hex
}

// Check is what was checked of one direction: the bytes rank's kernel
// moved from or to peer's memory (HostPeer: pinned host memory).
type Check struct {
	Rank         int       `json:"rank"`
	Peer         int       `json:"peer"`
	CheckedBytes int64     `json:"checked_bytes"`
	BadWords     int64     `json:"bad_words"`
	FirstBad     *Mismatch `json:"first_bad,omitempty"`
}

// Test names (Result.Test) and ops (Result.Op).
const (
	TestHost    = "host"    // ops OpLoad, OpStore: a GPU and pinned host memory
	TestPair    = "pair"    // ops OpRead, OpWrite: a GPU's kernel and a peer's memory, alone
	TestLatency = "latency" // ops OpFlagRTT, OpRead (dependent loads from a peer), OpHostRead
	TestPattern = "pattern" // ops OpRead, OpWrite, OpReadLatency: every rank of a group at once
	TestIPC     = "ipc"     // a mapping that failed

	OpLoad     = "load"
	OpStore    = "store"
	OpRead     = "read"
	OpWrite    = "write"
	OpFlagRTT  = "flag_rtt"
	OpHostRead = "host_read"
	// OpReadLatency is a pattern's round of dependent loads, every rank
	// from every other at once.
	OpReadLatency = "read_latency"
)

// Result is one case as rank 0 reported it. Ranks are torchrun's, as in
// Options.GPUs.
type Result struct {
	Test  string `json:"test"`
	Op    string `json:"op"`
	Rank  int    `json:"rank"`
	Peer  int    `json:"peer"`            // HostPeer for host tests
	Name  string `json:"name,omitempty"`  // pattern
	Ranks []int  `json:"ranks,omitempty"` // pattern
	Bytes int    `json:"bytes,omitempty"` // per transfer (per peer in a pattern)
	// SamplesGBps are per timed rep (pair, host), in GB/s (1e9 bytes/s).
	SamplesGBps []float64 `json:"samples_gbps,omitempty"`
	// SamplesUS are per rep, in µs: one round trip of flags, or one
	// dependent load.
	SamplesUS []float64 `json:"samples_us,omitempty"`
	// PerRankUS are a pattern's times per rank (the key: its rank, as
	// JSON writes it) per rep, in µs: its kernel's (OpRead, OpWrite), or
	// one round of dependent loads from every peer at once, the slowest
	// peer's (OpReadLatency).
	PerRankUS map[string][]float64 `json:"per_rank_us,omitempty"`
	Checks    []Check              `json:"checks,omitempty"`
	// CPUCheck is "ok" when the CPU read back what the GPU wrote to
	// pinned host memory (host tests), else what it found.
	CPUCheck string `json:"cpu_check,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Run is the outcome of one probe run.
type Run struct {
	Command []string  `json:"command"`
	Env     *RunEnv   `json:"env,omitempty"`
	Results []Result  `json:"results"`
	Hang    *Result   `json:"hang,omitempty"`        // the case in progress when the run ended otherwise than on its own
	Stopped *Result   `json:"interrupted,omitempty"` // the case in progress when the caller's context ended
	Done    bool      `json:"done"`                  // the probe wrote its last record
	Error   string    `json:"error,omitempty"`       // the probe's own, in its last record
	Seconds float64   `json:"seconds"`
	Exit    string    `json:"exit"` // "ok", "timeout", "interrupted", or a rank's error
	Started time.Time `json:"started"`
	// BadLines counts records that did not parse (cut by a kill).
	BadLines int      `json:"bad_lines,omitempty"`
	Output   []string `json:"-"`
}

// Execute runs the probe on one rank per GPU of o.GPUs. It returns what
// was read even when the run fails: a timeout or a rank's death marks the
// case in progress (Run.Hang), the caller's context ending names it
// without a verdict (Run.Stopped). It returns an error only when nothing
// could be started, or for options it cannot run (no GPU, a size that is
// not a positive multiple of 16).
func Execute(ctx context.Context, o Options) (*Run, error) {
	o = o.resolved()
	if len(o.GPUs) == 0 {
		return nil, fmt.Errorf("p2p: no GPU to measure")
	}
	for _, s := range append([]int{o.PatternBytes}, o.Sizes...) {
		if s <= 0 || s%16 != 0 {
			return nil, fmt.Errorf("p2p: %d bytes: sizes must be positive multiples of 16", s)
		}
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(env[:len(env):len(env)], "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	started := time.Now().UTC()
	tr, err := torchrun.Run(ctx, torchrun.Spec{Script: script, Name: "p2p.py", Env: env, Timeout: o.Timeout, Log: o.Log, Argv: o.argv})
	if err != nil {
		return nil, err
	}
	run := &Run{Command: tr.Argv, Exit: tr.Exit, Seconds: tr.Seconds, Output: tr.Output, Started: started}
	return run, readRecords(tr.Records, run)
}

// readRecords reads p2p.py's JSON lines into run. A "start" without its
// "result" is the case that hung or was stopped.
func readRecords(records []byte, run *Run) error {
	var pending *Result
	sc := bufio.NewScanner(bytes.NewReader(records))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var head struct {
			Event string `json:"event"`
			Error string `json:"error"`
		}
		line := sc.Bytes()
		if json.Unmarshal(line, &head) != nil {
			run.BadLines++ // a line cut by a kill
			continue
		}
		switch head.Event {
		case "env":
			var e RunEnv
			if json.Unmarshal(line, &e) != nil {
				run.BadLines++
				continue
			}
			run.Env = &e
		case "start", "result":
			var r Result
			if json.Unmarshal(line, &r) != nil {
				run.BadLines++
				continue
			}
			if head.Event == "start" {
				pending = &r
			} else {
				run.Results = append(run.Results, r)
				pending = nil
			}
		case "done":
			run.Done, run.Error = true, head.Error
		}
	}
	switch {
	case pending == nil:
	case run.Exit == torchrun.ExitInterrupted:
		run.Stopped = pending
	case run.Exit != torchrun.ExitOK:
		pending.Error = "hang: the run timed out during this case"
		if run.Exit != torchrun.ExitTimeout {
			pending.Error = "the run ended during this case: " + run.Exit
		}
		run.Hang = pending
		run.Results = append(run.Results, *pending)
	}
	return sc.Err()
}

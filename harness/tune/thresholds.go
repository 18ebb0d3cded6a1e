// Package tune holds the run-time settings of the pcie series' PCIe-only
// allreduce dispatch and the tune file that carries them from
// `arpatch tune allreduce` to `bench`, `nightly` and the printed runtime
// environment: the variable names, the parse rules both patched sides
// share, what the patched stack runs at each size, the choice of a
// schedule, a cut and an NCCL variant from measured cases, and the env
// file with its host record and host check.
//
// It is not the measurement (harness/allreduce runs the ranks) and not the
// traffic model (harness/traffic estimates without measuring).
//
// Facts it rests on, as the pcie series patches them (its 0001 and 0002
// in patches/sglang/pcie-*, whose own lines the tests run:
// patches/seriessim):
//   - Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3 (CustomAllreduce.should_custom_ar)
//     admits at most max_size bytes (8 MiB); 0002 caps PCIe-only groups at
//     SGLANG_PCIE_CUSTOM_AR_MAX_BYTES (0 keeps every size on NCCL) when
//     SGLANG_FORCE_CUSTOM_AR_PCIE=1 opened the gate.
//   - Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce)
//     picks 1-stage or 2-stage (pull1, pull2); 0001 adds the push
//     algorithms push1, push2 and island on PCIe-only groups (full_nvlink_
//     false) and reads, once at init_custom_ar, a schedule
//     SGLANG_PCIE_CUSTOM_AR_ALGO (ALGO[:MAX_BYTES] steps, "auto" by default)
//     and the islands SGLANG_PCIE_CUSTOM_AR_ISLANDS. The legacy
//     SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=B still means pull1:B,pull2
//     and is refused together with SGLANG_PCIE_CUSTOM_AR_ALGO.
//     SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage|2stage forces one and wins.
//   - Both sides accept byte counts in ASCII digits only, 0 to 2^64-1, and
//     refuse a bad value at init, naming the variable.
//   - Upstream: python/sglang/srt/distributed/parallel_state.py@84118acf50b3 (GroupCoordinator.__init__)
//     (and @8905cbd42f4a, @0bda0b168ad5) constructs CustomAllreduce inside
//     `except Exception`, logging "Setup Custom allreduce failed with ...":
//     a refused value leaves a server running on NCCL, so arpatch checks
//     tune files (FromEnv) before any server starts.
//   - NCCL's knobs (allreduce.NCCLKnobs) apply to every NCCL collective of
//     the process; a tune carries the one variant that won at the sizes
//     left on NCCL.
package tune

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/patches/sglenv"
)

// The variables the pcie series reads.
const (
	EnvForce     = sglenv.Force
	EnvMaxBytes  = sglenv.MaxBytes
	Env1StageMax = sglenv.OneStageMax // legacy: pull1:B,pull2
	EnvSchedule  = sglenv.Schedule
	EnvIslands   = sglenv.Islands
	EnvAlgo      = sglenv.Algo // upstream's
)

// Variables are the pcie series' variables a tune sets or clears.
var Variables = []string{EnvForce, EnvMaxBytes, Env1StageMax, EnvSchedule, EnvIslands}

// DefaultMaxBytes is 0002's built-in SGLANG_PCIE_CUSTOM_AR_MAX_BYTES in
// bytes: the traffic model's cut on its reference host (docs/pcie-dispatch.md
// derives it; harness/traffic's TestShippedDefaultsAreTheModels holds the
// two equal).
const DefaultMaxBytes = 4 << 20

// AutoPush1MaxBytes is 0001's kPcieAutoPush1MaxBytes in bytes: auto's
// push1 bound above world size 2, the traffic model's on its reference
// host (harness/traffic's TestShippedDefaultsAreTheModels holds the
// three equal).
const AutoPush1MaxBytes = 5824

// AutoText says what the pcie series runs on a PCIe-only group of ws
// ranks with none of its schedule variables set (auto), as every era's
// 0001 defines it: pull1 (upstream's 1-stage) at world size 2; above it
// push1 up to AutoPush1MaxBytes, then island where the ranks form two
// islands or more (0002 hands over the CPU sockets NVML shows), else
// push2; where an algorithm's scratch runs out, island falls through to
// push2, push2 to pull2. Custom allreduce takes sizes up to
// DefaultMaxBytes, NCCL the rest.
func AutoText(ws int) string {
	if ws == 2 {
		return fmt.Sprintf("pull1 (upstream's 1-stage) at every size up to %s, NCCL above", formatBytes(DefaultMaxBytes))
	}
	return fmt.Sprintf("push1 up to %d bytes, then island on the CPU sockets where there are two or more of equal size, else push2 (island falls through to push2 and push2 to pull2 where the 8 MiB scratch runs out), up to %s, NCCL above",
		AutoPush1MaxBytes, formatBytes(DefaultMaxBytes))
}

// UpstreamMaxSize is CustomAllreduce's max_size in bytes (8 MiB), the
// largest allreduce custom allreduce takes at all.
// Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3 (CustomAllreduce.__init__).
const UpstreamMaxSize = 8 << 20

// ParseBytes reads a threshold value as both patched sides do: ASCII
// digits only, 0 to 2^64-1. It returns an error naming the variable,
// the value and an example.
func ParseBytes(name, raw string) (uint64, error) {
	ok := raw != ""
	for _, c := range raw {
		ok = ok && c >= '0' && c <= '9'
	}
	v, err := strconv.ParseUint(raw, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("%s=%q: expected a whole number of bytes (digits only, 0 to 2**64-1), e.g. %s=65536", name, raw, name)
	}
	return v, nil
}

// Algos are the algorithm names of a schedule, the pcie series' names of
// the forced implementations (allreduce.Algo).
var Algos = []string{"push1", "push2", "island", "pull1", "pull2"}

// Step is one step of a schedule: Algo for allreduces up to MaxBytes
// bytes; the last step has no bound (Last).
type Step struct {
	Algo     string `json:"algo"`
	MaxBytes uint64 `json:"max_bytes,omitempty"`
	Last     bool   `json:"last,omitempty"`
}

// Schedule is SGLANG_PCIE_CUSTOM_AR_ALGO: steps with strictly ascending
// bounds, the last without one. nil is "auto", the kernel's own.
type Schedule []Step

// ExampleSchedule is the schedule arpatch's messages and help give as an
// example of SGLANG_PCIE_CUSTOM_AR_ALGO, the one every era's series gives
// too: push1 up to 32 KiB, push2 up to 2 MiB, pull2 above. Every step fits
// the 8 MiB scratch up to its bound at every world size and on any
// islands, and pull2 needs none, so the series takes it as printed
// whatever the cut (TestPrintedSchedulesAccepted).
const ExampleSchedule = "push1:32768,push2:2097152,pull2"

// ParseSchedule reads SGLANG_PCIE_CUSTOM_AR_ALGO as 0001 does: "" or
// "auto" is nil; else comma-separated ALGO[:MAX_BYTES] steps, ALGO one
// of Algos, MAX_BYTES digits (ParseBytes), bounds strictly ascending, the
// last step without a bound ("push2" alone: push2 at every size). The
// error names the variable, the step and an example.
func ParseSchedule(raw string) (Schedule, error) {
	if raw == "" || raw == "auto" {
		return nil, nil
	}
	bad := func(f string, a ...any) (Schedule, error) {
		return nil, fmt.Errorf("%s=%q: %s; want auto, or steps ALGO[:MAX_BYTES] joined by ',' (ALGO: %s), bounds strictly ascending, the last step without a bound, e.g. %s=%s",
			EnvSchedule, raw, fmt.Sprintf(f, a...), strings.Join(Algos, ", "), EnvSchedule, ExampleSchedule)
	}
	parts := strings.Split(raw, ",")
	var s Schedule
	for i, p := range parts {
		algo, bound, hasBound := strings.Cut(p, ":")
		if !slices.Contains(Algos, algo) {
			return bad("step %d names %q, not an algorithm", i+1, algo)
		}
		st := Step{Algo: algo, Last: i == len(parts)-1}
		switch {
		case st.Last && hasBound:
			return bad("the last step %q has a bound: nothing would run above it", p)
		case !st.Last && !hasBound:
			return bad("step %q has no bound, but steps follow it", p)
		case hasBound:
			v, err := ParseBytes(EnvSchedule, bound)
			if err != nil {
				return bad("step %q: the bound %q is not a whole number of bytes (digits only)", p, bound)
			}
			if len(s) > 0 && v <= s[len(s)-1].MaxBytes {
				return bad("step %q: bounds must be strictly ascending", p)
			}
			st.MaxBytes = v
		}
		s = append(s, st)
	}
	return s, nil
}

// String is the variable's value, e.g. "push1:5824,island:3355424,push2"; "auto" for
// nil.
func (s Schedule) String() string {
	if s == nil {
		return "auto"
	}
	parts := make([]string, len(s))
	for i, st := range s {
		parts[i] = st.Algo
		if !st.Last {
			parts[i] += ":" + strconv.FormatUint(st.MaxBytes, 10)
		}
	}
	return strings.Join(parts, ",")
}

// At is the algorithm the schedule runs for an allreduce of n bytes.
func (s Schedule) At(n uint64) string {
	for _, st := range s {
		if st.Last || n <= st.MaxBytes {
			return st.Algo
		}
	}
	return ""
}

// Describe is "push1 up to 32K, island above" or "push2 at every size".
func (s Schedule) Describe() string {
	if len(s) == 1 {
		return s[0].Algo + " at every size"
	}
	var parts []string
	for _, st := range s {
		if st.Last {
			parts = append(parts, st.Algo+" above")
		} else {
			parts = append(parts, st.Algo+" up to "+formatBytes(st.MaxBytes))
		}
	}
	return strings.Join(parts, ", ")
}

// legacySchedule is what SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=b means.
func legacySchedule(b uint64) Schedule {
	return Schedule{{Algo: "pull1", MaxBytes: b}, {Algo: "pull2", Last: true}}
}

// ncclValueRe is what a tune file may give an NCCL knob: a word, so that
// `set -a; . FILE` reads it unquoted as written.
var ncclValueRe = lazyre.New(`^[A-Za-z0-9_]+$`)

// Thresholds are the run-time settings of the PCIe dispatch that a tune
// chooses: the NCCL cut, the schedule (or the legacy 1-stage limit), the
// islands, and the NCCL variant that serves the sizes left on NCCL.
type Thresholds struct {
	// MaxBytes is SGLANG_PCIE_CUSTOM_AR_MAX_BYTES: the largest allreduce
	// that takes custom allreduce; larger ones stay on NCCL. 0: none.
	MaxBytes uint64 `json:"max_bytes"`
	// OneStageMax is the legacy SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES:
	// pull1 up to it, pull2 above. nil: not set.
	OneStageMax *uint64 `json:"one_stage_max_bytes,omitempty"`
	// Schedule is SGLANG_PCIE_CUSTOM_AR_ALGO; nil: not set (auto).
	Schedule Schedule `json:"schedule,omitempty"`
	// Islands is SGLANG_PCIE_CUSTOM_AR_ISLANDS ("": not set), set when the
	// schedule runs island.
	Islands string `json:"islands,omitempty"`
	// NCCL are the winning NCCL variant's variables ("NCCL_PROTO=Simple"),
	// nil when NCCL as the environment leaves it won.
	NCCL []string `json:"nccl_env,omitempty"`
}

// Defaults are the thresholds when no variable is set.
func Defaults() Thresholds { return Thresholds{MaxBytes: DefaultMaxBytes} }

// FromEnv reads the thresholds from a KEY=VALUE map; a variable left out
// keeps its default. It returns the error of ParseBytes, ParseSchedule or
// allreduce.ParseIslands for a bad value, and refuses the schedule and the
// legacy 1-stage limit set together (0001 refuses the pair at init) and an
// NCCL knob whose value is not a plain word.
func FromEnv(env map[string]string) (Thresholds, error) {
	t := Defaults()
	if raw, ok := env[EnvMaxBytes]; ok && raw != "" {
		v, err := ParseBytes(EnvMaxBytes, raw)
		if err != nil {
			return t, err
		}
		t.MaxBytes = v
	}
	if raw, ok := env[Env1StageMax]; ok && raw != "" {
		v, err := ParseBytes(Env1StageMax, raw)
		if err != nil {
			return t, err
		}
		t.OneStageMax = &v
	}
	s, err := ParseSchedule(env[EnvSchedule])
	if err != nil {
		return t, err
	}
	t.Schedule = s
	if s != nil && t.OneStageMax != nil {
		return t, fmt.Errorf("%s=%s and %s=%d are both set, which the pcie series refuses at init: keep %s (the legacy %s means %s=%s)",
			EnvSchedule, env[EnvSchedule], Env1StageMax, *t.OneStageMax, EnvSchedule, Env1StageMax, EnvSchedule, legacySchedule(*t.OneStageMax))
	}
	if raw := env[EnvIslands]; raw != "" {
		if _, err := allreduce.ParseIslands(raw, 0); err != nil {
			return t, fmt.Errorf("%s=%w", EnvIslands, err)
		}
		t.Islands = raw
	}
	for _, k := range allreduce.NCCLKnobs {
		if v, ok := env[k]; ok {
			if !ncclValueRe().MatchString(v) {
				return t, fmt.Errorf("%s=%q: want a plain word of letters, digits and '_' (e.g. %s), as NCCL's documented values are", k, v, exampleKnob(k))
			}
			t.NCCL = append(t.NCCL, k+"="+v)
		}
	}
	return t, nil
}

// exampleKnob is a built-in variant's assignment of knob k.
func exampleKnob(k string) string {
	for _, v := range allreduce.NCCLVariants {
		for _, kv := range v.Env {
			if strings.HasPrefix(kv, k+"=") {
				return kv
			}
		}
	}
	return k + "=..."
}

// OneStageLimit is the legacy 1-stage limit in bytes the kernel uses at
// world size ws: OneStageMax, or upstream's default (every size at 2,
// none above).
func (t Thresholds) OneStageLimit(ws int) uint64 {
	if t.OneStageMax != nil {
		return *t.OneStageMax
	}
	if ws == 2 {
		return math.MaxUint64
	}
	return 0
}

// Effective is the schedule the kernel runs at world size ws: Schedule,
// the legacy 1-stage limit's pull1:B,pull2, or nil when neither is set
// (auto: at world size 2 pull1, above it the kernel's own choice).
func (t Thresholds) Effective() Schedule {
	switch {
	case t.Schedule != nil:
		return t.Schedule
	case t.OneStageMax != nil:
		return legacySchedule(*t.OneStageMax)
	}
	return nil
}

// Algorithm names what the patched stack runs for an allreduce of n bytes
// on a PCIe-only group of ws ranks with SGLANG_FORCE_CUSTOM_AR_PCIE=1:
// allreduce.NCCL above the cut, else the implementation of the schedule's
// algorithm there (allreduce.ImplOf); with neither schedule nor legacy
// limit, custom-1stage at world size 2 (upstream's choice, which auto
// keeps) and allreduce.CustomAuto above (the kernel's own constants
// decide).
func (t Thresholds) Algorithm(ws, n int) string {
	if n < 0 || uint64(n) > min(t.MaxBytes, UpstreamMaxSize) {
		return allreduce.NCCL
	}
	return t.Kernel(ws, n)
}

// Kernel is the custom implementation the kernel's dispatch runs for n
// bytes at world size ws, whatever the cut (as custom-auto, called
// directly, runs): Algorithm below the cut.
func (t Thresholds) Kernel(ws, n int) string {
	if s := t.Effective(); s != nil {
		return allreduce.ImplOf(s.At(uint64(n)))
	}
	if ws == 2 {
		return allreduce.Custom1Stage
	}
	return allreduce.CustomAuto
}

// Env returns the variables that select these thresholds, in a fixed
// order: the force switch, the custom allreduce cap, the schedule (or the
// legacy 1-stage limit), the islands, then the NCCL variant's.
func (t Thresholds) Env() []string {
	out := []string{EnvForce + "=1", EnvMaxBytes + "=" + strconv.FormatUint(t.MaxBytes, 10)}
	if t.Schedule != nil {
		out = append(out, EnvSchedule+"="+t.Schedule.String())
	}
	if t.OneStageMax != nil {
		out = append(out, Env1StageMax+"="+strconv.FormatUint(*t.OneStageMax, 10))
	}
	if t.Islands != "" {
		out = append(out, EnvIslands+"="+t.Islands)
	}
	return append(out, t.NCCL...)
}

// String is "custom allreduce up to 1M (push1 up to 32K, island above),
// NCCL above", with the NCCL variant's variables after it.
func (t Thresholds) String() string {
	nccl := ""
	if len(t.NCCL) > 0 {
		nccl = " (" + strings.Join(t.NCCL, " ") + ")"
	}
	if t.MaxBytes == 0 {
		return "NCCL at every size" + nccl
	}
	sched := "the kernel's auto schedule"
	if s := t.Effective(); s != nil {
		sched = s.Describe()
		if t.Schedule == nil {
			sched += ", by the legacy " + Env1StageMax
		}
	}
	if t.Islands != "" {
		sched += ", islands " + t.Islands
	}
	return fmt.Sprintf("custom allreduce up to %s (%s), NCCL above%s", formatBytes(t.MaxBytes), sched, nccl)
}

func formatBytes(n uint64) string {
	if n >= math.MaxInt {
		return "any size"
	}
	return allreduce.FormatBytes(int(n))
}

// U64 returns a pointer to v, for Thresholds.OneStageMax.
func U64(v uint64) *uint64 { return &v }

// Forced reports whether the pcie series opens its PCIe gate for the value
// v of SGLANG_FORCE_CUSTOM_AR_PCIE (EnvForce; "" for unset): as every
// era's 0002 reads it (pcie_custom_ar_forced:
// os.getenv(NAME, "0").strip().lower() in ("1", "true", "yes", "on")),
// so 1, true, yes and on in any case, with Python's whitespace around
// them. Every reading of the variable in arpatch goes through it
// (TestForcedIsTheSeries runs each era's function beside it).
func Forced(v string) bool {
	switch forceWord(v) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// forceWord is v as 0002 compares it: Python's str.strip() (which also
// strips U+001C..U+001F, the separators Go's unicode.IsSpace leaves) and
// lower(). Only ASCII capitals lower to the ASCII letters of 0002's words.
func forceWord(v string) string {
	return strings.ToLower(strings.TrimFunc(v, func(r rune) bool {
		return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
	}))
}

// CheckEnv checks the value v of a variable k whose meaning arpatch
// knows, as a recipe's [env] sets it: the pcie series' byte limits,
// schedule and islands (its patched custom_all_reduce_utils.py and
// custom_all_reduce.cuh refuse a bad one at server start, far from the
// recipe), its switch EnvForce, and SGLang's algorithm override EnvAlgo
// (custom_all_reduce.cuh throws on an unknown value). Any other variable
// passes. The error names the value and what is wanted.
func CheckEnv(k, v string) error {
	switch k {
	case EnvMaxBytes, Env1StageMax:
		if _, err := ParseBytes(k, v); err != nil {
			return err
		}
	case EnvSchedule, EnvIslands:
		if _, err := FromEnv(map[string]string{k: v}); err != nil {
			return err
		}
	case EnvForce:
		if w := forceWord(v); !Forced(v) && w != "0" && w != "false" && w != "no" && w != "off" {
			return fmt.Errorf("%q: the pcie series reads it as off (it opens the gate for 1, true, yes or on, in any case); want \"1\" (on) or \"0\" (off)", v)
		}
	case EnvAlgo:
		switch v {
		case "1stage", "oneshot", "2stage", "twoshot":
		default:
			return fmt.Errorf("%q: sgl-kernel accepts 1stage, oneshot, 2stage, twoshot", v)
		}
	}
	return nil
}

// ScratchNeeded is the scratch in bytes (after a rank's Signal block) that
// the pcie series' algo needs for an allreduce of n bytes at world size ws
// on k islands of m ranks (m = ws, k = 1 for one island), counted in whole
// 16-byte packs as 0002's _pcie_scratch_needed and 0001's
// pcie_scratch_needed count them: push1 ws·P; push2 ws·ceil(P/ws) + P;
// island (m+k)·ceil(P/m) + P, for P = n/16 packs; 0 for the pulls. It
// grows with n.
func ScratchNeeded(algo string, n uint64, ws, m, k int) uint64 {
	p, w, um, uk := n/16, uint64(ws), uint64(m), uint64(k)
	ceil := func(a, b uint64) uint64 { return (a + b - 1) / b }
	switch algo {
	case "push1":
		return w * p * 16
	case "push2":
		return (w*ceil(p, w) + p) * 16
	case "island":
		return ((um+uk)*ceil(p, um) + p) * 16
	}
	return 0
}

// SeriesError is what 0002 raises at CustomAllreduce init (before
// sgl-kernel's init_custom_ar) when a PCIe-only group of ws ranks runs
// with these thresholds and SGLANG_FORCE_CUSTOM_AR_PCIE=1, nil when it
// takes them: the islands must cut ws ranks, and each step of the
// schedule must fit the communicator's scratch (UpstreamMaxSize bytes,
// SGLang's max_size) up to its bound or the cut, whichever is lower (the
// kernel would throw mid-serving there, since an explicit schedule does
// not fall through). Auto (no schedule) always fits: the kernel falls
// through. It mirrors pcie_custom_ar_setup in every era's 0002; the
// series' own Python decides in the tests (harness/tune's
// TestPrintedSchedulesAccepted).
func (t Thresholds) SeriesError(ws int) error {
	m, k := ws, 1
	if t.Islands != "" {
		is, err := allreduce.ParseIslands(t.Islands, ws)
		if err != nil {
			return fmt.Errorf("%s=%w", EnvIslands, err)
		}
		m, k = is.Size(), len(is)
	}
	cut := min(t.MaxBytes, UpstreamMaxSize)
	lower := uint64(0)
	for _, st := range t.Effective() {
		largest := cut
		if !st.Last {
			largest = min(st.MaxBytes, cut)
		}
		if need := ScratchNeeded(st.Algo, largest, ws, m, k); largest >= lower && need > UpstreamMaxSize {
			return fmt.Errorf("%s: %s up to %d bytes needs %d bytes of scratch at world size %d and custom allreduce has %d, which the pcie series refuses at init (SGLang then serves on NCCL): bound that step at %d bytes or lower, or lower %s",
				EnvSchedule, st.Algo, largest, need, ws, uint64(UpstreamMaxSize), LastFit(st.Algo, ws, m, k), EnvMaxBytes)
		}
		if !st.Last {
			lower = st.MaxBytes + 1
		}
	}
	return nil
}

// LastFit is the largest size in bytes, a whole number of 16-byte packs,
// at which algo fits UpstreamMaxSize bytes of scratch (ScratchNeeded) at
// world size ws on k islands of m ranks: 3355424 for island on 4+4 ranks.
func LastFit(algo string, ws, m, k int) uint64 {
	lo, hi := uint64(0), uint64(UpstreamMaxSize/16) // packs: lo fits
	if ScratchNeeded(algo, hi*16, ws, m, k) <= UpstreamMaxSize {
		return hi * 16
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ScratchNeeded(algo, mid*16, ws, m, k) <= UpstreamMaxSize {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo * 16
}

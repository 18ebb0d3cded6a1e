// Package tune holds the run-time thresholds of the pcie series' PCIe-only
// allreduce dispatch and the tune file that carries them from
// `arpatch tune allreduce` to `bench`, `nightly` and the printed runtime
// environment: the variable names, the parse rule both patched sides share,
// what the patched stack runs at each size, the choice of thresholds from
// measured cases, and the env file with its host record and host check.
//
// It is not the measurement (harness/allreduce runs the ranks) and not the
// traffic model (harness/traffic estimates without measuring).
//
// Facts it rests on, as the pcie series patches them:
//   - Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3 (CustomAllreduce.should_custom_ar)
//     admits at most max_size bytes (8 MiB); 0002 caps PCIe-only groups at
//     SGLANG_PCIE_CUSTOM_AR_MAX_BYTES (default 65536; 0 keeps every size on
//     NCCL) when SGLANG_FORCE_CUSTOM_AR_PCIE=1 opened the gate.
//   - Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce)
//     picks 1-stage or 2-stage; 0001 gives PCIe-only groups (full_nvlink_
//     false) 1-stage up to SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES, read once
//     at init_custom_ar, 2-stage above; unset, every size at world size 2 and
//     none above. SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage|2stage forces one.
//   - Both sides accept ASCII digits only, 0 to 2^64-1, and refuse anything
//     else at init, naming the variable. The kernel reads
//     SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES on every PCIe-only group, a pair
//     without SGLANG_FORCE_CUSTOM_AR_PCIE included, and 0002 checks it there
//     too; SGLANG_PCIE_CUSTOM_AR_MAX_BYTES is read only with the gate open.
//   - Upstream: python/sglang/srt/distributed/parallel_state.py@84118acf50b3 (GroupCoordinator.__init__)
//     (and @8905cbd42f4a, @0bda0b168ad5) constructs CustomAllreduce inside
//     `except Exception`, logging "Setup Custom allreduce failed with ...":
//     a refused threshold leaves a server running on NCCL, so arpatch checks
//     tune files with ParseBytes before any server starts.
package tune

import (
	"fmt"
	"math"
	"strconv"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// The variables the pcie series reads.
const (
	EnvForce     = "SGLANG_FORCE_CUSTOM_AR_PCIE"
	EnvMaxBytes  = "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES"
	Env1StageMax = "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"
	EnvAlgo      = "SGLANG_CUSTOM_ALLREDUCE_ALGO"
)

// DefaultMaxBytes is 0002's built-in SGLANG_PCIE_CUSTOM_AR_MAX_BYTES in
// bytes (docs/pcie-dispatch.md derives it).
const DefaultMaxBytes = 64 << 10

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

// Thresholds are the PCIe dispatch's two limits, in bytes.
type Thresholds struct {
	// MaxBytes is SGLANG_PCIE_CUSTOM_AR_MAX_BYTES: the largest allreduce
	// that takes custom allreduce; larger ones stay on NCCL. 0: none.
	MaxBytes uint64 `json:"max_bytes"`
	// OneStageMax is SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES: the largest
	// that takes 1-stage, 2-stage above. nil: the kernel's default.
	OneStageMax *uint64 `json:"one_stage_max_bytes,omitempty"`
}

// Defaults are the thresholds when neither variable is set.
func Defaults() Thresholds { return Thresholds{MaxBytes: DefaultMaxBytes} }

// FromEnv reads the thresholds from a KEY=VALUE map; a variable left out
// keeps its default. It returns ParseBytes' error for a bad value.
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
	return t, nil
}

// OneStageLimit is the 1-stage limit in bytes the kernel uses at world
// size ws: OneStageMax, or its default (every size at 2, none above).
func (t Thresholds) OneStageLimit(ws int) uint64 {
	if t.OneStageMax != nil {
		return *t.OneStageMax
	}
	if ws == 2 {
		return math.MaxUint64
	}
	return 0
}

// Algorithm names what the patched stack runs for an allreduce of n bytes
// on a PCIe-only group of ws ranks with SGLANG_FORCE_CUSTOM_AR_PCIE=1:
// allreduce.NCCL, allreduce.Custom1Stage or allreduce.Custom2Stage.
func (t Thresholds) Algorithm(ws, n int) string {
	if n < 0 || uint64(n) > min(t.MaxBytes, UpstreamMaxSize) {
		return allreduce.NCCL
	}
	if uint64(n) <= t.OneStageLimit(ws) {
		return allreduce.Custom1Stage
	}
	return allreduce.Custom2Stage
}

// Env returns the variables that select these thresholds, in a fixed
// order: the force switch, the custom allreduce cap and, when set, the
// 1-stage limit.
func (t Thresholds) Env() []string {
	out := []string{EnvForce + "=1", EnvMaxBytes + "=" + strconv.FormatUint(t.MaxBytes, 10)}
	if t.OneStageMax != nil {
		out = append(out, Env1StageMax+"="+strconv.FormatUint(*t.OneStageMax, 10))
	}
	return out
}

// String is "custom up to 64K (1-stage up to 0B, 2-stage above), NCCL above".
func (t Thresholds) String() string {
	if t.MaxBytes == 0 {
		return "NCCL at every size"
	}
	one := "the kernel's default 1-stage limit"
	if t.OneStageMax != nil {
		one = "1-stage up to " + formatBytes(*t.OneStageMax)
	}
	return fmt.Sprintf("custom allreduce up to %s (%s, 2-stage above), NCCL above", formatBytes(t.MaxBytes), one)
}

func formatBytes(n uint64) string {
	if n >= math.MaxInt {
		return "any size"
	}
	return allreduce.FormatBytes(int(n))
}

// U64 returns a pointer to v, for Thresholds.OneStageMax.
func U64(v uint64) *uint64 { return &v }

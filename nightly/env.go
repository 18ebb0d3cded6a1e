package nightly

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/harness/doctor"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/kernels"
)

// Environment is what a run records about its host: GPU model and count,
// driver, CUDA (nvcc), torch and its NCCL, the host name and the GPU
// topology. The GPU model and count make the default hardware key: runs
// are compared only with runs on the same. The rest (EnvKeys) is checked
// against the reference runs: a change there is reported, not judged.
type Environment struct {
	GPUModel string `json:"gpu_model"`
	GPUCount int    `json:"gpu_count"`
	Driver   string `json:"driver,omitempty"`
	CUDA     string `json:"cuda,omitempty"`
	Torch    string `json:"torch,omitempty"`
	NCCL     string `json:"nccl,omitempty"`
	Host     string `json:"host,omitempty"`
	// Topology is nvidia-smi topo -m in one line (doctor's
	// Topology.Summary), e.g. "8 GPUs: NODE 8, PIX 4, SYS 16; 2 NUMA nodes".
	Topology string `json:"topology,omitempty"`
}

// EnvKeys are the environment entries (Environment.Map keys) that must
// match the reference runs' for a comparison with history to mean
// anything: another host, driver, CUDA, torch, NCCL, topology or GPU count
// moves every number. An entry a run did not record is not compared.
var EnvKeys = []string{"host", "gpu_count", "driver", "cuda", "torch", "nccl", "topology"}

// EnvChanges lists each EnvKeys entry recorded in both old and now that
// differs, as "driver 570.172.08 -> 580.95.05", in EnvKeys order.
func EnvChanges(old, now map[string]string) []string {
	var out []string
	for _, k := range EnvKeys {
		a, okA := old[k]
		b, okB := now[k]
		if okA && okB && a != b {
			out = append(out, fmt.Sprintf("%s %s -> %s", k, a, b))
		}
	}
	return out
}

// Discover reads the environment with nvidia-smi and, when toolchain is
// set, the toolchain probe (nvcc, torch, NCCL through python); what cannot
// be read stays empty. A drift-only night builds and benches nothing, so
// it leaves the toolchain out: the probe starts Python and nvcc.
func Discover(ctx context.Context, python string, toolchain bool) Environment {
	var e Environment
	e.Host, _ = os.Hostname()
	run := doctor.ExecRunner(os.Environ())
	if out, err := run(ctx, "nvidia-smi", "--query-gpu="+nvsmi.QueryGPUFields, "--format=csv"); err == nil {
		if gpus, err := nvsmi.ParseQueryGPU(out); err == nil && len(gpus) > 0 {
			e.GPUModel, e.GPUCount, e.Driver = gpus[0].Name, len(gpus), gpus[0].Driver
		}
	}
	if out, err := run(ctx, "nvidia-smi", "topo", "-m"); err == nil {
		if t, err := nvsmi.ParseTopoMatrix(out); err == nil {
			e.Topology = t.Summary()
		}
	}
	if !toolchain {
		return e
	}
	if tc, err := kernels.Probe(ctx, kernels.ProbeOptions{Python: python}); err == nil {
		e.CUDA, e.Torch, e.NCCL = tc.NVCC.Version, tc.Torch.Version, tc.Torch.NCCL
	}
	return e
}

// HardwareKey is "<count>x <model>", or "no-gpu".
func (e Environment) HardwareKey() string {
	if e.GPUCount == 0 {
		return "no-gpu"
	}
	return fmt.Sprintf("%dx %s", e.GPUCount, e.GPUModel)
}

// Map returns the environment as key/value pairs for the history.
func (e Environment) Map() map[string]string {
	m := map[string]string{"gpu_model": e.GPUModel, "gpu_count": fmt.Sprint(e.GPUCount), "driver": e.Driver, "cuda": e.CUDA, "torch": e.Torch, "nccl": e.NCCL, "host": e.Host, "topology": e.Topology}
	for k, v := range m {
		if strings.TrimSpace(v) == "" {
			delete(m, k)
		}
	}
	return m
}

// shortHash is a fingerprint of s: the first 16 hex digits of its SHA-256.
func shortHash(s string) string {
	return digest.SHA256Hex([]byte(s))[:16]
}

// EnvChange is an environment that differs from the reference runs'.
type EnvChange struct {
	// Since is the newest reference run whose environment differs;
	// Changes say how ("driver 570.172.08 -> 580.95.05").
	Since   int64    `json:"since_run"`
	Changes []string `json:"changes"`
	// Accept is the command that makes tonight the new reference.
	Accept string `json:"accept"`
}

func (e *EnvChange) String() string {
	return fmt.Sprintf("the environment changed since run %d (%s): not compared with history; if the change is intended, make this run the reference: `%s`",
		e.Since, strings.Join(e.Changes, ", "), e.Accept)
}

// envChange compares tonight's environment with each reference run's
// (newest first) over EnvKeys, and returns the first difference (nil for
// none) with the "environment" check (nil without reference runs). A
// value either run did not record is not compared. The error is a
// history that could not be read.
func envChange(store *history.Store, rep *Report, refRuns []int64, dbPath string) (*EnvChange, *history.Check, error) {
	slices.Sort(refRuns)
	refRuns = slices.Compact(refRuns)
	if len(refRuns) == 0 {
		return nil, nil, nil
	}
	now := rep.Environment.Map()
	for i := len(refRuns) - 1; i >= 0; i-- {
		old, err := store.Env(refRuns[i])
		if err != nil {
			return nil, nil, err
		}
		if ch := EnvChanges(old, now); len(ch) > 0 {
			e := &EnvChange{Since: refRuns[i], Changes: ch,
				Accept: shellq.Join([]string{"arpatch", "history", "accept", fmt.Sprint(rep.RunID), "--db", dbPath})}
			return e, &history.Check{Name: "environment vs reference runs", Kind: history.KindEnvironment, Status: history.CheckSkip, Detail: e.String()}, nil
		}
	}
	return nil, &history.Check{Name: "environment vs reference runs", Kind: history.KindEnvironment, Status: history.CheckPass,
		Detail: fmt.Sprintf("same %s as reference runs %d..%d", strings.Join(EnvKeys, ", "), refRuns[0], refRuns[len(refRuns)-1])}, nil
}

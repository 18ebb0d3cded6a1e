package nightly

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/arpatch/arpatch/harness/doctor"
	"github.com/arpatch/arpatch/kernels"
)

// Environment is what a run records about its host: GPU model and count,
// driver, CUDA (nvcc), torch and its NCCL. The GPU model and count make
// the default hardware key: runs are compared only with runs on the same.
type Environment struct {
	GPUModel string `json:"gpu_model"`
	GPUCount int    `json:"gpu_count"`
	Driver   string `json:"driver,omitempty"`
	CUDA     string `json:"cuda,omitempty"`
	Torch    string `json:"torch,omitempty"`
	NCCL     string `json:"nccl,omitempty"`
	Host     string `json:"host,omitempty"`
}

// Discover reads the environment with nvidia-smi and the toolchain probe;
// what cannot be read stays empty.
func Discover(ctx context.Context, python string) Environment {
	var e Environment
	e.Host, _ = os.Hostname()
	run := doctor.ExecRunner(os.Environ())
	if out, err := run(ctx, "nvidia-smi", "--query-gpu="+doctor.QueryGPUFields, "--format=csv"); err == nil {
		if gpus, err := doctor.ParseQueryGPU(out); err == nil && len(gpus) > 0 {
			e.GPUModel, e.GPUCount, e.Driver = gpus[0].Name, len(gpus), gpus[0].Driver
		}
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
	m := map[string]string{"gpu_model": e.GPUModel, "gpu_count": fmt.Sprint(e.GPUCount), "driver": e.Driver, "cuda": e.CUDA, "torch": e.Torch, "nccl": e.NCCL, "host": e.Host}
	for k, v := range m {
		if strings.TrimSpace(v) == "" {
			delete(m, k)
		}
	}
	return m
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

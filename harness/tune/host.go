package tune

import (
	"sort"
	"strings"
)

// ServingSizes are the allreduce sizes in bytes of a serving run with
// hidden size hidden (bf16): every power-of-two token count from 1 (one
// decode token) up to the custom allreduce cap (UpstreamMaxSize, 8 MiB:
// prefill chunks above it take NCCL anyway), the EAGLE-3 verify pass of
// draftTokens tokens and its decode batches of 2, 4, ... 64 requests, and
// the cap itself. Each is rounded down to a multiple of 16 bytes; the
// list is sorted and unique.
func ServingSizes(hidden, draftTokens int) []int {
	row := hidden * 2
	seen := map[int]bool{}
	var out []int
	add := func(n int) {
		n = n / 16 * 16
		if n > 0 && n <= UpstreamMaxSize && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for t := 1; t*row <= UpstreamMaxSize; t *= 2 {
		add(t * row)
	}
	for b := 1; b <= 64; b *= 2 {
		add(b * draftTokens * row)
	}
	add(UpstreamMaxSize)
	sort.Ints(out)
	return out
}

// ApplyEnv sets the thresholds in env, a server's environment, when it
// opens the PCIe gate (SGLANG_FORCE_CUSTOM_AR_PCIE=1); it reports whether
// it did. An arm without the gate open runs NCCL and is left alone.
func (t Thresholds) ApplyEnv(env map[string]string) bool {
	if env[EnvForce] != "1" {
		return false
	}
	for _, kv := range t.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if t.OneStageMax == nil {
		delete(env, Env1StageMax)
	}
	return true
}

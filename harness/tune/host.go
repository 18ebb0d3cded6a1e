package tune

import (
	"slices"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// ServingSizes are the allreduce sizes in bytes of a serving run with
// hidden size hidden (bf16): every power-of-two token count from 1 (one
// decode token) up to the custom allreduce cap (UpstreamMaxSize, 8 MiB:
// prefill chunks above it take NCCL anyway), the EAGLE-3 verify pass of
// draftTokens tokens and its decode batches of 2, 4, ... 64 requests, and
// the cap itself. Each is rounded down to a multiple of 16 bytes; the
// list is sorted and unique.
func ServingSizes(hidden, draftTokens int) []int {
	row := hidden * allreduce.BF16Bytes
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

// BenchSizes are the ServingSizes of a bench of draftTokens draft tokens
// (fewer than 1, as without speculation: 1) on the verify pass's model
// (allreduce.VerifyHidden): the sizes whose dispatch `arpatch bench
// --tune`, `arpatch apply --tune` and the nightly's bench.tune print and
// record.
func BenchSizes(draftTokens int) []int {
	return ServingSizes(allreduce.VerifyHidden, max(draftTokens, 1))
}

// ApplyEnv sets the tune's variables in env, a server's environment: the
// NCCL variant's always (every arm's NCCL then is the strongest one the
// tune found, the baseline's included), the pcie series' only when env
// opens the PCIe gate (SGLANG_FORCE_CUSTOM_AR_PCIE read as the series
// reads it, Forced; gate reports it),
// clearing those of its variables the tune does not set, so that the arm
// runs exactly the tune. set lists what it set, "K=V", in Env's order.
func (t Thresholds) ApplyEnv(env map[string]string) (set []string, gate bool) {
	gate = Forced(env[EnvForce])
	for _, kv := range t.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if !gate && !strings.HasPrefix(k, "NCCL_") {
			continue
		}
		env[k] = v
		set = append(set, kv)
	}
	if gate {
		for _, k := range Variables {
			if !slices.ContainsFunc(set, func(kv string) bool { return strings.HasPrefix(kv, k+"=") }) {
				delete(env, k)
			}
		}
	}
	return set, gate
}

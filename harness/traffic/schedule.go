package traffic

import (
	"math"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/harness/tune"
)

// Schedule is a PCIe dispatch as the pcie series runs it: custom
// algorithms by size (SGLANG_PCIE_CUSTOM_AR_ALGO), the islands the island
// algorithm uses (SGLANG_PCIE_CUSTOM_AR_ISLANDS), and the size above which
// allreduces stay on NCCL (SGLANG_PCIE_CUSTOM_AR_MAX_BYTES).
type Schedule struct {
	// Steps run their algorithm up to Max bytes, in ascending order; the
	// last has Max 0 (every larger size).
	Steps []Step `json:"steps"`
	// Islands are the island step's islands; nil without one.
	Islands *IslandChoice `json:"islands,omitempty"`
	// MaxBytes is the cut: custom allreduce up to it, NCCL above.
	MaxBytes int `json:"max_bytes"`
	// AgainstSHM: the cut is against NCCL over SHM (the published
	// figure), not against the best NCCL over P2P.
	AgainstSHM bool `json:"against_shm"`
}

// Step is one part of a schedule: Algo (a custom algorithm) up to Max
// bytes (0: no bound).
type Step struct {
	Algo string `json:"algo"`
	Max  int    `json:"max,omitempty"`
}

// Algo is the schedule as SGLANG_PCIE_CUSTOM_AR_ALGO takes it:
// "push1:5824,island".
func (s Schedule) Algo() string {
	parts := make([]string, len(s.Steps))
	for i, st := range s.Steps {
		parts[i] = EnvName(st.Algo)
		if st.Max > 0 {
			parts[i] += ":" + strconv.Itoa(st.Max)
		}
	}
	return strings.Join(parts, ",")
}

// Env is the environment that makes the pcie series run s, one VAR=value
// each: the gate open (0002 reads SGLANG_PCIE_CUSTOM_AR_MAX_BYTES only
// then, at world size 2 too), the schedule, its islands and the cut.
func (s Schedule) Env() []string {
	env := []string{tune.EnvForce + "=1", tune.EnvSchedule + "=" + s.Algo()}
	if s.Islands != nil {
		env = append(env, tune.EnvIslands+"="+s.Islands.Islands.String())
	}
	return append(env, tune.EnvMaxBytes+"="+strconv.Itoa(s.MaxBytes))
}

// Auto is what s runs at bytes: the step whose bound covers it, or, when
// that algorithm's scratch does not hold the size, the next that does in
// the order push1, island (with islands), push2, pull2, as the pcie
// series' pcie_algo_for falls through (docs/pcie-dispatch.md, "The
// algorithms").
func (t *Topology) Auto(s Schedule, bytes int, p Params) Estimate {
	algo := s.Steps[len(s.Steps)-1].Algo
	for _, st := range s.Steps {
		if st.Max == 0 || bytes <= st.Max {
			algo = st.Algo
			break
		}
	}
	order := []string{CustomPush1, CustomIsland, CustomPush2, Custom2Stage}
	if t.N == 2 {
		order = []string{CustomPush1, Custom1Stage}
	}
	for i, a := range order {
		if a != algo {
			continue
		}
		for _, next := range order[i:] {
			if next == CustomIsland && s.Islands == nil {
				continue
			}
			if e := t.est(s, next, bytes, p); e.Fits {
				return e
			}
		}
	}
	return t.est(s, algo, bytes, p)
}

func (t *Topology) est(s Schedule, algo string, bytes int, p Params) Estimate {
	if algo == CustomIsland && s.Islands != nil {
		return t.EstimateIslands(*s.Islands, bytes, p)
	}
	return t.custom(algo, bytes, nil, p)
}

// Suggest is the model's schedule for t. Above world size 2: push1 up to
// the largest size at which it is not slower than what follows it, then
// island on the island choice the model finds fastest summed over the
// powers of two up to the scratch (when the host cuts into equal islands)
// or push2. At world size 2, where
// the series' auto keeps upstream's pull1 at every size: push1 up to the
// largest size at which it beats pull1 (and fits), then pull1. MaxBytes
// is the largest size up to which the schedule beats NCCL without a
// break: the best NCCL over P2P at each size, or NCCL over SHM when shm.
// Sizes are scanned in steps of 16 bytes (scanSizes) up to
// Params.ScratchBytes.
func (t *Topology) Suggest(p Params, shm bool) Schedule {
	sizes := scanSizes(p.ScratchBytes)
	s := Schedule{AgainstSHM: shm}
	large := Custom1Stage
	if t.N > 2 {
		large = CustomPush2
		if cs := t.IslandChoices(); len(cs) > 0 {
			large = CustomIsland
			best := math.Inf(1)
			for i, c := range cs {
				sum := 0.0
				for n := 16; n <= p.ScratchBytes; n *= 2 {
					sum += t.EstimateIslands(c, n, p).US
				}
				if sum < best {
					best, s.Islands = sum, &cs[i]
				}
			}
		}
	}
	s.Steps = []Step{{Algo: large}}
	push1 := 0
	for _, n := range sizes {
		e := t.custom(CustomPush1, n, nil, p)
		if !e.Fits || e.US > t.est(s, large, n, p).US {
			break
		}
		push1 = n
	}
	if push1 > 0 {
		s.Steps = []Step{{Algo: CustomPush1, Max: push1}, {Algo: large}}
	}
	for _, n := range sizes {
		if t.Auto(s, n, p).US >= t.NCCL(n, p, shm).US {
			break
		}
		s.MaxBytes = n
	}
	return s
}

// scanSizes are 16 B .. top: powers of two with 64 even steps (multiples
// of 16 bytes) between each and the next.
func scanSizes(top int) []int {
	var out []int
	for lo := 16; lo < top; lo *= 2 {
		step := max(16, lo/64)
		for n := lo; n < 2*lo && n < top; n += step {
			out = append(out, n)
		}
	}
	return append(out, top)
}

package traffic

import (
	"math"
	"slices"
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
// "push1:5824,island:3355424,push2".
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

// Auto is what the series' auto dispatch runs at bytes for the steps of
// s: the step whose bound covers it, or, when that algorithm's scratch
// does not hold the size, the next that does in the order push1, island
// (with islands), push2, pull2, as the pcie series' pcie_algo_for falls
// through when SGLANG_PCIE_CUSTOM_AR_ALGO is auto (docs/pcie-dispatch.md,
// "The algorithms"). An explicit schedule never falls through (the
// kernel throws instead), so Suggest states every fall-through as a
// bounded step: on its schedules Auto is the step lookup at every size up
// to MaxBytes.
func (t *Topology) Auto(s Schedule, bytes int, p Params) Estimate {
	algo := t.autoAlgo(s, bytes, p)
	return t.est(s, algo, bytes, p)
}

// fallThrough is the order the series' auto falls through in, from algo
// on: push1, island (when s has islands), push2, pull2; at world size 2,
// the model's own push1, then pull1.
func (t *Topology) fallThrough(s Schedule, algo string) []string {
	order := []string{CustomPush1, CustomIsland, CustomPush2, Custom2Stage}
	if t.N == 2 {
		order = []string{CustomPush1, Custom1Stage}
	}
	i := slices.Index(order, algo)
	if i < 0 {
		return []string{algo}
	}
	var out []string
	for _, a := range order[i:] {
		if a != CustomIsland || s.Islands != nil {
			out = append(out, a)
		}
	}
	return out
}

// autoAlgo is the algorithm Auto runs at bytes: the step's, or the first
// of its fall-through that fits the scratch; the step's when none fits.
func (t *Topology) autoAlgo(s Schedule, bytes int, p Params) string {
	algo := s.Steps[len(s.Steps)-1].Algo
	for _, st := range s.Steps {
		if st.Max == 0 || bytes <= st.Max {
			algo = st.Algo
			break
		}
	}
	for _, next := range t.fallThrough(s, algo) {
		if t.fits(s, next, bytes, p) {
			return next
		}
	}
	return algo
}

// fits says algo's scratch at bytes (docs/pcie-dispatch.md, "The
// algorithms") is within Params.ScratchBytes, on s's islands for island.
func (t *Topology) fits(s Schedule, algo string, bytes int, p Params) bool {
	is := t.all()
	if algo == CustomIsland && s.Islands != nil {
		is = s.Islands.Islands
	}
	return scratch(algo, bytes, t.N, is) <= p.ScratchBytes
}

// explicit is s with every fall-through of the series' auto up to
// s.MaxBytes stated as a step of its own, so that the schedule runs the
// same as SGLANG_PCIE_CUSTOM_AR_ALGO, where the kernel does not fall
// through but throws (and 0002 refuses, at init, a step whose algorithm
// does not fit the scratch up to its bound or the cut): each step's
// algorithm fits at its bound, the last one's at MaxBytes. Sizes are
// whole 16-byte packs, as the kernel moves them; a step changes where the
// last whole pack fits. s is returned as is when MaxBytes is below one
// pack (custom allreduce runs at no size).
func (t *Topology) explicit(s Schedule, p Params) Schedule {
	if s.MaxBytes < 16 {
		return s
	}
	out := s
	out.Steps = nil
	lo := 16 // the smallest size not yet covered
	add := func(algo string, hi int) {
		if n := len(out.Steps); n > 0 && out.Steps[n-1].Algo == algo {
			out.Steps[n-1].Max = hi
			return
		}
		out.Steps = append(out.Steps, Step{Algo: algo, Max: hi})
	}
	for _, st := range s.Steps {
		hi := s.MaxBytes
		if st.Max > 0 {
			hi = min(st.Max, s.MaxBytes)
		}
		for lo <= hi {
			algo := t.autoAlgo(Schedule{Steps: []Step{{Algo: st.Algo}}, Islands: s.Islands}, lo, p)
			// algo fits from lo on up to its last whole pack that fits.
			last := hi
			if !t.fits(s, algo, hi, p) {
				a, b := lo, hi // fits at a, not at b
				for b-a > 16 {
					mid := (a + b) / 2 / 16 * 16
					if mid <= a {
						mid = a + 16
					}
					if t.fits(s, algo, mid, p) {
						a = mid
					} else {
						b = mid
					}
				}
				last = a
			}
			add(algo, last)
			lo = last + 16
		}
		if hi == s.MaxBytes {
			break
		}
	}
	out.Steps[len(out.Steps)-1].Max = 0
	return out
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
// Params.ScratchBytes. The schedule is returned as an explicit
// SGLANG_PCIE_CUSTOM_AR_ALGO must state it (explicit): where auto would
// fall through (island, then push2, as the scratch runs out) the steps
// say so, e.g. push1:5824,island:3355424,push2 on the reference host.
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
	return t.explicit(s, p)
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

package tune

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// Choice is one size of a tune: the median of each correct candidate in
// µs, the fastest of them, the fastest NCCL, and what the chosen settings
// run there.
type Choice struct {
	Bytes int `json:"bytes"`
	// US holds each correct, timed candidate's median: the forced custom
	// implementations through the PCIe branch by name (custom-push1, ...)
	// and NCCL by variant (allreduce.VariantName: nccl, nccl:LL, ...).
	US      map[string]float64 `json:"us"`
	Fastest string             `json:"fastest,omitempty"` // "" when nothing correct was timed
	// BestNCCL is the fastest correct NCCL variant here: the baseline of
	// the cut and of Speedup.
	BestNCCL string `json:"best_nccl,omitempty"`
	// Chosen is the custom implementation the schedule runs here, or the
	// NCCL variant the tune leaves this size to.
	Chosen string `json:"chosen"`
	// Regret is the chosen candidate's time over the fastest's (1 = none).
	Regret float64 `json:"regret"`
	// Speedup is BestNCCL's time over Chosen's where Chosen is custom.
	Speedup float64 `json:"speedup_vs_best_nccl,omitempty"`
}

// Hysteresis is how much slower (3%) than the fastest custom algorithm at
// a size the previous size's algorithm may be and still be kept there: a
// schedule changes algorithm only where that pays more than noise.
const Hysteresis = 0.03

// KeepNCCLDefault is how much (3%, over the sizes left on NCCL) an NCCL
// variant must beat NCCL as the environment leaves it by to be written to
// the tune file: a knob the serving run depends on must earn its place.
const KeepNCCLDefault = 0.03

// Pick chooses the settings from measured results of one run at world
// size ws, in mode (allreduce.ModeGraph or ModeEager), bf16, on ranks
// joined all by NVLink (nvlink) or not: NCCL and its variants, and the forced custom algorithms through the PCIe branch
// (custom-1stage, custom-2stage, custom-push1, custom-push2,
// custom-island). Only correct, timed cases count: a WRONG, failed, n/a or
// unsupported one is never chosen and never fast. Off NVLink, a variant
// NCCL enables only over NVLink (allreduce.NCCLVariant.NVLinkOnly: LL128)
// is neither chosen nor the baseline: its sums can be right in a test
// and its data corrupt in service.
//
// The cut between custom allreduce and NCCL (MaxBytes) minimises the
// summed ratio of each size's time to the fastest candidate's, where a
// size at or below the cut takes its fastest custom algorithm and a size
// above it the fastest correct NCCL variant there; each size weighs the
// same, and ties keep NCCL. A size where no custom algorithm was correct
// caps the cut below it. The schedule runs, at each size up to the cut,
// the fastest custom algorithm, keeping the previous size's while it is
// within Hysteresis of the fastest; its steps end at measured sizes. The
// NCCL variant written (Thresholds.NCCL) is the one, correct at every
// size above the cut, with the least summed ratio there, unless it beats
// NCCL as the environment leaves it by less than KeepNCCLDefault. The
// islands are those the custom-island results were measured with, when
// the schedule runs island.
//
// It returns the settings, the per-size choices and a one-line verdict;
// an error when NCCL as the environment leaves it has no correct timing
// at some size, or no size was measured.
func Pick(results []allreduce.Result, ws int, mode string, nvlink bool) (Thresholds, []Choice, string, error) {
	by := map[int]map[string]float64{}
	var variants []string // NCCL names, in order of appearance
	islands := ""
	for _, r := range results {
		if r.Mode != mode || !r.Timed() || r.DType != "" && r.DType != allreduce.BF16 {
			continue
		}
		name := r.Impl
		switch {
		case r.Impl == allreduce.NCCL:
			name = allreduce.VariantName(r.Variant)
			if !allreduce.IsBaseline(r.Variant, nvlink) {
				break // in the table (US), never a candidate
			}
			if !slices.Contains(variants, name) {
				variants = append(variants, name)
			}
		case r.Branch != "pcie" || !slices.Contains(allreduce.ForcedImpls, r.Impl):
			continue
		case r.Impl == allreduce.CustomIsland:
			islands = r.Islands
		}
		if by[r.Bytes] == nil {
			by[r.Bytes] = map[string]float64{}
		}
		by[r.Bytes][name] = r.MedianUS
	}
	sizes := slices.Sorted(maps.Keys(by))
	if len(sizes) == 0 {
		return Thresholds{}, nil, "", fmt.Errorf("no correct, timed case in %s mode to tune from", mode)
	}
	for _, n := range sizes {
		if _, ok := by[n][allreduce.NCCL]; !ok {
			return Thresholds{}, nil, "", fmt.Errorf("NCCL has no correct timing at %s in %s mode: nothing to compare custom allreduce with", allreduce.FormatBytes(n), mode)
		}
	}
	fastest := func(n int) float64 { return minOf(by[n]) }
	bestNCCL := func(n int) (string, float64) { return argmin(by[n], variants) }
	bestCustom := func(n int) (string, float64) { return argmin(by[n], allreduce.ForcedImpls) }

	// The cut: sizes up to it take custom allreduce.
	cut, bestCost := 0, math.Inf(1)
	for _, c := range append([]int{0}, sizes...) {
		cost := 0.0
		for _, n := range sizes {
			var us float64
			if n <= c {
				if _, us = bestCustom(n); us == 0 {
					us = math.Inf(1)
				}
			} else {
				_, us = bestNCCL(n)
			}
			cost += us / fastest(n)
		}
		if cost < bestCost-1e-9 {
			cut, bestCost = c, cost
		}
	}

	th := Thresholds{MaxBytes: uint64(cut)}
	chosen := map[int]string{}
	prev := ""
	for _, n := range sizes {
		if n > cut {
			break
		}
		alg, us := bestCustom(n)
		if p, ok := by[n][prev]; ok && p <= us*(1+Hysteresis) {
			alg = prev
		}
		chosen[n], prev = alg, alg
		a := allreduce.Algo(alg)
		if len(th.Schedule) > 0 && th.Schedule[len(th.Schedule)-1].Algo == a {
			th.Schedule[len(th.Schedule)-1].MaxBytes = uint64(n)
		} else {
			th.Schedule = append(th.Schedule, Step{Algo: a, MaxBytes: uint64(n)})
		}
	}
	if len(th.Schedule) > 0 {
		last := &th.Schedule[len(th.Schedule)-1]
		last.MaxBytes, last.Last = 0, true
		if slices.ContainsFunc(th.Schedule, func(s Step) bool { return s.Algo == "island" }) {
			th.Islands = islands
		}
	}

	// The NCCL variant for the sizes above the cut.
	var above []int
	for _, n := range sizes {
		if n > cut {
			above = append(above, n)
		}
	}
	variant := allreduce.NCCL
	if len(above) > 0 {
		costOf := func(v string) float64 {
			sum := 0.0
			for _, n := range above {
				us, ok := by[n][v]
				if !ok {
					return math.Inf(1)
				}
				sum += us / fastest(n)
			}
			return sum
		}
		def, best := costOf(allreduce.NCCL), math.Inf(1)
		for _, v := range variants {
			if c := costOf(v); c < best {
				variant, best = v, c
			}
		}
		if best > def*(1-KeepNCCLDefault) {
			variant = allreduce.NCCL
		}
		if variant != allreduce.NCCL {
			vv, _ := allreduce.LookupVariant(variant[len(allreduce.NCCL)+1:])
			th.NCCL = slices.Clone(vv.Env)
		}
		for _, n := range above {
			chosen[n] = variant
		}
	}

	var choices []Choice
	customWins := 0
	for _, n := range sizes {
		c := Choice{Bytes: n, US: by[n], Chosen: chosen[n]}
		bn, bnUS := bestNCCL(n)
		c.BestNCCL = bn
		c.Fastest, _ = argmin(by[n], append(slices.Clone(variants), allreduce.ForcedImpls...))
		if _, us := bestCustom(n); us > 0 && us < bnUS {
			customWins++
		}
		c.Regret = by[n][c.Chosen] / fastest(n)
		if n <= cut {
			c.Speedup = bnUS / by[n][c.Chosen]
		}
		choices = append(choices, c)
	}
	var verdict string
	switch {
	case customWins == 0:
		verdict = fmt.Sprintf("custom allreduce never beat the fastest NCCL at world size %d (%s mode, %d sizes): %s", ws, mode, len(sizes), th)
	case cut == 0:
		verdict = fmt.Sprintf("custom allreduce beat the fastest NCCL at %d of %d sizes, too few to pay: %s", customWins, len(sizes), th)
	default:
		verdict = fmt.Sprintf("custom allreduce beat the fastest NCCL at %d of %d sizes at world size %d (%s mode): %s", customWins, len(sizes), ws, mode, th)
	}
	return th, choices, verdict, nil
}

// argmin is the name among names (in order: the first wins a tie) with the
// least time in m, and the time; "", 0 when none is in m.
func argmin(m map[string]float64, names []string) (string, float64) {
	best, us := "", 0.0
	for _, n := range names {
		if v, ok := m[n]; ok && (best == "" || v < us) {
			best, us = n, v
		}
	}
	return best, us
}

// minOf is the least value of m.
func minOf(m map[string]float64) float64 {
	f := math.Inf(1)
	for _, v := range m {
		f = min(f, v)
	}
	return f
}

package tune

import (
	"fmt"
	"math"
	"sort"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// Choice is one size of a tune: the median of each correct algorithm in
// µs, the fastest of them and what the chosen thresholds run there.
type Choice struct {
	Bytes   int                `json:"bytes"`
	US      map[string]float64 `json:"us"`                // allreduce.NCCL, Custom1Stage, Custom2Stage (pcie branch)
	Fastest string             `json:"fastest,omitempty"` // "" when nothing correct was timed
	Chosen  string             `json:"chosen"`
	// Regret is the chosen algorithm's time over the fastest's (1 = none).
	Regret float64 `json:"regret"`
}

// Pick chooses thresholds from measured results of one run at world size
// ws: NCCL, custom-1stage and custom-2stage through the PCIe branch, at
// each size, in mode (allreduce.ModeGraph or ModeEager). Only correct, timed cases
// count. Thresholds cut sizes into 1-stage (≤ OneStageMax), 2-stage (≤
// MaxBytes) and NCCL; Pick takes the cut that minimises the summed ratio
// of chosen to fastest time over the sizes (each size weighs the same),
// preferring NCCL, then 2-stage, on ties. A size where neither custom
// algorithm was correct keeps NCCL.
//
// It returns the thresholds, the per-size choices and a one-line verdict;
// an error when NCCL has no correct timing at some size, or no size was
// measured.
func Pick(results []allreduce.Result, ws int, mode string) (Thresholds, []Choice, string, error) {
	by := map[int]map[string]float64{}
	for _, r := range results {
		if r.Mode != mode || !r.Timed() {
			continue
		}
		if r.Impl != allreduce.NCCL && r.Branch != "pcie" {
			continue
		}
		switch r.Impl {
		case allreduce.NCCL, allreduce.Custom1Stage, allreduce.Custom2Stage:
		default:
			continue
		}
		if by[r.Bytes] == nil {
			by[r.Bytes] = map[string]float64{}
		}
		by[r.Bytes][r.Impl] = r.MedianUS
	}
	var sizes []int
	for n := range by {
		sizes = append(sizes, n)
	}
	sort.Ints(sizes)
	if len(sizes) == 0 {
		return Thresholds{}, nil, "", fmt.Errorf("no correct, timed case in %s mode to tune from", mode)
	}
	for _, n := range sizes {
		if _, ok := by[n][allreduce.NCCL]; !ok {
			return Thresholds{}, nil, "", fmt.Errorf("NCCL has no correct timing at %s in %s mode: nothing to compare custom allreduce with", allreduce.FormatBytes(n), mode)
		}
	}
	cost := func(t Thresholds) float64 {
		sum := 0.0
		for _, n := range sizes {
			v, ok := by[n][t.Algorithm(ws, n)]
			if !ok {
				return math.Inf(1)
			}
			sum += v / fastest(by[n])
		}
		return sum
	}
	cuts := append([]int{0}, sizes...)
	best := Thresholds{MaxBytes: 0, OneStageMax: U64(0)}
	bestCost := cost(best)
	// Ties keep the earlier candidate: smaller custom cap first, then a
	// smaller 1-stage limit.
	for _, max := range cuts {
		for _, one := range cuts {
			if one > max {
				continue
			}
			t := Thresholds{MaxBytes: uint64(max), OneStageMax: U64(uint64(one))}
			if c := cost(t); c < bestCost-1e-9 {
				best, bestCost = t, c
			}
		}
	}
	var choices []Choice
	customWins := 0
	for _, n := range sizes {
		c := Choice{Bytes: n, US: by[n], Chosen: best.Algorithm(ws, n)}
		f := fastest(by[n])
		for _, alg := range []string{allreduce.NCCL, allreduce.Custom2Stage, allreduce.Custom1Stage} {
			if v, ok := by[n][alg]; ok && v == f && c.Fastest == "" {
				c.Fastest = alg
			}
		}
		if c.Fastest != allreduce.NCCL {
			customWins++
		}
		c.Regret = by[n][c.Chosen] / f
		choices = append(choices, c)
	}
	var verdict string
	switch {
	case customWins == 0:
		verdict = fmt.Sprintf("custom allreduce never beat NCCL at world size %d (%s mode, %d sizes): NCCL at every size", ws, mode, len(sizes))
	case best.MaxBytes == 0:
		verdict = fmt.Sprintf("custom allreduce beat NCCL at %d of %d sizes, too few to pay: NCCL at every size", customWins, len(sizes))
	default:
		verdict = fmt.Sprintf("custom allreduce beat NCCL at %d of %d sizes at world size %d (%s mode): %s", customWins, len(sizes), ws, mode, best)
	}
	return best, choices, verdict, nil
}

func fastest(m map[string]float64) float64 {
	f := math.Inf(1)
	for _, v := range m {
		f = min(f, v)
	}
	return f
}

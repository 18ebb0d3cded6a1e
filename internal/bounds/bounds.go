// Package bounds holds the allowed ranges of every count, size and
// duration a bench setting takes, in one table, so that a recipe's
// [bench], nightly.toml's [bench] and bench's flags refuse the same values
// with the same range, long before a huge value reaches an allocation
// (num_prompts = 9223372036854775807 would ask for a slice of that many
// prompts) or a loop that would run for years.
//
// The ranges are generous: the largest is far beyond any real run, the
// smallest is what the setting needs to mean anything.
package bounds

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/arpatch/arpatch/internal/textfmt"
)

// Range is an inclusive range of an integer setting.
type Range struct{ Min, Max int64 }

// Bench holds the ranges of the bench settings, by their TOML key (the
// flag is the key with '-' for '_'), and of [build] jobs.
var Bench = map[string]Range{
	"jobs":                         {0, 4096}, // 0: one per core
	"tp":                           {1, 8},
	"speculative_num_steps":        {1, 64},
	"speculative_eagle_topk":       {1, 64},
	"speculative_num_draft_tokens": {1, 1024},
	"num_prompts":                  {1, 100_000},
	"max_new_tokens":               {1, 1 << 20},
	"concurrency":                  {1, 4096},
	"warmup":                       {0, 10_000},
	"trials":                       {1, 1000},
	"agree_tokens":                 {1, 1 << 20},
}

// WorldSizes are the world sizes SGLang's custom allreduce runs at; at
// any other it disables itself. The one list: bench's tp, bench allreduce's
// and tune's --world-size, a tune file's world_size and doctor's verdict
// all judge by it, with WorldSizeError's words.
//
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce:
// REDUCE_CASE(2), (4), (6), (8)), also at 8905cbd42f4a and, under
// python/sglang/kernels/aot/, 0bda0b168ad5.
//
// Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (CustomAllreduce._SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]), the same at 8905cbd42f4a and 0bda0b168ad5.
var WorldSizes = []int{2, 4, 6, 8}

// WorldSizesText is WorldSizes as messages write it: "world sizes 2, 4, 6 and 8".
var WorldSizesText = "world sizes " + textfmt.Ints(WorldSizes[:len(WorldSizes)-1], ", ") + " and " + textfmt.Ints(WorldSizes[len(WorldSizes)-1:], "")

// WorldSizeError is nil for a world size in WorldSizes, else the one
// refusal: "3: custom allreduce supports world sizes 2, 4, 6 and 8";
// callers put the setting's name before it.
func WorldSizeError(ws int) error {
	if slices.Contains(WorldSizes, ws) {
		return nil
	}
	return fmt.Errorf("%d: custom allreduce supports %s", ws, WorldSizesText)
}

// Sets holds the settings whose values are a set within their range:
// tp is a world size custom allreduce supports (WorldSizes; 1: no TP).
var Sets = map[string]Set{
	"tp": {Values: func() []int64 {
		v := []int64{1}
		for _, n := range WorldSizes {
			v = append(v, int64(n))
		}
		return v
	}(), Why: "custom allreduce supports " + WorldSizesText + " (1: no TP)"},
}

// Set is the values a setting may take within its range, and why.
type Set struct {
	Values []int64
	Why    string
}

// FloatRange is the range of a real-valued setting: inclusive, unless
// MinOpen or MaxOpen excludes that end. NaN and the infinities are never
// in it.
type FloatRange struct {
	Min, Max         float64
	MinOpen, MaxOpen bool
	Noun             string // what the value is, for the message: "use a share in [0, 1]"
}

// Floats holds the ranges of every real-valued setting, by TOML key
// (bench's agree_threshold; nightly.toml's regression.threshold_pct, the
// thresholds of regression.metrics, regression.alpha) or flag (the fake
// server's rate and accept). A NaN compares false with everything, so a
// check written "v < 0 || v > 1" lets it through: --agree-threshold NaN
// turned the output check off. CheckFloat refuses it first.
var Floats = map[string]FloatRange{
	"agree_threshold": {Min: 0, Max: 1, Noun: "a share"},
	"threshold_pct":   {Min: 0, Max: 1000, Noun: "a percentage"},
	"alpha":           {Min: 0, Max: 1, MinOpen: true, MaxOpen: true, Noun: "a level"},
	"rate":            {Min: 0, Max: 1e7, MinOpen: true, Noun: "a rate in tokens/s"},
	"accept":          {Min: 1, Max: 1024, Noun: "an accept length"},
}

// Durations holds the ranges of the bench's durations, by TOML key.
var Durations = map[string]struct{ Min, Max time.Duration }{
	"ready_timeout":   {time.Second, 48 * time.Hour},
	"request_timeout": {time.Second, 24 * time.Hour},
}

// Check returns an error when v is outside key's range: "%d: use MIN to
// MAX". key must be in Bench. The caller prefixes where the value came
// from (file:line: bench.key, or --flag).
func Check(key string, v int64) error {
	r, ok := Bench[key]
	return check(key, ok, v, r.Min, r.Max)
}

// CheckDuration is Check for a duration setting, a key of Durations.
func CheckDuration(key string, d time.Duration) error {
	r, ok := Durations[key]
	return check(key, ok, d, r.Min, r.Max)
}

// CheckFloat returns an error when v is NaN, infinite or outside key's
// range: "NaN: not a number; use 0 to 1". key must be in Floats.
func CheckFloat(key string, v float64) error {
	r, ok := Floats[key]
	if !ok {
		panic("bounds: no range for " + key)
	}
	lo, hi := "[", "]"
	if r.MinOpen {
		lo = "("
	}
	if r.MaxOpen {
		hi = ")"
	}
	use := fmt.Sprintf("use %s in %s%v, %v%s", r.Noun, lo, r.Min, r.Max, hi)
	switch {
	case math.IsNaN(v):
		return fmt.Errorf("NaN: not a number; %s", use)
	case math.IsInf(v, 0):
		return fmt.Errorf("%v: not a finite number; %s", v, use)
	case v < r.Min || v > r.Max || (r.MinOpen && v == r.Min) || (r.MaxOpen && v == r.Max):
		return fmt.Errorf("%v: %s", v, use)
	}
	return nil
}

func check[T int64 | time.Duration](key string, ok bool, v, lo, hi T) error {
	if !ok {
		panic("bounds: no range for " + key)
	}
	if v < lo || v > hi {
		return fmt.Errorf("%v: use %v to %v", v, lo, hi)
	}
	if set, ok := Sets[key]; ok && !slices.Contains(set.Values, int64(v)) {
		return fmt.Errorf("%v: %s", v, set.Why)
	}
	return nil
}

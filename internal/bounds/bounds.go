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
	"time"
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

func check[T int64 | time.Duration](key string, ok bool, v, lo, hi T) error {
	if !ok {
		panic("bounds: no range for " + key)
	}
	if v < lo || v > hi {
		return fmt.Errorf("%v: use %v to %v", v, lo, hi)
	}
	return nil
}

package bounds

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		key  string
		v    int64
		want string
	}{
		{"num_prompts", 9223372036854775807, "9223372036854775807: use 1 to 100000"},
		{"num_prompts", 0, "0: use 1 to 100000"},
		{"warmup", -1, "-1: use 0 to 10000"},
		{"concurrency", 4097, "4097: use 1 to 4096"},
		{"warmup", 0, ""},
		{"concurrency", 4096, ""},
	} {
		err := Check(tc.key, tc.v)
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("Check(%s, %d) = %q, want %q", tc.key, tc.v, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("Check(%s, %d) passed, want %q", tc.key, tc.v, tc.want)
		}
	}
	if err := CheckDuration("request_timeout", 25*time.Hour); err == nil || err.Error() != "25h0m0s: use 1s to 24h0m0s" {
		t.Errorf("duration: %v", err)
	}
	if err := CheckDuration("ready_timeout", 20*time.Minute); err != nil {
		t.Errorf("20m: %v", err)
	}
}

// Every real-valued setting refuses NaN and the infinities: a NaN passes
// "v < lo || v > hi" (every comparison with it is false), which let
// --agree-threshold NaN turn the output check off.
func TestCheckFloat(t *testing.T) {
	for key := range Floats {
		for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			if err := CheckFloat(key, v); err == nil {
				t.Errorf("CheckFloat(%s, %v) passed", key, v)
			}
		}
	}
	for _, tc := range []struct {
		key  string
		v    float64
		want string
	}{
		{"agree_threshold", math.NaN(), "NaN: not a number; use a share in [0, 1]"},
		{"agree_threshold", math.Inf(1), "+Inf: not a finite number; use a share in [0, 1]"},
		{"agree_threshold", 1.5, "1.5: use a share in [0, 1]"},
		{"agree_threshold", -0.1, "-0.1: use a share in [0, 1]"},
		{"alpha", 0, "0: use a level in (0, 1)"},
		{"alpha", 1, "1: use a level in (0, 1)"},
		{"rate", 0, "0: use a rate in tokens/s in (0, 1e+07]"},
		{"agree_threshold", 0, ""},
		{"agree_threshold", 1, ""},
		{"alpha", 0.05, ""},
		{"threshold_pct", 0, ""},
	} {
		got := ""
		if err := CheckFloat(tc.key, tc.v); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckFloat(%s, %v) = %q, want %q", tc.key, tc.v, got, tc.want)
		}
	}
}

// tp is a world size custom allreduce supports, for a flag and a recipe
// alike: 3 is in 1..8 but no such world size.
func TestCheckSet(t *testing.T) {
	if err := Check("tp", 3); err == nil || err.Error() != "3: custom allreduce supports world sizes 2, 4, 6 and 8 (1: no TP)" {
		t.Errorf("tp 3: %v", err)
	}
	for _, v := range []int64{1, 2, 4, 6, 8} {
		if err := Check("tp", v); err != nil {
			t.Errorf("tp %d: %v", v, err)
		}
	}
}

// Issue 14 tester, B: the world sizes are one list with one message, and
// bench's tp set is that list plus 1 (no TP).
func TestWorldSizes(t *testing.T) {
	if WorldSizesText != "world sizes 2, 4, 6 and 8" {
		t.Errorf("WorldSizesText = %q", WorldSizesText)
	}
	for ws, want := range map[int]string{2: "", 8: "", 1: "1: custom allreduce supports world sizes 2, 4, 6 and 8", 3: "3: custom allreduce supports world sizes 2, 4, 6 and 8"} {
		err := WorldSizeError(ws)
		if got := fmt.Sprint(err); want == "" && err != nil || want != "" && got != want {
			t.Errorf("WorldSizeError(%d) = %v, want %q", ws, err, want)
		}
	}
	for _, tp := range []int64{1, 2, 4, 6, 8} {
		if err := Check("tp", tp); err != nil {
			t.Errorf("tp %d: %v", tp, err)
		}
	}
	if err := Check("tp", 3); err == nil || err.Error() != "3: custom allreduce supports world sizes 2, 4, 6 and 8 (1: no TP)" {
		t.Errorf("tp 3: %v", err)
	}
}

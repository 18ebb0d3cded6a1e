package bench

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/recipes"
)

// Counts beyond their bounds are refused before anything is allocated.
func TestOptionBounds(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Trials: 100000}, "bench trials 100000: use 1 to 1000"},
		{Options{Warmup: 1 << 40}, "bench warmup 1099511627776: use 0 to 10000"},
		{Options{Concurrency: []int{1, 1 << 30}}, "bench concurrency 1073741824: use 1 to 4096"},
		{Options{Concurrency: []int{4, 4}}, "bench concurrency 4 is listed twice"},
		{Options{MaxNewTokens: 1 << 40}, "bench max_new_tokens 1099511627776: use 1 to 1048576"},
	} {
		tc.o.Arms, tc.o.Prompts = []Arm{{Name: "baseline", URL: "http://127.0.0.1:1"}}, []string{"a"}
		if _, err := Run(context.Background(), tc.o); err == nil || err.Error() != tc.want {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

// A NaN agreement threshold passes every "share < threshold" test, so the
// output check would be off: Run refuses it, as the flag and the config do.
func TestNaNThresholdRefused(t *testing.T) {
	_, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: "http://127.0.0.1:1"}}, Prompts: []string{"a"}, AgreeThreshold: math.NaN()})
	if err == nil || !strings.Contains(err.Error(), "agree_threshold NaN: not a number") {
		t.Errorf("NaN threshold: %v", err)
	}
	if _, err := FromRecipe(recipes.Bench{}, Overrides{AgreeThreshold: math.Inf(1)}); err == nil || !strings.Contains(err.Error(), "agree_threshold: +Inf: not a finite number") {
		t.Errorf("FromRecipe +Inf: %v", err)
	}
}

func TestFromRecipeAgreeTokens(t *testing.T) {
	rb := recipes.Bench{MaxNewTokens: 8, Trials: 1, NumPrompts: 2, SpeculativeNumSteps: 3, SpeculativeEagleTopK: 1, SpeculativeNumDraftTokens: 4}
	o, err := FromRecipe(rb, Overrides{AgreeThreshold: 0.9})
	if err != nil || o.AgreeTokens != sglang.DefaultAgreeTokens {
		t.Errorf("default: %d, %v", o.AgreeTokens, err)
	}
	n := 16
	if o, err := FromRecipe(rb, Overrides{AgreeTokens: &n, AgreeThreshold: 0.9}); err != nil || o.AgreeTokens != 16 {
		t.Errorf("override: %d, %v", o.AgreeTokens, err)
	}
	n = 0
	if _, err := FromRecipe(rb, Overrides{AgreeTokens: &n, AgreeThreshold: 0.9}); err == nil || !strings.HasPrefix(err.Error(), "agree_tokens: 0") {
		t.Errorf("0 tokens: %v", err)
	}
}

package bench

import (
	"time"

	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/recipes"
)

// The defaults of the settings a recipe's [bench] does not hold; those it
// holds (trials, max new tokens, concurrency, warm-up ...) are
// recipes.Default*, the ready timeout is server.DefaultReadyTimeout and
// the output check's token count sglang.DefaultAgreeTokens. nightly.toml
// and the flags of `arpatch bench` (their --help defaults) read them here.
const (
	// DefaultAgreeThreshold is the share of outputs, in [0, 1], that must
	// give the baseline's output over the first AgreeTokens tokens.
	DefaultAgreeThreshold = 0.9
	// DefaultRequestTimeout is how long one request may take.
	DefaultRequestTimeout = 10 * time.Minute
)

// Resolved returns o with every zero that means a default filled in: the
// one step that resolves a run's defaults. Run runs with what it returns,
// and report.SettingsOf records it, so a report shows the values a run
// used, also for Options built directly with zero values. Trials and max
// new tokens (zero or negative) and the concurrency levels (none) take
// recipes' defaults, the ready
// timeout server.DefaultReadyTimeout, the request timeout
// DefaultRequestTimeout, AgreeTokens sglang.DefaultAgreeTokens and, unless
// AgreeOff, AgreeThreshold DefaultAgreeThreshold. Warmup, TP and the
// speculative settings are kept: zero there means none. It returns no
// error; Run checks the values' ranges after it.
func (o Options) Resolved() Options {
	if o.Trials <= 0 {
		o.Trials = recipes.DefaultTrials
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{recipes.DefaultConcurrency}
	}
	if o.MaxNewTokens <= 0 {
		o.MaxNewTokens = recipes.DefaultMaxNewTokens
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = server.DefaultReadyTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.AgreeTokens == 0 {
		o.AgreeTokens = sglang.DefaultAgreeTokens
	}
	if o.AgreeThreshold == 0 && !o.AgreeOff {
		o.AgreeThreshold = DefaultAgreeThreshold
	}
	if len(o.Serving.Metrics) == 0 {
		o.Serving.Metrics = stats.DefaultSelection.Metrics
	}
	if len(o.Serving.Percentiles) == 0 {
		o.Serving.Percentiles = stats.DefaultSelection.Percentiles
	}
	return o
}

package workload

import (
	"fmt"
	"math"
	"time"

	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"
)

// Arrivals is an open-loop arrival process, as `vllm bench serve
// --request-rate R --burstiness B` makes one: requests arrive at Rate
// per second on average whether or not earlier ones have finished (a
// level's concurrency still caps how many are in flight, as
// --max-concurrency does there). Rate 0 or +Inf is no rate: every
// request is ready at once, the closed loop of the concurrency level
// alone. Burstiness is the shape of the gamma distribution the gaps
// between arrivals are drawn from: 1 is a Poisson process (exponential
// gaps), below 1 burstier, above 1 more even, +Inf evenly spaced at
// 1/Rate.
type Arrivals struct {
	Rate       float64 `json:"request_rate"` // requests/s; 0 or +Inf: no rate
	Burstiness float64 `json:"burstiness"`   // gamma shape, > 0; 0 means 1 (Poisson)
	Seed       uint64  `json:"seed"`         // of the gaps' generator: the same seed gives the same arrivals
}

// Open reports whether l spaces arrivals at all (a finite rate).
func (l Arrivals) Open() bool { return l.Rate > 0 && !math.IsInf(l.Rate, 1) }

// Check refuses a negative or NaN rate and a burstiness that is not
// positive (or 0, its default), naming the setting as the flags spell
// it.
func (l Arrivals) Check() error {
	if math.IsNaN(l.Rate) || l.Rate < 0 {
		return fmt.Errorf("request rate %v: want requests per second above 0, or inf for none", l.Rate)
	}
	if math.IsNaN(l.Burstiness) || l.Burstiness < 0 {
		return fmt.Errorf("burstiness %v: want a gamma shape above 0 (1 is a Poisson process), or inf for even spacing", l.Burstiness)
	}
	return nil
}

// Times returns when each of n requests is due, as offsets from the
// start of the trial, by vllm bench serve's rule (Upstream:
// vllm/benchmarks/serve.py@2e2bf3cb16509a3bf7f66bb532a8a561b26a280f of
// flytiger-eco/vllm-for-sail (get_request)): request i waits a gap
// drawn from gamma(shape B, scale 1/(R x B)) after request i-1 (the
// first after the start), so gaps average 1/R; the sums are then scaled
// so that the last is due at n/R exactly, which vLLM does to keep the
// throughput of different seeds alike. With no rate every offset is 0;
// with B = +Inf request i is due at (i+1)/R. SGLang's bench_serving
// (Upstream: python/sglang/bench_serving.py@84118acf50b3 (get_request)) sends its
// first request at once and draws exponential gaps, unscaled, and has
// no burstiness: the same process up to those two details.
func (l Arrivals) Times(n int) []time.Duration {
	out := make([]time.Duration, n)
	if !l.Open() || n == 0 {
		return out
	}
	gaps := l.Gaps(n)
	sum := 0.0
	for i, g := range gaps {
		sum += g
		gaps[i] = sum
	}
	scale := 1.0
	if sum > 0 {
		scale = float64(n) / l.Rate / sum
	}
	for i, t := range gaps {
		out[i] = time.Duration(t * scale * float64(time.Second))
	}
	return out
}

// Gaps returns the n gaps (seconds) before Times' scaling: draws of
// gamma(shape B, rate R x B) from the seeded generator (gonum's
// distuv.Gamma), or 1/R each for B = +Inf.
func (l Arrivals) Gaps(n int) []float64 {
	b := l.Burstiness
	if b == 0 {
		b = 1
	}
	out := make([]float64, n)
	if math.IsInf(b, 1) {
		for i := range out {
			out[i] = 1 / l.Rate
		}
		return out
	}
	g := distuv.Gamma{Alpha: b, Beta: l.Rate * b, Src: pcg{rand.NewPCG(l.Seed, 0)}}
	for i := range out {
		out[i] = g.Rand()
	}
	return out
}

// pcg is math/rand/v2's PCG generator as the source gonum's distuv takes
// (golang.org/x/exp/rand.Source: Uint64 and Seed), without that
// deprecated package.
type pcg struct{ *rand.PCG }

func (p pcg) Seed(seed uint64) { p.PCG.Seed(seed, 0) }

package workload

import (
	"math"
	"slices"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// ks is the Kolmogorov-Smirnov statistic of xs against the CDF cdf: the
// largest distance between xs' empirical CDF and cdf.
func ks(xs []float64, cdf func(float64) float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := float64(len(s))
	d := 0.0
	for i, x := range s {
		f := cdf(x)
		d = max(d, math.Abs(float64(i+1)/n-f), math.Abs(f-float64(i)/n))
	}
	return d
}

// The gaps of a seeded Arrivals follow their gamma distribution: the
// Kolmogorov-Smirnov distance of 20,000 draws from the CDF stays below
// the 0.1% critical value (1.95/sqrt(n)), for a Poisson process
// (burstiness 1: exponential gaps, CDF 1 - e^(-Rx)), for the Erlang
// shapes 2 and 3 (closed forms, not gonum's), and for a bursty 0.5
// (the regularized incomplete gamma, gonum's CDF); and their mean is
// 1/R within 3 standard errors. A generator whose gaps had the wrong
// scale (R instead of R x B) or shape fails each.
func TestArrivalGapsFollowTheirDistribution(t *testing.T) {
	const n = 20000
	crit := 1.95 / math.Sqrt(n)
	for _, c := range []struct {
		rate, b float64
		cdf     func(x float64) float64
	}{
		{8, 1, func(x float64) float64 { return 1 - math.Exp(-8*x) }},
		{8, 2, func(x float64) float64 { l := 8 * 2 * x; return 1 - math.Exp(-l)*(1+l) }},
		{3, 3, func(x float64) float64 { l := 3 * 3 * x; return 1 - math.Exp(-l)*(1+l+l*l/2) }},
		{5, 0.5, distuv.Gamma{Alpha: 0.5, Beta: 5 * 0.5}.CDF},
	} {
		for _, seed := range []uint64{0, 1, 42} {
			gaps := Arrivals{Rate: c.rate, Burstiness: c.b, Seed: seed}.Gaps(n)
			if d := ks(gaps, c.cdf); d > crit {
				t.Errorf("rate %v burstiness %v seed %d: KS distance %.4f > %.4f", c.rate, c.b, seed, d, crit)
			}
			mean := 0.0
			for _, g := range gaps {
				mean += g / n
			}
			// A gamma(B, scale 1/(R B)) gap has mean 1/R and standard
			// deviation 1/(R sqrt(B)).
			if se := 1 / (c.rate * math.Sqrt(c.b*n)); math.Abs(mean-1/c.rate) > 3*se {
				t.Errorf("rate %v burstiness %v seed %d: mean gap %.5f s, want %.5f ± %.5f", c.rate, c.b, seed, mean, 1/c.rate, 3*se)
			}
		}
	}
}

// Times: the same seed gives the same arrivals and another seed others;
// the arrivals rise, the last is due at n/R exactly (vLLM's scaling),
// and the scaling keeps the gaps' proportions; burstiness +Inf spaces
// them evenly at 1/R; no rate (0 or +Inf) makes every request due at
// once.
func TestArrivalTimes(t *testing.T) {
	a := Arrivals{Rate: 4, Burstiness: 1, Seed: 7}
	got := a.Times(100)
	if !slices.Equal(got, a.Times(100)) {
		t.Error("the same seed gave other arrivals")
	}
	if slices.Equal(got, Arrivals{Rate: 4, Burstiness: 1, Seed: 8}.Times(100)) {
		t.Error("another seed gave the same arrivals")
	}
	if !slices.IsSorted(got) || got[0] <= 0 {
		t.Errorf("arrivals do not rise from after the start: %v", got[:5])
	}
	if want := 25 * time.Second; absDur(got[99]-want) > time.Microsecond {
		t.Errorf("last arrival %v, want %v (n/R)", got[99], want)
	}
	gaps := a.Gaps(100)
	if r, w := float64(got[1]-got[0])/float64(got[0]), gaps[1]/gaps[0]; math.Abs(r-w) > 1e-6*w {
		t.Errorf("second gap / first %.6f, the generator's %.6f: scaling changed their proportion", r, w)
	}
	even := Arrivals{Rate: 2, Burstiness: math.Inf(1)}.Times(4)
	if want := []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second}; !slices.Equal(even, want) {
		t.Errorf("burstiness inf: %v, want %v", even, want)
	}
	for _, r := range []float64{0, math.Inf(1)} {
		for _, d := range (Arrivals{Rate: r}).Times(3) {
			if d != 0 {
				t.Errorf("rate %v: an arrival at %v, want every one at 0", r, d)
			}
		}
	}
	for _, bad := range []Arrivals{{Rate: -1}, {Rate: math.NaN()}, {Rate: 1, Burstiness: -0.5}, {Rate: 1, Burstiness: math.NaN()}} {
		if bad.Check() == nil {
			t.Errorf("%+v: Check accepted it", bad)
		}
	}
	if err := (Arrivals{Rate: math.Inf(1), Burstiness: math.Inf(1)}).Check(); err != nil {
		t.Errorf("inf rate and burstiness: %v", err)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

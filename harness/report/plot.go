package report

import (
	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/chart"
)

// Curves returns metric (a stats.Table name, in its unit) against
// concurrency per arm of a bench result: the median across trials at each
// level with its interval, and for an arm whose figures are no result,
// its verdict (Curve.NoResult).
func Curves(res *bench.Result, metric string) []chart.Curve {
	var out []chart.Curve
	for _, a := range res.Arms {
		c := chart.Curve{Arm: a.Arm.Name}
		if !a.Verdict.Valid() {
			c.NoResult = string(a.Verdict)
		}
		for _, l := range a.Levels {
			s := l.Summaries[metric]
			c.Points = append(c.Points, chart.LevelPoint{Concurrency: l.Concurrency, Center: s.Center, Lo: s.Lo, Hi: s.Hi})
		}
		out = append(out, c)
	}
	return out
}

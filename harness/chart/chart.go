// Package chart draws arpatch's plots with gonum/plot: a metric against
// concurrency, one line (or, at one level, one bar) per arm with its
// interval (PlotConcurrency), the arms' colours (Palette), and Save, which
// writes any gonum plot to a file atomically. It only draws: the points
// come from harness/report (a bench result) and history (a stored run),
// which also draws its plots over time with Palette and Save.
package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/arpatch/arpatch/internal/safefs"
)

// LevelPoint is one arm at one concurrency level: the median of a metric
// across trials and its interval (Lo, Hi; ±Inf when the trials allow
// none, drawn as no error bar).
type LevelPoint struct {
	Concurrency    int
	Center, Lo, Hi float64
}

// Curve is one arm's points, lowest level first.
type Curve struct {
	Arm    string
	Points []LevelPoint
	// NoResult is why the arm's figures are no result ("INVALID", "no
	// verdict (INVALID baseline)"; bench.Verdict.Valid), "" when they
	// are one: such a curve is not drawn, and the legend says so.
	NoResult string
}

// Palette holds the line colours of arpatch's plots, one per arm.
var Palette = []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {140, 86, 75, 255}}

// PlotConcurrency draws metric (its unit in ylabel, e.g. "tok/s") against
// concurrency, one line per arm with the interval as error bars, on a
// log x axis, to out: .svg or .png (or another extension gonum/plot
// writes; history.PlotFormat checks one before a run). A curve whose
// figures are no result (NoResult) is not drawn: its legend entry reads
// "broken: INVALID, not drawn". It returns an error for an unsupported
// extension or no points to draw.
//
// The title gets "(median across trials, CI)" when some point has an
// interval, and "(median across trials; too few trials for an
// interval)" when none has: 2 or 3 trials give none.
func PlotConcurrency(out, title, ylabel string, curves []Curve) error {
	levels := map[int]bool{}
	for _, c := range curves {
		for _, q := range c.Points {
			levels[q.Concurrency] = true
		}
	}
	if len(levels) == 1 {
		for l := range levels {
			return plotOneLevel(out, title, ylabel, l, curves)
		}
	}
	p := plot.New()
	p.Title.Text = title + " " + intervalNote(curves)
	p.X.Label.Text = "concurrency (requests in flight)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	seen := map[int]bool{}
	n := 0
	var left []string
	for i, c := range curves {
		if c.NoResult != "" {
			left = append(left, c.Arm+": "+c.NoResult)
			continue
		}
		if len(c.Points) == 0 {
			continue
		}
		if err := addCurve(p, c, Palette[i%len(Palette)]); err != nil {
			return err
		}
		for _, q := range c.Points {
			if !seen[q.Concurrency] {
				seen[q.Concurrency] = true
				ticks = append(ticks, plot.Tick{Value: float64(q.Concurrency), Label: fmt.Sprint(q.Concurrency)})
			}
			n++
		}
	}
	if n == 0 && len(left) > 0 {
		return fmt.Errorf("%s: no arm with a result to plot (%s)", out, strings.Join(left, "; "))
	}
	if n == 0 {
		return fmt.Errorf("%s: no points to plot", out)
	}
	for _, l := range left {
		p.Legend.Add(l + ", not drawn")
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	// Room on both sides, and a range even for one level (a log axis
	// cannot start at 0).
	lo, hi := math.Inf(1), 0.0
	for c := range seen {
		lo, hi = math.Min(lo, float64(c)), math.Max(hi, float64(c))
	}
	p.X.Min, p.X.Max = lo/1.5, hi*1.5
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	if p.Y.Max > 0 {
		p.Y.Max *= 1.15
	}
	return Save(p, 7*vg.Inch, 4*vg.Inch, out)
}

// addCurve draws curve c on p in colour col: a line through its points
// (median against concurrency), each point a circle with its interval as
// an error bar (none where the interval is unbounded), and its legend
// entry.
func addCurve(p *plot.Plot, c Curve, col color.RGBA) error {
	xys := make(plotter.XYs, 0, len(c.Points))
	var errs plotter.YErrors
	for _, q := range c.Points {
		xys = append(xys, plotter.XY{X: float64(q.Concurrency), Y: q.Center})
		lo, hi := 0.0, 0.0
		if !math.IsInf(q.Lo, 0) && !math.IsInf(q.Hi, 0) {
			lo, hi = q.Center-q.Lo, q.Hi-q.Center
		}
		errs = append(errs, struct{ Low, High float64 }{lo, hi})
	}
	l, sc, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, sc.Color = col, col
	sc.Shape = draw.CircleGlyph{}
	p.Add(l, sc)
	eb, err := plotter.NewYErrorBars(struct {
		plotter.XYs
		plotter.YErrors
	}{xys, errs})
	if err != nil {
		return err
	}
	eb.Color = col
	p.Add(eb)
	p.Legend.Add(c.Arm, l, sc)
	return nil
}

// plotOneLevel is PlotConcurrency for a run of one level: a line through
// one point per arm says nothing, so each arm with a result gets a bar
// (its median) with its interval as an error bar, side by side, the
// arms named under them and the level in the title.
func plotOneLevel(out, title, ylabel string, level int, curves []Curve) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s at concurrency %d (one level: a bar per arm) %s", strings.Replace(title, " against concurrency", "", 1), level, intervalNote(curves))
	p.Y.Label.Text = ylabel
	var names, left []string
	for i, c := range curves {
		if c.NoResult != "" {
			left = append(left, c.Arm+": "+c.NoResult)
			continue
		}
		if len(c.Points) == 0 {
			continue
		}
		q := c.Points[0]
		x := float64(len(names))
		bar, err := plotter.NewBarChart(plotter.Values{q.Center}, vg.Points(60))
		if err != nil {
			return err
		}
		col := Palette[i%len(Palette)]
		bar.Color, bar.LineStyle.Color, bar.XMin = col, col, x
		p.Add(bar)
		if !math.IsInf(q.Lo, 0) && !math.IsInf(q.Hi, 0) {
			eb, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{plotter.XYs{{X: x, Y: q.Center}}, plotter.YErrors{{Low: q.Center - q.Lo, High: q.Hi - q.Center}}})
			if err != nil {
				return err
			}
			p.Add(eb)
		}
		names = append(names, c.Arm)
	}
	if len(names) == 0 && len(left) > 0 {
		return fmt.Errorf("%s: no arm with a result to plot (%s)", out, strings.Join(left, "; "))
	}
	if len(names) == 0 {
		return fmt.Errorf("%s: no points to plot", out)
	}
	p.NominalX(names...)
	// Half a slot of room beside the outer bars (gonum's range ends at
	// their centres).
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	for _, l := range left {
		p.Legend.Add(l + ", not drawn")
	}
	p.Legend.Top = true
	p.Y.Min = 0
	if p.Y.Max > 0 {
		p.Y.Max *= 1.15
	}
	return Save(p, 7*vg.Inch, 4*vg.Inch, out)
}

// intervalNote says what the points and bars of curves are.
func intervalNote(curves []Curve) string {
	for _, c := range curves {
		if c.NoResult != "" {
			continue
		}
		for _, q := range c.Points {
			if !math.IsInf(q.Lo, 0) && !math.IsInf(q.Hi, 0) && q.Hi > q.Lo {
				return "(median across trials, CI)"
			}
		}
	}
	return "(median across trials; too few trials for an interval)"
}

// Raster reports whether Save writes out, by its extension, as an image
// of pixels (PNG, JPEG, TIFF, at vgimg.DefaultDPI) rather than as vector
// paths (SVG, PDF, EPS). Upstream: gonum.org/v1/plot
// vg/vgimg/vgimg.go@v0.10.1 (init: the formats it registers).
func Raster(out string) bool {
	switch format(out) {
	case "png", "jpg", "jpeg", "tif", "tiff":
		return true
	}
	return false
}

// format is the format out's extension names, as gonum/plot's formats
// are registered: "png", "svg", ...
func format(out string) string { return strings.TrimPrefix(strings.ToLower(filepath.Ext(out)), ".") }

// Save writes p to out, w x h, in the format out's extension names (.svg,
// .png, .pdf), atomically (safefs.WriteFile). It draws p on a canvas
// whose top is lowered by the title font's descent and 4 points:
// gonum/plot v0.10 places the title's top that descent above the
// canvas (Plot.Draw: FillText at Max.Y + descent, aligned YTop), which
// clipped its letters at the top of a PNG.
func Save(p *plot.Plot, w, h vg.Length, out string) error {
	c, err := draw.NewFormattedCanvas(w, h, format(out))
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	top := vg.Points(4)
	if p.Title.Text != "" {
		top += p.Title.TextStyle.FontExtents().Descent
	}
	p.Draw(draw.Crop(draw.New(c), 0, 0, 0, -top))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	return safefs.WriteFile(out, b.Bytes(), 0o644)
}

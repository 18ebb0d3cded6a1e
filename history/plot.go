package history

import (
	"cmp"
	"database/sql"
	"fmt"
	"image/color"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/arpatch/arpatch/harness/chart"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// Point is one run of one arm on a plot: the median of the metric across
// its trials with the interval stats.Summarize gives.
type Point struct {
	RunID          int64
	X              float64   // run start, Unix seconds
	Center, Lo, Hi float64   // median and interval, in the metric's unit (stats.Metric.Unit)
	Mark           CheckKind // KindRegression when this arm failed a regression check of the plotted metric at the plotted level, else KindDrift when the run failed a drift check; "" for neither
	// Invalid: the arm's figures that night are no result (arms.invalid:
	// INVALID, or no verdict); Plot draws no line through it.
	Invalid bool
}

// Series picks the runs a plot shows: one hardware key and one workload,
// since numbers from other machines or other workloads do not belong on
// one line, and one concurrency level. Empty fields take the newest
// finished run's (its lowest level).
type Series struct {
	HardwareKey string
	Workload    string
	Level       int
}

// Points returns, per arm, one point per complete or failed run (not
// incomplete ones) of the series' hardware and workload, oldest first,
// and the series it used. metric is a stats.Table name; a run stored
// before the metric existed (NULL) gives no point for it. It reads the
// series' trials at its level in one query and their failed drift and
// regression checks in another: linear in the rows it plots.
func (s *Store) Points(metric string, sel Series) (map[string][]Point, Series, error) {
	col, err := column(metric)
	if err != nil {
		return nil, sel, err
	}
	if sel.HardwareKey == "" || sel.Workload == "" || sel.Level == 0 {
		// The newest finished run with a trial of metric (on the
		// hardware and workload asked for) fills in what sel leaves out:
		// a newer run without bench results (--skip-bench) has nothing
		// to plot, whatever its workload.
		where, args := `WHERE status IN (?, ?)`, []any{Complete, Failed}
		if sel.HardwareKey != "" {
			where, args = where+` AND hardware_key = ?`, append(args, sel.HardwareKey)
		}
		if sel.Workload != "" {
			where, args = where+` AND workload = ?`, append(args, sel.Workload)
		}
		where += ` AND EXISTS (SELECT 1 FROM arms a JOIN trials t ON t.arm_id = a.id WHERE a.run_id = runs.id AND t.` + col + ` IS NOT NULL)`
		runs, err := s.selectRuns("reading the newest run with bench results", where+` ORDER BY id DESC LIMIT 1`, args...)
		if err != nil {
			return nil, sel, err
		}
		if len(runs) == 1 {
			r := runs[0]
			sel.HardwareKey, sel.Workload = cmp.Or(sel.HardwareKey, r.HardwareKey), cmp.Or(sel.Workload, r.Workload)
			if sel.Level == 0 {
				if sel.Level, err = s.lowestLevel(r.ID); err != nil {
					return nil, sel, err
				}
			}
		}
		sel.Level = cmp.Or(sel.Level, 1) // no run to take it from: the level a single stream runs at
	}
	what := fmt.Sprintf("reading the %s points of %s, %s", metric, sel.HardwareKey, sel.Workload)
	// Drift marks every arm of the run; a regression marks the arm and
	// metric its check names ("<arm> <metric> vs <reference>", with
	// "@concurrency=N" after the metric when the run had several levels),
	// and only on that metric's plot at that level (regressedOn).
	type failed struct {
		drift bool
		names []string // of failed regression checks
	}
	marks := map[int64]*failed{}
	err = s.each(what, `SELECT c.run_id, c.kind, c.name FROM runs r JOIN checks c ON c.run_id = r.id
		WHERE r.hardware_key = ? AND r.workload = ? AND c.status = ? AND c.kind IN (?, ?)`,
		[]any{sel.HardwareKey, sel.Workload, CheckFail, KindDrift, KindRegression}, func(r *sql.Rows) error {
			var id int64
			var kind CheckKind
			var name string
			if err := r.Scan(&id, &kind, &name); err != nil {
				return err
			}
			f := marks[id]
			if f == nil {
				f = &failed{}
				marks[id] = f
			}
			if kind == KindDrift {
				f.drift = true
			} else {
				f.names = append(f.names, name)
			}
			return nil
		})
	if err != nil {
		return nil, sel, err
	}
	out := map[string][]Point{}
	type armRun struct {
		run, arm int64
		name     string
		invalid  bool
		started  time.Time
		vals     []float64
	}
	var cur armRun
	flush := func() {
		if len(cur.vals) == 0 {
			return
		}
		var mark CheckKind
		if f := marks[cur.run]; f != nil {
			if slices.ContainsFunc(f.names, func(n string) bool { return regressedOn(n, cur.name, metric, sel.Level) }) {
				mark = KindRegression
			} else if f.drift {
				mark = KindDrift
			}
		}
		sm := stats.Summarize(cur.vals)
		lo, hi := sm.Lo, sm.Hi
		if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
			lo, hi = minMax(cur.vals)
		}
		out[cur.name] = append(out[cur.name], Point{RunID: cur.run, X: float64(cur.started.Unix()), Center: sm.Center, Lo: lo, Hi: hi, Mark: mark, Invalid: cur.invalid})
	}
	err = s.each(what, `SELECT r.id, r.started_at, a.id, a.name, a.invalid, t.`+col+` FROM runs r JOIN arms a ON a.run_id = r.id JOIN trials t ON t.arm_id = a.id
		WHERE r.hardware_key = ? AND r.workload = ? AND r.status IN (?, ?) AND t.concurrency = ? AND t.`+col+` IS NOT NULL
		ORDER BY r.id, a.id, t.idx`, []any{sel.HardwareKey, sel.Workload, Complete, Failed, sel.Level}, func(r *sql.Rows) error {
		var row armRun
		var started string
		var v float64
		if err := r.Scan(&row.run, &started, &row.arm, &row.name, &row.invalid, &v); err != nil {
			return fmt.Errorf("run %d: %w", row.run, err)
		}
		if row.arm != cur.arm {
			flush()
			var err error
			if row.started, err = parseTime(row.run, "started_at", started); err != nil {
				return err
			}
			cur = row
		}
		cur.vals = append(cur.vals, v)
		return nil
	})
	if err != nil {
		return nil, sel, err
	}
	flush()
	return out, sel, nil
}

// noPoints is why a plot of metric from the history at path has no
// point: no run has bench results with the metric at all, or none on
// the series asked (sel, as Points filled it in), with the flags to
// leave out.
func noPoints(path, metric string, asked, sel Series) error {
	why := "runs with --skip-bench have none; runs recorded before " + metric + " existed have none of it"
	var given []string
	for _, f := range []struct {
		flag string
		set  bool
	}{{"--hardware", asked.HardwareKey != ""}, {"--workload", asked.Workload != ""}, {"--concurrency", asked.Level != 0}} {
		if f.set {
			given = append(given, f.flag)
		}
	}
	if len(given) == 0 {
		return fmt.Errorf("history %s has no run with bench results to plot (%s)", path, why)
	}
	return fmt.Errorf("history %s has no run with bench results to plot on hardware %q, workload %q at concurrency %d (%s; leave out %s to plot the newest run's)",
		path, sel.HardwareKey, sel.Workload, sel.Level, why, strings.Join(given, ", "))
}

// regressedOn reports whether the failed regression check named name
// ("pcie tok_s vs history", "pcie tok_s@concurrency=4 vs baseline") is
// of arm and metric, at level when it names one (a run of one level
// names none: its only level is the one plotted).
func regressedOn(name, arm, metric string, level int) bool {
	rest, ok := strings.CutPrefix(name, arm+" "+metric)
	if !ok {
		return false
	}
	if at, ok := strings.CutPrefix(rest, "@concurrency="); ok {
		n, _, _ := strings.Cut(at, " ")
		return n == strconv.Itoa(level)
	}
	return strings.HasPrefix(rest, " ")
}

// lowestLevel is the lowest concurrency level of a run's trials (1 when
// it has none).
func (s *Store) lowestLevel(run int64) (int, error) {
	var l sql.NullInt64
	err := s.x().row(`SELECT MIN(t.concurrency) FROM trials t JOIN arms a ON t.arm_id = a.id WHERE a.run_id = ?`, run).Scan(&l)
	if err != nil {
		return 0, s.wrap(fmt.Sprintf("reading run %d", run), err)
	}
	if !l.Valid {
		return 1, nil
	}
	return int(l.Int64), nil
}

// LevelCurves returns, per arm of run (0: the newest complete or failed
// run with bench results on sel's hardware and workload), metric against
// concurrency: the median across the run's trials at each level with its
// interval, for chart.PlotConcurrency. It returns the run used.
func (s *Store) LevelCurves(metric string, sel Series, run int64) ([]chart.Curve, int64, error) {
	col, err := column(metric)
	if err != nil {
		return nil, 0, err
	}
	benched := false // a run asked for had trials, if not of metric
	if run == 0 {
		// The newest finished run of the series with a trial of metric,
		// and whether any finished run of it has trials at all.
		where, args := `WHERE status IN (?, ?)`, []any{Complete, Failed}
		if sel.HardwareKey != "" {
			where, args = where+` AND hardware_key = ?`, append(args, sel.HardwareKey)
		}
		if sel.Workload != "" {
			where, args = where+` AND workload = ?`, append(args, sel.Workload)
		}
		has := func(cond string) (int64, error) {
			var id int64
			err := s.x().row(`SELECT COALESCE(MAX(id), 0) FROM runs `+where+` AND EXISTS (SELECT 1 FROM arms a JOIN trials t ON t.arm_id = a.id
				WHERE a.run_id = runs.id`+cond+`)`, args...).Scan(&id)
			return id, s.wrap("finding the newest run with bench results", err)
		}
		if run, err = has(` AND t.` + col + ` IS NOT NULL`); err != nil {
			return nil, 0, err
		}
		if run == 0 {
			any, err := has(``)
			if err != nil {
				return nil, 0, err
			}
			if any != 0 {
				return nil, 0, fmt.Errorf("history %s has no run with %s to plot: arpatch versions from before that metric recorded its runs", s.Path, metric)
			}
			return nil, 0, fmt.Errorf("history %s has no run with bench results to plot (runs with --skip-bench have none)", s.Path)
		}
	}
	byArm := map[string]map[int][]float64{}
	invalid := map[string]bool{}
	var arms []string
	err = s.each(fmt.Sprintf("reading run %d", run), `SELECT a.name, a.invalid, t.concurrency, t.`+col+` FROM arms a JOIN trials t ON t.arm_id = a.id
		WHERE a.run_id = ? ORDER BY a.id, t.idx`, []any{run}, func(r *sql.Rows) error {
		var arm string
		var bad bool
		var level int
		var v sql.NullFloat64
		if err := r.Scan(&arm, &bad, &level, &v); err != nil {
			return fmt.Errorf("arm %s: %w", arm, err)
		}
		benched = true
		if byArm[arm] == nil {
			byArm[arm] = map[int][]float64{}
			arms = append(arms, arm)
			invalid[arm] = bad
		}
		if v.Valid {
			byArm[arm][level] = append(byArm[arm][level], v.Float64)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	var curves []chart.Curve
	for _, arm := range arms {
		c := chart.Curve{Arm: arm}
		if invalid[arm] {
			c.NoResult = "INVALID" // chart.PlotConcurrency draws no line for it
		}
		for _, l := range slices.Sorted(maps.Keys(byArm[arm])) {
			sm := stats.Summarize(byArm[arm][l])
			c.Points = append(c.Points, chart.LevelPoint{Concurrency: l, Center: sm.Center, Lo: sm.Lo, Hi: sm.Hi})
		}
		if len(c.Points) > 0 {
			curves = append(curves, c)
		}
	}
	switch {
	case len(curves) > 0:
		return curves, run, nil
	case benched:
		return nil, 0, fmt.Errorf("history %s: run %d has no %s: an arpatch from before that metric recorded it (plot another metric, or a newer run)", s.Path, run, metric)
	}
	return nil, 0, fmt.Errorf("history %s: run %d has no bench results (arpatch history list shows the runs)", s.Path, run)
}

// timeFormat is the layout of the time axis' ticks for runs started
// from first to last (Unix seconds, UTC): the date, with the hour when
// the runs lie within three days (it tells them apart), and with the year
// when they do not lie within one year (UTC).
func timeFormat(first, last float64) string {
	a, b := time.Unix(int64(first), 0).UTC(), time.Unix(int64(last), 0).UTC()
	hours := last-first < 3*24*3600
	switch {
	case a.Year() != b.Year() && hours:
		return "2006-01-02 15:04"
	case a.Year() != b.Year():
		return "2006-01-02"
	case hours:
		return "01-02 15:04"
	}
	return "01-02"
}

// timeLabel is the time axis' label for ticks in layout (timeFormat) of
// runs started from first (Unix seconds): the year, when the ticks do
// not name it.
func timeLabel(layout string, first float64) string {
	if strings.HasPrefix(layout, "2006") {
		return "run start (UTC)"
	}
	return fmt.Sprintf("run start (UTC, %d)", time.Unix(int64(first), 0).UTC().Year())
}

func minMax(xs []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// PlotFormat checks that out's extension is one Plot writes.
func PlotFormat(out string) error {
	switch strings.ToLower(filepath.Ext(out)) {
	case ".svg", ".png", ".pdf", ".eps", ".jpg", ".jpeg", ".tif", ".tiff":
		return nil
	}
	return fmt.Errorf("%s: a plot is .svg, .png or .pdf (or .eps, .jpg, .tif)", out)
}

// Plot draws metric over time per arm for one hardware key and workload
// (sel; empty fields take the newest run's): the median of each run as a
// line, its confidence interval as a band, a red cross on an arm's run
// that failed a regression check of this metric at this level (not one
// of another metric), and a grey triangle on runs with drift. A run whose arm's figures are no result (INVALID,
// or no verdict: Point.Invalid) is not drawn; the legend names it. The format follows out's extension (.svg, .png,
// .pdf). It returns an error for an unknown metric, a history without
// bench results or an unsupported extension.
func (s *Store) Plot(metric, out string, sel Series) error {
	if err := PlotFormat(out); err != nil {
		return err
	}
	asked := sel
	pts, sel, err := s.Points(metric, sel)
	if err != nil {
		return err
	}
	if len(pts) == 0 {
		return noPoints(s.Path, metric, asked, sel)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("arpatch nightly: %s per run on %s at concurrency %d (median, CI band)", metric, sel.HardwareKey, sel.Level)
	m, _ := stats.Lookup(metric) // Points refused an unknown one
	p.Y.Label.Text = m.Axis()
	var first, last float64
	for _, ps := range pts {
		for _, q := range ps {
			if first == 0 || q.X < first {
				first = q.X
			}
			last = max(last, q.X)
		}
	}
	layout := timeFormat(first, last)
	p.X.Tick.Marker = plot.TimeTicks{Format: layout}
	p.X.Label.Text = timeLabel(layout, first)
	p.Legend.Top = true
	p.Legend.Left = true
	arms := slices.Sorted(maps.Keys(pts))
	// A raster (PNG, JPEG, TIFF) draws each arm at its pixels' resolution
	// (thin, and its line in runs); a vector format gets every point.
	raster, cols := chart.Raster(out), int(plotWidth.Dots(vgimg.DefaultDPI))
	var regressed, drifted plotter.XYs
	var left []string // "pcie run 4": arm-nights whose figures are no result
	drawn := 0
	for i, arm := range arms {
		var ps []Point
		for _, q := range pts[arm] {
			if q.Invalid {
				left = append(left, fmt.Sprintf("%s run %d", arm, q.RunID))
			} else {
				ps = append(ps, q)
			}
		}
		if len(ps) == 0 {
			continue
		}
		drawn++
		if raster {
			ps = thin(ps, cols)
		}
		c := chart.Palette[i%len(chart.Palette)]
		band := make(plotter.XYs, 0, 2*len(ps))
		line := make(plotter.XYs, 0, len(ps))
		for _, q := range ps {
			band = append(band, plotter.XY{X: q.X, Y: q.Hi})
			line = append(line, plotter.XY{X: q.X, Y: q.Center})
			switch q.Mark {
			case KindRegression:
				regressed = append(regressed, plotter.XY{X: q.X, Y: q.Center})
			case KindDrift:
				drifted = append(drifted, plotter.XY{X: q.X, Y: q.Center})
			}
		}
		for j := len(ps) - 1; j >= 0; j-- {
			band = append(band, plotter.XY{X: ps[j].X, Y: ps[j].Lo})
		}
		if len(ps) > 1 {
			poly, err := plotter.NewPolygon(band)
			if err != nil {
				return err
			}
			poly.Color = color.NRGBA{c.R, c.G, c.B, 50}
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
		if err := addLine(p, arm, line, c, raster); err != nil {
			return err
		}
	}
	for _, mk := range []struct {
		xys   plotter.XYs
		shape draw.GlyphDrawer
		col   color.Color
		label string
	}{
		{regressed, draw.CrossGlyph{}, color.RGBA{214, 39, 40, 255}, "regression of " + metric},
		{drifted, draw.TriangleGlyph{}, color.RGBA{127, 127, 127, 255}, "drift (the series no longer applied)"},
	} {
		if len(mk.xys) == 0 {
			continue
		}
		m, err := plotter.NewScatter(mk.xys)
		if err != nil {
			return err
		}
		m.Shape, m.Radius, m.Color = mk.shape, vg.Points(6), mk.col
		p.Add(m)
		p.Legend.Add(mk.label, m)
	}
	if drawn == 0 {
		return fmt.Errorf("history %s has no run with a result to plot on hardware %q, workload %q at concurrency %d: every arm's figures there are INVALID or without a verdict (%s)", s.Path, sel.HardwareKey, sel.Workload, sel.Level, textfmt.List(left, 5))
	}
	if len(left) > 0 {
		p.Legend.Add("INVALID, not drawn: " + textfmt.List(left, 5))
	}
	// Headroom above the data for the legend, which sits top left.
	if span := p.Y.Max - p.Y.Min; span > 0 {
		p.Y.Max += 0.12 * span * float64(len(arms)+1)
	}
	return chart.Save(p, plotWidth, plotHeight, out)
}

// addLine adds an arm's line of medians to p, with a circle on each
// point, in colour c, and names it arm in the legend. A raster strokes it
// in runs of rasterRun segments, each its own path: the rasterizer's cost
// grows with the square of a path's cells on one row (freetype's
// Rasterizer.findCell walks them), and one path of thousands of segments
// was most of a PNG's time. Each run starts where the last ended.
func addLine(p *plot.Plot, arm string, line plotter.XYs, c color.Color, raster bool) error {
	l, sc, err := plotter.NewLinePoints(line)
	if err != nil {
		return err
	}
	l.Color, sc.Color = c, c
	sc.Shape = draw.CircleGlyph{}
	p.Legend.Add(arm, l, sc)
	if !raster || len(line) <= rasterRun {
		p.Add(l, sc)
		return nil
	}
	for a := 0; a < len(line)-1; a += rasterRun {
		seg, err := plotter.NewLine(line[a:min(a+rasterRun+1, len(line))])
		if err != nil {
			return err
		}
		seg.LineStyle = l.LineStyle
		p.Add(seg)
	}
	p.Add(sc)
	return nil
}

// plotWidth and plotHeight are the size of Plot's figure.
const plotWidth, plotHeight = 8 * vg.Inch, 4 * vg.Inch

// rasterRun is how many segments of a line a raster strokes as one path
// (Plot): short enough that no path holds many cells on one row, long
// enough that the runs' joins are few (docs/performance.md,
// BenchmarkNightlyHistory10k/png).
const rasterRun = 32

// thin returns ps (in X order) as a raster of cols pixel columns draws
// it: where more than one point falls in a column of the X range, only
// the points that set what the column shows are kept, in X order: the
// first and the last (which the lines to the neighbouring columns join),
// those of the lowest and highest median (the line's extent in the
// column), and those of the highest Hi and lowest Lo (the band's). This
// is M4 aggregation (Jugel et al., "M4: A Visualization-Oriented Time
// Series Data Aggregation", VLDB 2014) with the band's two extremes
// added: the line and the band cover the same pixels, at most 6 points a
// column, so that a PNG of 10,000 runs is not rasterized 10,000 segments
// at a time into 768 columns. ps with at most 2*cols points is returned
// as it is.
func thin(ps []Point, cols int) []Point {
	if len(ps) <= 2*cols || cols < 1 {
		return ps
	}
	first, last := ps[0].X, ps[len(ps)-1].X
	if last <= first {
		return ps
	}
	col := func(x float64) int { return min(int((x-first)/(last-first)*float64(cols)), cols-1) }
	out := make([]Point, 0, 6*cols)
	for i := 0; i < len(ps); {
		c, j := col(ps[i].X), i
		for j < len(ps) && col(ps[j].X) == c {
			j++
		}
		lo, hi, bandLo, bandHi := i, i, i, i
		for k := i; k < j; k++ {
			if ps[k].Center < ps[lo].Center {
				lo = k
			}
			if ps[k].Center > ps[hi].Center {
				hi = k
			}
			if ps[k].Lo < ps[bandLo].Lo {
				bandLo = k
			}
			if ps[k].Hi > ps[bandHi].Hi {
				bandHi = k
			}
		}
		keep := []int{i, lo, hi, bandLo, bandHi, j - 1}
		slices.Sort(keep)
		for _, k := range slices.Compact(keep) {
			out = append(out, ps[k])
		}
		i = j
	}
	return out
}

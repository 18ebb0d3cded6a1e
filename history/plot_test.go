package history

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// walk is n points of a random walk, one a run, with a band around each
// median; every 7th run starts at the same second as the one before it.
func walk(seed uint64, n int) []Point {
	r := rand.New(rand.NewPCG(seed, 1))
	ps := make([]Point, n)
	x, y := 1.7e9, 100.0
	for i := range ps {
		if i%7 != 0 {
			x += 3600 * (0.5 + r.Float64())
		}
		y += r.NormFloat64()
		lo, hi := y-r.Float64()*3, y+r.Float64()*3
		ps[i] = Point{RunID: int64(i + 1), X: x, Center: y, Lo: lo, Hi: hi}
	}
	return ps
}

// TestThinKeepsEveryColumnsExtremes: thin keeps, in X order, a subset of
// the points that holds, for each of cols equal columns of the X range,
// the first and last point and the extremes of the median, Lo and Hi,
// computed here by grouping the points the plain way; at most 6 points a
// column; and a series of at most 2*cols points whole.
func TestThinKeepsEveryColumnsExtremes(t *testing.T) {
	for _, tc := range []struct {
		n, cols int
	}{{10000, 768}, {1537, 768}, {3000, 100}, {50, 3}, {1536, 768}} {
		ps := walk(uint64(tc.n), tc.n)
		got := thin(ps, tc.cols)
		if tc.n <= 2*tc.cols {
			if !slices.Equal(got, ps) {
				t.Errorf("n=%d cols=%d: thinned a series of at most 2*cols points", tc.n, tc.cols)
			}
			continue
		}
		first, last := ps[0].X, ps[len(ps)-1].X
		colOf := func(x float64) int {
			c := int(math.Floor((x - first) / (last - first) * float64(tc.cols)))
			return min(c, tc.cols-1)
		}
		type ext struct {
			firstID, lastID        int64
			lo, hi, bandLo, bandHi float64
			n                      int
		}
		want, have := map[int]*ext{}, map[int]*ext{}
		add := func(m map[int]*ext, p Point) {
			c := colOf(p.X)
			e := m[c]
			if e == nil {
				e = &ext{firstID: p.RunID, lo: p.Center, hi: p.Center, bandLo: p.Lo, bandHi: p.Hi}
				m[c] = e
			}
			e.lastID, e.n = p.RunID, e.n+1
			e.lo, e.hi = min(e.lo, p.Center), max(e.hi, p.Center)
			e.bandLo, e.bandHi = min(e.bandLo, p.Lo), max(e.bandHi, p.Hi)
		}
		for _, p := range ps {
			add(want, p)
		}
		for i, p := range got {
			if i > 0 && p.RunID <= got[i-1].RunID {
				t.Fatalf("n=%d: point %d (run %d) out of order after run %d", tc.n, i, p.RunID, got[i-1].RunID)
			}
			if p != ps[p.RunID-1] {
				t.Fatalf("n=%d: point of run %d changed: %+v", tc.n, p.RunID, p)
			}
			add(have, p)
		}
		if len(have) != len(want) {
			t.Fatalf("n=%d: %d columns kept of %d", tc.n, len(have), len(want))
		}
		for c, w := range want {
			h := have[c]
			if h.firstID != w.firstID || h.lastID != w.lastID || h.lo != w.lo || h.hi != w.hi || h.bandLo != w.bandLo || h.bandHi != w.bandHi || h.n > 6 {
				t.Errorf("n=%d column %d: kept %+v, want the extremes of %+v (at most 6 points)", tc.n, c, *h, *w)
			}
		}
		if tc.n == 10000 && len(got) > 6*tc.cols {
			t.Errorf("10,000 points thinned to %d, more than 6 a column", len(got))
		}
	}
}

// render draws ps as Plot draws an arm (the band, then the line, in runs
// of run segments when run > 0) at Plot's size, as a PNG, and decodes it.
func render(t *testing.T, ps []Point, run int) image.Image {
	t.Helper()
	p := plot.New()
	band := make(plotter.XYs, 0, 2*len(ps))
	line := make(plotter.XYs, 0, len(ps))
	for _, q := range ps {
		band = append(band, plotter.XY{X: q.X, Y: q.Hi})
		line = append(line, plotter.XY{X: q.X, Y: q.Center})
	}
	for j := len(ps) - 1; j >= 0; j-- {
		band = append(band, plotter.XY{X: ps[j].X, Y: ps[j].Lo})
	}
	poly, err := plotter.NewPolygon(band)
	if err != nil {
		t.Fatal(err)
	}
	poly.Color = color.NRGBA{31, 119, 180, 50}
	poly.LineStyle.Width = 0
	p.Add(poly)
	if run == 0 {
		run = len(line)
	}
	for a := 0; a < len(line)-1; a += run {
		l, err := plotter.NewLine(line[a:min(a+run+1, len(line))])
		if err != nil {
			t.Fatal(err)
		}
		p.Add(l)
	}
	c := vgimg.New(plotWidth, plotHeight)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestThinnedPNGIsTheSamePicture: a PNG of 4,000 runs drawn from thin's
// points, its line stroked in runs of rasterRun segments, against one
// drawn from every point as one path: the same shapes to within a pixel
// (every pixel either image inks has ink at most one pixel away in the
// other), and the same colours but for the antialiased line's darkness
// where many of its segments cross one pixel (at most 3% of the inked
// pixels are more than a quarter of the range apart in some channel).
func TestThinnedPNGIsTheSamePicture(t *testing.T) {
	ps := walk(7, 4000)
	full, fast := render(t, ps, 0), render(t, thin(ps, int(plotWidth.Dots(vgimg.DefaultDPI))), rasterRun)
	if full.Bounds() != fast.Bounds() {
		t.Fatalf("bounds %v and %v", full.Bounds(), fast.Bounds())
	}
	for _, pair := range [][2]image.Image{{full, fast}, {fast, full}} {
		apart, ink := inkApart(pair[0], pair[1])
		if ink < 10000 || apart > 0 {
			t.Errorf("%d of %d inked pixels have no ink within a pixel in the other image", apart, ink)
		}
	}
	b, shade, ink := full.Bounds(), 0, 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r1, g1, b1, _ := full.At(x, y).RGBA()
			r2, g2, b2, _ := fast.At(x, y).RGBA()
			if inked(full.At(x, y)) || inked(fast.At(x, y)) {
				ink++
			}
			if max(absDiff(r1, r2), absDiff(g1, g2), absDiff(b1, b2)) > 0x4000 {
				shade++
			}
		}
	}
	if float64(shade) > 0.03*float64(ink) {
		t.Errorf("%d of %d inked pixels differ by more than a quarter of the range", shade, ink)
	}
}

// inked: c is not white.
func inked(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r != 0xffff || g != 0xffff || b != 0xffff
}

// inkApart counts a's inked pixels (ink) and those of them with no inked
// pixel of b at most one pixel away (apart).
func inkApart(a, b image.Image) (apart, ink int) {
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if !inked(a.At(x, y)) {
				continue
			}
			ink++
			near := false
			for dy := -1; dy <= 1 && !near; dy++ {
				for dx := -1; dx <= 1 && !near; dx++ {
					near = image.Pt(x+dx, y+dy).In(r) && inked(b.At(x+dx, y+dy))
				}
			}
			if !near {
				apart++
			}
		}
	}
	return apart, ink
}

func absDiff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

package eval

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Point is one (x, y) value of a curve.
type Point struct{ X, Y float64 }

// Series is a labelled curve, optionally with an interval [Lo[i], Hi[i]] around each
// point: drawn as error bars, or as a shaded band when Band is set. Lo and Hi are nil
// or as long as Points.
type Series struct {
	Label  string
	Points []Point
	Lo, Hi []float64
	Band   bool
}

// dodge is how far apart, as a fraction of the x range, the error bars of different
// series at one x are drawn, so that overlapping intervals stay visible.
const dodge = 0.02

// PlotPNG draws the series as lines with points into a PNG file at path, each with its
// intervals when it has them: shaded bands under every line, error bars on top, the
// series with error bars shifted slightly apart along x.
func PlotPNG(path, title, xLabel, yLabel string, series []Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())

	xmin, xmax, bars := math.Inf(1), math.Inf(-1), 0
	for _, s := range series {
		if s.Lo != nil && (len(s.Lo) != len(s.Points) || len(s.Hi) != len(s.Points)) {
			return fmt.Errorf("plot %s: series %s: %d points, %d lows and %d highs", path, s.Label, len(s.Points), len(s.Lo), len(s.Hi))
		}
		for _, pt := range s.Points {
			xmin, xmax = min(xmin, pt.X), max(xmax, pt.X)
		}
		if s.Lo != nil && !s.Band {
			bars++
		}
	}
	step := dodge * (xmax - xmin)
	if !(step > 0) {
		step = 0.05
	}

	xys := make([]plotter.XYs, len(series))
	bar := 0
	for i, s := range series {
		xys[i] = make(plotter.XYs, len(s.Points))
		shift := 0.0
		if s.Lo != nil && !s.Band {
			shift = (float64(bar) - float64(bars-1)/2) * step
			bar++
		}
		for j, pt := range s.Points {
			xys[i][j].X, xys[i][j].Y = pt.X+shift, pt.Y
		}
		if s.Band && len(s.Points) > 0 {
			ring := make(plotter.XYs, 0, 2*len(s.Points))
			for j := range s.Points {
				ring = append(ring, plotter.XY{X: s.Points[j].X, Y: s.Hi[j]})
			}
			for j := len(s.Points) - 1; j >= 0; j-- {
				ring = append(ring, plotter.XY{X: s.Points[j].X, Y: s.Lo[j]})
			}
			poly, err := plotter.NewPolygon(ring)
			if err != nil {
				return fmt.Errorf("plot %s: series %s band: %w", path, s.Label, err)
			}
			poly.Color = translucent(plotutil.Color(i))
			poly.LineStyle.Width = 0
			p.Add(poly) // before every line, so no band hides one
		}
	}
	for i, s := range series {
		// The styles plotutil.AddLinePoints gives series i.
		l, pts, err := plotter.NewLinePoints(xys[i])
		if err != nil {
			return fmt.Errorf("plot %s: series %s: %w", path, s.Label, err)
		}
		l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		pts.Color, pts.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(s.Label, l, pts)
		if s.Lo == nil || s.Band || len(s.Points) == 0 {
			continue
		}
		errs := make(plotter.YErrors, len(s.Points))
		for j, pt := range s.Points {
			errs[j].Low, errs[j].High = pt.Y-s.Lo[j], s.Hi[j]-pt.Y
		}
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{xys[i], errs})
		if err != nil {
			return fmt.Errorf("plot %s: series %s error bars: %w", path, s.Label, err)
		}
		eb.Color = plotutil.Color(i)
		p.Add(eb)
	}
	if bars > 0 { // room for the shifted bars at both ends
		p.X.Min, p.X.Max = min(p.X.Min, xmin-float64(bars)*step), max(p.X.Max, xmax+float64(bars)*step)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	if err := p.Save(6*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func translucent(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 56}
}

// ByK turns a report into one series per policy of metric m against K, with its 95%
// intervals: policies in first-appearance order, points sorted by K, unknown values left
// out.
func ByK(results []Result, m Metric) []Series {
	var out []Series
	index := map[string]int{}
	type kv struct {
		k float64
		e Estimate
	}
	var pts [][]kv
	for _, r := range results {
		i, ok := index[r.Policy]
		if !ok {
			i = len(out)
			index[r.Policy] = i
			out = append(out, Series{Label: r.Policy})
			pts = append(pts, nil)
		}
		if e := r.Values[m]; e.Known() {
			pts[i] = append(pts[i], kv{float64(r.K), e})
		}
	}
	for i := range out {
		slices.SortFunc(pts[i], func(a, b kv) int { return cmp.Compare(a.k, b.k) })
		out[i].Lo, out[i].Hi = []float64{}, []float64{}
		for _, p := range pts[i] {
			lo, hi := p.e.Lo, p.e.Hi
			if math.IsNaN(lo) || math.IsNaN(hi) {
				lo, hi = p.e.Mean, p.e.Mean
			}
			out[i].Points = append(out[i].Points, Point{X: p.k, Y: p.e.Mean})
			out[i].Lo, out[i].Hi = append(out[i].Lo, lo), append(out[i].Hi, hi)
		}
	}
	return out
}

package eval

import (
	"fmt"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Point is one (x, y) value of a curve.
type Point struct{ X, Y float64 }

// Series is a labelled curve.
type Series struct {
	Label  string
	Points []Point
}

// PlotPNG draws the series as lines with points into a PNG file at path.
func PlotPNG(path, title, xLabel, yLabel string, series []Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	var args []any
	for _, s := range series {
		xys := make(plotter.XYs, len(s.Points))
		for i, pt := range s.Points {
			xys[i].X, xys[i].Y = pt.X, pt.Y
		}
		args = append(args, s.Label, xys)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	if err := p.Save(6*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// ByK turns table rows into one series per policy of metric against K, policies in
// first-appearance order and points sorted by K.
func ByK(rows []Row, metric func(Row) float64) []Series {
	var out []Series
	index := map[string]int{}
	for _, r := range rows {
		i, ok := index[r.Label]
		if !ok {
			i = len(out)
			index[r.Label] = i
			out = append(out, Series{Label: r.Label})
		}
		out[i].Points = append(out[i].Points, Point{X: float64(r.K), Y: metric(r)})
	}
	for i := range out {
		slices.SortFunc(out[i].Points, func(a, b Point) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
	}
	return out
}

package stats

import (
	"math"
	"testing"
)

func TestAUC(t *testing.T) {
	for _, c := range []struct {
		name     string
		pos, neg []float64
		want     float64
	}{
		{"separated", []float64{3, 4}, []float64{1, 2}, 1},
		{"reversed", []float64{1, 2}, []float64{3, 4}, 0},
		{"all tied", []float64{1, 1}, []float64{1, 1, 1}, 0.5},
		// pairs (pos, neg): (2,1) win, (2,3) loss, (2,2) tie, (4,·) three wins → 4.5/6
		{"mixed with a tie", []float64{2, 4}, []float64{1, 2, 3}, 4.5 / 6},
		{"single pair", []float64{0.3}, []float64{0.1}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := AUC(c.pos, c.neg); math.Abs(got-c.want) > 1e-12 {
				t.Errorf("AUC(%v, %v) = %v, want %v", c.pos, c.neg, got, c.want)
			}
		})
	}
	if got := AUC(nil, []float64{1}); !math.IsNaN(got) {
		t.Errorf("AUC with no positives = %v, want NaN", got)
	}
}

func TestMean(t *testing.T) {
	if got := Mean([]float64{0.5, 0.25, 0.75}); got != 0.5 {
		t.Errorf("Mean(0.5, 0.25, 0.75) = %v, want 0.5", got)
	}
	if got := Mean(nil); !math.IsNaN(got) {
		t.Errorf("Mean(nil) = %v, want NaN", got)
	}
}

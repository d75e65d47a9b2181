// Package qwen2test holds what the training stages' tests compare checkpoints with.
package qwen2test

import (
	"math"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
)

// WeightValues loads the checkpoint in dir and returns every weight's values, in order.
func WeightValues(t testing.TB, dir string) []float64 {
	t.Helper()
	m, err := qwen2.Load(dir, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	var out []float64
	for _, w := range m.Weights() {
		out = append(out, torch.Values(w.Tensor)...)
	}
	return out
}

// ChangeDiff is RelDiff of the weights' change from checkpoint dir from to got and to
// want: how far two trainings of the same start agree.
func ChangeDiff(t testing.TB, from, got, want string) float64 {
	t.Helper()
	before := WeightValues(t, from)
	g, w := WeightValues(t, got), WeightValues(t, want)
	for i := range w {
		w[i] -= before[i]
		g[i] -= before[i]
	}
	return RelDiff(g, w)
}

// RelDiff is the L2 norm of a − b relative to b's.
func RelDiff(a, b []float64) float64 {
	var num, den float64
	for i := range a {
		num += (a[i] - b[i]) * (a[i] - b[i])
		den += b[i] * b[i]
	}
	return math.Sqrt(num / den)
}

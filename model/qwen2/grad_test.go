package qwen2

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// TestLogProbGradients runs LogProbTensor with gradients, as the PPO update does,
// and checks the backward pass: every weight gets a finite gradient, and a central
// difference along the gradient of layer 0's query bias matches its norm within 1%.
// The forward pass runs some ops in place; one that overwrote a tensor a backward
// formula saved would fail here.
func TestLogProbGradients(t *testing.T) {
	runtime.LockOSThread() // libtorch's grad mode is per OS thread
	defer runtime.UnlockOSThread()
	m := newTrainableModel(t, testConfig(), Options{})
	defer torch.SetGrad(torch.SetGrad(true))
	rng := rand.New(rand.NewPCG(8, 9))
	var pairs []Pair
	for range 4 {
		pairs = append(pairs, Pair{Context: torchtest.RandomTokens(rng, 1+rng.IntN(8), 97), Response: torchtest.RandomTokens(rng, 1+rng.IntN(9), 97)})
	}
	lp, ent, err := m.LogProbTensor(pairs, ScoreConfig{Entropy: true, Chunk: 5})
	if err != nil {
		t.Fatal(err)
	}
	a, b := torch.Of(lp).SumLast(), torch.Of(ent).SumLast()
	a.Add_(b) // sum saves nothing for backward
	loss := a.Wrap()
	b.Free()
	torch.Drop(lp, ent)
	defer loss.MustDrop()
	if err := loss.Backward(); err != nil {
		t.Fatalf("backward: %v", err)
	}
	var bias, grad []float32
	for _, w := range m.Weights() {
		g := torch.Must(w.Tensor.Grad(false))
		vals := floats(g)
		g.MustDrop()
		for i, v := range vals {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: gradient %d is %g", w.Key, i, v)
			}
		}
		if w.Key == "model.layers.0.self_attn.q_proj.bias" {
			bias, grad = floats(w.Tensor), vals
		}
	}
	norm := 0.0
	for _, v := range grad {
		norm += float64(v) * float64(v)
	}
	norm = math.Sqrt(norm)
	eval := func(step float64) float64 {
		shifted := make([]float32, len(bias))
		for i := range bias {
			shifted[i] = bias[i] + float32(step*float64(grad[i])/norm)
		}
		set(t, m.Layers[0].Attn.Q.Bias, shifted)
		lp, ent, err := m.LogProbTensor(pairs, ScoreConfig{Entropy: true, Chunk: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer torch.Drop(lp, ent)
		sum := 0.0
		for _, v := range append(floats(lp), floats(ent)...) {
			sum += float64(v)
		}
		return sum
	}
	torch.SetGrad(false)
	const eps = 5e-2 // smaller steps drown in the float32 rounding of the log-probs; error here 0.02%
	fd := (eval(eps) - eval(-eps)) / (2 * eps)
	set(t, m.Layers[0].Attn.Q.Bias, bias)
	if math.Abs(fd-norm) > 0.01*norm {
		t.Errorf("directional derivative along the q_proj bias gradient = %g by central difference, gradient norm %g", fd, norm)
	}
}

// set copies vals into w (grad mode off).
func set(t *testing.T, w *ts.Tensor, vals []float32) {
	t.Helper()
	src := torch.RawFromHost(vals, []int64{int64(len(vals))}, gotch.CPU)
	defer src.Free()
	torch.Of(w).CopyFrom(src)
}

func TestGradMode(t *testing.T) {
	runtime.LockOSThread() // grad mode is per OS thread
	defer runtime.UnlockOSThread()
	defer torch.SetGrad(torch.SetGrad(true))
	for _, on := range []bool{true, false, true} {
		torch.SetGrad(on)
		if got := torch.GradEnabled(); got != on {
			t.Errorf("after torch.SetGrad(%v): torch.GradEnabled() = %v", on, got)
		}
	}
}

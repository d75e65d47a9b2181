package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
)

// TestContextLossWeight checks the weighted objective against its parts: with context
// weight w, the gradient is (n_r·g_r + w·n_c·g_c) / (n_r + w·n_c), where g_r is the
// gradient of the response tokens' mean NLL (weight 0) and g_c that of the context
// tokens after the first (scored as responses of their first token); the reported loss
// stays the response mean.
func TestContextLossWeight(t *testing.T) {
	cfg, err := qwen2.Preset("tiny", 64)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads = 16, 32, 1, 2, 1
	m, err := qwen2.New(cfg, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	if err := m.Init(7); err != nil {
		t.Fatal(err)
	}
	if _, err := Trainable(m); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = rng.Int64N(64)
		}
		return out
	}
	batch := []qwen2.Pair{{Context: ids(9), Response: ids(4)}, {Context: ids(5), Response: ids(7)}}
	var ctxOnly []qwen2.Pair
	nr, nc := 0, 0
	for _, e := range batch {
		ctxOnly = append(ctxOnly, qwen2.Pair{Context: e.Context[:1], Response: e.Context[1:]})
		nr, nc = nr+len(e.Response), nc+len(e.Context)-1
	}
	grad := func(w float64, b []qwen2.Pair) (float64, []float64) {
		t.Helper()
		loss, _, err := NLLStep{Model: m, ContextWeight: w}.Backward(b)
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, p := range m.Weights() {
			g := torch.Must(p.Tensor.Grad(false))
			out = append(out, torch.Values(g)...)
			torch.Check(g.Zero_())
			g.MustDrop()
		}
		return loss, out
	}
	lossR, gr := grad(0, batch)
	_, gc := grad(0, ctxOnly)
	const w = 0.3
	lossW, gw := grad(w, batch)
	if math.Abs(lossW-lossR) > 1e-6 {
		t.Errorf("reported loss with weight %v = %v, want the response mean %v", w, lossW, lossR)
	}
	var num, den, diff float64
	for i := range gw {
		want := (float64(nr)*gr[i] + w*float64(nc)*gc[i]) / (float64(nr) + w*float64(nc))
		num += (gw[i] - want) * (gw[i] - want)
		den += want * want
		diff += (gw[i] - gr[i]) * (gw[i] - gr[i])
	}
	if rel := math.Sqrt(num / den); rel > 1e-5 {
		t.Errorf("weighted gradient is %.2g (relative) off the weighted mix of its parts", rel)
	}
	if diff == 0 {
		t.Error("the context weight did not change the gradient")
	}
}

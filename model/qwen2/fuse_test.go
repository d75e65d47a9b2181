package qwen2

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// TestFusedMatchesSeparate decodes the same batch through the fused projections
// Generate uses and through the model's separate weights, prefill and eight steps,
// and compares every logit. Each output column of a GEMM is the same dot product
// whatever columns are computed beside it, so the two agree to the last bit on this
// machine; the assertion allows 1e-6 for a libtorch whose kernels block by width.
func TestFusedMatchesSeparate(t *testing.T) {
	tiny, err := Preset("tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	m := newTestModel(t, tiny, Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	base := liveTensors()
	fs := m.fuse()
	prompts := [][]int64{torchtest.RandomTokens(rng, 9, tiny.VocabSize), torchtest.RandomTokens(rng, 3, tiny.VocabSize), torchtest.RandomTokens(rng, 14, tiny.VocabSize)}
	run := func(fs []fused) [][]float32 {
		cache := m.NewCache(len(prompts), 32)
		defer cache.Drop()
		b := NewBatch(prompts, []int{0, 0, 0}, nil, 0)
		out := [][]float32{m.lastLogits(b, cache, fs)}
		start := []int{9, 3, 14}
		for step := range 8 {
			toks := [][]int64{{int64(step)}, {int64(2 * step)}, {int64(3 * step)}}
			b = NewBatch(toks, start, b.Valid, cache.Len())
			out = append(out, m.lastLogits(b, cache, fs))
			for r := range start {
				start[r]++
			}
		}
		return out
	}
	sep, fus := run(nil), run(fs)
	freeFused(fs)
	if n := liveTensors(); n != base {
		t.Errorf("fuse and decode left %d live tensors, want %d", n, base)
	}
	bits := 0
	for s := range sep {
		if d := torchtest.MaxAbsDiff(fus[s], sep[s]); d > 1e-6 {
			t.Errorf("step %d: max |Δlogit| fused vs separate = %g, want <= 1e-6", s, d)
		}
		for i := range sep[s] {
			if math.Float32bits(fus[s][i]) != math.Float32bits(sep[s][i]) {
				bits++
			}
		}
	}
	t.Logf("%d of %d logits differ in any bit", bits, len(sep)*len(sep[0]))
}

// TestLayerForwardMatchesHidden runs the exported per-layer API with HF's
// arguments (cos, sin: [batch, 1, seq, headDim], a boolean mask) and checks it
// reproduces Hidden bit for bit.
func TestLayerForwardMatchesHidden(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	b := NewBatch([][]int64{{1, 2, 3, 4}, {5, 6}}, []int{0, 3}, nil, 0)
	ids, pos, mask := m.tensors(b)
	defer torch.Drop(ids, pos, mask)
	want := m.Hidden(ids, pos, mask, nil)
	defer want.MustDrop()

	base := liveTensors()
	sin := signHalf(m.rope.sin) // back to HF's unsigned table
	flat := torch.Of(pos).Reshape(-1)
	c, s := torch.Of(m.rope.cos).IndexSelect(0, flat), torch.Of(sin).IndexSelect(0, flat)
	d := int64(m.Config.HeadDim())
	cos4, sin4 := c.View(2, 1, 4, d).Wrap(), s.View(2, 1, 4, d).Wrap()
	torch.Free(flat, c, s)
	h := torch.Of(m.Embed).Embedding(torch.Of(ids)).Wrap()
	for _, l := range m.Layers {
		next := l.Forward(h, cos4, sin4, mask, nil)
		h.MustDrop()
		h = next
	}
	got := m.Norm.Forward(h)
	torch.Drop(sin, cos4, sin4, h)
	defer got.MustDrop()
	if n := liveTensors(); n != base+1 {
		t.Errorf("live tensors = %d, want %d (baseline + result)", n, base+1)
	}
	g, w := floats(got), floats(want)
	for i := range w {
		if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
			t.Fatalf("element %d: layer-by-layer %g, Hidden %g", i, g[i], w[i])
		}
	}
	if dt := got.DType(); dt != gotch.Float {
		t.Errorf("dtype %v, want float32", dt)
	}
}

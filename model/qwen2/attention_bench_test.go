package qwen2

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// BenchmarkAttentionLong runs one decoder layer of Qwen2.5-0.5B's widths (14 query
// heads, 2 kv heads of 64) over one causal row of 1k, 4k and 8k random tokens (seed
// 5), with the attention materialised (attention=eager) and through libtorch's fused
// kernel (attention=sdpa): the forward pass without autograd, as scoring runs it
// (pass=score), and forward and backward with every weight requiring grad and a random
// upstream gradient, as the update runs it (pass=train). Besides the rates it reports
// MB_peak: the most bytes of tensors of 1 MiB and more alive at once during one pass
// (torch.HeapPeak), beyond what was alive before it. Two threads; each sub-benchmark
// takes one untimed pass first, so -benchtime=1x runs the set in a few minutes.
func BenchmarkAttentionLong(b *testing.B) {
	torch.BoundHeap() // as every stage sets it; HeapPeak reads its cache
	m := benchModel(b, "qwen2.5-0.5b-shape", 1)
	for _, w := range m.Weights() {
		torch.InPlace(w.Tensor, func() error { return w.Tensor.RequiresGrad_(true) })
	}
	torchtest.ForThreads(b, []int{2}, func(b *testing.B) {
		for _, n := range []int{1024, 4096, 8192} {
			for _, pass := range []string{"score", "train"} {
				for _, attn := range []string{"eager", "sdpa"} {
					b.Run(fmt.Sprintf("ctx=%d/pass=%s/attention=%s", n, pass, attn), func(b *testing.B) {
						benchLayer(b, m, n, pass == "train", attn == "sdpa")
					})
				}
			}
		}
	})
}

// benchLayer times m's first layer over one causal row of n tokens (see
// BenchmarkAttentionLong).
func benchLayer(b *testing.B, m *Model, n int, train, sdpa bool) {
	defer func(old int64) { m.fuseFrom = old }(m.fuseFrom)
	m.fuseFrom, _ = attentionFuseFrom(map[bool]string{false: "eager", true: "sdpa"}[sdpa])
	rng := rand.New(rand.NewPCG(5, 5))
	bt := NewBatch([][]int64{torchtest.RandomTokens(rng, n, m.Config.VocabSize)}, []int{0}, nil, 0)
	var ids, pos, bias, x, dy torch.Raw
	torch.DoNoGrad(func() {
		ids, pos, bias = m.inputs(bt)
		x = m.embed(ids, false)
		g := make([]float32, n*int(m.Config.HiddenSize))
		for i := range g {
			g[i] = float32(rng.NormFloat64())
		}
		gf := torch.RawFromHost(g, x.Size(), x.Device())
		defer gf.Free()
		dy = gf.ToDType(x.DType())
	})
	defer torch.Do(func() { torch.Free(ids, pos, bias, x, dy) })
	layer := func() {
		defer torch.SetGrad(torch.SetGrad(train))
		p := m.newPass(pos, bias, 1, int64(n), int64(n), train)
		defer p.free()
		in := x
		if train {
			in = x.Leaf()
			defer in.Free()
		}
		y := m.Layers[0].forward(in, p, nil, nil)
		defer y.Free()
		if train {
			torch.Backward([]torch.Raw{y}, []torch.Raw{dy})
		}
	}
	best := torchtest.TimeLoop(b, layer)
	var peak int64
	torch.Do(func() {
		torch.TrimHeap()
		base, _ := torch.HeapStats()
		layer()
		peak = torch.HeapPeak() - base
	})
	b.ReportMetric(float64(n)/best.Seconds(), "best-tokens/s")
	b.ReportMetric(float64(peak)/(1<<20), "MB_peak")
}

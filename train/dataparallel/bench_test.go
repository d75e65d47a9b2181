package dataparallel

import (
	"math/rand/v2"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
	"github.com/mempo/mempo/train"
)

// BenchmarkSFTStep runs the supervised step of the tiny preset (in MEMPO_TEST_DTYPE,
// float32 by default; the demo trains in bfloat16) on batches shaped like the demo's
// SFT batches (14 turns of 150-300 tokens behind a shared 53-token system prompt,
// context weight 0.2, shared prefixes) in one process on two threads and across two
// one-thread processes, the same two cores either way: tokens/s of each, whose ratio
// is what `--procs 2` gains here. The optimizer step, the same in both, is left out.
func BenchmarkSFTStep(b *testing.B) {
	cfg, err := qwen2.Preset("tiny", 4096)
	if err != nil {
		b.Fatal(err)
	}
	opt := qwen2.Options{Device: "cpu", DType: torchtest.DType()}
	m, err := qwen2.New(cfg, opt)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Drop()
	if err := m.Init(1); err != nil {
		b.Fatal(err)
	}
	if _, err := train.Trainable(m); err != nil {
		b.Fatal(err)
	}
	step := train.NLLStep{Model: m, ContextWeight: 0.2, SharePrefixes: true}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = rng.Int64N(4096)
		}
		return out
	}
	system := ids(53)
	batch := make([]qwen2.Pair, 14)
	tokens := 0
	for i := range batch {
		ctx := append(append([]int64(nil), system...), ids(60+rng.IntN(150))...)
		batch[i] = qwen2.Pair{Context: ctx, Response: ids(40 + rng.IntN(40))}
		tokens += len(ctx) + len(batch[i].Response)
	}
	restore := torch.NumThreads()
	defer torch.SetNumThreads(restore)
	for _, c := range []struct {
		name           string
		procs, threads int
	}{{"procs=1,threads=2", 1, 2}, {"procs=2,threads=1", 2, 1}} {
		b.Run(c.name, func(b *testing.B) {
			if err := torch.SetNumThreads(c.threads); err != nil {
				b.Fatal(err)
			}
			var pass interface {
				Backward([]qwen2.Pair) (float64, int, error)
			} = step
			if c.procs > 1 {
				g, err := StartNLL(step, Config{Procs: c.procs, Threads: c.threads, Options: opt})
				if err != nil {
					b.Fatal(err)
				}
				defer g.Close()
				pass = g
			}
			best := torchtest.TimeLoop(b, func() {
				if _, _, err := pass.Backward(batch); err != nil {
					b.Fatal(err)
				}
				clearGrads(m)
			})
			b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(tokens)/best.Seconds(), "best-tokens/s")
		})
	}
}

// clearGrads leaves m's weights without gradients.
func clearGrads(m *qwen2.Model) {
	for _, w := range m.Weights() {
		torch.Of(w.Tensor).ClearGrad()
	}
}

package update

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
	"github.com/mempo/mempo/train"
)

// benchSamples draws n turns of context ctx and response resp tokens for vocab.
func benchSamples(rng *rand.Rand, n, ctx, resp, vocab int) []Sample {
	out := make([]Sample, n)
	for i := range out {
		s := &out[i]
		for range ctx {
			s.Context = append(s.Context, rng.Int64N(int64(vocab)))
		}
		for range resp {
			s.Response = append(s.Response, rng.Int64N(int64(vocab)))
			s.Old = append(s.Old, -8+float32(rng.NormFloat64())*0.1)
			s.Ref = append(s.Ref, -8+float32(rng.NormFloat64())*0.1)
			s.Adv = append(s.Adv, float32(rng.NormFloat64()))
		}
	}
	return out
}

// benchTrainer builds a preset with trainable weights on the benchmark device in its
// dtype (torchtest.Device, torchtest.DType: the CPU in float32 unless MEMPO_TEST_DEVICE
// and MEMPO_TEST_DTYPE say otherwise); layers > 0 truncates it (the 0.5B-shaped preset
// keeps Qwen2.5-0.5B's widths and vocabulary with fewer layers).
func benchTrainer(b *testing.B, preset string, layers int) (train.PPOStep, *train.AdamW) {
	cfg, err := qwen2.Preset(preset, 0)
	if err != nil {
		b.Fatal(err)
	}
	if layers > 0 {
		cfg.NumLayers, cfg.MaxWindowLayers = layers, layers
	}
	m, err := qwen2.New(cfg, qwen2.Options{Device: torchtest.Device(), DType: torchtest.DType()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Drop)
	if err := m.Init(1); err != nil {
		b.Fatal(err)
	}
	ps, err := train.Trainable(m)
	if err != nil {
		b.Fatal(err)
	}
	adam, err := train.NewAdamW(ps, train.DefaultAdamW)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(adam.Drop)
	return train.PPOStep{Model: m, Objective: train.DefaultObjective}, adam
}

// miniBatch runs one mini-batch's forward and backward passes under budget and
// returns the micro-batch count.
func miniBatch(b *testing.B, tr train.PPOStep, adam *train.AdamW, samples []Sample, budget int) int {
	all := make([]int, len(samples))
	lengths := make([]int, len(samples))
	for i := range all {
		all[i], lengths[i] = i, len(samples[i].Response)
	}
	div, err := train.Divisor(tr.Objective.Agg, lengths)
	if err != nil {
		b.Fatal(err)
	}
	micros := qwen2.BudgetBatches(all, func(i int) int { return samples[i].Len() }, budget)
	for _, mi := range micros {
		batch := make([]*train.Sequence, len(mi))
		for r, i := range mi {
			batch[r] = &samples[i].Sequence
		}
		if _, err := tr.Micro(batch, div); err != nil {
			b.Fatal(err)
		}
	}
	if err := adam.ZeroGrad(); err != nil {
		b.Fatal(err)
	}
	return len(micros)
}

// The benchmarks below run once per thread count in benchThreads (sub-benchmarks
// threads=1 and threads=2) on a model initialised with seed 1 and turns drawn with seed
// (1, 1), each of 192 context and 64 response tokens, every mini-batch in one
// micro-batch, under torch.BoundHeap as Run sets it. Besides their mean rates they report the
// rate of the fastest iteration (best-) and its gemm-fraction, the matmul FLOP rate of
// the forward and backward passes (3 × forwardFLOPs) over libtorch's peak fp32 GEMM
// rate at the same thread count, and the optimizer step bw-fraction, its minimal memory
// traffic over the copy bandwidth. build/bench_compare/compare.py times the same
// workloads in PyTorch.
var benchThreads = []int{1, 2}

// BenchmarkUpdateTiny measures forward+backward throughput of the update on the tiny
// preset: 16 turns, one pass.
func BenchmarkUpdateTiny(b *testing.B) {
	torchtest.ForThreads(b, benchThreads, func(b *testing.B) { benchUpdate(b, "tiny", 0, 16, false) })
}

// BenchmarkUpdate05BShape2L is the same on Qwen2.5-0.5B's widths and 151936-token
// vocabulary with two layers and 2 turns per mini-batch (the head dominates).
func BenchmarkUpdate05BShape2L(b *testing.B) {
	torchtest.ForThreads(b, benchThreads, func(b *testing.B) { benchUpdate(b, "qwen2.5-0.5b-shape", 2, 2, false) })
}

// BenchmarkUpdateAdamW05BShape2L is BenchmarkUpdate05BShape2L with the optimizer
// step: forward, backward, AdamW (DefaultAdamW, clipping included) and zeroing the
// gradients, one optimizer step per mini-batch of 2 turns.
func BenchmarkUpdateAdamW05BShape2L(b *testing.B) {
	torchtest.ForThreads(b, benchThreads, func(b *testing.B) { benchUpdate(b, "qwen2.5-0.5b-shape", 2, 2, true) })
}

// BenchmarkUpdateAdamW15BShape2L is BenchmarkUpdateAdamW05BShape2L at Qwen2.5-1.5B's
// widths, sized for an accelerator (torchtest.Large).
func BenchmarkUpdateAdamW15BShape2L(b *testing.B) {
	torchtest.Large(b)
	torchtest.ForThreads(b, benchThreads, func(b *testing.B) { benchUpdate(b, "qwen2.5-1.5b-shape", 2, 2, true) })
}

func benchUpdate(b *testing.B, preset string, layers, turns int, step bool) {
	torch.BoundHeap() // as Run sets it
	tr, adam := benchTrainer(b, preset, layers)
	samples := benchSamples(rand.New(rand.NewPCG(1, 1)), turns, 192, 64, tr.Model.Config.VocabSize)
	iter := func() {
		if !step {
			miniBatch(b, tr, adam, samples, 0)
			return
		}
		backward(b, tr, samples)
		if _, err := adam.Step(); err != nil {
			b.Fatal(err)
		}
		if err := adam.ZeroGrad(); err != nil {
			b.Fatal(err)
		}
	}
	torchtest.GEMMFLOPS()
	best := torchtest.TimeLoop(b, iter)
	b.ReportMetric(float64(b.N*turns*64)/b.Elapsed().Seconds(), "resp_tokens/s")
	torchtest.ReportRate(b, best, turns*256, 3*tr.Model.Config.ForwardFLOPs(turns*256, turns*64))
	if step {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	}
}

// backward runs the forward and backward passes of samples as one micro-batch.
func backward(b *testing.B, tr train.PPOStep, samples []Sample) {
	batch := make([]*train.Sequence, len(samples))
	lengths := make([]int, len(samples))
	for i := range samples {
		batch[i], lengths[i] = &samples[i].Sequence, len(samples[i].Response)
	}
	div, err := train.Divisor(tr.Objective.Agg, lengths)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tr.Micro(batch, div); err != nil {
		b.Fatal(err)
	}
}

// adamWBytes is the memory traffic of one fused float32 AdamW step with clipping,
// per parameter: the norm reads the gradient (4 B), the clip reads and writes it (8),
// the update reads parameter, gradient and both moments and writes parameter and
// moments (28). An optimizer at the copy bandwidth would move exactly this.
const adamWBytes = 40

// BenchmarkAdamWStep05BShape2L is the optimizer step alone (DefaultAdamW, clipping
// included) on the 0.5B-shaped model with two layers, whose gradients come from one
// backward pass over 2 turns before the timer starts and stay set. It reports
// steps/s, and of the fastest step best-steps/s, params/s and bw-fraction:
// adamWBytes per parameter per step over the copy bandwidth at the same thread count.
func BenchmarkAdamWStep05BShape2L(b *testing.B) {
	torchtest.ForThreads(b, benchThreads, func(b *testing.B) {
		torch.BoundHeap()
		tr, adam := benchTrainer(b, "qwen2.5-0.5b-shape", 2)
		samples := benchSamples(rand.New(rand.NewPCG(1, 1)), 2, 192, 64, tr.Model.Config.VocabSize)
		backward(b, tr, samples)
		bw := torchtest.CopyBandwidth()
		step := func() {
			if _, err := adam.Step(); err != nil {
				b.Fatal(err)
			}
		}
		best := 1 / torchtest.TimeLoop(b, step).Seconds()
		params := float64(tr.Model.Config.NumParams())
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		b.ReportMetric(best, "best-steps/s")
		b.ReportMetric(best*params, "params/s")
		b.ReportMetric(best*params*adamWBytes/bw, "bw-fraction")
		b.ReportMetric(bw/1e9, "copy-GB/s")
	})
}

// BenchmarkAccumulationOverhead is the cost of gradient accumulation: the time of a
// mini-batch split into micro-batches of four turns, over the time of the same
// mini-batch in one pass (ratio, 1 = free).
func BenchmarkAccumulationOverhead(b *testing.B) {
	tr, adam := benchTrainer(b, "tiny", 0)
	samples := benchSamples(rand.New(rand.NewPCG(2, 2)), 16, 192, 64, tr.Model.Config.VocabSize)
	var whole, split time.Duration
	for b.Loop() {
		t0 := time.Now()
		miniBatch(b, tr, adam, samples, 0)
		t1 := time.Now()
		if k := miniBatch(b, tr, adam, samples, 4*256); k != 4 {
			b.Fatalf("%d micro-batches, want 4", k)
		}
		whole += t1.Sub(t0)
		split += time.Since(t1)
	}
	b.ReportMetric(split.Seconds()/whole.Seconds(), "split/whole")
}

// BenchmarkUpdateSharedPrefixes measures what tree passes save on GRPO-shaped
// mini-batches: 4 prompts of 128 tokens, 8 samples each, every sample's context the
// prompt and 32 tokens of its own, with 64 response tokens; one pass per mini-batch,
// forward and backward. It alternates the unshared pass and the tree pass and
// reports each one's best tokens/s (context and response tokens, as the unshared pass
// computes them) and unshared/shared, the ratio of their fastest iterations. On the
// tiny preset and on the 0.5B shape with two layers, where the head's cost (the same
// on both sides) is a larger share.
func BenchmarkUpdateSharedPrefixes(b *testing.B) {
	for _, c := range []struct {
		name   string
		preset string
		layers int
	}{{"tiny", "tiny", 0}, {"0.5B-shape-2L", "qwen2.5-0.5b-shape", 2}} {
		b.Run(c.name, func(b *testing.B) {
			torch.BoundHeap()
			tr, adam := benchTrainer(b, c.preset, c.layers)
			vocab := tr.Model.Config.VocabSize
			rng := rand.New(rand.NewPCG(3, 3))
			var samples []Sample
			for range 4 {
				prompt := benchSamples(rng, 1, 128, 0, vocab)[0].Context
				for _, s := range benchSamples(rng, 8, 32, 64, vocab) {
					s.Context = append(append([]int64{}, prompt...), s.Context...)
					samples = append(samples, s)
				}
			}
			tokens := 0
			for _, s := range samples {
				tokens += s.Len()
			}
			best := map[bool]time.Duration{}
			for b.Loop() {
				for _, share := range []bool{false, true} {
					tr.SharePrefixes = share
					t0 := time.Now()
					miniBatch(b, tr, adam, samples, 0)
					if d := time.Since(t0); best[share] == 0 || d < best[share] {
						best[share] = d
					}
				}
			}
			b.ReportMetric(float64(tokens)/best[false].Seconds(), "unshared-tokens/s")
			b.ReportMetric(float64(tokens)/best[true].Seconds(), "shared-tokens/s")
			b.ReportMetric(best[false].Seconds()/best[true].Seconds(), "unshared/shared")
		})
	}
}

package update

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mempo/mempo/model/qwen2"
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

// benchTrainer builds a preset with trainable weights; layers > 0 truncates it (the
// 0.5B-shaped preset keeps Qwen2.5-0.5B's widths and vocabulary with fewer layers).
func benchTrainer(b *testing.B, preset string, layers int) (train.PPOStep, *train.AdamW) {
	cfg, err := qwen2.Preset(preset, 0)
	if err != nil {
		b.Fatal(err)
	}
	if layers > 0 {
		cfg.NumLayers, cfg.MaxWindowLayers = layers, layers
	}
	m, err := qwen2.New(cfg, qwen2.Options{})
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

// BenchmarkUpdateTiny measures forward+backward throughput of the update on the tiny
// preset: 16 turns of 192 context and 64 response tokens, one pass.
func BenchmarkUpdateTiny(b *testing.B) { benchUpdate(b, "tiny", 0, 16) }

// BenchmarkUpdate05BShape2L is the same on Qwen2.5-0.5B's widths and 151936-token
// vocabulary with two layers and 2 turns per mini-batch (the head dominates).
func BenchmarkUpdate05BShape2L(b *testing.B) { benchUpdate(b, "qwen2.5-0.5b-shape", 2, 2) }

func benchUpdate(b *testing.B, preset string, layers, turns int) {
	tr, adam := benchTrainer(b, preset, layers)
	samples := benchSamples(rand.New(rand.NewPCG(1, 1)), turns, 192, 64, tr.Model.Config.VocabSize)
	start := time.Now()
	n := 0
	for b.Loop() {
		miniBatch(b, tr, adam, samples, 0)
		n++
	}
	b.ReportMetric(float64(n*turns*64)/time.Since(start).Seconds(), "resp_tokens/s")
	b.ReportMetric(float64(n*turns*256)/time.Since(start).Seconds(), "tokens/s")
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

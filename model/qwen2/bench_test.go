package qwen2

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// benchModel builds a randomly initialised preset; layers > 0 overrides the depth.
func benchModel(b *testing.B, preset string, layers int) *Model {
	c, err := Preset(preset, 0)
	if err != nil {
		b.Fatal(err)
	}
	if layers > 0 {
		c.NumLayers = layers
	}
	return newTestModel(b, c, Options{})
}

// gemmFLOPS measures libtorch float32 matmul throughput on this machine (1024³),
// the denominator of the "fraction of GEMM" figures.
func gemmFLOPS() float64 {
	const n = 1024
	a := torch.RawZeros([]int64{n, n}, gotch.Float, gotch.CPU)
	defer a.Free()
	run := func() { a.Matmul(a).Free() }
	run()
	start := time.Now()
	reps := 0
	for time.Since(start) < 300*time.Millisecond {
		run()
		reps++
	}
	return 2 * n * n * n * float64(reps) / time.Since(start).Seconds()
}

// benchForward scores batch × seq tokens per iteration through the full model.
func benchForward(b *testing.B, m *Model, batch, seq int) {
	rng := rand.New(rand.NewPCG(1, 1))
	rows := make([][]int64, batch)
	for i := range rows {
		rows[i] = randomTokens(rng, seq, m.Config.VocabSize)
	}
	bt := NewBatch(rows, make([]int, batch), nil, 0)
	ids, pos, mask := m.tensors(bt)
	defer torch.Drop(ids, pos, mask)
	flops := gemmFLOPS()
	b.ResetTimer()
	for b.Loop() {
		l := m.Forward(ids, pos, mask, nil)
		l.MustDrop()
	}
	tokPerS := float64(batch*seq*b.N) / b.Elapsed().Seconds()
	b.ReportMetric(tokPerS, "tokens/s")
	// A forward pass costs about 2 FLOPs per parameter per token.
	b.ReportMetric(tokPerS*2*float64(m.Config.NumParams())/flops, "gemm-fraction")
}

func BenchmarkForwardTiny(b *testing.B) { benchForward(b, benchModel(b, "tiny", 0), 8, 128) }
func BenchmarkForward05BShape2L(b *testing.B) {
	benchForward(b, benchModel(b, "qwen2.5-0.5b-shape", 2), 1, 128)
}

// Measured on the 2-core CI machine (AMD EPYC, load 0.7-1.0 from other jobs),
// `build/go.sh test -run '^$' -bench 'Decode|ForwardTiny|LogProbsTiny' -benchtime 4x
// ./model/qwen2/`, before → after the decode rewrite (raw handles instead of
// ts.New, fused q/k/v and gate/up GEMMs, keys read once per kv head, an in-place
// pass without autograd, a bucket-sorting sampler run on every core):
//
//	                        OMP_NUM_THREADS=1          default (2 threads)
//	DecodeTiny16 tokens/s   719 → 1778                 695 → 1890 (2027 at load 0.4)
//	  decode-tokens/s       816 → 2377                 749 → 2253
//	  gemm-fraction         0.18 → 0.43                0.09 → 0.23
//	DecodeTiny tokens/s     543 → 1364                 493 → 1264
//	ForwardTiny tokens/s    7891 → 8979 (0.76 GEMM)    12020 → 14321 (0.60 GEMM)
//	LogProbsTiny tokens/s   8837 → 10071               13463 → 16737
//
// libtorch's GEMM reached 95 GFLOP/s on one thread and 169 on two (model/torch
// BenchmarkGEMM). A decode step of batch 16 is about 128 MFLOP of small GEMMs
// (M = 16) that stream 16 MB of float32 weights plus the KV cache from memory, so
// it runs at about 20% of the GEMM rate; prefill runs at 60-75%. Two threads help
// the prefill and hurt small GEMMs when the other core is busy, which is why the
// thread count is the caller's choice (torch.SetNumThreads or OMP_NUM_THREADS).

// BenchmarkDecodeTiny generates 32 tokens for 8 prompts of 64 tokens per iteration.
func BenchmarkDecodeTiny(b *testing.B) { benchDecode(b, 8) }

// BenchmarkDecodeTiny16 is BenchmarkDecodeTiny at batch 16, the demo's rollout batch.
func BenchmarkDecodeTiny16(b *testing.B) { benchDecode(b, 16) }

// benchDecode generates 32 tokens (T=1, top-p 0.9) for batch prompts of 64 tokens
// per iteration. It reports generated tokens/s end to end, prefill-ms (one
// Generate of a single token: the prompts' forward pass, which the end-to-end
// figure includes) and decode-tokens/s (generated tokens after the first over the
// time after the prefill), and gemm-fraction: every token the model processes,
// prompt or generated, at 2 FLOPs per parameter, as a fraction of libtorch's GEMM
// rate.
func benchDecode(b *testing.B, batch int) {
	m := benchModel(b, "tiny", 0)
	rng := rand.New(rand.NewPCG(2, 2))
	var reqs []Request
	for i := range batch {
		reqs = append(reqs, Request{Prompt: randomTokens(rng, 64, m.Config.VocabSize), Seed: uint64(i)})
	}
	generate := func(n int) int {
		out, err := m.Generate(reqs, sample.Config{Temperature: 1, TopP: 0.9, MaxNewTokens: n})
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for _, c := range out {
			got += len(c.Tokens)
		}
		return got
	}
	flops := gemmFLOPS()
	var prefill time.Duration
	for i := range 3 {
		start := time.Now()
		generate(1)
		if d := time.Since(start); i == 0 || d < prefill {
			prefill = d
		}
	}
	n := 0
	for b.Loop() {
		n += generate(32)
	}
	el := b.Elapsed().Seconds()
	b.ReportMetric(float64(n)/el, "tokens/s")
	b.ReportMetric(float64(prefill.Milliseconds()), "prefill-ms")
	b.ReportMetric(float64(n-b.N*batch)/(el-float64(b.N)*prefill.Seconds()), "decode-tokens/s")
	processed := float64(n + b.N*batch*64)
	b.ReportMetric(processed/el*2*float64(m.Config.NumParams())/flops, "gemm-fraction")
}

// BenchmarkLogProbsTiny scores 16 pairs of 64 context and 64 response tokens per
// iteration, with entropy, as the log-prob stage does.
func BenchmarkLogProbsTiny(b *testing.B) {
	m := benchModel(b, "tiny", 0)
	rng := rand.New(rand.NewPCG(3, 3))
	var pairs []Pair
	for range 16 {
		pairs = append(pairs, Pair{Context: randomTokens(rng, 64, m.Config.VocabSize), Response: randomTokens(rng, 64, m.Config.VocabSize)})
	}
	n := 0
	for b.Loop() {
		if _, err := m.LogProbs(pairs, ScoreConfig{Entropy: true}); err != nil {
			b.Fatal(err)
		}
		n += 16 * 128
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
}

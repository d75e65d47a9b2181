package qwen2

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mempo/mempo/stages/qwen2/sample"
	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
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
	a := zeros([]int64{n, n}, gotch.Float, gotch.CPU)
	defer a.MustDrop()
	run := func() {
		o := call(func(o *lib.Ctensor) { lib.AtgMatmul(o, c(a), c(a)) })
		o.MustDrop()
	}
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
	defer drop(ids, pos, mask)
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

// BenchmarkDecodeTiny generates 32 tokens for 8 prompts of 64 tokens per iteration.
func BenchmarkDecodeTiny(b *testing.B) {
	m := benchModel(b, "tiny", 0)
	rng := rand.New(rand.NewPCG(2, 2))
	var reqs []Request
	for i := range 8 {
		reqs = append(reqs, Request{Prompt: randomTokens(rng, 64, m.Config.VocabSize), Seed: uint64(i)})
	}
	cfg := sample.Config{Temperature: 1, TopP: 0.9, MaxNewTokens: 32}
	n := 0
	for b.Loop() {
		out, err := m.Generate(reqs, cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range out {
			n += len(c.Tokens)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
}

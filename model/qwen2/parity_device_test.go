package qwen2

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// The device parity tests run the same randomly initialised model (Init draws its
// values on the host, so they do not depend on the device) on the CPU and on the device
// MEMPO_TEST_DEVICE names, in float32 and in bfloat16 on both sides, and compare what
// each computes. build/gpu_check runs them on a GPU (MEMPO_TEST_DEVICE=cuda); with
// MEMPO_TEST_DEVICE=cpu they compare the CPU with itself (every difference 0), which
// exercises them anywhere; unset, they skip.
//
// The tolerances are first estimates, to be revised from the differences these tests
// log on a GPU: float32 differs only in the order of accumulation (cuBLAS's against
// MKL's, TF32 off as libtorch defaults), bfloat16 in the rounding of every
// intermediate to 8 significant bits (about 0.4%), so that a logit near 3 moves in
// steps of 0.016.

// parityShape is a model the parity tests build: a preset, optionally with fewer layers.
type parityShape struct {
	name, preset string
	layers       int
}

// parityShapes are the tiny preset and, unless -short, Qwen2.5-0.5B's widths and
// vocabulary with two layers.
func parityShapes() []parityShape {
	shapes := []parityShape{{"tiny", "tiny", 0}}
	if !testing.Short() {
		shapes = append(shapes, parityShape{"0.5b-shape-2l", "qwen2.5-0.5b-shape", 2})
	}
	return shapes
}

// parityTolerance holds the tolerances of one dtype. Logits and greedy logit gaps are
// in units of the reference logits' scale, max(1, max |logit|); log-probs and
// entropies are absolute.
type parityTolerance struct {
	logits, logprobs, gap torchtest.Tolerance
}

var parityTolerances = map[string]parityTolerance{
	"float32": {
		logits:   torchtest.Tolerance{Max: 1e-4, Mean: 1e-5},
		logprobs: torchtest.Tolerance{Max: 2e-4, Mean: 2e-5},
		gap:      torchtest.Tolerance{Max: 1e-4, Mean: 1e-5},
	},
	"bfloat16": {
		logits:   torchtest.Tolerance{Max: 0.05, Mean: 0.005},
		logprobs: torchtest.Tolerance{Max: 0.1, Mean: 0.01},
		gap:      torchtest.Tolerance{Max: 0.05, Mean: 0.005},
	},
}

// TestDeviceParity compares, per shape and dtype, the logits of a right-padded batch,
// the log-probs and entropies of LogProbs, the log-probs of PrefixLogProbs (the
// log-prob stage's path), and greedy generation; and the logits and log-probs again
// with the device's multi-token passes through libtorch's fused attention
// (Options.Attention sdpa) against the CPU's materialised attention.
func TestDeviceParity(t *testing.T) {
	dev := torchtest.ParityDevice(t)
	for _, sh := range parityShapes() {
		for _, dtype := range []string{"float32", "bfloat16"} {
			t.Run(sh.name+"/"+dtype, func(t *testing.T) {
				c, err := Preset(sh.preset, 0)
				if err != nil {
					t.Fatal(err)
				}
				if sh.layers > 0 {
					c.NumLayers, c.MaxWindowLayers = sh.layers, sh.layers
				}
				ref := newTestModel(t, c, Options{Device: "cpu", DType: dtype})
				got := newTestModel(t, c, Options{Device: dev, DType: dtype})
				tol := parityTolerances[dtype]
				t.Run("logits", func(t *testing.T) { parityLogits(t, ref, got, tol) })
				t.Run("logprobs", func(t *testing.T) { parityLogProbs(t, ref, got, tol) })
				t.Run("greedy", func(t *testing.T) { parityGreedy(t, ref, got, tol) })
				t.Run("past", func(t *testing.T) { parityPast(t, got, dtype, tol) })
				t.Run("sdpa", func(t *testing.T) {
					withAttention(t, got, "sdpa", func() {
						parityLogits(t, ref, got, tol)
						parityLogProbs(t, ref, got, tol)
					})
				})
			})
		}
	}
}

// parityLogits compares the logits of 4 rows of 25 to 48 random tokens (seed 11), one
// right-padded batch, at every real position.
func parityLogits(t *testing.T, ref, got *Model, tol parityTolerance) {
	rng := rand.New(rand.NewPCG(11, 11))
	var rows [][]int64
	for _, n := range []int{40, 33, 48, 25} {
		rows = append(rows, torchtest.RandomTokens(rng, n, ref.Config.VocabSize))
	}
	want, g := batchLogits(ref, rows), batchLogits(got, rows)
	scale := 1.0
	for _, v := range want {
		scale = max(scale, float64(v), -float64(v))
	}
	torchtest.CheckDiff(t, "logits", torchtest.Diff32(g, want), scale, tol.logits)
}

// batchLogits runs rows as one right-padded batch and returns the logits of the real
// positions, row after row.
func batchLogits(m *Model, rows [][]int64) []float32 {
	b := NewBatch(rows, make([]int, len(rows)), nil, 0)
	ids, pos, mask := m.tensors(b)
	logits := m.Forward(ids, pos, mask, nil)
	flat := floats(logits)
	torch.Drop(ids, pos, mask, logits)
	v := m.Config.VocabSize
	var out []float32
	for r, row := range rows {
		out = append(out, flat[r*b.Width*v:(r*b.Width+len(row))*v]...)
	}
	return out
}

// parityPairs is two GRPO-like groups (seed 12): each of four samples extends its
// group's 24-token prompt by 0 to 8 tokens and has a response of 12 to 20 tokens.
func parityPairs(vocab int) []Pair {
	rng := rand.New(rand.NewPCG(12, 12))
	var pairs []Pair
	for range 2 {
		prompt := torchtest.RandomTokens(rng, 24, vocab)
		for range 4 {
			ctx := append(slices.Clone(prompt), torchtest.RandomTokens(rng, rng.IntN(9), vocab)...)
			pairs = append(pairs, Pair{Context: ctx, Response: torchtest.RandomTokens(rng, 12+rng.IntN(9), vocab)})
		}
	}
	return pairs
}

// parityLogProbs compares LogProbs (with entropy) and PrefixLogProbs.
func parityLogProbs(t *testing.T, ref, got *Model, tol parityTolerance) {
	pairs := parityPairs(ref.Config.VocabSize)
	cfg := ScoreConfig{Entropy: true}
	want, err := ref.LogProbs(pairs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := got.LogProbs(pairs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	torchtest.CheckDiff(t, "LogProbs log-probs", torchtest.Diff32(scoredValues(g, false), scoredValues(want, false)), 1, tol.logprobs)
	torchtest.CheckDiff(t, "LogProbs entropies", torchtest.Diff32(scoredValues(g, true), scoredValues(want, true)), 1, tol.logprobs)

	want, err = ref.PrefixLogProbs(pairs, ScoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g, err = got.PrefixLogProbs(pairs, ScoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	torchtest.CheckDiff(t, "PrefixLogProbs log-probs", torchtest.Diff32(scoredValues(g, false), scoredValues(want, false)), 1, tol.logprobs)
}

// scoredValues concatenates the log-probs (or the entropies) of every pair.
func scoredValues(s []Scored, entropy bool) []float32 {
	var out []float32
	for _, x := range s {
		if entropy {
			out = append(out, x.Entropy...)
		} else {
			out = append(out, x.LogProbs...)
		}
	}
	return out
}

// parityGreedy generates 16 greedy tokens for 4 prompts of 12 to 20 tokens (seed 13)
// on the device and checks them against the CPU teacher-forced on the device's
// tokens: each token's CPU logit is within the tolerance of the CPU's largest (a tie
// to the last bits may pick either token, so equal sequences are not required), and
// the log-probs Generate reports match the CPU's LogProbs of the same tokens. How
// many rows the CPU's own greedy run reproduces is logged.
func parityGreedy(t *testing.T, ref, got *Model, tol parityTolerance) {
	rng := rand.New(rand.NewPCG(13, 13))
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{Prompt: torchtest.RandomTokens(rng, 12+rng.IntN(9), ref.Config.VocabSize), Seed: uint64(i)})
	}
	cfg := sample.Config{MaxNewTokens: 16}
	gen, err := got.Generate(reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantGen, err := ref.Generate(reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var gaps, zeros, scores, pairsLP []float64
	scale, same := 1.0, 0
	var pairs []Pair
	for i, r := range reqs {
		toks := gen[i].Tokens
		if slices.Equal(toks, wantGen[i].Tokens) {
			same++
		}
		if len(toks) == 0 {
			t.Fatalf("request %d: no tokens generated", i)
		}
		logits := fullLogits(ref, append(slices.Clone(r.Prompt), toks...))
		for j, tok := range toks {
			row := logits[len(r.Prompt)-1+j]
			mx := slices.Max(row)
			scale = max(scale, float64(mx), -float64(slices.Min(row)))
			gaps = append(gaps, float64(mx-row[tok]))
			zeros = append(zeros, 0)
		}
		pairs = append(pairs, Pair{Context: r.Prompt, Response: toks})
		for _, v := range gen[i].LogProbs {
			scores = append(scores, float64(v))
		}
	}
	want, err := ref.LogProbs(pairs, ScoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range want {
		for _, v := range s.LogProbs {
			pairsLP = append(pairsLP, float64(v))
		}
	}
	t.Logf("parity %s greedy: %d of %d rows equal to the CPU's own greedy tokens", t.Name(), same, len(reqs))
	torchtest.CheckDiff(t, "greedy CPU logit gap", torchtest.Diff64(gaps, zeros), scale, tol.gap)
	torchtest.CheckDiff(t, "greedy log-probs", torchtest.Diff64(scores, pairsLP), 1, tol.logprobs)
}

// parityPast runs a second turn of 3 greedy sequences on the device from the first
// turn's Pasts and from the whole prompts: each Past is in host memory, and the
// completions agree (tokens identical in float32; log-probs of the tokens both share
// within the log-prob tolerance).
func parityPast(t *testing.T, m *Model, dtype string, tol parityTolerance) {
	rng := rand.New(rand.NewPCG(17, 17))
	cfg := sample.Config{MaxNewTokens: 8}
	var prompts [][]int64
	for i := range 3 {
		prompts = append(prompts, torchtest.RandomTokens(rng, 20+5*i, m.Config.VocabSize))
	}
	whole, carried := secondTurns(t, m, rng, prompts, 5, cfg)
	for i, r := range carried {
		if dev := r.Past.cache.layers[0].k.Device(); dev.IsCuda() {
			t.Errorf("request %d: Past on %v, want the host", i, dev)
		}
	}
	want, err := m.Generate(whole, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Generate(carried, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if dtype == "float32" && !slices.Equal(want[i].Tokens, got[i].Tokens) {
			t.Errorf("request %d: tokens %v from the Past, %v from the whole prompt", i, got[i].Tokens, want[i].Tokens)
		}
		for j := 0; j < min(len(want[i].Tokens), len(got[i].Tokens)) && want[i].Tokens[j] == got[i].Tokens[j]; j++ {
			if d := math.Abs(float64(want[i].LogProbs[j] - got[i].LogProbs[j])); d > tol.logprobs.Max {
				t.Errorf("request %d token %d: log-prob %g from the Past, %g whole (|Δ| > %g)", i, j, got[i].LogProbs[j], want[i].LogProbs[j], tol.logprobs.Max)
			}
		}
	}
}

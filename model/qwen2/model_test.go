package qwen2

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
	"github.com/sugarme/gotch/ts"
)

// testConfig is a small GQA model (4 query heads over 2 kv heads) that runs in
// milliseconds on a CPU.
func testConfig() Config {
	c, err := Preset("tiny", 97)
	if err != nil {
		panic(err)
	}
	c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads = 64, 96, 2, 4, 2
	c.MaxPositions = 64
	return c
}

func newTestModel(t testing.TB, c Config, opt Options) *Model {
	t.Helper()
	m, err := New(c, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(7); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Drop)
	return m
}

// newTrainableModel is newTestModel with every weight requiring grad, as training
// holds it. The caller turns grad mode on (torch.SetGrad) on a locked OS thread:
// libtorch keeps it per thread.
func newTrainableModel(t testing.TB, c Config, opt Options) *Model {
	t.Helper()
	m := newTestModel(t, c, opt)
	for _, w := range m.Weights() {
		torch.InPlace(w.Tensor, func() error { return w.Tensor.RequiresGrad_(true) })
	}
	return m
}

// secondTurns generates a first turn of prompts, keeping each sequence's Past, and
// returns its next turn (the prompt, the completion and extra random tokens, seeded
// 100+i) twice: whole, from the whole prompt, and carried, from the Past. The Pasts
// are dropped at the end of tb.
func secondTurns(tb testing.TB, m *Model, rng *rand.Rand, prompts [][]int64, extra int, cfg sample.Config) (whole, carried []Request) {
	tb.Helper()
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = Request{Prompt: p, Seed: uint64(i), KeepPast: true}
	}
	first, err := m.Generate(reqs, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	whole, carried = make([]Request, len(reqs)), make([]Request, len(reqs))
	for i, c := range first {
		tb.Cleanup(c.Past.Drop)
		p := slices.Concat(prompts[i], c.Tokens, torchtest.RandomTokens(rng, extra, m.Config.VocabSize))
		whole[i] = Request{Prompt: p, Seed: uint64(100 + i)}
		carried[i] = Request{Prompt: p, Seed: uint64(100 + i), Past: c.Past}
	}
	return whole, carried
}

// liveTensors counts live tensors and raw handles (torch.Live).
func liveTensors() int { return torch.Live() }

// floats copies t to the host as float32.
func floats(t *ts.Tensor) []float32 { return torch.ToHost[float32](torch.Of(t)) }

// fullLogits runs one forward over each sequence alone and returns [pos][vocab].
func fullLogits(m *Model, seq []int64) [][]float32 {
	b := NewBatch([][]int64{seq}, []int{0}, nil, 0)
	ids, pos, mask := m.tensors(b)
	logits := m.Forward(ids, pos, mask, nil)
	flat := floats(logits)
	torch.Drop(ids, pos, mask, logits)
	v := m.Config.VocabSize
	out := make([][]float32, len(seq))
	for i := range out {
		out[i] = flat[i*v : (i+1)*v]
	}
	return out
}

// TestCacheMatchesFull decodes two rows of different prompt lengths together, one
// token at a time through the KV cache, and compares every step's logits with a
// full forward over each row alone. Tolerance 1e-4 absolute in float32: the two
// paths reduce in different orders (batched GEMMs, masked padding slots).
func TestCacheMatchesFull(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := [][]int64{torchtest.RandomTokens(rng, 20, 97), torchtest.RandomTokens(rng, 17, 97)}
	prompt := []int{5, 9}
	want := [][][]float32{fullLogits(m, seqs[0]), fullLogits(m, seqs[1])}
	base := liveTensors()

	cache := m.NewCache(2, 40)
	defer cache.Drop()
	b := NewBatch([][]int64{seqs[0][:prompt[0]], seqs[1][:prompt[1]]}, []int{0, 0}, nil, 0)
	valid := b.Valid
	ids, pos, mask := m.tensors(b)
	logits := m.Forward(ids, pos, mask, cache)
	got := floats(logits)
	torch.Drop(ids, pos, mask, logits)
	v := m.Config.VocabSize
	for r := range 2 {
		for j := 0; j < prompt[r]; j++ {
			row := got[(r*b.Width+j)*v : (r*b.Width+j+1)*v]
			if d := torchtest.MaxAbsDiff(row, want[r][j]); d > 1e-4 {
				t.Errorf("prefill row %d pos %d: max |Δlogit| = %g, want <= 1e-4", r, j, d)
			}
		}
	}
	n := [2]int{prompt[0], prompt[1]}
	for step := 0; step < 8; step++ {
		toks := [][]int64{{seqs[0][n[0]]}, {seqs[1][n[1]]}}
		b := NewBatch(toks, []int{n[0], n[1]}, valid, cache.Len())
		valid = b.Valid
		ids, pos, mask := m.tensors(b)
		logits := m.Forward(ids, pos, mask, cache)
		got := floats(logits)
		torch.Drop(ids, pos, mask, logits)
		for r := range 2 {
			if d := torchtest.MaxAbsDiff(got[r*v:(r+1)*v], want[r][n[r]]); d > 1e-4 {
				t.Errorf("step %d row %d pos %d: max |Δlogit| = %g, want <= 1e-4", step, r, n[r], d)
			}
			n[r]++
		}
	}
	if got := liveTensors(); got != base+len(cache.layers)*2 {
		t.Errorf("live tensors = %d, want %d (baseline + cache)", got, base+len(cache.layers)*2)
	}
}

func TestForwardShapes(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	b := NewBatch([][]int64{{1, 2, 3}, {4}}, []int{0, 0}, nil, 0)
	ids, pos, mask := m.tensors(b)
	defer torch.Drop(ids, pos, mask)
	logits := m.Forward(ids, pos, mask, nil)
	defer logits.MustDrop()
	if got, want := fmt.Sprint(logits.MustSize()), "[2 3 97]"; got != want {
		t.Errorf("Forward shape = %s, want %s", got, want)
	}
}

// TestBFloat16 runs the same weights in bfloat16: logits stay within 0.05 of
// float32 (bfloat16 keeps 8 significant bits; logits here are O(0.1)), and scoring
// and cached decoding run in bfloat16.
func TestBFloat16(t *testing.T) {
	f32 := newTestModel(t, testConfig(), Options{})
	bf := newTestModel(t, testConfig(), Options{DType: "bfloat16"})
	if bf.DType().String() == f32.DType().String() {
		t.Fatalf("bfloat16 model has dtype %v", bf.DType())
	}
	seq := torchtest.RandomTokens(rand.New(rand.NewPCG(4, 4)), 10, 97)
	want, got := fullLogits(f32, seq), fullLogits(bf, seq)
	for p := range seq {
		if d := torchtest.MaxAbsDiff(got[p], want[p]); d > 0.05 {
			t.Errorf("pos %d: max |bf16 - f32 logit| = %g, want <= 0.05", p, d)
		}
	}
	scored, err := bf.LogProbs([]Pair{{Context: seq[:4], Response: seq[4:]}}, ScoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(scored[0].LogProbs) != 6 {
		t.Errorf("bf16 LogProbs returned %d values, want 6", len(scored[0].LogProbs))
	}
	gen, err := bf.Generate([]Request{{Prompt: seq[:4]}, {Prompt: seq}}, sample.Config{MaxNewTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range gen {
		if len(c.Tokens) != 5 {
			t.Errorf("bf16 Generate request %d: %d tokens, want 5", i, len(c.Tokens))
		}
	}
}

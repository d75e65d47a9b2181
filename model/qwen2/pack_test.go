package qwen2

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mempo/mempo/model/torch/torchtest"
)

func TestPackRows(t *testing.T) {
	seqs := [][]int64{{1, 2}, {3, 4, 5, 6, 7}, {8, 9, 10}, {11}, {12, 13, 14, 15}}
	p := packRows(seqs)
	// Width 5; decreasing: 5 → row 0; 4 → row 1; 3 → row 2; 2 → row 2 (3+2); 1 → row 1.
	if p.rows != 3 || p.width != 5 {
		t.Fatalf("packRows: %d rows of %d, want 3 of 5", p.rows, p.width)
	}
	if want := []int{13, 0, 10, 9, 5}; !slices.Equal(p.slot, want) {
		t.Errorf("first slots %v, want %v", p.slot, want)
	}
	if want := []int64{12, 13, 14, 15, 11}; !slices.Equal(p.ids[5:10], want) {
		t.Errorf("row 1 ids %v, want %v", p.ids[5:10], want)
	}
	if want := []int64{0, 1, 2, 3, 0}; !slices.Equal(p.pos[5:10], want) {
		t.Errorf("row 1 positions %v, want %v (each sequence from 0)", p.pos[5:10], want)
	}
	// Row 2: [8 9 10 | 1 2]; query 4 (token 2) reads keys 3 and 4 only.
	b := p.bias()
	row := b[(2*5+4)*5 : (2*5+5)*5]
	for k, v := range row {
		if want := k >= 3; (v == 0) != want {
			t.Errorf("row 2 query 4 key %d: bias %v, want readable %v", k, v, want)
		}
	}
}

// TestLogProbTensorPacksRows scores pairs of mixed lengths in one packed forward and
// each alone: tolerance 1e-5 absolute (the GEMM shapes differ), and the pack must
// actually share rows.
func TestLogProbTensorPacksRows(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	var pairs []Pair
	var seqs [][]int64
	for range 12 {
		p := Pair{Context: torchtest.RandomTokens(rng, 1+rng.IntN(20), 97), Response: torchtest.RandomTokens(rng, rng.IntN(8), 97)}
		pairs = append(pairs, p)
		seqs = append(seqs, append(slices.Clone(p.Context), p.Response...))
	}
	if p := packRows(seqs); p.rows >= len(pairs) {
		t.Fatalf("%d pairs packed into %d rows: nothing shared a row", len(pairs), p.rows)
	}
	got, err := m.LogProbs(pairs, ScoreConfig{TokenBudget: 1 << 20, Entropy: true})
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.LogProbs(pairs, ScoreConfig{TokenBudget: 1, Entropy: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pairs {
		if d := max(torchtest.MaxAbsDiff(got[i].LogProbs, want[i].LogProbs), torchtest.MaxAbsDiff(got[i].Entropy, want[i].Entropy)); d > 1e-5 {
			t.Errorf("pair %d: max |Δ| packed vs alone = %g, want <= 1e-5", i, d)
		}
	}
}

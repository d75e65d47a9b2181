package qwen2

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mempo/mempo/model/torch/torchtest"
)

func TestBestSplit(t *testing.T) {
	tests := []struct {
		lcp   []int
		saved int
		runs  [][2]int
	}{
		{nil, 0, [][2]int{{0, 0}}},
		{[]int{0}, 0, [][2]int{{0, 0}, {1, 1}}},
		{[]int{5, 5, 5}, 15, [][2]int{{0, 3}}},
		// Two prompts of 100 tokens, 3 samples each, sharing a 10-token system prompt:
		// one group per prompt saves 2·100 + 2·100, one group over all 5·10.
		{[]int{100, 100, 10, 100, 100}, 400, [][2]int{{0, 2}, {3, 5}}},
		// Not worth a split: 5·20 against 30 + 0.
		{[]int{20, 30, 20, 20, 20}, 100, [][2]int{{0, 5}}},
	}
	for _, tt := range tests {
		saved, runs := bestSplit(tt.lcp, 0, len(tt.lcp))
		if saved != tt.saved || !slices.Equal(runs, tt.runs) {
			t.Errorf("bestSplit(%v) = %d, %v; want %d, %v", tt.lcp, saved, runs, tt.saved, tt.runs)
		}
	}
}

// TestPrefixLogProbsMatchLogProbs scores pairs that share prefixes in every way the
// grouping must handle — prompts shared by samples, contexts that are prefixes of
// others, duplicates, no shared token, empty responses — against LogProbs, pair by
// pair; tolerance 1e-5 absolute (only the GEMM shapes differ). Then it checks the
// trees PrefixTrees makes of them.
func TestPrefixLogProbsMatchLogProbs(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	var pairs []Pair
	for range 3 {
		prompt := torchtest.RandomTokens(rng, 4+rng.IntN(10), 97)
		for range 4 {
			ctx := slices.Clone(prompt)
			for turn := range 3 {
				resp := torchtest.RandomTokens(rng, rng.IntN(5), 97)
				pairs = append(pairs, Pair{Context: slices.Clone(ctx), Response: resp})
				if turn == 0 && rng.IntN(2) == 0 {
					pairs = append(pairs, pairs[len(pairs)-1]) // a duplicate
				}
				ctx = append(ctx, torchtest.RandomTokens(rng, 1+rng.IntN(6), 97)...)
			}
		}
	}
	pairs = append(pairs, Pair{Context: []int64{96}, Response: []int64{1, 2}}) // shares nothing
	rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	for _, cfg := range []ScoreConfig{{}, {TokenBudget: 30, Chunk: 3}} {
		base := liveTensors()
		got, err := m.PrefixLogProbs(pairs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if n := liveTensors(); n != base {
			t.Errorf("PrefixLogProbs(%+v) left %d live tensors, want %d", cfg, n, base)
		}
		want, err := m.LogProbs(pairs, ScoreConfig{TokenBudget: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pairs {
			if len(got[i].LogProbs) != len(pairs[i].Response) {
				t.Fatalf("%+v pair %d: %d log-probs for %d response tokens", cfg, i, len(got[i].LogProbs), len(pairs[i].Response))
			}
			if d := torchtest.MaxAbsDiff(got[i].LogProbs, want[i].LogProbs); d > 1e-5 {
				t.Errorf("%+v pair %d: max |Δlogprob| shared vs alone = %g, want <= 1e-5", cfg, i, d)
			}
		}
	}
	// Each sample's turns extend one another, so its contexts are one trunk's prefixes:
	// one tree per sample (the bare prompt joins one of them), and one for the pair that
	// shares nothing.
	trees, members := PrefixTrees(pairs)
	if len(trees) != 3*4+1 {
		t.Errorf("%d trees for 3 prompts × 4 samples and a pair that shares nothing, want 13", len(trees))
	}
	for i, tr := range trees {
		for b, br := range tr.Branches {
			p := pairs[members[i][b]]
			if !slices.Equal(tr.Trunk[:br.Prefix], p.Context) || !slices.Equal(br.IDs, p.Response) || br.From != 0 {
				t.Errorf("tree %d branch %d: not pair %d's response after its context", i, b, members[i][b])
			}
		}
	}
}

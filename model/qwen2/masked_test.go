package qwen2

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestPackMask(t *testing.T) {
	// Trunk a b c; branch x y after prefix 2 scoring from 0; branch z after prefix 3
	// scoring nothing; padded to the width of a second, wider tree.
	trees := []Tree{
		{Trunk: []int64{1, 2, 3}, Branches: []Branch{{Prefix: 2, IDs: []int64{7, 8}}, {Prefix: 3, IDs: []int64{9}, From: 1}}},
		{Trunk: []int64{1, 2, 3, 4, 5, 6, 7}},
	}
	p := pack(trees)
	if p.rows != 2 || p.width != 7 {
		t.Fatalf("pack: %d rows of width %d, want 2 of 7", p.rows, p.width)
	}
	if got, want := p.pos[:7], []int64{0, 1, 2, 2, 3, 3, 0}; !slices.Equal(got, want) {
		t.Errorf("positions = %v, want %v", got, want)
	}
	// Row 0 mask, one string per query: which keys it sees.
	want := []string{
		"1000000", "1100000", "1110000", // trunk: causal
		"1101000", "1101100", // branch 0: prefix 2 + itself
		"1110010", // branch 1: prefix 3 + itself
		"1000000", // padding: key 0 only
	}
	for q := range 7 {
		var b strings.Builder
		for k := range 7 {
			if p.mask[q*7+k] {
				b.WriteByte('1')
			} else {
				b.WriteByte('0')
			}
		}
		if b.String() != want[q] {
			t.Errorf("query %d sees %s, want %s", q, b.String(), want[q])
		}
	}
	// Branch 0 token 0 is predicted by trunk position 1, token 1 by its own token 0.
	if got, want := p.at, []int64{1, 3}; !slices.Equal(got, want) {
		t.Errorf("predicting positions = %v, want %v", got, want)
	}
	if got, want := p.target, []int64{7, 8}; !slices.Equal(got, want) {
		t.Errorf("targets = %v, want %v", got, want)
	}
}

// TestBranchLogProbsMatchPairs scores branches packed into trees, for several token
// budgets and forward chunkings (one slot at a time up to one forward per row), and the
// same continuations as separate (prefix, branch) pairs; tolerance 1e-5 absolute: the
// masked keys contribute exact zeros, only the GEMM shapes differ.
func TestBranchLogProbsMatchPairs(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	var trees []Tree
	for range 4 {
		tr := Tree{Trunk: randomTokens(rng, 5+rng.IntN(20), 97)}
		for range 1 + rng.IntN(4) {
			ids := randomTokens(rng, 1+rng.IntN(6), 97)
			tr.Branches = append(tr.Branches, Branch{Prefix: 1 + rng.IntN(len(tr.Trunk)), IDs: ids, From: rng.IntN(len(ids))})
		}
		trees = append(trees, tr)
	}
	defer func(c int) { treeChunk = c }(treeChunk)
	for _, tc := range []struct {
		cfg   ScoreConfig
		chunk int
	}{{ScoreConfig{}, 1 << 20}, {ScoreConfig{Chunk: 3, TokenBudget: 40}, 7}, {ScoreConfig{TokenBudget: 1}, 1}, {ScoreConfig{}, 256}} {
		cfg := tc.cfg
		treeChunk = tc.chunk
		base := liveTensors()
		got, err := m.BranchLogProbs(trees, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if n := liveTensors(); n != base {
			t.Errorf("BranchLogProbs(%+v) left %d live tensors, want %d", cfg, n, base)
		}
		for i, tr := range trees {
			for b, br := range tr.Branches {
				pair := Pair{Context: tr.Trunk[:br.Prefix], Response: br.IDs}
				want, err := m.LogProbs([]Pair{pair}, ScoreConfig{})
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(got[i][b], want[0].LogProbs[br.From:]); d > 1e-5 {
					t.Errorf("%+v chunk %d tree %d branch %d: max |Δlogprob| packed vs alone = %g, want <= 1e-5", cfg, tc.chunk, i, b, d)
				}
			}
		}
	}
}

func TestBranchLogProbsErrors(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	tests := []struct {
		name string
		tree Tree
		want string
	}{
		{"empty trunk", Tree{Branches: []Branch{{Prefix: 1, IDs: []int64{1}}}}, "empty trunk"},
		{"prefix past trunk", Tree{Trunk: []int64{1, 2}, Branches: []Branch{{Prefix: 3, IDs: []int64{1}}}}, "prefix 3 outside"},
		{"zero prefix", Tree{Trunk: []int64{1, 2}, Branches: []Branch{{Prefix: 0, IDs: []int64{1}}}}, "prefix 0 outside"},
		{"from past branch", Tree{Trunk: []int64{1}, Branches: []Branch{{Prefix: 1, IDs: []int64{1}, From: 2}}}, "from 2"},
		{"too long", Tree{Trunk: make([]int64, 60), Branches: []Branch{{Prefix: 60, IDs: make([]int64, 5)}}}, "max_position_embeddings 64"},
		{"outside vocab", Tree{Trunk: []int64{1}, Branches: []Branch{{Prefix: 1, IDs: []int64{97}}}}, "vocab mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.BranchLogProbs([]Tree{{Trunk: []int64{1}}, tt.tree}, ScoreConfig{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "tree 1") {
				t.Errorf("BranchLogProbs() = %v, want an error naming tree 1 and %q", err, tt.want)
			}
		})
	}
}

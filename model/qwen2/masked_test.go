package qwen2

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

func TestBranchBatches(t *testing.T) {
	var brs []treeBranch
	for i, n := range [][2]int{{10, 3}, {10, 5}, {4, 1}, {10, 8}, {2, 2}} { // {past, tokens}
		brs = append(brs, treeBranch{Branch: Branch{IDs: make([]int64, n[1])}, out: i, past: n[0]})
	}
	// Longest first, rows × (past + longest) <= 40.
	var got [][]int
	for _, b := range branchBatches(brs, 40) {
		var outs []int
		for _, x := range b {
			outs = append(outs, x.out)
		}
		got = append(got, outs)
	}
	want := [][]int{{3, 1}, {0, 2, 4}} // 2×18 (a third would be 3×18), 3×13
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("branchBatches = %v, want %v", got, want)
	}
	if got := branchBatches(brs[3:4], 5); len(got) != 1 || len(got[0]) != 1 {
		t.Errorf("a branch over the budget: %d batches, want one of its own", len(got))
	}
}

// TestBranchLogProbsMatchPairs scores branches packed into trees, for several token
// budgets and forward chunkings (one slot at a time up to one forward per row), and the
// same continuations as separate (prefix, branch) pairs; tolerance 1e-5 absolute: the
// masked keys contribute exact zeros, only the GEMM shapes differ. Four trunks share a
// 12-token root (one of them is the root alone, so it continues nothing) and the others
// share nothing, so batches mix trunks that continue a shared root with trunks that run
// whole, and branches start inside and beyond the root. Some branches repeat others.
func TestBranchLogProbsMatchPairs(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	root := torchtest.RandomTokens(rng, 12, 97)
	var trees []Tree
	for i := range 8 {
		tr := Tree{Trunk: torchtest.RandomTokens(rng, 5+rng.IntN(20), 97)}
		switch {
		case i == 4:
			tr.Trunk = root
		case i > 4:
			tr.Trunk = slices.Concat(root, tr.Trunk)
		}
		for range 1 + rng.IntN(4) {
			ids := torchtest.RandomTokens(rng, 1+rng.IntN(6), 97)
			tr.Branches = append(tr.Branches, Branch{Prefix: 1 + rng.IntN(len(tr.Trunk)), IDs: ids, From: rng.IntN(len(ids))})
		}
		trees = append(trees, tr)
	}
	// Repeats, scored once (distinctTrees): tree 8 continues tree 5's trunk and repeats
	// its branches, and tree 2 repeats its first branch.
	rep := Tree{Trunk: slices.Concat(trees[5].Trunk, torchtest.RandomTokens(rng, 4, 97)), Branches: slices.Clone(trees[5].Branches)}
	rep.Branches = append(rep.Branches, Branch{Prefix: len(rep.Trunk), IDs: torchtest.RandomTokens(rng, 3, 97), From: 1})
	trees = append(trees, rep)
	trees[2].Branches = append(trees[2].Branches, trees[2].Branches[0])
	if runs, shared := prefixRuns([][]int64{trees[4].Trunk, trees[5].Trunk, trees[6].Trunk, trees[7].Trunk}); len(runs) != 1 || shared[0] != 12 {
		t.Fatalf("prefixRuns of the rooted trunks = %v sharing %v, want one run sharing the 12-token root", runs, shared)
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
				if d := torchtest.MaxAbsDiff(got[i][b], want[0].LogProbs[br.From:]); d > 1e-5 {
					t.Errorf("%+v chunk %d tree %d branch %d: max |Δlogprob| packed vs alone = %g, want <= 1e-5", cfg, tc.chunk, i, b, d)
				}
			}
		}
	}
}

// TestTrunkRowsLongestFirst checks the layout extend's savings rest on: the trunk
// cache's rows go by the length of the trunk part each row runs (after its shared
// root), longest first, so a chunk computes only leading rows (running).
func TestTrunkRowsLongestFirst(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	root := torchtest.RandomTokens(rng, 10, 97)
	trees := []Tree{
		{Trunk: torchtest.RandomTokens(rng, 5, 97)},                      // runs 5
		{Trunk: slices.Concat(root, torchtest.RandomTokens(rng, 3, 97))}, // runs 3 after the root
		{Trunk: torchtest.RandomTokens(rng, 9, 97)},                      // runs 9
		{Trunk: slices.Concat(root, torchtest.RandomTokens(rng, 7, 97))}, // runs 7 after the root
	}
	var brs []treeBranch
	for i, tr := range trees {
		brs = append(brs, treeBranch{Branch: Branch{Prefix: len(tr.Trunk), IDs: []int64{1, 2}, From: 1}, tree: i})
	}
	var row []int
	torch.DoNoGrad(func() {
		tc, st := m.trunks(trees, brs)
		row = tc.row
		tc.Drop()
		st.h.Free()
	})
	if want := []int{2, 3, 0, 1}; !slices.Equal(row, want) {
		t.Errorf("trunk cache rows by tree = %v, want %v (9, 7, 5, 3 tokens to run)", row, want)
	}
	rows := []extendRow{{ids: make([]int64, 9)}, {ids: make([]int64, 7)}, {ids: make([]int64, 5)}, {ids: make([]int64, 3)}}
	for s, want := range map[int]int{0: 4, 2: 4, 3: 3, 5: 2, 6: 2, 7: 1, 8: 1} {
		if got := running(rows, s); got != want {
			t.Errorf("running(rows of 9, 7, 5, 3 tokens, from %d) = %d, want %d", s, got, want)
		}
	}
}

func TestTreeOrderKeepsSharedTrunksTogether(t *testing.T) {
	root := []int64{7, 7, 7, 7}
	trees := []Tree{
		{Trunk: slices.Concat(root, []int64{1})},
		{Trunk: []int64{2, 3, 4, 5, 6, 8, 9}},
		{Trunk: slices.Concat(root, []int64{1, 2, 3})},
		{Trunk: []int64{3}},
		{Trunk: slices.Concat(root, []int64{2, 2})},
	}
	// The rooted run's longest trunk (7 tokens) ties the loner's; ties keep sorted order.
	if got, want := treeOrder(trees), []int{1, 2, 4, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("treeOrder = %v, want %v", got, want)
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

// TestDistinctTrees checks what the tree pass computes when branches repeat: a branch
// with the tokens and From of an earlier one after the same trunk prefix, in its tree
// or another, is scored by that one; the same tokens after another prefix are not a
// repeat; a trunk is cut after its last kept branch's prefix, and a tree with nothing
// left to score is dropped.
func TestDistinctTrees(t *testing.T) {
	a, b := []int64{1, 2}, []int64{3, 4}
	trees := []Tree{
		{Trunk: []int64{5, 6, 7, 8}, Branches: []Branch{{Prefix: 2, IDs: a, From: 1}, {Prefix: 3, IDs: a}, {Prefix: 2, IDs: a, From: 1}}},
		{Trunk: []int64{5, 6, 9, 9, 9}, Branches: []Branch{{Prefix: 2, IDs: a, From: 1}, {Prefix: 3, IDs: a}}},
		{Trunk: []int64{5, 6, 7}, Branches: []Branch{{Prefix: 3, IDs: a}, {Prefix: 2, IDs: a, From: 1}}},
		{Trunk: []int64{5, 6, 7}, Branches: []Branch{{Prefix: 2, IDs: a, From: 0}, {Prefix: 3, IDs: b}}},
	}
	out, orig, same := distinctTrees(trees)
	want := []Tree{
		{Trunk: []int64{5, 6, 7}, Branches: []Branch{{Prefix: 2, IDs: a, From: 1}, {Prefix: 3, IDs: a}}},
		{Trunk: []int64{5, 6, 9}, Branches: []Branch{{Prefix: 3, IDs: a}}},
		{Trunk: []int64{5, 6, 7}, Branches: []Branch{{Prefix: 2, IDs: a, From: 0}, {Prefix: 3, IDs: b}}},
	}
	equal := func(x, y Tree) bool {
		return slices.Equal(x.Trunk, y.Trunk) && slices.EqualFunc(x.Branches, y.Branches, func(p, q Branch) bool {
			return p.Prefix == q.Prefix && p.From == q.From && slices.Equal(p.IDs, q.IDs)
		})
	}
	if !slices.EqualFunc(out, want, equal) {
		t.Errorf("distinct trees = %v, want %v", out, want)
	}
	if w := []int{0, 1, 3}; !slices.Equal(orig, w) {
		t.Errorf("orig = %v, want %v", orig, w)
	}
	wantSame := [][]branchRef{{{0, 0}, {0, 1}, {0, 0}}, {{0, 0}, {1, 0}}, {{0, 1}, {0, 0}}, {{2, 0}, {2, 1}}}
	if !slices.EqualFunc(same, wantSame, slices.Equal) {
		t.Errorf("same = %v, want %v", same, wantSame)
	}
	if got, w := BranchTokens(trees), 3+2+2+3+2+3+2+2; got != w {
		t.Errorf("BranchTokens = %d, want %d (the distinct trees' trunks and branches)", got, w)
	}
}

// TestBranchTemperatures checks branches scored at their own temperature beside the
// call's: each branch equals its pair scored alone at its temperature, and a branch
// that repeats another's tokens at another temperature is not taken for its repeat.
func TestBranchTemperatures(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	var trees []Tree
	for range 4 {
		tr := Tree{Trunk: torchtest.RandomTokens(rng, 4+rng.IntN(12), 97)}
		for k := range 4 {
			ids := torchtest.RandomTokens(rng, 2+rng.IntN(5), 97)
			br := Branch{Prefix: 1 + rng.IntN(len(tr.Trunk)), IDs: ids, From: rng.IntN(len(ids))}
			if k%2 == 1 {
				br.Temperature = 1
			}
			tr.Branches = append(tr.Branches, br)
		}
		twin := tr.Branches[0]
		twin.Temperature = 2
		tr.Branches = append(tr.Branches, twin)
		trees = append(trees, tr)
	}
	const def = 0.5
	for _, cfg := range []ScoreConfig{{Temperature: def}, {Temperature: def, TokenBudget: 8}} {
		base := liveTensors()
		got, err := m.BranchLogProbs(trees, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if n := liveTensors(); n != base {
			t.Errorf("BranchLogProbs left %d live tensors, want %d", n, base)
		}
		for i, tr := range trees {
			for b, br := range tr.Branches {
				temp := cmp.Or(br.Temperature, def)
				want, err := m.LogProbs([]Pair{{Context: tr.Trunk[:br.Prefix], Response: br.IDs}}, ScoreConfig{Temperature: temp})
				if err != nil {
					t.Fatal(err)
				}
				if d := torchtest.MaxAbsDiff(got[i][b], want[0].LogProbs[br.From:]); d > 1e-5 {
					t.Errorf("budget %d tree %d branch %d at temperature %v: max |Δlogprob| = %g, want <= 1e-5", cfg.TokenBudget, i, b, temp, d)
				}
			}
			if torchtest.MaxAbsDiff(got[i][0], got[i][4]) < 1e-3 {
				t.Errorf("tree %d: the branch at temperature 2 scored as its twin at %v", i, def)
			}
		}
	}
}

package qwen2

import (
	"fmt"
	"slices"
)

// PrefixLogProbs is LogProbs without entropy for pairs whose contexts share leading
// tokens, as the turns of one prompt's samples share the prompt (and a turn's context
// often extends an earlier one's): the pairs are grouped into Trees over their shared
// prefixes (see prefixTrees) and scored with BranchLogProbs, so a shared prefix runs
// through the model once per group instead of once per pair. The values agree with
// LogProbs to float rounding: only the GEMM shapes differ.
func (m *Model) PrefixLogProbs(pairs []Pair, cfg ScoreConfig) ([]Scored, error) {
	for i, p := range pairs {
		if err := m.checkPair(p); err != nil {
			return nil, fmt.Errorf("score: pair %d: %w", i, err)
		}
	}
	trees, members := prefixTrees(pairs)
	lps, err := m.BranchLogProbs(trees, cfg)
	if err != nil {
		return nil, err
	}
	out := make([]Scored, len(pairs))
	for i := range out {
		out[i].LogProbs = []float32{}
	}
	for t, idx := range members {
		for b, i := range idx {
			out[i].LogProbs = lps[t][b]
		}
	}
	return out, nil
}

// prefixTrees groups the pairs with a response into trees: members[t][b] is the pair
// whose response branch b of tree t scores. Contexts are sorted, and the sorted run is
// split where splitting saves more trunk tokens than keeping one group over the run's
// common prefix (bestSplit); each group's trunk is its common prefix, and each branch
// holds the rest of its context and its response, scored from the response on.
func prefixTrees(pairs []Pair) (trees []Tree, members [][]int) {
	var order []int
	for i, p := range pairs {
		if len(p.Response) > 0 {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(order, func(a, b int) int { return slices.Compare(pairs[a].Context, pairs[b].Context) })
	lcp := make([]int, len(order)-1) // lcp[k]: shared prefix of sorted pairs k and k+1
	for k := range lcp {
		a, b := pairs[order[k]].Context, pairs[order[k+1]].Context
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		lcp[k] = n
	}
	_, groups := bestSplit(lcp, 0, len(order)-1)
	for _, g := range groups {
		shared := len(pairs[order[g[0]]].Context)
		for k := g[0]; k < g[1]; k++ {
			shared = min(shared, lcp[k])
		}
		tr := Tree{Trunk: pairs[order[g[0]]].Context[:shared]}
		var idx []int
		for k := g[0]; k <= g[1]; k++ {
			p := pairs[order[k]]
			rest := p.Context[shared:]
			ids := slices.Concat(rest, p.Response)
			tr.Branches = append(tr.Branches, Branch{Prefix: shared, IDs: ids, From: len(rest)})
			idx = append(idx, order[k])
		}
		trees, members = append(trees, tr), append(members, idx)
	}
	return trees, members
}

// bestSplit partitions sorted items lo..hi (inclusive), whose neighbours share lcp[k]
// leading tokens, into runs [first, last] that each become one tree over their common
// prefix, maximising the trunk tokens saved: a run of n items over a prefix of p
// tokens computes that prefix once instead of n times, saving (n-1)·p. The run's
// common prefix is its smallest neighbour lcp; splitting there is the only split that
// can lengthen it, so the choice at each level is keep or split at that minimum.
func bestSplit(lcp []int, lo, hi int) (saved int, runs [][2]int) {
	if lo == hi {
		return 0, [][2]int{{lo, hi}}
	}
	at := lo
	for k := lo; k < hi; k++ {
		if lcp[k] < lcp[at] {
			at = k
		}
	}
	whole := (hi - lo) * lcp[at]
	left, lr := bestSplit(lcp, lo, at)
	right, rr := bestSplit(lcp, at+1, hi)
	if left+right >= whole { // ties split: shorter branches, and no run over 0 tokens
		return left + right, append(lr, rr...)
	}
	return whole, [][2]int{{lo, hi}}
}

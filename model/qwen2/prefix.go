package qwen2

import (
	"fmt"
	"slices"
)

// PrefixLogProbs is LogProbs without entropy for pairs whose contexts share leading
// tokens, as the turns of one prompt's samples share the prompt (and a turn's context
// often extends an earlier one's): the pairs are grouped into Trees over their shared
// prefixes (see PrefixTrees) and scored with BranchLogProbs, so a shared prefix runs
// through the model once per group instead of once per pair. The values agree with
// LogProbs to float rounding: only the GEMM shapes differ.
func (m *Model) PrefixLogProbs(pairs []Pair, cfg ScoreConfig) ([]Scored, error) {
	for i, p := range pairs {
		if err := m.checkPair(p); err != nil {
			return nil, fmt.Errorf("score: pair %d: %w", i, err)
		}
	}
	trees, members := PrefixTrees(pairs)
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

// PrefixTrees groups the pairs with a response into the trees PrefixLogProbs scores:
// members[t][b] is the pair whose response branch b of tree t scores. Contexts are
// sorted, and a context that is a prefix of the next one in that order joins its tree:
// each tree's trunk is the longest context of such a chain, and each of its branches is
// a response continuing the trunk where its own context ends, scored whole. So a
// context runs once however many responses continue it, and one that extends another
// (the full-context agent's turns, a turn's context after the bare prompt) reruns none
// of it. What distinct trunks share, such as the prompt of a GRPO group, BranchLogProbs
// runs once per batch (see trunks), so the trees do not split contexts into a shared
// trunk and per-pair branches, which would run as padded rows.
func PrefixTrees(pairs []Pair) (trees []Tree, members [][]int) {
	var contexts [][]int64
	var scored []int // pairs with a response, in contexts' order
	for i, p := range pairs {
		if len(p.Response) > 0 {
			contexts, scored = append(contexts, p.Context), append(scored, i)
		}
	}
	order, lcp := sortedPrefixes(contexts)
	first := 0
	for k, c := range order {
		if k < len(lcp) && lcp[k] == len(contexts[c]) {
			continue // a prefix of the next context
		}
		tr := Tree{Trunk: contexts[c]}
		var group []int
		for _, j := range order[first : k+1] {
			p := pairs[scored[j]]
			tr.Branches = append(tr.Branches, Branch{Prefix: len(p.Context), IDs: p.Response})
			group = append(group, scored[j])
		}
		trees, members = append(trees, tr), append(members, group)
		first = k + 1
	}
	return trees, members
}

// prefixRuns sorts seqs and partitions the sorted list into runs that each become one
// group over their common prefix, where splitting a run saves more shared tokens than
// keeping it (bestSplit). runs[g] lists the members of run g (indices into seqs) in
// sorted order and shared[g] is the length of their common prefix (a run of one
// shares its whole sequence).
func prefixRuns(seqs [][]int64) (runs [][]int, shared []int) {
	if len(seqs) == 0 {
		return nil, nil
	}
	order, lcp := sortedPrefixes(seqs)
	_, groups := bestSplit(lcp, 0, len(order)-1)
	for _, g := range groups {
		n := len(seqs[order[g[0]]])
		for k := g[0]; k < g[1]; k++ {
			n = min(n, lcp[k])
		}
		runs, shared = append(runs, order[g[0]:g[1]+1]), append(shared, n)
	}
	return runs, shared
}

// sortedPrefixes is the order of seqs sorted (ties in input order) and lcp[k], the
// leading tokens sorted seqs k and k+1 share.
func sortedPrefixes(seqs [][]int64) (order, lcp []int) {
	order = make([]int, len(seqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return slices.Compare(seqs[a], seqs[b]) })
	lcp = make([]int, max(len(order)-1, 0))
	for k := range lcp {
		a, b := seqs[order[k]], seqs[order[k+1]]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		lcp[k] = n
	}
	return order, lcp
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

package dataparallel

import (
	"cmp"
	"slices"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/train"
)

// Split deals items of the given costs into at most parts shares of about equal total
// cost, each share's items in their order: the costliest item first, each to the
// share with the least cost so far (the lowest such share on a tie), so shares differ
// by at most about one item's cost, where cutting the batch into contiguous runs
// leaves up to an item's cost on either side of every cut. Every share but the
// first may be empty when there are fewer items than parts; the first is not unless
// there are no items. The deal depends on the costs alone.
func Split(costs []int, parts int) [][]int {
	parts = max(parts, 1)
	order := make([]int, len(costs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(costs[b], costs[a]) })
	shares := make([][]int, parts)
	load := make([]int, parts)
	for _, i := range order {
		k := 0
		for j := range parts {
			if load[j] < load[k] {
				k = j
			}
		}
		shares[k] = append(shares[k], i)
		load[k] += costs[i]
	}
	for _, s := range shares {
		slices.Sort(s)
	}
	return shares
}

// pairCosts is each pair's tokens, what Split deals SFT's batch by.
func pairCosts(batch []qwen2.Pair) []int {
	costs := make([]int, len(batch))
	for i, e := range batch {
		costs[i] = len(e.Context) + len(e.Response)
	}
	return costs
}

// microCosts is each micro-batch's tokens, what Split deals a mini-batch's micro-batches by.
func microCosts(micros [][]*train.Sequence) []int {
	costs := make([]int, len(micros))
	for j, mi := range micros {
		for _, s := range mi {
			costs[j] += s.Len()
		}
	}
	return costs
}

// pick is items[idx[0]], items[idx[1]], …: a share (or a micro-batch) of a batch.
func pick[T any](items []T, idx []int) []T {
	out := make([]T, len(idx))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out
}

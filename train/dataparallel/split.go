package dataparallel

import (
	"cmp"
	"slices"
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

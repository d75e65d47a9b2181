package dataparallel

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		costs []int
		parts int
		want  [][]int
	}{
		{[]int{10, 10, 10, 10}, 2, [][]int{{0, 2}, {1, 3}}},
		{[]int{30, 10, 10, 10}, 2, [][]int{{0}, {1, 2, 3}}},
		{[]int{10, 10, 10, 30}, 2, [][]int{{3}, {0, 1, 2}}},
		{[]int{5, 9, 5, 4, 5, 2}, 3, [][]int{{1, 5}, {0, 4}, {2, 3}}},
		// Fewer items than parts: the leader's share is never the empty one.
		{[]int{4, 4}, 3, [][]int{{0}, {1}, nil}},
		{[]int{7}, 2, [][]int{{0}, nil}},
		{[]int{3, 3, 3}, 1, [][]int{{0, 1, 2}}},
	} {
		if got := Split(c.costs, c.parts); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%v, %d) = %v, want %v", c.costs, c.parts, got, c.want)
		}
	}
}

// TestSplitBalance checks on batches shaped like SFT's (a dozen turns of 50-500
// tokens) that every item lands in exactly one share and the shares' costs differ by
// less than the largest item's cost.
func TestSplitBalance(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		costs := make([]int, 2+rng.IntN(20))
		for i := range costs {
			costs[i] = 50 + rng.IntN(450)
		}
		parts := 2 + rng.IntN(3)
		shares := Split(costs, parts)
		var seen []int
		lo, hi := -1, 0
		for _, s := range shares {
			sum := 0
			for _, i := range s {
				sum += costs[i]
			}
			seen = append(seen, s...)
			if lo < 0 || sum < lo {
				lo = sum
			}
			hi = max(hi, sum)
		}
		slices.Sort(seen)
		all := make([]int, len(costs))
		for i := range all {
			all[i] = i
		}
		if !slices.Equal(seen, all) {
			t.Fatalf("Split(%v, %d) = %v: not every item once", costs, parts, shares)
		}
		if hi-lo > slices.Max(costs) {
			t.Errorf("Split(%v, %d): shares cost %d to %d, more than an item apart", costs, parts, lo, hi)
		}
	}
}

package dataparallel

import (
	"slices"
	"testing"
)

func TestCut(t *testing.T) {
	for _, c := range []struct {
		costs []int
		parts int
		want  []int
	}{
		{[]int{10, 10, 10, 10}, 2, []int{0, 2, 4}},
		{[]int{30, 10, 10, 10}, 2, []int{0, 1, 4}},
		{[]int{10, 10, 10, 30}, 2, []int{0, 3, 4}},
		{[]int{5, 5, 5, 5, 5, 5}, 3, []int{0, 2, 4, 6}},
		// Every run gets an item even when one item outweighs the rest.
		{[]int{100, 1, 1}, 3, []int{0, 1, 2, 3}},
		{[]int{1, 1, 100}, 3, []int{0, 1, 2, 3}},
		// Fewer items than parts: one run each.
		{[]int{4, 4}, 3, []int{0, 1, 2}},
		{[]int{7}, 2, []int{0, 1}},
		{[]int{3, 3, 3}, 1, []int{0, 3}},
	} {
		if got := cut(c.costs, c.parts); !slices.Equal(got, c.want) {
			t.Errorf("cut(%v, %d) = %v, want %v", c.costs, c.parts, got, c.want)
		}
	}
}

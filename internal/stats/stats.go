// Package stats holds small statistics shared by stage summaries.
package stats

import (
	"cmp"
	"math"
	"slices"
)

// Mean is the arithmetic mean of xs, summed left to right; NaN when xs is empty.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// AUC is the area under the ROC curve of a score that should rank pos above neg: the
// probability that a random pos value exceeds a random neg value, ties counting one
// half (the Mann-Whitney U statistic over |pos|·|neg|). It is NaN when either side is
// empty. O((n+m) log(n+m)).
func AUC(pos, neg []float64) float64 {
	if len(pos) == 0 || len(neg) == 0 {
		return math.NaN()
	}
	type v struct {
		x   float64
		pos bool
	}
	all := make([]v, 0, len(pos)+len(neg))
	for _, x := range pos {
		all = append(all, v{x, true})
	}
	for _, x := range neg {
		all = append(all, v{x, false})
	}
	slices.SortFunc(all, func(a, b v) int { return cmp.Compare(a.x, b.x) })
	// Sum of the positives' mid-ranks (1-based), ties sharing their average rank.
	rankSum := 0.0
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].x == all[i].x {
			j++
		}
		mid := float64(i+j+1) / 2
		for k := i; k < j; k++ {
			if all[k].pos {
				rankSum += mid
			}
		}
		i = j
	}
	n, m := float64(len(pos)), float64(len(neg))
	return (rankSum - n*(n+1)/2) / (n * m)
}

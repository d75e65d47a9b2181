package ppo

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Batch is one mini-batch of the plan: one optimizer step.
type Batch struct {
	Epoch, Index int   // epoch and position in it, 0-based
	Samples      []int // indices into the sample list
}

// Plan lays out the whole update before any work, so a resumed run takes the same
// steps: for each epoch, a permutation of the n samples drawn from rng, cut into
// miniBatches contiguous mini-batches of sizes differing by at most one.
func Plan(n, epochs, miniBatches int, rng *rand.Rand) ([]Batch, error) {
	if n < miniBatches {
		return nil, fmt.Errorf("--mini-batches %d with %d samples: every mini-batch needs a sample; lower --mini-batches: %w", miniBatches, n, ErrConfig)
	}
	var out []Batch
	for e := range epochs {
		perm := rng.Perm(n)
		for j := range miniBatches {
			lo, hi := j*n/miniBatches, (j+1)*n/miniBatches
			out = append(out, Batch{Epoch: e, Index: j, Samples: perm[lo:hi:hi]})
		}
	}
	return out, nil
}

// Micro splits a mini-batch (sample indices with their pass lengths) into micro-batches
// whose rows × longest row stays within budget: longest first, so padding stays small,
// ties in plan order; a sample longer than the budget gets a micro-batch of its own,
// and budget 0 keeps the mini-batch whole. The split changes only how the gradient is
// accumulated, never its value beyond float rounding.
func Micro(idx []int, length func(int) int, budget int) [][]int {
	order := slices.Clone(idx)
	if budget <= 0 {
		return [][]int{order}
	}
	slices.SortStableFunc(order, func(a, b int) int { return length(b) - length(a) })
	var out [][]int
	var cur []int
	width := 0
	for _, i := range order {
		w := max(width, length(i))
		if len(cur) > 0 && (len(cur)+1)*w > budget {
			out = append(out, cur)
			cur, w = nil, length(i)
		}
		cur = append(cur, i)
		width = w
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

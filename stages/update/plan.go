package update

import (
	"fmt"
	"math/rand/v2"
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

package sft

import (
	"github.com/mempo/mempo/model/qwen2"
)

// heldOutLoss is the mean NLL of every response token of examples under m, without
// gradients; 0 when there are none.
func heldOutLoss(m *qwen2.Model, examples []example, budget, chunk int) (float64, error) {
	if len(examples) == 0 {
		return 0, nil
	}
	pairs := make([]qwen2.Pair, len(examples))
	for i, e := range examples {
		pairs[i] = e.Pair
	}
	scored, err := m.LogProbs(pairs, qwen2.ScoreConfig{TokenBudget: budget, Chunk: chunk})
	if err != nil {
		return 0, err
	}
	var sum float64
	n := 0
	for _, s := range scored {
		for _, v := range s.LogProbs {
			sum -= float64(v)
			n++
		}
	}
	return sum / float64(n), nil
}

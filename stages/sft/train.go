package sft

import (
	"fmt"
	"math"
	"runtime"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/ppo"
	"github.com/sugarme/gotch/ts"
)

type trainer struct {
	m     *qwen2.Model
	chunk int
	// ctxWeight is Config.ContextLossWeight.
	ctxWeight float64
}

// trainable marks every weight of m as a gradient-accumulating leaf and returns them
// as the optimizer's parameters.
func trainable(m *qwen2.Model) (ps []train.Param, err error) {
	defer torch.Catch("mark weights trainable", &err)
	for _, w := range m.Weights() {
		torch.InPlace(w.Tensor, func() error { return w.Tensor.RequiresGrad_(true) })
		ps = append(ps, train.Param{Name: w.Key, T: w.Tensor})
	}
	return ps, nil
}

// backward runs one batch: the mean NLL of every response token of the batch (token
// mean, as verl's SFT trainer), backpropagated into the weights' gradients. With a
// context weight w > 0 every context token after the first also counts, with weight w:
// the objective is Σ weight·NLL / Σ weight. It returns the response tokens' mean NLL
// and their count; a non-finite loss is an error before any gradient.
func (t *trainer) backward(batch []*example) (loss float64, tokens int, err error) {
	// libtorch keeps grad mode per OS thread; pin, and make sure it is on.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if was, err := ts.GradSetEnabled(true); err == nil {
		defer ts.GradSetEnabled(was)
	}
	pairs := make([]qwen2.Pair, len(batch))
	var isResponse []float32 // per scored token: 0 in the context, 1 in the response
	for i, e := range batch {
		pairs[i] = e.pair(t.ctxWeight > 0)
		isResponse = append(isResponse, make([]float32, len(pairs[i].Response)-len(e.Response))...)
		for range e.Response {
			isResponse = append(isResponse, 1)
		}
		tokens += len(e.Response)
	}
	lp, _, err := t.m.LogProbTensor(pairs, qwen2.ScoreConfig{Chunk: t.chunk})
	if err != nil {
		return 0, 0, err
	}
	var live []*ts.Tensor
	defer func() { torch.Drop(live...) }()
	live = append(live, lp)
	defer torch.Catch(fmt.Sprintf("batch of %d turns", len(batch)), &err)
	shape := []int64{1, int64(len(isResponse))}
	row := torch.Must(lp.View(shape, false))
	resp := torch.FromHost(isResponse, shape, t.m.Device())
	live = append(live, row, resp)
	// The response mean is what the held-out loss measures, whatever the weight.
	respMean, v, err := train.AggregateTokens(row, resp, ppo.AggTokenMean, float64(tokens))
	if err != nil {
		return 0, 0, err
	}
	live = append(live, respMean)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, 0, fmt.Errorf("loss %v: %w", -v, train.ErrNonFinite)
	}
	objective := respMean
	if t.ctxWeight > 0 {
		// Weight w on a context token, 1 on a response token.
		weights := make([]float32, len(isResponse))
		var wsum float64
		for i, r := range isResponse {
			if r == 1 {
				weights[i], wsum = 1, wsum+1
			} else {
				weights[i], wsum = float32(t.ctxWeight), wsum+t.ctxWeight
			}
		}
		w := torch.FromHost(weights, shape, t.m.Device())
		weighted := torch.Must(row.Mul(w, false))
		live = append(live, w, weighted)
		if objective, _, err = train.AggregateTokens(weighted, w, ppo.AggTokenMean, wsum); err != nil {
			return 0, 0, err
		}
		live = append(live, objective)
	}
	nll := torch.Must(objective.Neg(false))
	live = append(live, nll)
	torch.Check(nll.Backward())
	return -v, tokens, nil
}

// eval is the mean NLL of every response token of examples, without gradients; 0
// when there are none.
func (t *trainer) eval(examples []example, budget int) (float64, error) {
	if len(examples) == 0 {
		return 0, nil
	}
	pairs := make([]qwen2.Pair, len(examples))
	for i, e := range examples {
		pairs[i] = qwen2.Pair{Context: e.Context, Response: e.Response}
	}
	scored, err := t.m.LogProbs(pairs, qwen2.ScoreConfig{TokenBudget: budget, Chunk: t.chunk})
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

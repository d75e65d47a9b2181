package train

import (
	"fmt"
	"math"
	"slices"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/ppo"
	"github.com/sugarme/gotch/ts"
)

// NLLStep runs the supervised (behaviour cloning) forward and backward passes on one model.
type NLLStep struct {
	Model *qwen2.Model
	Chunk int // logits chunk of the scoring pass (qwen2.ScoreConfig)
	// ContextWeight > 0 also trains on the context tokens, each with this weight.
	ContextWeight float64
	// GradCheckpoint recomputes the pass layer by layer in the backward pass
	// (qwen2.Checkpointed) instead of keeping every layer's activations.
	GradCheckpoint bool
	// SharePrefixes runs a batch as a tree pass over the prefixes its sequences share
	// (qwen2.TreeLogProbTensor), unless GradCheckpoint is set: with a context weight,
	// every turn's system prompt is computed and scored once a batch.
	SharePrefixes bool
}

// Backward runs one batch: the mean NLL of every response token of the batch (token
// mean, as verl's SFT trainer), backpropagated into the weights' gradients. With a
// context weight w > 0 every context token after the first also counts, with weight w:
// the objective is Σ weight·NLL / Σ weight. It returns the response tokens' mean NLL
// and their count; a non-finite loss is an error before any gradient. It runs on the
// torch thread (torch.Do), as PPOStep.Micro does.
func (t NLLStep) Backward(batch []qwen2.Pair) (loss float64, tokens int, err error) {
	return t.BackwardPart(batch, t.Totals(batch))
}

// Totals are what a batch's objective divides by: its response tokens and, with a
// context weight, the sum of its scored tokens' weights.
type Totals struct {
	Response int
	Weight   float64
}

// Totals sums batch's divisors in the order Backward adds them, so that BackwardPart of
// the whole batch is Backward bit for bit.
func (t NLLStep) Totals(batch []qwen2.Pair) Totals {
	var s Totals
	for _, e := range batch {
		s.Response += len(e.Response)
		if t.ContextWeight <= 0 {
			continue
		}
		for range len(scored(e, true).Response) - len(e.Response) {
			s.Weight += t.ContextWeight
		}
		for range e.Response {
			s.Weight++
		}
	}
	return s
}

// BackwardPart runs part of a batch whose totals are whole: the part's terms of the
// batch's objective, Σ weight·NLL over the part's tokens / whole's Σ weight,
// backpropagated. The parts of a batch, each run so (in other processes, say), have
// gradients and losses that add up to the batch's. It returns the part's response
// NLL divided by whole's response tokens, and the part's response tokens.
func (t NLLStep) BackwardPart(part []qwen2.Pair, whole Totals) (loss float64, tokens int, err error) {
	torch.Do(func() { loss, tokens, err = t.backward(part, whole) })
	return loss, tokens, err
}

// Pass is the shape of the pass Backward runs on batch, for PlanMemory.
func (t NLLStep) Pass(batch []qwen2.Pair) Pass {
	pairs := make([]qwen2.Pair, len(batch))
	for i, e := range batch {
		pairs[i] = scored(e, t.ContextWeight > 0)
	}
	return passOf(pairs, TreePass(t.SharePrefixes, t.GradCheckpoint), t.ContextWeight > 0)
}

func (t NLLStep) backward(batch []qwen2.Pair, whole Totals) (loss float64, tokens int, err error) {
	if whole.Response < 1 || (t.ContextWeight > 0 && !(whole.Weight > 0)) {
		return 0, 0, fmt.Errorf("nll: totals %+v: want response tokens and a positive weight: %w", whole, ErrInput)
	}
	// libtorch keeps grad mode per OS thread; make sure it is on.
	defer torch.SetGrad(torch.SetGrad(true))
	pairs := make([]qwen2.Pair, len(batch))
	var isResponse []float32 // per scored token: 0 in the context, 1 in the response
	for i, e := range batch {
		pairs[i] = scored(e, t.ContextWeight > 0)
		isResponse = append(isResponse, make([]float32, len(pairs[i].Response)-len(e.Response))...)
		for range e.Response {
			isResponse = append(isResponse, 1)
		}
		tokens += len(e.Response)
	}
	cfg := qwen2.ScoreConfig{Chunk: t.Chunk, ShareScored: t.ContextWeight > 0}
	lp, _, ck, err := scores(t.Model, pairs, cfg, t.GradCheckpoint, t.SharePrefixes)
	if err != nil {
		return 0, 0, err
	}
	defer ck.Free()
	var live []*ts.Tensor
	defer func() { torch.Drop(live...) }()
	live = append(live, lp)
	defer torch.Catch(fmt.Sprintf("batch of %d turns", len(batch)), &err)
	shape := []int64{1, int64(len(isResponse))}
	row := torch.Must(lp.View(shape, false))
	resp := torch.FromHost(isResponse, shape, t.Model.Device())
	live = append(live, row, resp)
	// The response mean is what the held-out loss measures, whatever the weight.
	respMean, v, err := AggregateTokens(row, resp, ppo.AggTokenMean, float64(whole.Response))
	if err != nil {
		return 0, 0, err
	}
	live = append(live, respMean)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, 0, fmt.Errorf("loss %v: %w", -v, ErrNonFinite)
	}
	objective := respMean
	if t.ContextWeight > 0 {
		// Weight w on a context token, 1 on a response token.
		weights := make([]float32, len(isResponse))
		for i, r := range isResponse {
			weights[i] = 1
			if r != 1 {
				weights[i] = float32(t.ContextWeight)
			}
		}
		w := torch.FromHost(weights, shape, t.Model.Device())
		weighted := torch.Must(row.Mul(w, false))
		live = append(live, w, weighted)
		if objective, _, err = AggregateTokens(weighted, w, ppo.AggTokenMean, whole.Weight); err != nil {
			return 0, 0, err
		}
		live = append(live, objective)
	}
	nll := torch.Must(objective.Neg(false))
	live = append(live, nll)
	if err := backward(nll, ck); err != nil {
		return 0, 0, err
	}
	return -v, tokens, nil
}

// scored is an example as the model scores it: the context as prefix and the response
// as scored tokens, or, withContext, only the first token as prefix so every later
// context token is scored too, ahead of the response's.
func scored(e qwen2.Pair, withContext bool) qwen2.Pair {
	if !withContext || len(e.Context) == 0 {
		return e
	}
	return qwen2.Pair{Context: e.Context[:1], Response: slices.Concat(e.Context[1:], e.Response)}
}

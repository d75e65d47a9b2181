package sft

import (
	"fmt"
	"math"
	"runtime"

	"github.com/mempo/mempo/stages/advantage"
	"github.com/mempo/mempo/stages/qwen2"
	"github.com/mempo/mempo/stages/update"
	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

type trainer struct {
	m     *qwen2.Model
	chunk int
}

// trainable marks every weight of m as a gradient-accumulating leaf and returns them
// as the optimizer's parameters.
func trainable(m *qwen2.Model) (ps []update.Param, err error) {
	defer catch("mark weights trainable", &err)
	for _, w := range m.Weights() {
		inplace(w.Tensor, func() error { return w.Tensor.RequiresGrad_(true) })
		ps = append(ps, update.Param{Name: w.Key, T: w.Tensor})
	}
	return ps, nil
}

// backward runs one batch: the mean NLL of every response token of the batch (token
// mean, as verl's SFT trainer), backpropagated into the weights' gradients. It returns
// the loss and the token count; a non-finite loss is an error before any gradient.
func (t *trainer) backward(batch []*example) (loss float64, tokens int, err error) {
	// libtorch keeps grad mode per OS thread; pin, and make sure it is on.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if was, err := ts.GradSetEnabled(true); err == nil {
		defer ts.GradSetEnabled(was)
	}
	pairs := make([]qwen2.Pair, len(batch))
	for i, e := range batch {
		pairs[i] = qwen2.Pair{Context: e.Context, Response: e.Response}
		tokens += len(e.Response)
	}
	lp, _, err := t.m.LogProbTensor(pairs, qwen2.ScoreConfig{Chunk: t.chunk})
	if err != nil {
		return 0, 0, err
	}
	var live []*ts.Tensor
	defer func() { drop(live...) }()
	live = append(live, lp)
	defer catch(fmt.Sprintf("batch of %d turns", len(batch)), &err)
	row := must(lp.View([]int64{1, int64(tokens)}, false))
	ones := must(ts.Ones([]int64{1, int64(tokens)}, gotch.Float, t.m.Device()))
	live = append(live, row, ones)
	mean, v, err := update.AggregateTokens(row, ones, advantage.AggTokenMean, float64(tokens))
	if err != nil {
		return 0, 0, err
	}
	live = append(live, mean)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, 0, fmt.Errorf("loss %v: %w", -v, update.ErrNonFinite)
	}
	nll := must(mean.Neg(false))
	live = append(live, nll)
	check(nll.Backward())
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

func must(t *ts.Tensor, err error) *ts.Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

func drop(xs ...*ts.Tensor) {
	for _, x := range xs {
		if x != nil {
			x.MustDrop()
		}
	}
}

func catch(what string, err *error) {
	if r := recover(); r != nil {
		if e, ok := r.(error); ok {
			*err = fmt.Errorf("%s: %w", what, e)
			return
		}
		*err = fmt.Errorf("%s: %v", what, r)
	}
}

// inplace runs one of gotch's generated in-place ops on t and frees the handle it
// supersedes (see stages/update/tensor.go).
func inplace(t *ts.Tensor, op func() error) {
	old := t.Ctensor()
	check(op())
	if t.Ctensor() != old {
		lib.AtFree(lib.Ctensor(old))
	}
}

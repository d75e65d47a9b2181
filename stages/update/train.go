package update

import (
	"fmt"
	"math"
	"runtime"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
	"github.com/sugarme/gotch/ts"
)

// trainer runs the forward and backward passes of the update on one model.
type trainer struct {
	m           *qwen2.Model
	obj         train.Objective
	chunk       int
	temperature float64
}

// trainable marks every weight of m as a leaf that accumulates gradients and returns
// them as the optimizer's parameters, named by their safetensors keys.
func trainable(m *qwen2.Model) (ps []train.Param, err error) {
	defer torch.Catch("mark weights trainable", &err)
	for _, w := range m.Weights() {
		torch.InPlace(w.Tensor, func() error { return w.Tensor.RequiresGrad_(true) })
		ps = append(ps, train.Param{Name: w.Key, T: w.Tensor})
	}
	return ps, nil
}

// micro runs one micro-batch of a mini-batch: the policy's log-probs and entropies of
// every response token (with gradients), the objective under the mini-batch's divisor,
// and the backward pass that adds this micro-batch's share to the gradients. A
// non-finite loss is reported before the backward pass, so no gradient sees it.
func (t *trainer) micro(batch []*Sample, divisor float64) (st train.Stats, err error) {
	// libtorch keeps grad mode per OS thread, and a no-grad scorer (qwen2.LogProbs) may
	// have left it off on whichever thread this goroutine lands on: pin and set it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if was, err := ts.GradSetEnabled(true); err == nil {
		defer ts.GradSetEnabled(was)
	}
	pairs := make([]qwen2.Pair, len(batch))
	width, n := 0, 0
	for i, s := range batch {
		pairs[i] = qwen2.Pair{Context: s.Context, Response: s.Response}
		width = max(width, len(s.Response))
		n += len(s.Response)
	}
	lp, ent, err := t.m.LogProbTensor(pairs, qwen2.ScoreConfig{Chunk: t.chunk, Entropy: true, Temperature: t.temperature})
	if err != nil {
		return st, err
	}
	var live []*ts.Tensor
	defer func() { torch.Drop(live...) }()
	live = append(live, lp, ent)
	defer torch.Catch(fmt.Sprintf("micro-batch of %d samples", len(batch)), &err)

	dev := t.m.Device()
	rows := int64(len(batch))
	// pad maps each [row, position] slot to its flat token, or to the zero appended
	// after the last one: index_select keeps the gradient of every real token.
	pad := make([]int64, 0, len(batch)*width)
	old := make([]float32, 0, cap(pad))
	ref := make([]float32, 0, cap(pad))
	adv := make([]float32, 0, cap(pad))
	mask := make([]float32, 0, cap(pad))
	off := 0
	for _, s := range batch {
		for j := range width {
			if j < len(s.Response) {
				pad = append(pad, int64(off+j))
				old, adv, mask = append(old, s.Old[j]), append(adv, s.Adv[j]), append(mask, 1)
				if s.Ref != nil {
					ref = append(ref, s.Ref[j])
				} else {
					ref = append(ref, s.Old[j])
				}
			} else {
				pad = append(pad, int64(n))
				old, ref, adv, mask = append(old, 0), append(ref, 0), append(adv, 0), append(mask, 0)
			}
		}
		off += len(s.Response)
	}
	shape := []int64{rows, int64(width)}
	idx := torch.FromHost(pad, []int64{rows * int64(width)}, dev)
	live = append(live, idx)
	logp := padded(lp, idx, shape)
	entropy := padded(ent, idx, shape)
	mb := train.Micro{
		Logp: logp, OldLogp: torch.FromHost(old, shape, dev), RefLogp: torch.FromHost(ref, shape, dev),
		Adv: torch.FromHost(adv, shape, dev), Mask: torch.FromHost(mask, shape, dev),
	}
	live = append(live, logp, entropy, mb.OldLogp, mb.RefLogp, mb.Adv, mb.Mask)

	obj := t.obj
	obj.EntropyCoef = 0 // the entropy comes from the chunked pass, not from full logits
	loss, st, err := obj.Loss(mb, divisor)
	if err != nil {
		return st, err
	}
	live = append(live, loss)
	h, hv, err := train.AggregateTokens(entropy, mb.Mask, t.obj.Agg, divisor)
	if err != nil {
		return st, err
	}
	live = append(live, h)
	st.Entropy = hv
	if t.obj.EntropyCoef != 0 {
		scaled := torch.Must(h.MulScalar(ts.FloatScalar(t.obj.EntropyCoef), false))
		total := torch.Must(loss.Sub(scaled, false))
		live = append(live, scaled, total)
		loss = total
		st.Total -= t.obj.EntropyCoef * hv
	}
	if math.IsNaN(st.Total) || math.IsInf(st.Total, 0) {
		return st, fmt.Errorf("loss %v (pg_loss %v, kl %v, entropy %v): %w", st.Total, st.Loss, st.KL, st.Entropy, train.ErrNonFinite)
	}
	torch.Check(loss.Backward())
	return st, nil
}

// padded lays the flat per-token values x: [n] out as [rows, width] through idx:
// [rows·width] (values n select the appended zero).
func padded(x, idx *ts.Tensor, shape []int64) *ts.Tensor {
	z := torch.Must(ts.Zeros([]int64{1}, x.DType(), x.MustDevice()))
	ext := torch.Must(ts.Cat([]*ts.Tensor{x, z}, 0))
	z.MustDrop()
	sel := torch.Must(ext.IndexSelect(0, idx, true))
	return torch.Must(sel.View(shape, true))
}

package train

import (
	"fmt"
	"math"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch/ts"
)

// Sequence is one response the update trains on: its context and response ids, and per
// response token the old and reference log-probs and the advantage.
type Sequence struct {
	Context  []int64
	Response []int64
	Old, Ref []float32 // per response token; Ref is nil when the KL is off
	Adv      []float32 // per response token
}

// Len is the tokens of one forward pass over the sequence.
func (s *Sequence) Len() int { return len(s.Context) + len(s.Response) }

// Pair is the sequence as the model scores it.
func (s *Sequence) Pair() qwen2.Pair { return qwen2.Pair{Context: s.Context, Response: s.Response} }

// PPOStep runs the forward and backward passes of the PPO update on one model.
type PPOStep struct {
	Model       *qwen2.Model
	Objective   Objective
	Chunk       int     // logits chunk of the scoring pass (qwen2.ScoreConfig)
	Temperature float64 // the rollout's sampling temperature, applied to the logits
	// GradCheckpoint recomputes the pass layer by layer in the backward pass
	// (qwen2.Checkpointed) instead of keeping every layer's activations.
	GradCheckpoint bool
	// SharePrefixes scores a micro-batch through a tree pass over the context prefixes
	// its sequences share (qwen2.TreeLogProbTensor), unless GradCheckpoint is set.
	SharePrefixes bool
}

// Micro runs one micro-batch of a mini-batch: the policy's log-probs and entropies of
// every response token (with gradients), the objective under the mini-batch's divisor,
// and the backward pass that adds this micro-batch's share to the gradients. A
// non-finite loss is reported before the backward pass, so no gradient sees it.
//
// It runs on the torch thread (torch.Do), so every micro-batch allocates from the
// same glibc arena and RSS stays flat across steps.
func (t PPOStep) Micro(batch []*Sequence, divisor float64) (st Stats, err error) {
	torch.Do(func() { st, err = t.micro(batch, divisor) })
	return st, err
}

// Pass is the shape of the pass Micro runs on batch, for PlanMemory.
func (t PPOStep) Pass(batch []*Sequence) Pass {
	pairs := make([]qwen2.Pair, len(batch))
	for i, s := range batch {
		pairs[i] = s.Pair()
	}
	return passOf(pairs, TreePass(t.SharePrefixes, t.GradCheckpoint), false)
}

func (t PPOStep) micro(batch []*Sequence, divisor float64) (st Stats, err error) {
	// libtorch keeps grad mode per OS thread, and a no-grad scorer (qwen2.LogProbs) may
	// have left it off on the torch thread: set it.
	defer torch.SetGrad(torch.SetGrad(true))
	pairs := make([]qwen2.Pair, len(batch))
	width, n := 0, 0
	for i, s := range batch {
		pairs[i] = s.Pair()
		width = max(width, len(s.Response))
		n += len(s.Response)
	}
	cfg := qwen2.ScoreConfig{Chunk: t.Chunk, Entropy: true, Temperature: t.Temperature}
	lp, ent, ck, err := scores(t.Model, pairs, cfg, t.GradCheckpoint, t.SharePrefixes)
	if err != nil {
		return st, err
	}
	defer ck.Free()
	var live []*ts.Tensor
	defer func() { torch.Drop(live...) }()
	live = append(live, lp, ent)
	defer torch.Catch(fmt.Sprintf("micro-batch of %d samples", len(batch)), &err)

	dev := t.Model.Device()
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
	logp := scatterPadded(lp, idx, shape)
	entropy := scatterPadded(ent, idx, shape)
	mb := Micro{
		Logp: logp, OldLogp: torch.FromHost(old, shape, dev), RefLogp: torch.FromHost(ref, shape, dev),
		Adv: torch.FromHost(adv, shape, dev), Mask: torch.FromHost(mask, shape, dev),
	}
	live = append(live, logp, entropy, mb.OldLogp, mb.RefLogp, mb.Adv, mb.Mask)

	obj := t.Objective
	obj.EntropyCoef = 0 // the entropy comes from the chunked pass, not from full logits
	loss, st, err := obj.Loss(mb, divisor)
	if err != nil {
		return st, err
	}
	live = append(live, loss)
	h, hv, err := AggregateTokens(entropy, mb.Mask, t.Objective.Agg, divisor)
	if err != nil {
		return st, err
	}
	live = append(live, h)
	st.Entropy = hv
	if t.Objective.EntropyCoef != 0 {
		scaled := torch.Must(h.MulScalar(torch.Scalar(t.Objective.EntropyCoef), false))
		total := torch.Must(loss.Sub(scaled, false))
		live = append(live, scaled, total)
		loss = total
		st.Total -= t.Objective.EntropyCoef * hv
	}
	if math.IsNaN(st.Total) || math.IsInf(st.Total, 0) {
		return st, fmt.Errorf("loss %v (pg_loss %v, kl %v, entropy %v): %w", st.Total, st.Loss, st.KL, st.Entropy, ErrNonFinite)
	}
	return st, backward(loss, ck)
}

// scores is the model's log-probs (and entropies) of pairs with gradients: through a
// checkpointed pass when checkpoint is set (ck is then not nil), else through a tree
// pass over shared context prefixes when share is.
func scores(m *qwen2.Model, pairs []qwen2.Pair, cfg qwen2.ScoreConfig, checkpoint, share bool) (lp, ent *ts.Tensor, ck *qwen2.Checkpointed, err error) {
	switch {
	case checkpoint:
		return m.LogProbTensorCheckpointed(pairs, cfg)
	case TreePass(share, checkpoint):
		lp, ent, err = m.TreeLogProbTensor(pairs, cfg)
	default:
		lp, ent, err = m.LogProbTensor(pairs, cfg)
	}
	return lp, ent, nil, err
}

// TreePass reports whether a step that shares prefixes runs a tree pass: a checkpointed
// pass recomputes its layers over plain packed rows and does not share.
func TreePass(share, checkpoint bool) bool { return share && !checkpoint }

// backward backpropagates loss into the weights' gradients: through ck's recomputation
// when the pass was checkpointed, else through the graph autograd kept.
func backward(loss *ts.Tensor, ck *qwen2.Checkpointed) error {
	if ck != nil {
		return ck.Backward(loss)
	}
	torch.Check(loss.Backward())
	return nil
}

// scatterPadded lays the flat per-token values x: [n] out as [rows, width] through idx:
// [rows·width] (values n select the appended zero).
func scatterPadded(x, idx *ts.Tensor, shape []int64) *ts.Tensor {
	z := torch.Must(ts.Zeros([]int64{1}, x.DType(), x.MustDevice()))
	ext := torch.Must(ts.Cat([]*ts.Tensor{x, z}, 0))
	z.MustDrop()
	sel := torch.Must(ext.IndexSelect(0, idx, true))
	return torch.Must(sel.View(shape, true))
}

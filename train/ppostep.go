package train

import (
	"fmt"
	"math"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/ppo"
	"github.com/sugarme/gotch/ts"
)

// The PPO update's step: the objective it minimises (Objective, its terms in loss.go)
// and the passes that compute it on a micro-batch of sequences (PPOStep).

// Objective is the PPO training loss of DESIGN.md §7:
//
//	loss = pg_loss + KLCoef·kl − EntropyCoef·entropy
//
// each term aggregated under Agg with the mini-batch's divisor.
type Objective struct {
	Clip Clip `json:"clip"`
	// KL is the estimator of the penalty to the reference; unused when KLCoef is 0.
	KL     KL      `json:"kl"`
	KLCoef float64 `json:"kl_coef"`
	// EntropyCoef weighs the entropy bonus; 0 (the default) skips the entropy, which
	// needs the full logits.
	EntropyCoef float64 `json:"entropy_coef"`
	Agg         Agg     `json:"loss_agg_mode"`
}

// DefaultObjective is verl's and the paper's setting: ε = 0.2, c = 3, k3 with β = 0.001,
// no entropy bonus, token-mean.
var DefaultObjective = Objective{
	Clip:   ppo.DefaultClip,
	KL:     ppo.KLK3,
	KLCoef: 0.001,
	Agg:    ppo.AggTokenMean,
}

// Micro is one micro-batch of response tokens, every tensor [batch, resp_len] but Logits.
type Micro struct {
	Logp    *ts.Tensor // current policy, carrying the gradient
	OldLogp *ts.Tensor // rollout policy
	RefLogp *ts.Tensor // frozen reference; needed when KLCoef != 0
	Adv     *ts.Tensor
	Mask    *ts.Tensor // 0/1, right-padded
	Logits  *ts.Tensor // [batch, resp_len, vocab]; needed when EntropyCoef != 0
}

// Stats are the metrics of a micro-batch (merged: of a mini-batch). KL, Entropy and
// Total are shares of the mini-batch value, like PolicyStats.Loss.
type Stats struct {
	PolicyStats
	KL      float64 `json:"kl"`
	Entropy float64 `json:"entropy"`
	Total   float64 `json:"loss"`
}

// Merge combines the stats of two micro-batches of one mini-batch.
func (s Stats) Merge(o Stats) Stats {
	return Stats{
		PolicyStats: s.PolicyStats.Merge(o.PolicyStats),
		KL:          s.KL + o.KL,
		Entropy:     s.Entropy + o.Entropy,
		Total:       s.Total + o.Total,
	}
}

// Validate checks the objective's settings; its errors name the flags that set them.
func (o Objective) Validate() error {
	if err := checkClip(o.Clip); err != nil {
		return err
	}
	if err := checkAgg(o.Agg, 1); err != nil {
		return err
	}
	if err := checkCoef("--kl-coef", o.KLCoef, 0); err != nil {
		return err
	}
	if o.KLCoef != 0 {
		if err := checkKL(o.KL); err != nil {
			return err
		}
	}
	return checkCoef("--entropy-coef", o.EntropyCoef, 0)
}

// MaxCoef bounds every weight and clip constant of a training loss (--kl-coef,
// --entropy-coef, --clip-high, --dual-clip, SFT's --context-loss-weight). The loss is
// computed in float32, where such a value past 3.4e38 is +Inf and a large one
// overflows the loss of the first step, found only after the model has loaded (issue
// 45). 1e6 is far beyond any useful setting (verl's defaults: clip 0.2, dual clip 3,
// KL 0.001) and keeps every term finite.
const MaxCoef = 1e6

// checkCoef refuses a loss setting v outside [lo, MaxCoef], NaN included, naming its
// flag.
func checkCoef(flag string, v, lo float64) error {
	if !(v >= lo && v <= MaxCoef) {
		return fmt.Errorf("%s %v: want a number in [%g, %g]: %w", flag, v, lo, MaxCoef, ErrConfig)
	}
	return nil
}

// Loss is the micro-batch's share of the mini-batch loss, a 0-dim tensor the caller
// backpropagates and drops, with the micro-batch's metrics. divisor comes from Divisor
// over the whole mini-batch; calling Loss and Backward on every micro-batch accumulates
// the gradient of the whole mini-batch.
func (o Objective) Loss(mb Micro, divisor float64) (*ts.Tensor, Stats, error) {
	if err := o.Validate(); err != nil {
		return nil, Stats{}, err
	}
	if mb.Logp == nil || mb.OldLogp == nil || mb.Adv == nil || mb.Mask == nil {
		return nil, Stats{}, fmt.Errorf("objective: micro-batch lacks logp, old logp, advantages or mask: %w", ErrInput)
	}
	if o.KLCoef != 0 && mb.RefLogp == nil {
		return nil, Stats{}, fmt.Errorf("objective: kl coefficient %v needs reference log-probs: %w", o.KLCoef, ErrInput)
	}
	if o.EntropyCoef != 0 && mb.Logits == nil {
		return nil, Stats{}, fmt.Errorf("objective: entropy coefficient %v needs logits: %w", o.EntropyCoef, ErrInput)
	}

	pg, ps, err := PolicyLoss(mb.Logp, mb.OldLogp, mb.Adv, mb.Mask, o.Clip, o.Agg, divisor)
	if err != nil {
		return nil, Stats{}, err
	}
	st := Stats{PolicyStats: ps}
	total := pg
	if o.KLCoef != 0 {
		kl, v, err := KLPenalty(mb.Logp, mb.RefLogp, mb.Mask, o.KL, o.Agg, divisor)
		if err != nil {
			total.MustDrop()
			return nil, Stats{}, err
		}
		st.KL = v
		total, err = addScaled(total, kl, o.KLCoef)
		if err != nil {
			return nil, Stats{}, err
		}
	}
	if o.EntropyCoef != 0 {
		h, v, err := Entropy(mb.Logits, mb.Mask, o.Agg, divisor)
		if err != nil {
			total.MustDrop()
			return nil, Stats{}, err
		}
		st.Entropy = v
		total, err = addScaled(total, h, -o.EntropyCoef)
		if err != nil {
			return nil, Stats{}, err
		}
	}
	st.Total = st.Loss + o.KLCoef*st.KL - o.EntropyCoef*st.Entropy
	return total, st, nil
}

// addScaled is acc + k·x; it drops acc and x.
func addScaled(acc, x *ts.Tensor, k float64) (out *ts.Tensor, err error) {
	defer torch.Drop(acc, x)
	defer torch.Catch("objective", &err)
	kx := torch.Must(x.MulScalar(torch.Scalar(k), false))
	defer kx.MustDrop()
	return torch.Must(acc.Add(kx, false)), nil
}

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

// Cut cuts a mini-batch into micro-batches of at most budget tokens each, as indices
// into batch (a sequence longer than the budget gets one of its own): in context order
// by the tree pass's slots when the passes share prefixes (qwen2.TreeBatches), else
// longest first (qwen2.BudgetBatches). A budget <= 0 keeps the mini-batch whole.
func (t PPOStep) Cut(batch []*Sequence, budget int) [][]int {
	idx := make([]int, len(batch))
	for i := range idx {
		idx[i] = i
	}
	if TreePass(t.SharePrefixes, t.GradCheckpoint) {
		return qwen2.TreeBatches(idx, func(i int) qwen2.Pair { return batch[i].Pair() }, budget)
	}
	return qwen2.BudgetBatches(idx, func(i int) int { return batch[i].Len() }, budget)
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

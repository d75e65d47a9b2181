// The policy loss, the KL penalty and the entropy bonus on tensors (DESIGN.md §7): the
// per-token formulas are those of the float64 host reference in train/ppo, which follows
// verl's core_algos; the tests compare the two. Every tensor an exported function
// creates and does not return is dropped before it returns.

package train

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/ppo"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// The clip range, KL estimator and aggregation mode are the host reference's, so a flag
// parsed once (ppo.ParseKL, ppo.ParseAgg) configures both.
type (
	Clip = ppo.Clip
	KL   = ppo.KL
	Agg  = ppo.Agg
)

var (
	// ErrConfig marks an invalid loss or optimizer setting.
	ErrConfig = ppo.ErrConfig
	// ErrInput marks inputs that cannot be trained on (no tokens, mismatched state).
	ErrInput = ppo.ErrInput
	// ErrNonFinite marks a NaN or infinite gradient norm; the step was not applied.
	ErrNonFinite = errors.New("non-finite gradient")
)

// Divisor is the normaliser of one mini-batch under mode, given the response length of
// each of its sequences: the total token count for token-mean, the sequence count for
// the seq-mean modes. Every micro-batch of the mini-batch passes this same divisor to
// the loss functions, which divide their micro-batch's sum by it, so the micro-batch
// losses add up to the mini-batch loss and accumulated gradients equal the gradient of
// the whole mini-batch:
//
//	token-mean:           Σ_micro Σ_tokens ℓ / N_tokens(mini-batch)
//	seq-mean-token-mean:  Σ_micro Σ_seqs (Σ_tokens ℓ / n_tokens(seq)) / N_seqs(mini-batch)
//	seq-mean-token-sum:   Σ_micro Σ_seqs (Σ_tokens ℓ) / N_seqs(mini-batch)
//
// As in the reference's Aggregate, a mini-batch without tokens, or with an empty
// sequence under seq-mean-token-mean, is an error.
func Divisor(mode Agg, lengths []int) (float64, error) {
	if len(lengths) == 0 {
		return 0, fmt.Errorf("divisor %s: no sequences in the mini-batch: %w", mode, ErrInput)
	}
	tokens := 0
	for i, n := range lengths {
		if n < 0 {
			return 0, fmt.Errorf("divisor %s: sequence %d has length %d, want >= 0: %w", mode, i, n, ErrInput)
		}
		if n == 0 && mode == ppo.AggSeqMeanTokenMean {
			return 0, fmt.Errorf("divisor %s: sequence %d has no tokens: %w", mode, i, ErrInput)
		}
		tokens += n
	}
	switch mode {
	case ppo.AggTokenMean:
		if tokens == 0 {
			return 0, fmt.Errorf("divisor %s: no tokens in the mini-batch: %w", mode, ErrInput)
		}
		return float64(tokens), nil
	case ppo.AggSeqMeanTokenMean, ppo.AggSeqMeanTokenSum:
		return float64(len(lengths)), nil
	}
	return 0, fmt.Errorf("divisor: loss aggregation %q: want token-mean, seq-mean-token-mean or seq-mean-token-sum: %w", string(mode), ErrConfig)
}

func checkAgg(mode Agg, divisor float64) error {
	switch mode {
	case ppo.AggTokenMean, ppo.AggSeqMeanTokenMean, ppo.AggSeqMeanTokenSum:
	default:
		return fmt.Errorf("--agg %q: want token-mean, seq-mean-token-mean or seq-mean-token-sum: %w", string(mode), ErrConfig)
	}
	if !(divisor > 0) || math.IsInf(divisor, 0) {
		return fmt.Errorf("loss aggregation %s: divisor %v, want a positive count from Divisor: %w", mode, divisor, ErrConfig)
	}
	return nil
}

// aggregate reduces per-token values under a boolean mask to this micro-batch's share
// of the mini-batch value (see Divisor). Masked-out positions are selected away, not
// multiplied by 0, so a non-finite value there cannot reach the sum.
//
//	x: [batch, resp_len] floating, m: [batch, resp_len] bool → []
func aggregate(x, m *ts.Tensor, mode Agg, divisor float64) *ts.Tensor {
	dt := x.DType()
	kept := torch.Must(x.WhereScalarother(m, torch.Scalar(0), false))
	var sum *ts.Tensor
	switch mode {
	case ppo.AggTokenMean, ppo.AggSeqMeanTokenSum:
		// Both sum every kept token; they differ only in the divisor.
		sum = torch.Must(kept.Sum(dt, true))
	case ppo.AggSeqMeanTokenMean:
		rows := torch.Must(kept.SumDimIntlist([]int64{1}, false, dt, true))
		cnt := torch.Must(m.SumDimIntlist([]int64{1}, false, dt, false))
		// A row without tokens has a zero sum; dividing it by 1 keeps it out of the
		// result instead of making it NaN.
		cnt1 := torch.Must(cnt.ClampMin(torch.Scalar(1), true))
		per := torch.Must(rows.Div(cnt1, true))
		cnt1.MustDrop()
		sum = torch.Must(per.Sum(dt, true))
	default:
		panic(fmt.Sprintf("aggregate: unknown mode %q", string(mode)))
	}
	return torch.Must(sum.DivScalar(torch.Scalar(divisor), true))
}

// maskedSum is Σ x over the mask, without gradient, on the host. x: [batch, resp_len].
func maskedSum(x, m *ts.Tensor) float64 {
	d := torch.Must(x.Detach(false))
	f := torch.Must(d.Totype(gotch.Double, true))
	kept := torch.Must(f.WhereScalarother(m, torch.Scalar(0), true))
	s := torch.Must(kept.Sum(gotch.Double, true))
	defer s.MustDrop()
	return torch.Item(s)
}

// PolicyStats are the policy-loss metrics of a micro-batch. Loss is the micro-batch's
// share of the mini-batch's pg_loss (the value of the returned loss tensor); the
// fractions and ppo_kl are token means over the micro-batch, whatever the aggregation,
// as in verl, and Tokens is their weight when micro-batches are merged.
type PolicyStats struct {
	Loss        float64 `json:"pg_loss"`
	ClipFrac    float64 `json:"pg_clipfrac"`
	ClipFracLow float64 `json:"pg_clipfrac_lower"`
	PPOKL       float64 `json:"ppo_kl"`
	Tokens      int     `json:"tokens"`
}

// Merge combines the stats of two micro-batches of one mini-batch: the loss shares
// add, the token means are weighted by their token counts.
func (s PolicyStats) Merge(o PolicyStats) PolicyStats {
	n := s.Tokens + o.Tokens
	mean := func(a, b float64) float64 {
		if n == 0 {
			return 0
		}
		return (a*float64(s.Tokens) + b*float64(o.Tokens)) / float64(n)
	}
	return PolicyStats{
		Loss:        s.Loss + o.Loss,
		ClipFrac:    mean(s.ClipFrac, o.ClipFrac),
		ClipFracLow: mean(s.ClipFracLow, o.ClipFracLow),
		PPOKL:       mean(s.PPOKL, o.PPOKL),
		Tokens:      n,
	}
}

func checkClip(c Clip) error {
	if !(c.Low >= 0 && c.Low < 1) {
		return fmt.Errorf("--clip-low %v: want 0 <= low < 1: %w", c.Low, ErrConfig)
	}
	if err := checkCoef("--clip-high", c.High, 0); err != nil {
		return err
	}
	// verl asserts c > 1: at c <= 1 the dual clip would cap the loss below the
	// unclipped surrogate of a ratio-1 token (arXiv 1912.09729).
	if !(c.DualC > 1 && c.DualC <= MaxCoef) {
		return fmt.Errorf("--dual-clip %v: want c in (1, %g]: %w", c.DualC, MaxCoef, ErrConfig)
	}
	return nil
}

// PolicyLoss is the PPO clipped surrogate with dual clip (arXiv 1707.06347, 1912.09729),
// per token as ppo.PolicyLoss:
//
//	ρ = exp(clamp(logp − oldLogp, −20, 20))
//	L_clip = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high));  L = min(L_clip, −A·c) where A < 0
//
// aggregated over the mask under mode with the mini-batch's divisor (see Divisor).
// It returns the loss, a 0-dim tensor carrying logp's gradient that the caller drops,
// and the micro-batch's metrics. The loss is computed in float32 (float64 when logp is
// float64) whatever the input dtypes.
//
//	logp, oldLogp, adv, mask: [batch, resp_len], right-padded; mask is 0/1 of any dtype.
//
// Padded positions must hold finite values: they are selected away in the forward pass,
// but a NaN there would still reach the gradient through exp.
func PolicyLoss(logp, oldLogp, adv, mask *ts.Tensor, c Clip, mode Agg, divisor float64) (loss *ts.Tensor, st PolicyStats, err error) {
	if err := checkClip(c); err != nil {
		return nil, PolicyStats{}, fmt.Errorf("policy loss: %w", err)
	}
	if err := checkAgg(mode, divisor); err != nil {
		return nil, PolicyStats{}, fmt.Errorf("policy loss: %w", err)
	}
	defer torch.Catch("policy loss", &err)
	sameShape("policy loss", []string{"logp", "oldLogp", "adv", "mask"}, logp, oldLogp, adv, mask)
	if logp.Dim() != 2 {
		panic(fmt.Sprintf("policy loss: logp has shape %v, want [batch, resp_len]", logp.MustSize()))
	}

	dt := computeType(logp)
	lp := torch.Must(logp.Totype(dt, false))
	old := torch.Must(oldLogp.Totype(dt, false))
	a := torch.Must(adv.Totype(dt, false))
	m := torch.Must(mask.Ne(torch.Scalar(0), false))
	defer torch.Drop(lp, old, a, m)

	diff := torch.Must(lp.Sub(old, false))
	negKL := torch.Must(diff.Clamp(torch.Scalar(-ppo.RatioClamp), torch.Scalar(ppo.RatioClamp), true))
	ratio := torch.Must(negKL.Exp(false))
	negA := torch.Must(a.Neg(false))
	l1 := torch.Must(negA.Mul(ratio, false))
	clipped := torch.Must(ratio.Clamp(torch.Scalar(1-c.Low), torch.Scalar(1+c.High), false))
	l2 := torch.Must(negA.Mul(clipped, false))
	lclip := torch.Must(l1.Maximum(l2, false))
	l3 := torch.Must(negA.MulScalar(torch.Scalar(c.DualC), false))
	dual := torch.Must(l3.Minimum(lclip, false))
	neg := torch.Must(a.Lt(torch.Scalar(0), false))
	perToken := torch.Must(dual.WhereSelf(neg, lclip, false))
	defer torch.Drop(negKL, ratio, negA, l1, clipped, l2, lclip, l3, dual, neg, perToken)

	// The events verl counts: the clipped branch won, and the dual clip capped a
	// negative-advantage token.
	clipEvent := torch.Must(l2.GtTensor(l1, false))
	dualCap := torch.Must(lclip.GtTensor(l3, false))
	dualEvent := torch.Must(dualCap.LogicalAnd(neg, true))
	defer torch.Drop(clipEvent, dualEvent)

	tokens := maskedSum(m, m)
	if tokens > 0 {
		st.ClipFrac = maskedSum(clipEvent, m) / tokens
		st.ClipFracLow = maskedSum(dualEvent, m) / tokens
		st.PPOKL = -maskedSum(negKL, m) / tokens
	}
	st.Tokens = int(tokens)
	loss = aggregate(perToken, m, mode, divisor)
	st.Loss = torch.Item(loss)
	return loss, st, nil
}

// klTokens is the per-token estimate of KL(π‖π_ref), as ppo.KL.Of:
//
//	k1 = logp − refLogp;  k2 = ½ (logp − refLogp)²
//	k3 = clamp(exp(d) − d − 1, −10, 10),  d = clamp(refLogp − logp, −20, 20)
//
//	logp, refLogp: [batch, resp_len] → [batch, resp_len]
func klTokens(logp, refLogp *ts.Tensor, kind KL) *ts.Tensor {
	switch kind {
	case ppo.KLK1:
		return torch.Must(logp.Sub(refLogp, false))
	case ppo.KLK2:
		d := torch.Must(logp.Sub(refLogp, false))
		sq := torch.Must(d.Square(true))
		return torch.Must(sq.MulScalar(torch.Scalar(0.5), true))
	case ppo.KLK3:
		diff := torch.Must(refLogp.Sub(logp, false))
		d := torch.Must(diff.Clamp(torch.Scalar(-ppo.KLDiffClamp), torch.Scalar(ppo.KLDiffClamp), true))
		e := torch.Must(d.Exp(false))
		ed := torch.Must(e.Sub(d, true))
		d.MustDrop()
		k := torch.Must(ed.SubScalar(torch.Scalar(1), true))
		return torch.Must(k.Clamp(torch.Scalar(-ppo.KLClamp), torch.Scalar(ppo.KLClamp), true))
	}
	panic(fmt.Sprintf("kl estimator %q: want k1, k2 or k3", string(kind)))
}

func checkKL(kind KL) error {
	switch kind {
	case ppo.KLK1, ppo.KLK2, ppo.KLK3:
		return nil
	}
	return fmt.Errorf("--kl %q: want k1, k2 or k3 (low_var_kl): %w", string(kind), ErrConfig)
}

// KLPenalty is the KL of the policy to the frozen reference, estimated per token with
// kind (see ppo.KL) and aggregated over the mask under mode with the mini-batch's
// divisor. It is exactly 0 where logp equals refLogp, and so is its gradient for k2 and
// k3 (k1's gradient is 1/divisor per token whatever the values). It returns
// the aggregated KL, a 0-dim tensor carrying logp's gradient that the caller scales by
// the KL coefficient and drops, and its value: this micro-batch's share of the
// mini-batch's kl metric.
//
//	logp, refLogp, mask: [batch, resp_len]; mask is 0/1 of any dtype.
func KLPenalty(logp, refLogp, mask *ts.Tensor, kind KL, mode Agg, divisor float64) (kl *ts.Tensor, v float64, err error) {
	if err := checkKL(kind); err != nil {
		return nil, 0, fmt.Errorf("kl penalty: %w", err)
	}
	if err := checkAgg(mode, divisor); err != nil {
		return nil, 0, fmt.Errorf("kl penalty: %w", err)
	}
	defer torch.Catch("kl penalty", &err)
	sameShape("kl penalty", []string{"logp", "refLogp", "mask"}, logp, refLogp, mask)

	dt := computeType(logp)
	lp := torch.Must(logp.Totype(dt, false))
	ref := torch.Must(refLogp.Totype(dt, false))
	m := torch.Must(mask.Ne(torch.Scalar(0), false))
	defer torch.Drop(lp, ref, m)
	per := klTokens(lp, ref, kind)
	defer per.MustDrop()
	kl = aggregate(per, m, mode, divisor)
	return kl, torch.Item(kl), nil
}

// Entropy is the mean entropy of the policy's next-token distributions, aggregated
// over the mask under mode with the mini-batch's divisor; per token it is
// H = logsumexp(z) − Σ softmax(z)·z, as verl's entropy_from_logits, in float32. It
// returns a 0-dim tensor carrying the logits' gradient (the caller subtracts it, times
// the entropy coefficient, from the loss, and drops it) and its value, this micro-batch's
// share of the mini-batch's entropy metric.
//
//	logits: [batch, resp_len, vocab]; mask: [batch, resp_len], 0/1 of any dtype.
func Entropy(logits, mask *ts.Tensor, mode Agg, divisor float64) (h *ts.Tensor, v float64, err error) {
	if err := checkAgg(mode, divisor); err != nil {
		return nil, 0, fmt.Errorf("entropy: %w", err)
	}
	defer torch.Catch("entropy", &err)
	ls, ms := logits.MustSize(), mask.MustSize()
	if len(ls) != 3 || len(ms) != 2 || ls[0] != ms[0] || ls[1] != ms[1] {
		panic(fmt.Sprintf("entropy: logits have shape %v, mask %v; want [batch, resp_len, vocab] and [batch, resp_len]", ls, ms))
	}
	dt := computeType(logits)
	z := torch.Must(logits.Totype(dt, false))
	m := torch.Must(mask.Ne(torch.Scalar(0), false))
	defer torch.Drop(z, m)

	lse := torch.Must(z.Logsumexp([]int64{-1}, false, false))
	p := torch.Must(z.Softmax(-1, dt, false))
	pz := torch.Must(p.Mul(z, true))
	expect := torch.Must(pz.SumDimIntlist([]int64{-1}, false, dt, true))
	per := torch.Must(lse.Sub(expect, true))
	expect.MustDrop()
	defer per.MustDrop()
	h = aggregate(per, m, mode, divisor)
	return h, torch.Item(h), nil
}

// computeType is the dtype the losses are computed in: float64 stays, anything else is
// computed in float32, as verl computes log-probs and losses in fp32 under bf16 training.
func computeType(t *ts.Tensor) gotch.DType {
	if t.DType() == gotch.Double {
		return gotch.Double
	}
	return gotch.Float
}

// sameShape panics unless every tensor of xs has the shape of the first; what names the
// call and names its arguments in order.
func sameShape(what string, names []string, xs ...*ts.Tensor) []int64 {
	want := xs[0].MustSize()
	for i, x := range xs[1:] {
		if got := x.MustSize(); !slices.Equal(got, want) {
			panic(fmt.Sprintf("%s: %s has shape %v, %s has %v; want equal shapes", what, names[i+1], got, names[0], want))
		}
	}
	return want
}

package train

import (
	"fmt"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/ppo"
	"github.com/sugarme/gotch/ts"
)

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

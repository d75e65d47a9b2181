package train

import (
	"fmt"

	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// AggregateTokens reduces per-token values x under mask to this micro-batch's share of
// the mini-batch value under mode with the mini-batch's divisor (see Divisor), keeping
// x's gradient: the same reduction PolicyLoss and KLPenalty apply. The update stage
// aggregates the per-token entropies the policy's chunked log-prob pass returns
// (qwen2.LogProbTensor with Entropy), which never materialises [tokens, vocab] logits as
// Entropy's input would; SFT aggregates log-probs into its NLL. It returns a 0-dim
// tensor the caller drops and its value.
//
//	x, mask: [batch, resp_len]; mask is 0/1 of any dtype.
func AggregateTokens(x, mask *ts.Tensor, mode Agg, divisor float64) (sum *ts.Tensor, v float64, err error) {
	if err := checkAgg(mode, divisor); err != nil {
		return nil, 0, fmt.Errorf("aggregate tokens: %w", err)
	}
	defer torch.Catch("aggregate tokens", &err)
	sameShape("aggregate tokens", []string{"x", "mask"}, x, mask)
	xf := torch.Must(x.Totype(computeType(x), false))
	m := torch.Must(mask.Ne(torch.Scalar(0), false))
	defer torch.Drop(xf, m)
	sum = aggregate(xf, m, mode, divisor)
	return sum, torch.Item(sum), nil
}

// SetLR sets the learning rate of the following steps to lr, with no warm-up: a
// schedule other than LRAt's constant-after-warm-up (SFT's linear decay) sets it before
// each Step. Config reports the changed settings.
func (o *AdamW) SetLR(lr float64) error {
	c := o.cfg
	c.LR, c.WarmupSteps = lr, 0
	if err := c.Validate(); err != nil {
		return err
	}
	o.cfg = c
	return nil
}

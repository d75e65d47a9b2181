package train

// #cgo LDFLAGS: -lm
// #include <math.h>
import "C"

import (
	"fmt"
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// Param is one trainable tensor of the model, named by its safetensors key.
type Param struct {
	Name string
	T    *ts.Tensor
}

// AdamWConfig holds the optimizer's settings (DESIGN.md §7).
type AdamWConfig struct {
	LR          float64 `json:"lr"`
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
	// WarmupSteps ramps the LR linearly from 0; 0 means constant from the first step.
	WarmupSteps int64 `json:"warmup_steps"`
	// MaxGradNorm clips the global L2 norm of the gradients; 0 disables clipping.
	MaxGradNorm float64 `json:"max_grad_norm"`
}

// DefaultAdamW is the paper's setting for 7B models: LR 1e-6, β 0.9/0.999, ε 1e-8,
// weight decay 0.01, grad-norm clip 1.0, no warm-up.
var DefaultAdamW = AdamWConfig{LR: 1e-6, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, MaxGradNorm: 1}

// Validate checks the settings.
func (c AdamWConfig) Validate() error {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case bad(c.LR) || c.LR < 0:
		return fmt.Errorf("--lr %v: want >= 0: %w", c.LR, ErrConfig)
	case bad(c.Beta1) || c.Beta1 < 0 || c.Beta1 >= 1:
		return fmt.Errorf("adamw: beta1 %v, want in [0, 1): %w", c.Beta1, ErrConfig)
	case bad(c.Beta2) || c.Beta2 < 0 || c.Beta2 >= 1:
		return fmt.Errorf("adamw: beta2 %v, want in [0, 1): %w", c.Beta2, ErrConfig)
	case bad(c.Eps) || c.Eps <= 0:
		return fmt.Errorf("adamw: eps %v, want > 0: %w", c.Eps, ErrConfig)
	case bad(c.WeightDecay) || c.WeightDecay < 0:
		return fmt.Errorf("--weight-decay %v: want >= 0: %w", c.WeightDecay, ErrConfig)
	case c.WarmupSteps < 0:
		return fmt.Errorf("--warmup-steps %d: want >= 0: %w", c.WarmupSteps, ErrConfig)
	case bad(c.MaxGradNorm) || c.MaxGradNorm < 0:
		return fmt.Errorf("--max-grad-norm %v: want >= 0 (0 disables clipping): %w", c.MaxGradNorm, ErrConfig)
	}
	return nil
}

// LRAt is the learning rate of the k-th optimizer step, k from 1. It is verl's
// get_constant_schedule_with_warmup (HF's, stepped after each optimizer step):
// lr·(k−1)/warmup during warm-up, so the first step has LR 0, then lr.
func (c AdamWConfig) LRAt(k int64) float64 {
	if k-1 < c.WarmupSteps {
		return c.LR * (float64(k-1) / float64(c.WarmupSteps))
	}
	return c.LR
}

// AdamW is torch.optim.AdamW (Loshchilov & Hutter, arXiv 1711.05101) with the update of
// PyTorch 2.1's single-tensor implementation, op for op:
//
//	step += 1
//	θ ← θ·(1 − lr·λ)
//	m ← lerp(m, g, 1 − β1);  v ← v·β2 + (1 − β2)·g·g
//	θ ← θ − (lr / (1 − β1^step)) · m / (√v / √(1 − β2^step) + ε)
//
// with the bias corrections in float64 (libm's pow, as CPython's **) and rounded to the
// parameter's dtype by libtorch, as PyTorch passes Python floats. Before the update the
// gradients are clipped as torch.nn.utils.clip_grad_norm_ does: the global L2 norm of
// the per-parameter norms, coefficient max_norm/(norm + 1e-6) capped at 1; like
// PyTorch, the clipped gradients are written back into the gradients of float32 and
// float64 parameters.
//
// Mixed precision: a bfloat16 or float16 parameter gets a float32 master copy held
// here. Its gradient is cast to float32, the update is applied to the master, and the
// master is copied back into the parameter (rounded to nearest even), so updates
// smaller than the parameter's resolution still accumulate. Float32 and float64
// parameters are updated in place. The moments have the master's dtype.
//
// An AdamW owns its state tensors (never the parameters); Drop frees them.
type AdamW struct {
	cfg    AdamWConfig
	params []Param
	slots  []slot
	steps  int64 // optimizer steps taken: the LR schedule's position
}

type slot struct {
	master           *ts.Tensor // float32 copy of a half-precision parameter; nil otherwise
	expAvg, expAvgSq *ts.Tensor
	step             int64 // updates applied to this parameter (PyTorch's state["step"])
}

// NewAdamW builds the optimizer over params, with zero moments. Names must be unique and
// non-empty, tensors floating point.
func NewAdamW(params []Param, cfg AdamWConfig) (o *AdamW, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, fmt.Errorf("adamw: no parameters: %w", ErrInput)
	}
	seen := make(map[string]bool, len(params))
	for i, p := range params {
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("adamw: parameter %d has no name: %w", i, ErrInput)
		case seen[p.Name]:
			return nil, fmt.Errorf("adamw: parameter %q appears twice: %w", p.Name, ErrInput)
		case p.T == nil || !defined(p.T):
			return nil, fmt.Errorf("adamw: parameter %q has no tensor: %w", p.Name, ErrInput)
		case !torch.IsFloating(p.T.DType()):
			return nil, fmt.Errorf("adamw: parameter %q has dtype %v, want a floating dtype: %w", p.Name, p.T.DType(), ErrInput)
		}
		seen[p.Name] = true
	}

	o = &AdamW{cfg: cfg, params: append([]Param(nil), params...), slots: make([]slot, len(params))}
	defer func() {
		if err != nil {
			o.Drop()
			o = nil
		}
	}()
	defer torch.Catch("adamw", &err)
	for i, p := range params {
		s := &o.slots[i]
		dt := p.T.DType()
		if dt == gotch.BFloat16 || dt == gotch.Half {
			d := torch.Must(p.T.Detach(false))
			s.master = torch.Must(d.Totype(gotch.Float, true))
			dt = gotch.Float
		}
		size, dev := p.T.MustSize(), p.T.MustDevice()
		s.expAvg = torch.Must(ts.Zeros(size, dt, dev))
		s.expAvgSq = torch.Must(ts.Zeros(size, dt, dev))
	}
	return o, nil
}

// defined reports whether t holds a tensor (gotch's MustDefined exits on error).
func defined(t *ts.Tensor) bool {
	ok, err := t.Defined()
	return err == nil && ok
}

// Steps is the number of optimizer steps taken.
func (o *AdamW) Steps() int64 { return o.steps }

// Config is the optimizer's configuration.
func (o *AdamW) Config() AdamWConfig { return o.cfg }

// Params are the parameters the optimizer updates, in order.
func (o *AdamW) Params() []Param { return append([]Param(nil), o.params...) }

// Drop frees the optimizer's state tensors; the parameters stay with their owner.
func (o *AdamW) Drop() {
	for i := range o.slots {
		s := &o.slots[i]
		torch.Drop(s.master, s.expAvg, s.expAvgSq)
		s.master, s.expAvg, s.expAvgSq = nil, nil, nil
	}
}

// StepStats are the metrics of one optimizer step.
type StepStats struct {
	GradNorm float64 `json:"grad_norm"` // global L2 norm before clipping
	LR       float64 `json:"lr"`
}

// ZeroGrad zeroes the gradients of the parameters. PyTorch's default unsets them
// instead; the difference shows only for a parameter that gets no gradient before the
// next Step, which here is updated with a zero gradient (weight decay and moment decay
// apply), as under zero_grad(set_to_none=False).
func (o *AdamW) ZeroGrad() (err error) {
	defer torch.Catch("adamw zero grad", &err)
	for _, p := range o.params {
		g := torch.Must(p.T.Grad(false))
		if defined(g) {
			torch.InPlace(g, g.Zero_)
		}
		g.MustDrop()
	}
	return nil
}

// Step clips the accumulated gradients and applies one AdamW update to every parameter
// that has a gradient. A non-finite gradient norm changes nothing (not the gradients,
// parameters, state or schedule) and returns ErrNonFinite, so the caller can stop and
// keep the previous checkpoint.
func (o *AdamW) Step() (st StepStats, err error) {
	k := o.steps + 1
	defer torch.Catch(fmt.Sprintf("adamw step %d", k), &err)
	grads := make([]*ts.Tensor, len(o.params))
	defer func() { torch.Drop(grads...) }()
	n := 0
	for i, p := range o.params {
		g := torch.Must(p.T.Grad(false))
		if !defined(g) {
			g.MustDrop()
			continue
		}
		if o.slots[i].master != nil {
			g = torch.Must(g.Totype(gotch.Float, true))
		}
		grads[i] = g
		n++
	}
	if n == 0 {
		return StepStats{}, fmt.Errorf("adamw step %d: no parameter has a gradient; run Backward before Step: %w", k, ErrInput)
	}

	total := gradNorm(grads)
	defer total.MustDrop()
	st.GradNorm = torch.Item(total)
	if math.IsNaN(st.GradNorm) || math.IsInf(st.GradNorm, 0) {
		return StepStats{GradNorm: st.GradNorm}, fmt.Errorf("adamw step %d: gradient norm %v: %w", k, st.GradNorm, ErrNonFinite)
	}
	if o.cfg.MaxGradNorm > 0 {
		clipGrads(grads, total, o.cfg.MaxGradNorm)
	}
	st.LR = o.cfg.LRAt(k)
	o.steps = k
	for i, g := range grads {
		if g != nil {
			o.update(i, g, st.LR)
		}
	}
	return st, nil
}

// gradNorm is the L2 norm of the per-tensor L2 norms, as clip_grad_norm_.
//
//	grads: any shapes, nil entries skipped → []
func gradNorm(grads []*ts.Tensor) *ts.Tensor {
	var norms []*ts.Tensor
	defer func() { torch.Drop(norms...) }()
	for _, g := range grads {
		if g != nil {
			norms = append(norms, torch.Must(g.Norm(false)))
		}
	}
	stacked := torch.Must(ts.Stack(norms, 0))
	return torch.Must(stacked.Norm(true))
}

// clipGrads scales grads in place by min(1, maxNorm/(total + 1e-6)), computed on the
// device as clip_grad_norm_ does (Python's max_norm / t is t.reciprocal() * max_norm).
func clipGrads(grads []*ts.Tensor, total *ts.Tensor, maxNorm float64) {
	d := torch.Must(total.AddScalar(torch.Scalar(1e-6), false))
	r := torch.Must(d.Reciprocal(true))
	c := torch.Must(r.MulScalar(torch.Scalar(maxNorm), true))
	coef := torch.Must(c.ClampMax(torch.Scalar(1), true))
	defer coef.MustDrop()
	for _, g := range grads {
		if g != nil {
			torch.InPlace(g, func() error { return g.Mul_(coef) })
		}
	}
}

// update applies AdamW to parameter i with its (clipped) gradient g at learning rate lr.
func (o *AdamW) update(i int, g *ts.Tensor, lr float64) {
	c, s := o.cfg, &o.slots[i]
	// The parameter is a leaf that may require grad; its detached alias shares the
	// storage and lets the update run in place without grad mode, which libtorch keeps
	// per OS thread and Go does not pin.
	param := torch.Must(o.params[i].T.Detach(false))
	defer param.MustDrop()
	target := param
	if s.master != nil {
		target = s.master
	}

	s.step++
	// float64(·) keeps the products from fusing into FMAs, which Python never does.
	torch.InPlace(target, func() error { return target.MulScalar_(torch.Scalar(1 - float64(lr*c.WeightDecay))) })
	torch.InPlace(s.expAvg, func() error { return s.expAvg.Lerp_(g, torch.Scalar(1-c.Beta1)) })
	torch.InPlace(s.expAvgSq, func() error { return s.expAvgSq.MulScalar_(torch.Scalar(c.Beta2)) })
	// addcmul_(g, g, value=1−β2) computes v + value·g·g left to right; gotch's addcmul
	// takes no value, so the product is formed in the same order first.
	sg := torch.Must(g.MulScalar(torch.Scalar(1-c.Beta2), false))
	sgg := torch.Must(sg.Mul(g, true))
	torch.InPlace(s.expAvgSq, func() error { return s.expAvgSq.Add_(sgg) })
	sgg.MustDrop()

	step := float64(s.step)
	bc1 := 1 - pow(c.Beta1, step)
	bc2 := 1 - pow(c.Beta2, step)
	stepSize := lr / bc1
	bc2Sqrt := math.Sqrt(bc2)
	root := torch.Must(s.expAvgSq.Sqrt(false))
	scaled := torch.Must(root.DivScalar(torch.Scalar(bc2Sqrt), true))
	denom := torch.Must(scaled.AddScalar(torch.Scalar(c.Eps), true))
	// addcdiv_(m, denom, value=−step_size) computes θ + value·m/denom.
	num := torch.Must(s.expAvg.MulScalar(torch.Scalar(-stepSize), false))
	delta := torch.Must(num.Div(denom, true))
	denom.MustDrop()
	torch.InPlace(target, func() error { return target.Add_(delta) })
	delta.MustDrop()

	if s.master != nil {
		torch.Copy(param, s.master)
	}
}

// pow is libm's pow, which CPython's float ** calls; Go's math.Pow can differ in the
// last bit.
func pow(x, y float64) float64 { return float64(C.pow(C.double(x), C.double(y))) }

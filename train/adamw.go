package train

// #cgo LDFLAGS: -lm
// #include <math.h>
import "C"

import (
	"fmt"
	"math"
	"unsafe"

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
// PyTorch 2.1's single-tensor implementation, element for element:
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
// here. Its gradient is cast to float32 (chunk by chunk into scratch, for the norm and
// again for the update: no float32 copy of the whole gradient is kept), the update is
// applied to the master, and the master is copied back into the parameter (rounded to
// nearest even), so updates smaller than the parameter's resolution still accumulate.
// The clipping scales the float32 cast, so a half-precision gradient keeps its
// unclipped values. Float32 and float64 parameters are updated in place. The
// moments have the master's dtype.
//
// The state lives in flat buffers per dtype and device (flat.go), and so do the
// gradients: from its first Step (or ZeroGrad) on, a parameter's gradient is a view
// into the optimizer's gradient buffer, which backward passes accumulate into in place,
// so a step runs a few vector ops over each buffer. The updated weights, state and
// gradients are bit-identical to the per-tensor implementation's
// (TestFlatMatchesPerTensor).
//
// An AdamW owns its state tensors and gradient buffer (never the parameters); Drop
// frees them, and leaves the parameters whose gradients were views into the buffer
// without a gradient.
type AdamW struct {
	cfg     AdamWConfig
	params  []Param
	handles []torch.Raw // a second handle to each parameter, alive until Drop
	slots   []slot
	groups  []*group
	chunk   int64 // the CPU update's chunk, stepChunk when built
	steps   int64 // optimizer steps taken: the LR schedule's position
	adopted int   // gradients copied into the flat buffer by Step (see adoptGrads)
}

// NewAdamW builds the optimizer over params, with zero moments. Names must be unique and
// non-empty, tensors floating point.
func NewAdamW(params []Param, cfg AdamWConfig) (o *AdamW, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkParams(params); err != nil {
		return nil, err
	}
	o = &AdamW{cfg: cfg, params: append([]Param(nil), params...), slots: make([]slot, len(params)), chunk: stepChunk}
	defer func() {
		if err != nil {
			o.Drop()
			o = nil
		}
	}()
	defer torch.Catch("adamw", &err)
	for _, p := range params {
		o.handles = append(o.handles, torch.Of(p.T).Alias())
	}
	o.layout()
	for _, g := range o.groups {
		o.alloc(g)
	}
	return o, nil
}

// checkParams checks that params are named uniquely and hold contiguous floating
// tensors of their own. A tensor listed twice (a tied head listed besides the embedding) would
// have one gradient slot for two views of the flat buffer, and its two updates would
// interleave chunk by chunk instead of running one after the other; only tensors
// whose data starts at the same address are caught, not overlapping views.
func checkParams(params []Param) error {
	if len(params) == 0 {
		return fmt.Errorf("adamw: no parameters: %w", ErrInput)
	}
	seen := make(map[string]bool, len(params))
	at := make(map[unsafe.Pointer]string, len(params))
	for i, p := range params {
		switch {
		case p.Name == "":
			return fmt.Errorf("adamw: parameter %d has no name: %w", i, ErrInput)
		case seen[p.Name]:
			return fmt.Errorf("adamw: parameter %q appears twice: %w", p.Name, ErrInput)
		case p.T == nil || !defined(p.T):
			return fmt.Errorf("adamw: parameter %q has no tensor: %w", p.Name, ErrInput)
		case !torch.IsFloating(p.T.DType()):
			return fmt.Errorf("adamw: parameter %q has dtype %v, want a floating dtype: %w", p.Name, p.T.DType(), ErrInput)
		}
		seen[p.Name] = true
		if contiguous, err := p.T.IsContiguous(); err != nil || !contiguous {
			return fmt.Errorf("adamw: parameter %q is not contiguous; its flat state views need row-major storage: %w", p.Name, ErrInput)
		}
		if p.T.Numel() == 0 {
			continue
		}
		ptr, err := p.T.DataPtr()
		if err != nil {
			return fmt.Errorf("adamw: parameter %q: %w", p.Name, err)
		}
		if other, ok := at[ptr]; ok {
			return fmt.Errorf("adamw: parameters %q and %q are the same tensor: %w", other, p.Name, ErrInput)
		}
		at[ptr] = p.Name
	}
	return nil
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

// Drop frees the optimizer's state tensors and gradient buffer; the parameters stay
// with their owner, without a gradient where theirs was a view into the buffer. Drop
// may be called again.
func (o *AdamW) Drop() {
	o.releaseGrads()
	for i := range o.slots {
		s := &o.slots[i]
		torch.Drop(s.master, s.expAvg, s.expAvgSq)
		freeRaws(s.grad)
		o.slots[i] = slot{}
	}
	for _, g := range o.groups {
		g.free()
	}
	o.groups = nil
	freeRaws(o.handles...)
	o.handles = nil
}

// StepStats are the metrics of one optimizer step.
type StepStats struct {
	GradNorm float64 `json:"grad_norm"` // global L2 norm before clipping
	LR       float64 `json:"lr"`
}

// ZeroGrad zeroes the gradients of the parameters: the flat gradient buffers, whose
// views become the gradient of every parameter that has one. PyTorch's default unsets
// them instead; the difference shows only for a parameter that gets no gradient before
// the next Step, which here is updated with a zero gradient (weight decay and moment
// decay apply), as under zero_grad(set_to_none=False).
func (o *AdamW) ZeroGrad() (err error) {
	defer torch.Catch("adamw zero grad", &err)
	for _, g := range o.groups {
		g.grad.Zero_()
	}
	for i, h := range o.handles {
		if defined, same := h.GradIs(o.slots[i].grad); defined && !same {
			h.AttachGrad(o.slots[i].grad)
		}
	}
	return nil
}

// LendGrads makes every parameter without a gradient take its zeroed view into the flat
// gradient buffer as its gradient, as ZeroGrad leaves every parameter after a step, so
// that the first backward pass too accumulates into the buffer in place. Without it
// that pass allocates a gradient per parameter, which Step copies into the buffer and
// frees: the first step of a run held two sets of gradients, the optimizer's and
// autograd's, and the training loop's memory estimate counts one. A parameter that then
// gets no gradient before Step is updated with a zero gradient.
func (o *AdamW) LendGrads() (err error) {
	defer torch.Catch("adamw lend gradients", &err)
	for i, h := range o.handles {
		if defined, _ := h.GradIs(o.slots[i].grad); !defined {
			o.slots[i].grad.Zero_()
			h.AttachGrad(o.slots[i].grad)
		}
	}
	return nil
}

// Step clips the accumulated gradients and applies one AdamW update to every parameter
// that has a gradient. A non-finite gradient norm changes nothing (not the gradients'
// values, parameters, state or schedule) and returns ErrNonFinite, so the caller can
// stop and keep the previous checkpoint.
func (o *AdamW) Step() (st StepStats, err error) {
	// On the torch thread: at its thread count, and on one OS thread for the gradient
	// norm's and clip's generated gotch ops, each of which reads libtch's thread-local
	// error in a second cgo call (see model/torch's checked).
	torch.Do(func() { st, err = o.step() })
	return st, err
}

// step is Step on the torch thread.
func (o *AdamW) step() (st StepStats, err error) {
	k := o.steps + 1
	defer torch.Catch(fmt.Sprintf("adamw step %d", k), &err)
	has := o.adoptGrads()
	segs := o.segments(has)
	if len(segs) == 0 {
		return StepStats{}, fmt.Errorf("adamw step %d: no parameter has a gradient; run Backward before Step: %w", k, ErrInput)
	}
	total := o.gradNorm(has)
	defer total.MustDrop()
	st.GradNorm = torch.Item(total)
	if math.IsNaN(st.GradNorm) || math.IsInf(st.GradNorm, 0) {
		return StepStats{GradNorm: st.GradNorm}, fmt.Errorf("adamw step %d: gradient norm %v: %w", k, st.GradNorm, ErrNonFinite)
	}
	var clip torch.Raw // the clip coefficient; the zero Raw when clipping is off
	if o.cfg.MaxGradNorm > 0 {
		coef := clipCoef(total, o.cfg.MaxGradNorm)
		defer coef.MustDrop()
		clip = torch.Of(coef)
	}
	st.LR = o.cfg.LRAt(k)
	o.steps = k
	for _, sg := range segs {
		o.update(sg, st.LR, clip)
	}
	return st, nil
}

// gradNorm is the L2 norm of the per-parameter L2 norms of the gradients, as
// clip_grad_norm_, over the parameters has marks. A half-precision gradient's norm is
// taken in float32, over its cast into the group's scratch: whole when the parameter
// fits (normChunk elements), else piece by piece, each piece's norm joining the
// stack as a parameter's would; the total is the same up to float32 rounding.
func (o *AdamW) gradNorm(has []bool) *ts.Tensor {
	var norms []torch.Raw
	defer func() { torch.Free(norms...) }()
	for i, ok := range has {
		if !ok {
			continue
		}
		s := &o.slots[i]
		g := o.groups[s.group]
		if !g.half {
			norms = append(norms, s.grad.Norm())
			continue
		}
		for lo := int64(0); lo < s.numel; lo += g.span {
			n := min(g.span, s.numel-lo)
			src, dst := g.grad.Narrow(0, s.off+lo, n), g.tmp.Narrow(0, 0, n)
			dst.CopyFrom(src)
			norms = append(norms, dst.Norm())
			torch.Free(src, dst)
		}
	}
	stacked := torch.RawStack(norms, 0)
	defer stacked.Free()
	return stacked.Norm().Wrap()
}

// clipCoef is clip_grad_norm_'s coefficient min(1, maxNorm/(total + 1e-6)), computed
// on the device as it does (Python's max_norm / t is t.reciprocal() * max_norm). The
// update scales each chunk of the gradients by it just before using them (see
// updateChunk), which saves a pass over the gradients and gives the same values.
func clipCoef(total *ts.Tensor, maxNorm float64) *ts.Tensor {
	d := torch.Must(total.AddScalar(torch.Scalar(1e-6), false))
	r := torch.Must(d.Reciprocal(true))
	c := torch.Must(r.MulScalar(torch.Scalar(maxNorm), true))
	return torch.Must(c.ClampMax(torch.Scalar(1), true))
}

// pow is libm's pow, which CPython's float ** calls; Go's math.Pow can differ in the
// last bit.
func pow(x, y float64) float64 { return float64(C.pow(C.double(x), C.double(y))) }

package torch

import (
	lib "github.com/sugarme/gotch/libtch"
)

// The element-wise ops of an optimizer step over flat buffers: in place (ending in _)
// or into a preallocated out tensor (ending in Into), so a step allocates no
// full-size temporaries. Each runs the same libtorch kernel as its allocating twin, so
// every element gets the same bits.

// Detach is x without autograd history, sharing its storage: in-place updates of a
// leaf that requires grad go through it.
func (x Raw) Detach() Raw { return call(func(o *lib.Ctensor) { lib.AtgDetach(o, x.c) }) }

// Norm is the L2 norm of all of x's elements, a 0-dim tensor of x's dtype
// (torch.norm(x)).
func (x Raw) Norm() Raw { return call(func(o *lib.Ctensor) { lib.AtgNorm(o, x.c) }) }

// RawStack stacks xs, of equal shapes, along a new dimension dim.
func RawStack(xs []Raw, dim int64) Raw {
	cs := make([]lib.Ctensor, len(xs))
	for i, x := range xs {
		cs[i] = x.c
	}
	return call(func(o *lib.Ctensor) { lib.AtgStack(o, cs, len(cs), dim) })
}

// Zero_ sets x to zeros.
func (x Raw) Zero_() { inplace(func(o *lib.Ctensor) { lib.AtgZero_(o, x.c) }) }

// Div_ sets x to x / y.
func (x Raw) Div_(y Raw) { inplace(func(o *lib.Ctensor) { lib.AtgDiv_(o, x.c, y.c) }) }

// Lerp_ sets x to lerp(x, end, w): x + w·(end − x) for |w| < 0.5, else
// end − (end − x)·(1 − w).
func (x Raw) Lerp_(end Raw, w float64) {
	withScalar(w, func(s lib.Cscalar) struct{} {
		inplace(func(o *lib.Ctensor) { lib.AtgLerp_(o, x.c, end.c, s) })
		return struct{}{}
	})
}

// DivScalar_ sets x to x / v.
func (x Raw) DivScalar_(v float64) {
	withScalar(v, func(s lib.Cscalar) struct{} {
		inplace(func(o *lib.Ctensor) { lib.AtgDivScalar_(o, x.c, s) })
		return struct{}{}
	})
}

// MulScalarInto sets out, of x's shape and dtype, to x·v.
func (x Raw) MulScalarInto(out Raw, v float64) {
	withScalar(v, func(s lib.Cscalar) struct{} {
		inplace(func(o *lib.Ctensor) { lib.AtgMulScalarOut(o, out.c, x.c, s) })
		return struct{}{}
	})
}

// SqrtInto sets out, of x's shape and dtype, to √x.
func (x Raw) SqrtInto(out Raw) { inplace(func(o *lib.Ctensor) { lib.AtgSqrtOut(o, out.c, x.c) }) }

package torch

import (
	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
)

// The tensor ops of the hot paths call libtch directly. gotch's generated wrappers
// pass each op a C.malloc(0) result slot that is never freed, about 32 bytes per op
// call: measured as RSS growing 26 MB over 5000 forward passes of a two-layer model
// (about 130 ops each), which a long rollout would turn into gigabytes. These ops use
// a Go slot instead (see call), so repeated forward passes keep RSS flat
// (qwen2.TestRSSFlat). None of them frees its inputs; callers free what they no
// longer need. An op returns a new raw the caller owns; a method ending in _ works in
// place on its receiver and returns nothing.

// RawEmpty allocates an uninitialised tensor.
func RawEmpty(shape []int64, dt gotch.DType, dev gotch.Device) Raw {
	return alloc(shape, func(o *lib.Ctensor, s []int64) {
		lib.AtgEmpty(o, s, len(s), int32(dt.CInt()), int32(dev.CInt()))
	})
}

// RawZeros allocates a tensor of zeros.
func RawZeros(shape []int64, dt gotch.DType, dev gotch.Device) Raw {
	return alloc(shape, func(o *lib.Ctensor, s []int64) {
		lib.AtgZeros(o, s, len(s), int32(dt.CInt()), int32(dev.CInt()))
	})
}

// alloc runs a constructor over shape. libtch's generated constructors index the shape
// slice, so a 0-dim tensor is made as [1] and squeezed.
func alloc(shape []int64, f func(o *lib.Ctensor, shape []int64)) Raw {
	if len(shape) == 0 {
		one := alloc([]int64{1}, f)
		defer one.Free()
		return one.Squeeze(0)
	}
	return call(func(o *lib.Ctensor) { f(o, shape) })
}

// RawCat concatenates xs along dim.
func RawCat(xs []Raw, dim int64) Raw {
	cs := make([]lib.Ctensor, len(xs))
	for i, x := range xs {
		cs[i] = x.c
	}
	return call(func(o *lib.Ctensor) { lib.AtgCat(o, cs, len(cs), dim) })
}

// Linear is x·wᵀ + b; b may be None.
func (x Raw) Linear(w, b Raw) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgLinear(o, x.c, w.c, b.c) })
}

// Embedding looks ids up in the rows of w.
func (w Raw) Embedding(ids Raw) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgEmbedding(o, w.c, ids.c, -1, 0, 0) })
}

// Matmul is torch.matmul(x, y).
func (x Raw) Matmul(y Raw) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgMatmul(o, x.c, y.c) })
}

// ToDType converts x to dt; the result aliases x when it already has dt.
func (x Raw) ToDType(dt gotch.DType) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgToDtype(o, x.c, int32(dt.CInt()), 0, 0) })
}

// ToDevice moves x to dev; the result aliases x when it is already there.
func (x Raw) ToDevice(dev gotch.Device) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgTo(o, x.c, int32(dev.CInt())) })
}

// Contiguous is x in row-major layout; the result aliases x when it already is.
func (x Raw) Contiguous() Raw {
	return call(func(o *lib.Ctensor) { lib.AtgContiguous(o, x.c) })
}

// CopyFrom copies src into x in place, broadcasting and converting dtype and device as
// copy_ does. gotch's own Copy_ exits the process on a libtorch error; this panics.
func (x Raw) CopyFrom(src Raw) {
	checked(func() { lib.AtCopy_(x.c, src.c) })
}

// Square is x².
func (x Raw) Square() Raw { return call(func(o *lib.Ctensor) { lib.AtgSquare(o, x.c) }) }

// Silu is x·sigmoid(x).
func (x Raw) Silu() Raw { return call(func(o *lib.Ctensor) { lib.AtgSilu(o, x.c) }) }

// Neg is −x.
func (x Raw) Neg() Raw { return call(func(o *lib.Ctensor) { lib.AtgNeg(o, x.c) }) }

// Rsqrt_ sets x to 1/√x.
func (x Raw) Rsqrt_() { inplace(func(o *lib.Ctensor) { lib.AtgRsqrt_(o, x.c) }) }

// Silu_ sets x to silu(x).
func (x Raw) Silu_() { inplace(func(o *lib.Ctensor) { lib.AtgSilu_(o, x.c) }) }

// Mul is x·y, broadcasting.
func (x Raw) Mul(y Raw) Raw { return call(func(o *lib.Ctensor) { lib.AtgMul(o, x.c, y.c) }) }

// Sub is x − y, broadcasting.
func (x Raw) Sub(y Raw) Raw { return call(func(o *lib.Ctensor) { lib.AtgSub(o, x.c, y.c) }) }

// Mul_ sets x to x·y.
func (x Raw) Mul_(y Raw) { inplace(func(o *lib.Ctensor) { lib.AtgMul_(o, x.c, y.c) }) }

// Add_ sets x to x + y.
func (x Raw) Add_(y Raw) { inplace(func(o *lib.Ctensor) { lib.AtgAdd_(o, x.c, y.c) }) }

// DivScalar is x / v.
func (x Raw) DivScalar(v float64) Raw {
	return withScalar(v, func(s lib.Cscalar) Raw {
		return call(func(o *lib.Ctensor) { lib.AtgDivScalar(o, x.c, s) })
	})
}

// AddScalar_ sets x to x + v.
func (x Raw) AddScalar_(v float64) {
	withScalar(v, func(s lib.Cscalar) struct{} {
		inplace(func(o *lib.Ctensor) { lib.AtgAddScalar_(o, x.c, s) })
		return struct{}{}
	})
}

// MulScalar_ sets x to x·v.
func (x Raw) MulScalar_(v float64) {
	withScalar(v, func(s lib.Cscalar) struct{} {
		inplace(func(o *lib.Ctensor) { lib.AtgMulScalar_(o, x.c, s) })
		return struct{}{}
	})
}

// withScalar passes a C scalar for v to f and frees it afterwards.
func withScalar[T any](v float64, f func(s lib.Cscalar) T) T {
	s := lib.AtsFloat(v)
	defer lib.AtsFree(s)
	return f(s)
}

// Where is v where the boolean cond holds and w elsewhere, in the default float dtype.
func (cond Raw) Where(v, w float64) Raw {
	sv, sw := lib.AtsFloat(v), lib.AtsFloat(w)
	defer lib.AtsFree(sv)
	defer lib.AtsFree(sw)
	return call(func(o *lib.Ctensor) { lib.AtgWhereScalar(o, cond.c, sv, sw) })
}

// MeanLast is the float32 mean over the last dimension, kept as size 1.
func (x Raw) MeanLast() Raw {
	dims := []int64{-1}
	return call(func(o *lib.Ctensor) { lib.AtgMeanDim(o, x.c, dims, 1, 1, int32(gotch.Float.CInt())) })
}

// SumLast is the float32 sum over the last dimension, which is removed.
func (x Raw) SumLast() Raw {
	dims := []int64{-1}
	return call(func(o *lib.Ctensor) { lib.AtgSumDimIntlist(o, x.c, dims, 1, 0, int32(gotch.Float.CInt())) })
}

// LogsumexpLast reduces the last dimension, which is removed.
func (x Raw) LogsumexpLast() Raw {
	dims := []int64{-1}
	return call(func(o *lib.Ctensor) { lib.AtgLogsumexp(o, x.c, dims, 1, 0) })
}

// SoftmaxLast is the softmax over the last dimension in x's dtype.
func (x Raw) SoftmaxLast() Raw {
	return call(func(o *lib.Ctensor) { lib.AtgSoftmax(o, x.c, -1, -1) })
}

// SoftmaxLastFloat is the softmax over the last dimension computed in float32.
func (x Raw) SoftmaxLastFloat() Raw {
	return call(func(o *lib.Ctensor) { lib.AtgSoftmax(o, x.c, -1, int32(gotch.Float.CInt())) })
}

// Roll rotates the last dimension by n places: out[i] = x[(i-n) mod size].
func (x Raw) Roll(n int64) Raw {
	shifts, dims := []int64{n}, []int64{-1}
	return call(func(o *lib.Ctensor) { lib.AtgRoll(o, x.c, shifts, 1, dims, 1) })
}

// Transpose swaps dimensions a and b (a view).
func (x Raw) Transpose(a, b int64) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgTranspose(o, x.c, a, b) })
}

// Reshape is x with the given shape, a view when the layout allows and a copy
// otherwise; one entry may be -1.
func (x Raw) Reshape(shape ...int64) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgReshape(o, x.c, shape, len(shape)) })
}

// View is x with the given shape, always a view; one entry may be -1.
func (x Raw) View(shape ...int64) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgView(o, x.c, shape, len(shape)) })
}

// Squeeze removes dimension dim when its size is 1 (a view).
func (x Raw) Squeeze(dim int64) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgSqueezeDim(o, x.c, dim) })
}

// Narrow is the view of length entries of dimension dim from start.
func (x Raw) Narrow(dim, start, length int64) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgNarrow(o, x.c, dim, start, length) })
}

// IndexSelect copies the entries idx (int64, 1-dim) of dimension dim.
func (x Raw) IndexSelect(dim int64, idx Raw) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgIndexSelect(o, x.c, dim, idx.c) })
}

// Gather is torch.gather(x, dim, idx).
func (x Raw) Gather(dim int64, idx Raw) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgGather(o, x.c, dim, idx.c, 0) })
}

// Expand is x broadcast to shape (a view); -1 keeps a dimension's size.
func (x Raw) Expand(shape ...int64) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgExpand(o, x.c, shape, len(shape), 0) })
}

// Attention is at::scaled_dot_product_attention of queries q: [b, heads, t, d] over
// keys k and values v: [b, heads, keys, d] under the additive bias: [b or 1, 1 or
// heads, t, keys], with q·kᵀ unscaled (callers scale q and k): softmax(q·kᵀ + bias)·v,
// [b, heads, t, d]. libtorch picks the kernel; on the CPU from 2.3 on that is its
// fused flash-attention kernel, which never materialises the [t, keys] scores.
func (q Raw) Attention(k, v, bias Raw) Raw {
	return call(func(o *lib.Ctensor) { lib.AtgScaledDotProductAttention(o, q.c, k.c, v.c, bias.c, 0, 0, 1, 0) })
}

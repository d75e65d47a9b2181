package qwen2

import (
	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// The tensor ops of the hot paths call libtch directly. gotch's generated wrappers
// pass each op a C.malloc(0) result slot that is never freed, about 32 bytes per op
// call: measured here as RSS growing 26 MB over 5000 forward passes of a two-layer
// model (about 130 ops each), which a long rollout would turn into gigabytes. These wrappers use a Go
// slot instead, so repeated forward passes keep RSS flat (TestRSSFlat). None of them
// frees its inputs; callers drop what they no longer need.

// call runs one libtch op that writes a new tensor handle into *out.
func call(f func(out *lib.Ctensor)) *ts.Tensor {
	var out lib.Ctensor
	f(&out)
	if err := ts.TorchErr(); err != nil {
		panic(err)
	}
	return ts.New(out)
}

func c(t *ts.Tensor) lib.Ctensor { return lib.Ctensor(t.Ctensor()) }

func flag(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// withScalar passes a C scalar for v to f and frees it afterwards.
func withScalar(v float64, f func(s lib.Cscalar) *ts.Tensor) *ts.Tensor {
	s := lib.AtsFloat(v)
	defer lib.AtsFree(s)
	return f(s)
}

func linear(x, w, b *ts.Tensor) *ts.Tensor {
	if b == nil {
		b = ts.None
	}
	return call(func(o *lib.Ctensor) { lib.AtgLinear(o, c(x), c(w), c(b)) })
}

func embedding(w, ids *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgEmbedding(o, c(w), c(ids), -1, 0, 0) })
}

// sdpa is scaled dot-product attention with a boolean mask (true = attend) and the
// default 1/sqrt(headDim) scale.
func sdpa(q, k, v, mask *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) {
		lib.AtgScaledDotProductAttention(o, c(q), c(k), c(v), c(mask), 0, 0, 0, 1)
	})
}

func toDType(x *ts.Tensor, dt gotch.DType) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgToDtype(o, c(x), int32(dt.CInt()), 0, 0) })
}

func toDevice(x *ts.Tensor, dev gotch.Device) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgTo(o, c(x), int32(dev.CInt())) })
}

func contiguous(x *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgContiguous(o, c(x)) })
}

func empty(shape []int64, dt gotch.DType, dev gotch.Device) *ts.Tensor {
	return call(func(o *lib.Ctensor) {
		lib.AtgEmpty(o, shape, len(shape), int32(dt.CInt()), int32(dev.CInt()))
	})
}

func zeros(shape []int64, dt gotch.DType, dev gotch.Device) *ts.Tensor {
	return call(func(o *lib.Ctensor) {
		lib.AtgZeros(o, shape, len(shape), int32(dt.CInt()), int32(dev.CInt()))
	})
}

func square(x *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgSquare(o, c(x)) })
}

func rsqrt(x *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgRsqrt(o, c(x)) })
}

func silu(x *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgSilu(o, c(x)) })
}

func neg(x *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgNeg(o, c(x)) })
}

func mul(a, b *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgMul(o, c(a), c(b)) })
}

func add(a, b *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgAdd(o, c(a), c(b)) })
}

func sub(a, b *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgSub(o, c(a), c(b)) })
}

func addScalar(x *ts.Tensor, v float64) *ts.Tensor {
	return withScalar(v, func(s lib.Cscalar) *ts.Tensor {
		return call(func(o *lib.Ctensor) { lib.AtgAddScalar(o, c(x), s) })
	})
}

func divScalar(x *ts.Tensor, v float64) *ts.Tensor {
	return withScalar(v, func(s lib.Cscalar) *ts.Tensor {
		return call(func(o *lib.Ctensor) { lib.AtgDivScalar(o, c(x), s) })
	})
}

// meanLast is the float32 mean over the last dimension, kept as size 1.
func meanLast(x *ts.Tensor) *ts.Tensor {
	dims := []int64{-1}
	return call(func(o *lib.Ctensor) { lib.AtgMeanDim(o, c(x), dims, 1, 1, int32(gotch.Float.CInt())) })
}

// sumLast is the float32 sum over the last dimension, which is removed.
func sumLast(x *ts.Tensor) *ts.Tensor {
	dims := []int64{-1}
	return call(func(o *lib.Ctensor) { lib.AtgSumDimIntlist(o, c(x), dims, 1, 0, int32(gotch.Float.CInt())) })
}

// logsumexpLast reduces the last dimension, which is removed.
func logsumexpLast(x *ts.Tensor) *ts.Tensor {
	dims := []int64{-1}
	return call(func(o *lib.Ctensor) { lib.AtgLogsumexp(o, c(x), dims, 1, 0) })
}

func softmaxLast(x *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgSoftmax(o, c(x), -1, int32(gotch.Float.CInt())) })
}

func transpose(x *ts.Tensor, a, b int64) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgTranspose(o, c(x), a, b) })
}

func reshape(x *ts.Tensor, shape ...int64) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgReshape(o, c(x), shape, len(shape)) })
}

func view(x *ts.Tensor, shape ...int64) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgView(o, c(x), shape, len(shape)) })
}

func unsqueeze(x *ts.Tensor, dim int64) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgUnsqueeze(o, c(x), dim) })
}

func squeeze(x *ts.Tensor, dim int64) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgSqueezeDim(o, c(x), dim) })
}

func expand(x *ts.Tensor, shape ...int64) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgExpand(o, c(x), shape, len(shape), 0) })
}

func narrow(x *ts.Tensor, dim, start, length int64) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgNarrow(o, c(x), dim, start, length) })
}

func indexSelect(x *ts.Tensor, dim int64, idx *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgIndexSelect(o, c(x), dim, c(idx)) })
}

func gather(x *ts.Tensor, dim int64, idx *ts.Tensor) *ts.Tensor {
	return call(func(o *lib.Ctensor) { lib.AtgGather(o, c(x), dim, c(idx), 0) })
}

func cat(xs []*ts.Tensor, dim int64) *ts.Tensor {
	cs := make([]lib.Ctensor, len(xs))
	for i, x := range xs {
		cs[i] = c(x)
	}
	return call(func(o *lib.Ctensor) { lib.AtgCat(o, cs, len(cs), dim) })
}

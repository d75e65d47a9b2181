package qwen2

import (
	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// The tensor ops of the hot paths call libtch directly. gotch's generated wrappers
// pass each op a C.malloc(0) result slot that is never freed, about 32 bytes per op
// call: measured here as RSS growing 26 MB over 5000 forward passes of a two-layer
// model (about 130 ops each), which a long rollout would turn into gigabytes. These
// wrappers use a Go slot instead, so repeated forward passes keep RSS flat
// (TestRSSFlat). None of them frees its inputs; callers drop what they no longer
// need.
//
// The functions here take and return *ts.Tensor for code outside the forward pass;
// each is its raw.go op wrapped once. The forward pass itself stays on raws.

// call runs one libtch op that writes a new tensor handle into *out.
func call(f func(out *lib.Ctensor)) *ts.Tensor { return rcall(f).wrap() }

func c(t *ts.Tensor) lib.Ctensor { return lib.Ctensor(t.Ctensor()) }

func embedding(w, ids *ts.Tensor) *ts.Tensor { return of(w).embedding(of(ids)).wrap() }
func toDevice(x *ts.Tensor, dev gotch.Device) *ts.Tensor {
	return of(x).toDevice(dev).wrap()
}
func contiguous(x *ts.Tensor) *ts.Tensor { return of(x).contiguous().wrap() }

func empty(shape []int64, dt gotch.DType, dev gotch.Device) *ts.Tensor {
	return rawEmpty(shape, dt, dev).wrap()
}

func zeros(shape []int64, dt gotch.DType, dev gotch.Device) *ts.Tensor {
	return rawZeros(shape, dt, dev).wrap()
}

func mul(a, b *ts.Tensor) *ts.Tensor               { return of(a).mul(of(b)).wrap() }
func sub(a, b *ts.Tensor) *ts.Tensor               { return of(a).sub(of(b)).wrap() }
func divScalar(x *ts.Tensor, v float64) *ts.Tensor { return of(x).divScalar(v).wrap() }

// logsumexpLast reduces the last dimension, which is removed.
func logsumexpLast(x *ts.Tensor) *ts.Tensor { return of(x).logsumexpLast().wrap() }

func reshape(x *ts.Tensor, shape ...int64) *ts.Tensor { return of(x).reshape(shape...).wrap() }
func view(x *ts.Tensor, shape ...int64) *ts.Tensor    { return of(x).view(shape...).wrap() }
func squeeze(x *ts.Tensor, dim int64) *ts.Tensor      { return of(x).squeeze(dim).wrap() }

func narrow(x *ts.Tensor, dim, start, length int64) *ts.Tensor {
	return of(x).narrow(dim, start, length).wrap()
}

func indexSelect(x *ts.Tensor, dim int64, idx *ts.Tensor) *ts.Tensor {
	return of(x).indexSelect(dim, of(idx)).wrap()
}

func gather(x *ts.Tensor, dim int64, idx *ts.Tensor) *ts.Tensor {
	return of(x).gather(dim, of(idx)).wrap()
}

func cat(xs []*ts.Tensor, dim int64) *ts.Tensor {
	rs := make([]raw, len(xs))
	for i, x := range xs {
		rs[i] = of(x)
	}
	return rawCat(rs, dim).wrap()
}

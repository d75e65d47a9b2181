package qwen2

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// raw is a libtorch tensor handle without gotch's bookkeeping. gotch's ts.New
// allocates and zeroes a 100 KB Go buffer per tensor (to push the garbage collector
// into running finalizers) and registers a formatted name in a global map under a
// lock: measured 43 µs per op against 2 µs for the op itself (a [16, 256] float32
// multiply on the 2-core CI machine), so a tiny-model decode step spent more time in
// ts.New than in libtorch. The hot paths keep intermediates as raws and free them
// explicitly; only tensors handed to callers become *ts.Tensor, through wrap.
//
// Like ops.go, raw ops pass libtch a Go result slot, so nothing leaks per call.
type raw struct{ c lib.Ctensor }

// liveRaws counts raws made and not yet freed or wrapped, so leak tests can add
// it to gotch's count of live tensors.
var liveRaws atomic.Int64

// none is the undefined tensor libtch takes for an absent optional argument.
var none = of(ts.None)

// of borrows t's handle; the raw must not be freed or wrapped.
func of(t *ts.Tensor) raw { return raw{lib.Ctensor(t.Ctensor())} }

// rcall runs one libtch op that writes a new tensor handle into *out.
func rcall(f func(out *lib.Ctensor)) raw {
	var out lib.Ctensor
	f(&out)
	if err := ts.TorchErr(); err != nil {
		panic(err)
	}
	liveRaws.Add(1)
	return raw{out}
}

// inplace runs an in-place libtch op, which returns a second handle to its target;
// that handle is freed here (gotch's generated wrappers leak it).
func inplace(f func(out *lib.Ctensor)) {
	var out lib.Ctensor
	f(&out)
	if err := ts.TorchErr(); err != nil {
		panic(err)
	}
	lib.AtFree(out)
}

// free releases the handle; the storage goes when no other tensor views it.
func (r raw) free() {
	lib.AtFree(r.c)
	liveRaws.Add(-1)
}

// wrap hands the handle to gotch as a *ts.Tensor the caller owns.
func (r raw) wrap() *ts.Tensor {
	liveRaws.Add(-1)
	return ts.New(r.c)
}

func (r raw) size() []int64 {
	n := lib.AtDim(r.c)
	if n == 0 {
		return nil
	}
	s := make([]int64, n)
	lib.AtShape(r.c, unsafe.Pointer(&s[0]))
	if err := ts.TorchErr(); err != nil {
		panic(err)
	}
	return s
}

func (r raw) dtype() gotch.DType { return gotch.CKind2DType(lib.AtScalarType(r.c)) }

// withScalar passes a C scalar for v to f and frees it afterwards.
func withScalar[T any](v float64, f func(s lib.Cscalar) T) T {
	s := lib.AtsFloat(v)
	defer lib.AtsFree(s)
	return f(s)
}

// gradEnabled reports whether autograd records ops on this OS thread, which rules
// out in-place ops on tensors a backward formula saves.
func gradEnabled() bool {
	prev := setGrad(false)
	setGrad(prev)
	return prev
}

// setGrad sets this OS thread's grad mode and returns the previous one. libtch
// widens the C int it returns by reading eight bytes from a four-byte variable, so
// only the low 32 bits are the mode; gotch's GradSetEnabled compares all 64 and
// reports false for a stray high bit.
func setGrad(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return int32(lib.AtGradSetEnabled(v)) != 0
}

// rawFromHost copies data into a new tensor of the given shape on dev. T's size must
// match dtype's (int64 with gotch.Int64, bool with gotch.Bool, float32 with gotch.Float).
func rawFromHost[T int64 | float32 | bool](data []T, shape []int64, dtype gotch.DType, dev gotch.Device) raw {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if int64(len(data)) != n {
		panic(fmt.Sprintf("fromHost: %d values for shape %v", len(data), shape))
	}
	if len(data) > 0 && int(unsafe.Sizeof(data[0])) != int(dtype.Size()) {
		panic(fmt.Sprintf("fromHost: %T into %v", data[0], dtype))
	}
	t := rawEmpty(shape, dtype, gotch.CPU)
	if len(data) > 0 {
		copy(t.bytes(), unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), len(data)*int(dtype.Size())))
	}
	if dev == gotch.CPU {
		return t
	}
	defer t.free()
	return t.toDevice(dev)
}

// bytes aliases the storage of a contiguous CPU tensor; valid while r lives.
func (r raw) bytes() []byte {
	n := 1
	for _, d := range r.size() {
		n *= int(d)
	}
	n *= int(r.dtype().Size())
	if n == 0 {
		return nil
	}
	ptr := lib.AtDataPtr(r.c)
	if err := ts.TorchErr(); err != nil {
		panic(err)
	}
	return unsafe.Slice((*byte)(ptr), n)
}

// host copies a tensor of any dtype and device into a new float32 slice in
// row-major order.
func (r raw) host() []float32 {
	f := r.toDevice(gotch.CPU)
	g := f.toDType(gotch.Float)
	c := g.contiguous()
	f.free()
	g.free()
	defer c.free()
	b := c.bytes()
	out := make([]float32, len(b)/4)
	if len(out) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(b)), b)
	}
	return out
}

func rawEmpty(shape []int64, dt gotch.DType, dev gotch.Device) raw {
	return rcall(func(o *lib.Ctensor) {
		lib.AtgEmpty(o, shape, len(shape), int32(dt.CInt()), int32(dev.CInt()))
	})
}

func rawZeros(shape []int64, dt gotch.DType, dev gotch.Device) raw {
	return rcall(func(o *lib.Ctensor) {
		lib.AtgZeros(o, shape, len(shape), int32(dt.CInt()), int32(dev.CInt()))
	})
}

// linear is x·wᵀ + b; b may be none.
func (x raw) linear(w, b raw) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgLinear(o, x.c, w.c, b.c) })
}

// embedding looks ids up in the rows of w.
func (w raw) embedding(ids raw) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgEmbedding(o, w.c, ids.c, -1, 0, 0) })
}

func (x raw) matmul(y raw) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgMatmul(o, x.c, y.c) })
}

func (x raw) toDType(dt gotch.DType) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgToDtype(o, x.c, int32(dt.CInt()), 0, 0) })
}

func (x raw) toDevice(dev gotch.Device) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgTo(o, x.c, int32(dev.CInt())) })
}

func (x raw) contiguous() raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgContiguous(o, x.c) })
}

// copyFrom copies src into x in place, broadcasting and converting as copy_ does.
func (x raw) copyFrom(src raw) {
	lib.AtCopy_(x.c, src.c)
	if err := ts.TorchErr(); err != nil {
		panic(err)
	}
}

func (x raw) square() raw { return rcall(func(o *lib.Ctensor) { lib.AtgSquare(o, x.c) }) }
func (x raw) silu() raw   { return rcall(func(o *lib.Ctensor) { lib.AtgSilu(o, x.c) }) }
func (x raw) neg() raw    { return rcall(func(o *lib.Ctensor) { lib.AtgNeg(o, x.c) }) }
func (x raw) rsqrt_()     { inplace(func(o *lib.Ctensor) { lib.AtgRsqrt_(o, x.c) }) }
func (x raw) silu_()      { inplace(func(o *lib.Ctensor) { lib.AtgSilu_(o, x.c) }) }

func (x raw) mul(y raw) raw { return rcall(func(o *lib.Ctensor) { lib.AtgMul(o, x.c, y.c) }) }
func (x raw) add(y raw) raw { return rcall(func(o *lib.Ctensor) { lib.AtgAdd(o, x.c, y.c) }) }
func (x raw) sub(y raw) raw { return rcall(func(o *lib.Ctensor) { lib.AtgSub(o, x.c, y.c) }) }
func (x raw) mul_(y raw)    { inplace(func(o *lib.Ctensor) { lib.AtgMul_(o, x.c, y.c) }) }
func (x raw) add_(y raw)    { inplace(func(o *lib.Ctensor) { lib.AtgAdd_(o, x.c, y.c) }) }

func (x raw) divScalar(v float64) raw {
	return withScalar(v, func(s lib.Cscalar) raw {
		return rcall(func(o *lib.Ctensor) { lib.AtgDivScalar(o, x.c, s) })
	})
}

func (x raw) addScalar_(v float64) {
	withScalar(v, func(s lib.Cscalar) struct{} {
		inplace(func(o *lib.Ctensor) { lib.AtgAddScalar_(o, x.c, s) })
		return struct{}{}
	})
}

func (x raw) mulScalar_(v float64) {
	withScalar(v, func(s lib.Cscalar) struct{} {
		inplace(func(o *lib.Ctensor) { lib.AtgMulScalar_(o, x.c, s) })
		return struct{}{}
	})
}

// where is v where cond holds and w elsewhere, in the default float dtype.
func (cond raw) where(v, w float64) raw {
	sv, sw := lib.AtsFloat(v), lib.AtsFloat(w)
	defer lib.AtsFree(sv)
	defer lib.AtsFree(sw)
	return rcall(func(o *lib.Ctensor) { lib.AtgWhereScalar(o, cond.c, sv, sw) })
}

// meanLast is the float32 mean over the last dimension, kept as size 1.
func (x raw) meanLast() raw {
	dims := []int64{-1}
	return rcall(func(o *lib.Ctensor) { lib.AtgMeanDim(o, x.c, dims, 1, 1, int32(gotch.Float.CInt())) })
}

// sumLast is the float32 sum over the last dimension, which is removed.
func (x raw) sumLast() raw {
	dims := []int64{-1}
	return rcall(func(o *lib.Ctensor) { lib.AtgSumDimIntlist(o, x.c, dims, 1, 0, int32(gotch.Float.CInt())) })
}

// logsumexpLast reduces the last dimension, which is removed.
func (x raw) logsumexpLast() raw {
	dims := []int64{-1}
	return rcall(func(o *lib.Ctensor) { lib.AtgLogsumexp(o, x.c, dims, 1, 0) })
}

// softmaxLast is the softmax over the last dimension in x's dtype.
func (x raw) softmaxLast() raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgSoftmax(o, x.c, -1, -1) })
}

// softmaxLastFloat is the softmax over the last dimension computed in float32.
func (x raw) softmaxLastFloat() raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgSoftmax(o, x.c, -1, int32(gotch.Float.CInt())) })
}

// roll rotates the last dimension by n places: out[i] = x[(i-n) mod size].
func (x raw) roll(n int64) raw {
	shifts, dims := []int64{n}, []int64{-1}
	return rcall(func(o *lib.Ctensor) { lib.AtgRoll(o, x.c, shifts, 1, dims, 1) })
}

func (x raw) transpose(a, b int64) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgTranspose(o, x.c, a, b) })
}

func (x raw) reshape(shape ...int64) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgReshape(o, x.c, shape, len(shape)) })
}

func (x raw) view(shape ...int64) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgView(o, x.c, shape, len(shape)) })
}

func (x raw) squeeze(dim int64) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgSqueezeDim(o, x.c, dim) })
}

func (x raw) narrow(dim, start, length int64) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgNarrow(o, x.c, dim, start, length) })
}

func (x raw) indexSelect(dim int64, idx raw) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgIndexSelect(o, x.c, dim, idx.c) })
}

func (x raw) gather(dim int64, idx raw) raw {
	return rcall(func(o *lib.Ctensor) { lib.AtgGather(o, x.c, dim, idx.c, 0) })
}

func rawCat(xs []raw, dim int64) raw {
	cs := make([]lib.Ctensor, len(xs))
	for i, x := range xs {
		cs[i] = x.c
	}
	return rcall(func(o *lib.Ctensor) { lib.AtgCat(o, cs, len(cs), dim) })
}

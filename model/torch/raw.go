package torch

import (
	"sync/atomic"
	"unsafe"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// Raw is a libtorch tensor handle without gotch's bookkeeping. gotch's ts.New
// allocates and zeroes a 100 KB Go buffer per tensor (to push the garbage collector
// into running finalizers) and registers a formatted name in a global map under a
// lock: measured 43 µs per op against 2 µs for the op itself (a [16, 256] float32
// multiply on the 2-core CI machine), so a tiny-model decode step spent more time in
// ts.New than in libtorch. The hot paths keep intermediates as raws and free them
// explicitly; only tensors handed to callers become *ts.Tensor, through Wrap.
//
// The raw ops (ops.go) pass libtch a Go result slot (see call), so nothing leaks per
// call. A raw made by an op is owned by its maker, who frees or wraps it exactly once.
type Raw struct{ c lib.Ctensor }

// liveRaws counts raws made and not yet freed or wrapped, so leak tests can add
// it to gotch's count of live tensors (see Live).
var liveRaws atomic.Int64

// Live counts the tensors gotch has created and not yet dropped plus the raws made
// and not yet freed or wrapped; leak tests check that it returns to its starting value.
func Live() int { return len(ts.ExistingTensors) + int(liveRaws.Load()) }

// None is the undefined tensor libtch takes for an absent optional argument.
var None = Of(ts.None)

// Of borrows t's handle; the raw must not be freed or wrapped.
func Of(t *ts.Tensor) Raw { return Raw{lib.Ctensor(t.Ctensor())} }

// call runs one libtch op that writes a new tensor handle into *out.
func call(f func(out *lib.Ctensor)) Raw {
	var out lib.Ctensor
	checked(func() { f(&out) })
	liveRaws.Add(1)
	return Raw{out}
}

// inplace runs an in-place libtch op, which returns a second handle to its target;
// that handle is freed here (gotch's generated wrappers leak it).
func inplace(f func(out *lib.Ctensor)) {
	var out lib.Ctensor
	checked(func() { f(&out) })
	lib.AtFree(out)
}

// Pointer is the handle as C code takes it: a pointer to the at::Tensor, borrowed.
func (r Raw) Pointer() unsafe.Pointer { return unsafe.Pointer(r.c) }

// Free releases the handle; the storage goes when no other tensor views it.
func (r Raw) Free() {
	lib.AtFree(r.c)
	liveRaws.Add(-1)
}

// Free frees every raw of xs.
func Free(xs ...Raw) {
	for _, x := range xs {
		x.Free()
	}
}

// Wrap hands the handle to gotch as a *ts.Tensor the caller owns and drops.
func (r Raw) Wrap() *ts.Tensor {
	liveRaws.Add(-1)
	return ts.New(r.c)
}

// Size is the shape; nil for a 0-dim tensor.
func (r Raw) Size() []int64 {
	n := lib.AtDim(r.c)
	if n == 0 {
		return nil
	}
	s := make([]int64, n)
	checked(func() { lib.AtShape(r.c, unsafe.Pointer(&s[0])) })
	return s
}

// DType is the element type.
func (r Raw) DType() gotch.DType { return gotch.CKind2DType(lib.AtScalarType(r.c)) }

// Device is where the tensor's storage lives.
func (r Raw) Device() gotch.Device {
	var d gotch.Device
	return d.OfCInt(int32(lib.AtDevice(r.c)))
}

// Drop frees tensors now instead of leaving them to finalizers; nil entries are skipped.
func Drop(xs ...*ts.Tensor) {
	for _, x := range xs {
		if x != nil {
			x.MustDrop()
		}
	}
}

// InPlace runs one of gotch's generated in-place ops on t and frees the handle it
// supersedes. The generated wrappers (libtch/torch_api_generated.cpp.h, e.g.
// atg_addcmul_) return a fresh torch::Tensor handle to the same storage and overwrite
// the Go tensor's pointer with it without deleting the old one, which would keep the
// storage referenced, and so alive, after t is dropped.
func InPlace(t *ts.Tensor, op func() error) {
	old := t.Ctensor()
	Check(op())
	if t.Ctensor() != old {
		lib.AtFree(lib.Ctensor(old))
	}
}

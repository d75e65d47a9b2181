package torch

import (
	"fmt"
	"io"
	"unsafe"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// Every copy between Go memory and a tensor goes through the functions of this file:
// in by RawFromHost, out by ToHost (values) or Write (bytes), both through Bytes.

// FromHost copies data into a new tensor of the given shape on dev, of T's dtype (see
// Elem); it panics on a libtorch error, as Must does.
func FromHost[T Elem](data []T, shape []int64, dev gotch.Device) *ts.Tensor {
	return RawFromHost(data, shape, dev).Wrap()
}

// RawFromHost is FromHost as a raw: data is copied into an empty CPU tensor's storage,
// then moved to dev.
func RawFromHost[T Elem](data []T, shape []int64, dev gotch.Device) Raw {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if int64(len(data)) != n {
		panic(fmt.Sprintf("from host: %d values for shape %v", len(data), shape))
	}
	t := RawEmpty(shape, dtypeOf[T](), gotch.CPU)
	copy(t.Bytes(), asBytes(data))
	if dev == gotch.CPU {
		return t
	}
	defer t.Free()
	return t.ToDevice(dev)
}

// ToHost copies r, of any dtype, device and layout, into a new slice of T in
// row-major order, converting the values to T's dtype as libtorch's to(dtype) does.
func ToHost[T Elem](r Raw) []T {
	h := r.ToDevice(gotch.CPU)
	d := h.ToDType(dtypeOf[T]())
	c := d.Contiguous()
	Free(h, d)
	defer c.Free()
	b := c.Bytes()
	out := make([]T, len(b)/int(unsafe.Sizeof(*new(T))))
	copy(asBytes(out), b)
	return out
}

// Values copies t, of any dtype, device and layout, into a new float64 slice in
// row-major order. gotch's Float64Values leaks its intermediate tensor.
func Values(t *ts.Tensor) []float64 { return ToHost[float64](Of(t)) }

// Item is the value of t's one element; it panics unless t has exactly one.
func Item(t *ts.Tensor) float64 {
	v := Values(t)
	if len(v) != 1 {
		panic(fmt.Sprintf("item of a tensor of shape %v, want one element", Of(t).Size()))
	}
	return v[0]
}

// Write writes t's values to w in row-major order as the bytes of its dtype, through
// one contiguous host copy; checkpoint files hold exactly these bytes. It panics on a
// libtorch error and returns w's error.
func Write(w io.Writer, t *ts.Tensor) error {
	h := Of(t).ToDevice(gotch.CPU)
	c := h.Contiguous()
	h.Free()
	defer c.Free()
	_, err := w.Write(c.Bytes())
	return err
}

// Bytes aliases the storage of a contiguous CPU tensor; valid while r lives. Checkpoint
// readers fill a tensor's storage through it, with no staging copy.
func (r Raw) Bytes() []byte {
	n := int(r.DType().Size())
	for _, d := range r.Size() {
		n *= int(d)
	}
	if n == 0 {
		return nil
	}
	var ptr unsafe.Pointer
	checked(func() { ptr = lib.AtDataPtr(r.c) })
	return unsafe.Slice((*byte)(ptr), n)
}

// asBytes aliases the memory of s.
func asBytes[T Elem](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(*new(T))))
}

// Copy copies src into dst in place, converting dtype and device; it panics on a
// libtorch error, where gotch's Copy_ exits the process.
func Copy(dst, src *ts.Tensor) { Of(dst).CopyFrom(Of(src)) }

// Scalar wraps v for gotch's scalar arguments. gotch frees scalars only by finalizer
// (its Scalar.Drop is a no-op in v0.9.1); they hold no tensor storage.
func Scalar(v float64) *ts.Scalar { return ts.FloatScalar(v) }

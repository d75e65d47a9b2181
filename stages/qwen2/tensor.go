package qwen2

import (
	"fmt"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// gotch's Must* functions call log.Fatal on a libtorch error, which no caller can
// recover from; this package calls the error-returning variants through must, so a
// libtorch error is a panic that the exported entrypoints turn into an error.
func must(t *ts.Tensor, err error) *ts.Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

// drop frees tensors now instead of leaving them to finalizers; nil entries are skipped.
func drop(xs ...*ts.Tensor) {
	for _, x := range xs {
		if x != nil {
			x.MustDrop()
		}
	}
}

// catch converts a panic raised by tensor code into an error prefixed with what.
func catch(what string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: %v", what, r)
	}
}

// storage aliases the bytes of a contiguous CPU tensor; valid while t lives.
func storage(t *ts.Tensor) []byte {
	n := int(t.Numel()) * int(t.DType().Size())
	if n == 0 {
		return nil
	}
	ptr, err := t.DataPtr()
	if err != nil {
		panic(err)
	}
	return unsafe.Slice((*byte)(ptr), n)
}

// fromHost copies data into a new tensor of the given shape on dev. T's size must
// match dtype's (int64 with gotch.Int64, bool with gotch.Bool, float32 with gotch.Float).
func fromHost[T int64 | float32 | bool](data []T, shape []int64, dtype gotch.DType, dev gotch.Device) *ts.Tensor {
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
	t := empty(shape, dtype, gotch.CPU)
	if len(data) > 0 {
		copy(storage(t), unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), len(data)*int(dtype.Size())))
	}
	if dev == gotch.CPU {
		return t
	}
	defer t.MustDrop()
	return toDevice(t, dev)
}

// toHost copies a tensor of any dtype and device into a new float32 slice in
// row-major order.
func toHost(t *ts.Tensor) []float32 {
	f := toDevice(t, gotch.CPU)
	g := toDType(f, gotch.Float)
	c := contiguous(g)
	drop(f, g)
	defer c.MustDrop()
	b := storage(c)
	out := make([]float32, len(b)/4)
	if len(out) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(b)), b)
	}
	return out
}

// dtype maps config.json's torch_dtype to a gotch dtype.
func (c Config) dtype() (gotch.DType, error) {
	switch c.TorchDType {
	case "float32":
		return gotch.Float, nil
	case "bfloat16":
		return gotch.BFloat16, nil
	case "float16":
		return gotch.Half, nil
	}
	return gotch.Float, fmt.Errorf("torch_dtype %q: want float32, bfloat16 or float16: %w", c.TorchDType, ErrConfig)
}

// DTypeName is the torch_dtype name of a floating dtype.
func DTypeName(d gotch.DType) string {
	switch d {
	case gotch.BFloat16:
		return "bfloat16"
	case gotch.Half:
		return "float16"
	}
	return "float32"
}

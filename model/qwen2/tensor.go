package qwen2

import (
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// storage aliases the bytes of a contiguous CPU tensor; valid while t lives.
func storage(t *ts.Tensor) []byte { return of(t).bytes() }

// fromHost copies data into a new tensor of the given shape on dev. T's size must
// match dtype's (int64 with gotch.Int64, bool with gotch.Bool, float32 with gotch.Float).
func fromHost[T int64 | float32 | bool](data []T, shape []int64, dtype gotch.DType, dev gotch.Device) *ts.Tensor {
	return rawFromHost(data, shape, dtype, dev).wrap()
}

// toHost copies a tensor of any dtype and device into a new float32 slice in
// row-major order.
func toHost(t *ts.Tensor) []float32 { return of(t).host() }

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

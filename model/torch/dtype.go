package torch

import (
	"github.com/sugarme/gotch"

	"github.com/mempo/mempo/model/safetensors"
)

// Elem is a Go element type with a libtorch dtype of the same size: int64 (Int64),
// float32 (Float), float64 (Double) and bool (Bool).
type Elem interface {
	int64 | float32 | float64 | bool
}

// dtypeOf is T's libtorch dtype.
func dtypeOf[T Elem]() gotch.DType {
	switch any(*new(T)).(type) {
	case int64:
		return gotch.Int64
	case float32:
		return gotch.Float
	case float64:
		return gotch.Double
	}
	return gotch.Bool
}

// IsFloating reports whether d is a floating dtype, the kind a parameter can have.
func IsFloating(d gotch.DType) bool {
	return d == gotch.Float || d == gotch.Double || d == gotch.BFloat16 || d == gotch.Half
}

// safetensorsDTypes pairs the dtypes mempo writes to and reads from safetensors
// files: the weights' three and the optimizer state's float64 and int64.
var safetensorsDTypes = []struct {
	t gotch.DType
	s safetensors.DType
}{
	{gotch.Float, safetensors.F32}, {gotch.BFloat16, safetensors.BF16}, {gotch.Half, safetensors.F16},
	{gotch.Double, safetensors.F64}, {gotch.Int64, safetensors.I64},
}

// ToSafetensors is d's safetensors dtype; ok is false for a dtype mempo does not store.
func ToSafetensors(d gotch.DType) (s safetensors.DType, ok bool) {
	for _, p := range safetensorsDTypes {
		if p.t == d {
			return p.s, true
		}
	}
	return "", false
}

// FromSafetensors is the libtorch dtype of a safetensors dtype; ok is false for one
// mempo does not read.
func FromSafetensors(s safetensors.DType) (d gotch.DType, ok bool) {
	for _, p := range safetensorsDTypes {
		if p.s == s {
			return p.t, true
		}
	}
	return gotch.Float, false
}

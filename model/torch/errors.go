package torch

import (
	"fmt"

	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// gotch's Must* functions call log.Fatal on a libtorch error, which no caller can
// recover from. Tensor code calls the error-returning variants through Must and Check,
// so a libtorch error is a panic, and each exported entry point turns it into an
// error with Catch.

// Must returns t, or panics with err.
func Must(t *ts.Tensor, err error) *ts.Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

// Check panics with err from an op without a tensor result.
func Check(err error) {
	if err != nil {
		panic(err)
	}
}

// Drop frees tensors now instead of leaving them to finalizers; nil entries are skipped.
func Drop(xs ...*ts.Tensor) {
	for _, x := range xs {
		if x != nil {
			x.MustDrop()
		}
	}
}

// Catch converts a panic raised by tensor code into *err, prefixed with what; use it
// deferred in an exported function with a named error result.
func Catch(what string, err *error) {
	if r := recover(); r != nil {
		if e, ok := r.(error); ok {
			*err = fmt.Errorf("%s: %w", what, e)
			return
		}
		*err = fmt.Errorf("%s: %v", what, r)
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

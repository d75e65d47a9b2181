package update

import (
	"fmt"
	"slices"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// gotch's Must* functions call log.Fatal on a libtorch error, which no caller can
// recover from; this package calls the error-returning variants through must, so a
// libtorch error is a panic that the exported functions turn into an error.
func must(t *ts.Tensor, err error) *ts.Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

// check panics on a libtorch error from an op without a tensor result (see must).
func check(err error) {
	if err != nil {
		panic(err)
	}
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
		if e, ok := r.(error); ok {
			*err = fmt.Errorf("%s: %w", what, e)
			return
		}
		*err = fmt.Errorf("%s: %v", what, r)
	}
}

// scalar wraps v for libtorch. gotch frees scalars only by finalizer (its Scalar.Drop
// is a no-op in v0.9.1); they hold no tensor storage.
func scalar(v float64) *ts.Scalar { return ts.FloatScalar(v) }

// inplace runs one of gotch's generated in-place ops on t and frees the handle it
// supersedes. The generated wrappers (libtch/torch_api_generated.cpp.h, e.g.
// atg_addcmul_) return a fresh torch::Tensor handle to the same storage and overwrite
// the Go tensor's pointer with it without deleting the old one, which would keep the
// storage referenced, and so alive, after t is dropped.
func inplace(t *ts.Tensor, op func() error) {
	old := t.Ctensor()
	check(op())
	if t.Ctensor() != old {
		lib.AtFree(lib.Ctensor(old))
	}
}

// copyInto copies src into dst in place, converting dtype and device. gotch's own
// Copy_ exits the process on a libtorch error; this reports it as a panic instead.
func copyInto(dst, src *ts.Tensor) {
	lib.AtCopy_(lib.Ctensor(dst.Ctensor()), lib.Ctensor(src.Ctensor()))
	check(ts.TorchErr())
}

// values copies t, of any dtype, device and layout, into a new float64 slice in
// row-major order. gotch's Float64Values leaks its intermediate tensor.
func values(t *ts.Tensor) []float64 {
	d := must(t.Detach(false))
	f := must(d.Totype(gotch.Double, true))
	defer f.MustDrop()
	out := make([]float64, f.Numel())
	if len(out) > 0 {
		check(f.CopyData(out, uint(len(out))))
	}
	return out
}

// value is the one element of t.
func value(t *ts.Tensor) float64 {
	v := values(t)
	if len(v) != 1 {
		panic(fmt.Sprintf("value of a tensor of shape %v, want one element", t.MustSize()))
	}
	return v[0]
}

// computeType is the dtype the losses are computed in: float64 stays, anything else is
// computed in float32, as verl computes log-probs and losses in fp32 under bf16 training.
func computeType(t *ts.Tensor) gotch.DType {
	if t.DType() == gotch.Double {
		return gotch.Double
	}
	return gotch.Float
}

// isFloating reports whether d can hold a parameter.
func isFloating(d gotch.DType) bool {
	return d == gotch.Float || d == gotch.Double || d == gotch.BFloat16 || d == gotch.Half
}

// sameShape panics unless every tensor of xs has the shape of the first; what names the
// call and names its arguments in order.
func sameShape(what string, names []string, xs ...*ts.Tensor) []int64 {
	want := xs[0].MustSize()
	for i, x := range xs[1:] {
		if got := x.MustSize(); !slices.Equal(got, want) {
			panic(fmt.Sprintf("%s: %s has shape %v, %s has %v; want equal shapes", what, names[i+1], got, names[0], want))
		}
	}
	return want
}

package train

import (
	"fmt"
	"slices"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// scalar wraps v for libtorch. gotch frees scalars only by finalizer (its Scalar.Drop
// is a no-op in v0.9.1); they hold no tensor storage.
func scalar(v float64) *ts.Scalar { return ts.FloatScalar(v) }

// copyInto copies src into dst in place, converting dtype and device. gotch's own
// Copy_ exits the process on a libtorch error; this reports it as a panic instead.
func copyInto(dst, src *ts.Tensor) {
	lib.AtCopy_(lib.Ctensor(dst.Ctensor()), lib.Ctensor(src.Ctensor()))
	torch.Check(ts.TorchErr())
}

// value is the one element of t.
func value(t *ts.Tensor) float64 {
	v := torch.Values(t)
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

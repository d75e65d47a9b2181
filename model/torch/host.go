package torch

import (
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// FromHost copies data into a new tensor of the given shape on dev; it panics on a
// libtorch error, as Must does.
func FromHost[T float32 | float64 | int64](data []T, shape []int64, dev gotch.Device) *ts.Tensor {
	t := Must(ts.OfSlice(data))
	v := Must(t.View(shape, true))
	if dev == gotch.CPU {
		return v
	}
	return Must(v.To(dev, true))
}

// Values copies t, of any dtype, device and layout, into a new float64 slice in
// row-major order. gotch's Float64Values leaks its intermediate tensor.
func Values(t *ts.Tensor) []float64 {
	d := Must(t.Detach(false))
	f := Must(d.Totype(gotch.Double, true))
	defer f.MustDrop()
	out := make([]float64, f.Numel())
	if len(out) > 0 {
		Check(f.CopyData(out, uint(len(out))))
	}
	return out
}

package torch

import (
	"slices"
	"testing"

	"github.com/sugarme/gotch"
)

// TestAttachGradAccumulatesInPlace checks the libtorch behaviour flat optimizers rely
// on: a view attached as a leaf's gradient stays its gradient through backward
// passes, which add into the view's storage in place.
func TestAttachGradAccumulatesInPlace(t *testing.T) {
	base := Live()
	defer func() {
		if got := Live(); got != base {
			t.Errorf("Live() = %d, want %d", got, base)
		}
	}()
	x := Must(FromHost([]float32{1, 2, 3}, []int64{3}, gotch.CPU).SetRequiresGrad(true, true))
	defer x.MustDrop()
	flat := RawZeros([]int64{5}, gotch.Float, gotch.CPU)
	defer flat.Free()
	g := flat.Narrow(0, 1, 3)
	defer g.Free()
	Of(x).AttachGrad(g)
	if defined, same := Of(x).GradIs(g); !defined || !same {
		t.Fatalf("after AttachGrad: GradIs = %v, %v; want true, true", defined, same)
	}
	for range 2 {
		sq := Must(x.Square(false))
		loss := Must(sq.Sum(gotch.Float, true)) // d/dx Σx² = 2x
		Check(loss.Backward())
		loss.MustDrop()
	}
	if defined, same := Of(x).GradIs(g); !defined || !same {
		t.Errorf("after backward: GradIs = %v, %v; want the attached view", defined, same)
	}
	if got, want := ToHost[float32](flat), []float32{0, 4, 8, 12, 0}; !slices.Equal(got, want) {
		t.Errorf("flat buffer after two backward passes = %v, want %v", got, want)
	}
	Of(x).ClearGrad()
	gr := Must(x.Grad(false))
	defer gr.MustDrop()
	if ok, _ := gr.Defined(); ok {
		t.Error("after ClearGrad the gradient is defined, want none")
	}
}

package torch

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sugarme/gotch"
)

// tiedLoss runs a tied embedding and head as the model does: rows of w: [11, 5]
// looked up by ids, squared, and scored by w in two chunks of the positions, as
// qwen2's chunked log-probs do; the loss is Σ logits² · weights. With inPlace it
// uses the in-place-gradient functions, else libtorch's Embedding and Linear.
func tiedLoss(w, ids Raw, inPlace bool) Raw {
	var h Raw
	if inPlace {
		h = w.EmbeddingInPlaceGrad(ids)
	} else {
		h = w.Embedding(ids)
	}
	x := h.Square() // [2, 3, 5]: the embedding's gradient depends on the head's input gradient
	flat := x.Reshape(6, 5)
	tmp := []Raw{h, x, flat}
	var parts []Raw
	for _, c := range [][2]int64{{0, 4}, {4, 2}} {
		xc := flat.Narrow(0, c[0], c[1])
		var y Raw
		if inPlace {
			y = xc.LinearInPlaceGrad(w)
		} else {
			y = xc.Linear(w, None)
		}
		sq := y.Square()
		all := sq.Reshape(-1)
		parts = append(parts, all.SumLast())
		tmp = append(tmp, xc, y, sq, all)
	}
	loss := parts[0]
	loss.Add_(parts[1]) // sum saves nothing for backward
	parts[1].Free()
	Free(tmp...)
	return loss
}

// TestInPlaceGradMatchesAutograd checks EmbeddingInPlaceGrad and LinearInPlaceGrad on
// one tied weight against libtorch's Embedding and Linear: the same weight gradient
// to float32 rounding (the in-place functions add the two uses' parts in another
// order), created when the weight had none, and added into an attached view in place
// when it had one, which stays the weight's gradient.
func TestInPlaceGradMatchesAutograd(t *testing.T) {
	base := Live()
	defer func() {
		if got := Live(); got != base {
			t.Errorf("Live() = %d, want %d", got, base)
		}
	}()
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, 55)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	ids := RawFromHost([]int64{3, 7, 3, 0, 10, 3}, []int64{2, 3}, gotch.CPU)
	defer ids.Free()
	grad := func(inPlace bool, prior Raw) (g []float32, stayed bool) {
		w := Must(FromHost(vals, []int64{11, 5}, gotch.CPU).SetRequiresGrad(true, true))
		defer w.MustDrop()
		if prior != (Raw{}) {
			Of(w).AttachGrad(prior)
		}
		loss := tiedLoss(Of(w), ids, inPlace).Wrap()
		defer loss.MustDrop()
		Check(loss.Backward())
		wg := Of(w).Grad()
		defer wg.Free()
		if prior != (Raw{}) {
			_, stayed = Of(w).GradIs(prior)
		}
		return ToHost[float32](wg), stayed
	}
	want, _ := grad(false, Raw{})
	got, _ := grad(true, Raw{})
	if d := maxRelDiff(got, want); d > 1e-6 {
		t.Errorf("weight gradient, none before: max relative difference %.3g from autograd's, want <= 1e-6", d)
	}

	// An attached view of a flat buffer holding ones, with a padding element after it.
	flat := RawFromHost(append(ones(55), 42), []int64{56}, gotch.CPU)
	defer flat.Free()
	part := flat.Narrow(0, 0, 55)
	view := part.View(11, 5)
	part.Free()
	defer view.Free()
	got, stayed := grad(true, view)
	if !stayed {
		t.Errorf("after backward the weight's gradient is not the attached view")
	}
	for i := range want {
		want[i]++
	}
	if d := maxRelDiff(got, want); d > 1e-6 {
		t.Errorf("weight gradient added into ones: max relative difference %.3g from 1 + autograd's, want <= 1e-6", d)
	}
	if pad := ToHost[float32](flat)[55]; pad != 42 {
		t.Errorf("flat buffer after the view = %v, want 42 (untouched)", pad)
	}
}

func ones(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// maxRelDiff is max |got−want| / max(1, |want|) over the elements.
func maxRelDiff(got, want []float32) float64 {
	d := 0.0
	for i := range want {
		d = max(d, math.Abs(float64(got[i]-want[i]))/max(1, math.Abs(float64(want[i]))))
	}
	return d
}

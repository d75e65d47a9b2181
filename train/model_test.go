package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// linear is a tiny stand-in for the policy, so these tests need no transformer:
// logits = x·Wᵀ over a vocabulary of V tokens, log-probs gathered at the targets.
type linear struct {
	w *ts.Tensor // [V, D], requires grad
}

func newLinear(t *testing.T, v, d int, dt gotch.DType, rng *rand.Rand) linear {
	t.Helper()
	data := make([]float64, v*d)
	for i := range data {
		data[i] = rng.NormFloat64() * 0.5
	}
	w := tensorOf(t, data, []int64{int64(v), int64(d)}, dt)
	return linear{w: torch.Must(w.SetRequiresGrad(true, true))}
}

// forward returns logp: [B, T] and logits: [B, T, V] for x: [B, T, D], targets: [B, T].
func (l linear) forward(x, targets *ts.Tensor) (logp, logits *ts.Tensor) {
	wt := torch.Must(l.w.T(false))
	logits = torch.Must(x.Matmul(wt, false))
	wt.MustDrop()
	lsm := torch.Must(logits.LogSoftmax(-1, logits.DType(), false))
	idx := torch.Must(targets.Unsqueeze(-1, false))
	g := torch.Must(lsm.Gather(2, idx, false, true))
	idx.MustDrop()
	return torch.Must(g.SqueezeDim(2, true)), logits
}

// grad is a host copy of W's gradient.
func (l linear) grad() []float64 {
	g := torch.Must(l.w.Grad(false))
	defer g.MustDrop()
	return torch.Values(g)
}

func (l linear) zeroGrad() {
	g := torch.Must(l.w.Grad(false))
	if defined(g) {
		torch.InPlace(g, g.Zero_)
	}
	g.MustDrop()
}

// episode is host data for a mini-batch of response sequences of varying lengths.
type episode struct {
	d, v    int
	x       [][][]float64 // [seq][token][D]
	targets [][]int64
	old     [][]float64
	ref     [][]float64
	adv     [][]float64
}

func newEpisode(lens []int, d, v int, rng *rand.Rand) episode {
	e := episode{d: d, v: v}
	for _, n := range lens {
		var xs [][]float64
		var tg []int64
		var old, ref, adv []float64
		for j := 0; j < n; j++ {
			row := make([]float64, d)
			for k := range row {
				row[k] = rng.NormFloat64()
			}
			xs = append(xs, row)
			tg = append(tg, int64(rng.IntN(v)))
			old = append(old, -math.Log(float64(v))+rng.NormFloat64()*0.4)
			ref = append(ref, -math.Log(float64(v))+rng.NormFloat64()*0.4)
			adv = append(adv, rng.NormFloat64())
		}
		e.x, e.targets = append(e.x, xs), append(e.targets, tg)
		e.old, e.ref, e.adv = append(e.old, old), append(e.ref, ref), append(e.adv, adv)
	}
	return e
}

// micro builds the tensors of sequences [lo, hi), padded to their longest one.
func (e episode) micro(t *testing.T, l linear, lo, hi int, dt gotch.DType) (Micro, func()) {
	t.Helper()
	width := 0
	for i := lo; i < hi; i++ {
		width = max(width, len(e.targets[i]))
	}
	b := int64(hi - lo)
	var x, tg []float64
	for i := lo; i < hi; i++ {
		for j := 0; j < width; j++ {
			if j < len(e.targets[i]) {
				x = append(x, e.x[i][j]...)
				tg = append(tg, float64(e.targets[i][j]))
			} else {
				x = append(x, make([]float64, e.d)...)
				tg = append(tg, 0)
			}
		}
	}
	shape := []int64{b, int64(width)}
	xt := tensorOf(t, x, []int64{b, int64(width), int64(e.d)}, dt)
	tgt := tensorOf(t, tg, shape, gotch.Int64)
	logp, logits := l.forward(xt, tgt)
	oldData, mask := padded(e.old[lo:hi], width, 0)
	refData, _ := padded(e.ref[lo:hi], width, 0)
	advData, _ := padded(e.adv[lo:hi], width, 0)
	mb := Micro{
		Logp:    logp,
		Logits:  logits,
		OldLogp: tensorOf(t, oldData, shape, dt),
		RefLogp: tensorOf(t, refData, shape, dt),
		Adv:     tensorOf(t, advData, shape, dt),
		Mask:    tensorOf(t, mask, shape, gotch.Float),
	}
	return mb, func() { torch.Drop(xt, tgt, mb.Logp, mb.Logits, mb.OldLogp, mb.RefLogp, mb.Adv, mb.Mask) }
}

package train

import (
	"math"

	"github.com/mempo/mempo/model/torch"
)

// stepScalars are the scalars of one AdamW update of a segment, each formed from
// float64 values as PyTorch's single-tensor AdamW forms it from Python floats.
type stepScalars struct {
	decay       float64 // 1 − lr·λ
	w1          float64 // 1 − β1, the lerp weight
	beta2, w2   float64 // β2 and 1 − β2
	bc2Sqrt     float64 // √(1 − β2^step)
	eps         float64
	negStepSize float64 // −lr / (1 − β1^step)
}

// scalars are the update's scalars at learning rate lr for the step-th update of a
// parameter (step from 1), with the bias corrections through libm's pow.
func (c AdamWConfig) scalars(lr float64, step int64) stepScalars {
	k := float64(step)
	bc1 := 1 - pow(c.Beta1, k)
	bc2 := 1 - pow(c.Beta2, k)
	stepSize := lr / bc1
	// float64(·) keeps the product from fusing into an FMA, which Python never does.
	return stepScalars{decay: 1 - float64(lr*c.WeightDecay), w1: 1 - c.Beta1, beta2: c.Beta2, w2: 1 - c.Beta2,
		bc2Sqrt: math.Sqrt(bc2), eps: c.Eps, negStepSize: -stepSize}
}

// update clips the gradients of sg's members by clip (a 0-dim tensor, or the zero Raw
// for no clipping) and applies one AdamW step at learning rate lr to them, chunk by
// chunk, the chunks dealt round-robin to the group's workers (torch.Parallel).
func (o *AdamW) update(sg segment, lr float64, clip torch.Raw) {
	sc := o.cfg.scalars(lr, sg.step+1)
	// The parameters are leaves that may require grad; detached aliases share their
	// storage and let the update run in place whatever the grad mode, which libtorch
	// keeps per OS thread and Go does not pin.
	weights := make([]torch.Raw, len(sg.members))
	for j, i := range sg.members {
		d := o.handles[i].Detach()
		weights[j] = d.View(-1)
		d.Free()
	}
	defer torch.Free(weights...)
	chunk := chunkFor(sg.g.dev, o.chunk)
	chunks := (sg.hi - sg.lo + chunk - 1) / chunk
	w := int(min(int64(sg.g.workers), chunks))
	torch.Parallel(w, func(k int) {
		for c := int64(k); c < chunks; c += int64(w) {
			lo := sg.lo + c*chunk
			o.updateChunk(sg, weights, lo, min(chunk, sg.hi-lo), sc, clip, int64(k)*chunk)
		}
	})
	for _, i := range sg.members {
		o.slots[i].step++
	}
}

// updateChunk clips and updates the flat range [lo, lo+n) of sg's group: the gradient
// times the clip coefficient, written back as clip_grad_norm_ does, then PyTorch 2.1's
// _single_tensor_adamw, element for element,
//
//	θ.mul_(1 − lr·λ)
//	m.lerp_(g, 1 − β1);  v.mul_(β2).addcmul_(g, g, value=1 − β2)
//	denom = (v.sqrt() / √bc2).add_(ε);  θ.addcdiv_(m, denom, value=−step_size)
//
// with addcmul_ as v + ((1 − β2)·g)·g and addcdiv_ as θ + (−step_size·m)/denom, the
// order the per-tensor implementation used (gotch's addcmul and addcdiv take no
// value). Every op is element-wise and its libtorch kernel computes each element the
// same way whatever its position (vectorised body and scalar tail agree, checked by
// TestFlatMatchesPerTensor), so the chunking changes no bit, and neither does which
// worker runs a chunk: its scratch is the worker's, from offset scratch of tmp and tmp2.
//
// A half-precision group's gradient is first cast to float32 into t2, which is free
// until it takes −step_size·m after the gradient's last use; the clip scales that cast,
// and the half-precision gradient keeps its unclipped values.
func (o *AdamW) updateChunk(sg segment, weights []torch.Raw, lo, n int64, sc stepScalars, clip torch.Raw, scratch int64) {
	g := sg.g
	flat := g.grad.Narrow(0, lo, n)
	m := g.expAvg.Narrow(0, lo, n)
	v := g.expAvgSq.Narrow(0, lo, n)
	t1 := g.tmp.Narrow(0, scratch, n)
	t2 := g.tmp2.Narrow(0, scratch, n)
	defer torch.Free(flat, m, v, t1, t2)
	grad := flat // the chunk's gradient as the update reads it
	if g.half {
		t2.CopyFrom(flat)
		grad = t2
	}
	ps := o.pieces(sg, weights, lo, n, scratch)
	defer ps.free()
	if clip != (torch.Raw{}) {
		grad.Mul_(clip)
	}

	// θ ← θ·(1 − lr·λ): the master weights of a half-precision group, else the
	// parameters' own storage.
	var theta torch.Raw
	if g.half {
		theta = g.master.Narrow(0, lo, n)
		defer theta.Free()
		theta.MulScalar_(sc.decay)
	} else {
		for _, p := range ps {
			p.weight.MulScalar_(sc.decay)
		}
	}
	m.Lerp_(grad, sc.w1)
	v.MulScalar_(sc.beta2)
	grad.MulScalarInto(t1, sc.w2)
	t1.Mul_(grad)
	v.Add_(t1)
	v.SqrtInto(t1)
	t1.DivScalar_(sc.bc2Sqrt)
	t1.AddScalar_(sc.eps) // t1 = denom
	m.MulScalarInto(t2, sc.negStepSize)
	t2.Div_(t1) // t2 = −step_size·m/denom
	if g.half {
		theta.Add_(t2)
	}
	for _, p := range ps {
		if g.half {
			p.weight.CopyFrom(p.src) // round the master to the parameter's dtype
		} else {
			p.weight.Add_(p.src)
		}
	}
}

// piece is the part of one member inside a chunk: its weights (a view of the
// parameter) and the same elements of the step's source, the update −step_size·m/denom
// or, in a half-precision group, the master weights.
type piece struct{ weight, src torch.Raw }

type pieces []piece

func (ps pieces) free() {
	for _, p := range ps {
		torch.Free(p.weight, p.src)
	}
}

// pieces cuts the members of sg that overlap the chunk [lo, lo+n) out of their
// weights and of the step's source (the scratch from offset scratch).
func (o *AdamW) pieces(sg segment, weights []torch.Raw, lo, n, scratch int64) pieces {
	var ps pieces
	for j, i := range sg.members {
		s := o.slots[i]
		a, b := max(s.off, lo), min(s.off+s.numel, lo+n)
		if a >= b {
			continue
		}
		p := piece{weight: weights[j].Narrow(0, a-s.off, b-a)}
		if sg.g.half {
			p.src = sg.g.master.Narrow(0, a, b-a)
		} else {
			p.src = sg.g.tmp2.Narrow(0, scratch+a-lo, b-a)
		}
		ps = append(ps, p)
	}
	return ps
}

package train

import (
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// perTensor is the AdamW of commit 195a7c0, before the flat buffers: the
// same update op for op on each parameter tensor, allocating its temporaries. The flat
// implementation must reproduce its weights, state and gradients bit for bit
// (TestFlatMatchesPerTensor), and BenchmarkAdamWStep measures against it.
type perTensor struct {
	cfg    AdamWConfig
	params []Param
	slots  []perTensorSlot
	steps  int64
}

type perTensorSlot struct {
	master           *ts.Tensor // float32 copy of a half-precision parameter; nil otherwise
	expAvg, expAvgSq *ts.Tensor
	step             int64
}

func newPerTensor(params []Param, cfg AdamWConfig) *perTensor {
	o := &perTensor{cfg: cfg, params: params, slots: make([]perTensorSlot, len(params))}
	for i, p := range params {
		s := &o.slots[i]
		dt := p.T.DType()
		if dt == gotch.BFloat16 || dt == gotch.Half {
			d := torch.Must(p.T.Detach(false))
			s.master = torch.Must(d.Totype(gotch.Float, true))
			dt = gotch.Float
		}
		size, dev := p.T.MustSize(), p.T.MustDevice()
		s.expAvg = torch.Must(ts.Zeros(size, dt, dev))
		s.expAvgSq = torch.Must(ts.Zeros(size, dt, dev))
	}
	return o
}

func (o *perTensor) drop() {
	for _, s := range o.slots {
		torch.Drop(s.master, s.expAvg, s.expAvgSq)
	}
}

func (o *perTensor) zeroGrad() {
	for _, p := range o.params {
		g := torch.Must(p.T.Grad(false))
		if defined(g) {
			torch.InPlace(g, g.Zero_)
		}
		g.MustDrop()
	}
}

// step is the old Step less its error paths: the tests feed finite gradients.
func (o *perTensor) step() StepStats {
	var st StepStats
	k := o.steps + 1
	grads := make([]*ts.Tensor, len(o.params))
	defer func() { torch.Drop(grads...) }()
	for i, p := range o.params {
		g := torch.Must(p.T.Grad(false))
		if !defined(g) {
			g.MustDrop()
			continue
		}
		if o.slots[i].master != nil {
			g = torch.Must(g.Totype(gotch.Float, true))
		}
		grads[i] = g
	}
	total := perTensorGradNorm(grads)
	defer total.MustDrop()
	st.GradNorm = torch.Item(total)
	if o.cfg.MaxGradNorm > 0 {
		perTensorClip(grads, total, o.cfg.MaxGradNorm)
	}
	st.LR = o.cfg.LRAt(k)
	o.steps = k
	for i, g := range grads {
		if g != nil {
			o.update(i, g, st.LR)
		}
	}
	return st
}

func perTensorGradNorm(grads []*ts.Tensor) *ts.Tensor {
	var norms []*ts.Tensor
	defer func() { torch.Drop(norms...) }()
	for _, g := range grads {
		if g != nil {
			norms = append(norms, torch.Must(g.Norm(false)))
		}
	}
	stacked := torch.Must(ts.Stack(norms, 0))
	return torch.Must(stacked.Norm(true))
}

func perTensorClip(grads []*ts.Tensor, total *ts.Tensor, maxNorm float64) {
	d := torch.Must(total.AddScalar(torch.Scalar(1e-6), false))
	r := torch.Must(d.Reciprocal(true))
	c := torch.Must(r.MulScalar(torch.Scalar(maxNorm), true))
	coef := torch.Must(c.ClampMax(torch.Scalar(1), true))
	defer coef.MustDrop()
	for _, g := range grads {
		if g != nil {
			torch.InPlace(g, func() error { return g.Mul_(coef) })
		}
	}
}

func (o *perTensor) update(i int, g *ts.Tensor, lr float64) {
	c, s := o.cfg, &o.slots[i]
	param := torch.Must(o.params[i].T.Detach(false))
	defer param.MustDrop()
	target := param
	if s.master != nil {
		target = s.master
	}

	s.step++
	torch.InPlace(target, func() error { return target.MulScalar_(torch.Scalar(1 - float64(lr*c.WeightDecay))) })
	torch.InPlace(s.expAvg, func() error { return s.expAvg.Lerp_(g, torch.Scalar(1-c.Beta1)) })
	torch.InPlace(s.expAvgSq, func() error { return s.expAvgSq.MulScalar_(torch.Scalar(c.Beta2)) })
	sg := torch.Must(g.MulScalar(torch.Scalar(1-c.Beta2), false))
	sgg := torch.Must(sg.Mul(g, true))
	torch.InPlace(s.expAvgSq, func() error { return s.expAvgSq.Add_(sgg) })
	sgg.MustDrop()

	step := float64(s.step)
	bc1 := 1 - pow(c.Beta1, step)
	bc2 := 1 - pow(c.Beta2, step)
	stepSize := lr / bc1
	bc2Sqrt := math.Sqrt(bc2)
	root := torch.Must(s.expAvgSq.Sqrt(false))
	scaled := torch.Must(root.DivScalar(torch.Scalar(bc2Sqrt), true))
	denom := torch.Must(scaled.AddScalar(torch.Scalar(c.Eps), true))
	num := torch.Must(s.expAvg.MulScalar(torch.Scalar(-stepSize), false))
	delta := torch.Must(num.Div(denom, true))
	denom.MustDrop()
	torch.InPlace(target, func() error { return target.Add_(delta) })
	delta.MustDrop()

	if s.master != nil {
		torch.Copy(param, s.master)
	}
}

// state is the per-parameter state under State's keys, as host values.
func (o *perTensor) state() map[string][]float64 {
	out := map[string][]float64{}
	for i, p := range o.params {
		s := o.slots[i]
		out[p.Name+keyExpAvg] = torch.Values(s.expAvg)
		out[p.Name+keyExpAvgSq] = torch.Values(s.expAvgSq)
		if s.master != nil {
			out[p.Name+keyMaster] = torch.Values(s.master)
		}
		out[p.Name+keyStep] = []float64{float64(s.step)}
	}
	out[KeySteps] = []float64{float64(o.steps)}
	return out
}

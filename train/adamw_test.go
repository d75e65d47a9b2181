package train

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// refAdamW is torch.optim.AdamW's single-tensor update with clip_grad_norm_ written out
// in float64, one parameter vector, learning rates given per step.
type refAdamW struct {
	p, m, v []float64
	step    int
}

func (r *refAdamW) update(g []float64, c AdamWConfig, lr float64) (norm float64) {
	g = slices.Clone(g)
	for _, x := range g {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	if c.MaxGradNorm > 0 {
		coef := math.Min(1, c.MaxGradNorm/(norm+1e-6))
		for i := range g {
			g[i] *= coef
		}
	}
	r.step++
	bc1 := 1 - math.Pow(c.Beta1, float64(r.step))
	bc2 := 1 - math.Pow(c.Beta2, float64(r.step))
	for i := range r.p {
		r.p[i] *= 1 - lr*c.WeightDecay
		r.m[i] += (1 - c.Beta1) * (g[i] - r.m[i])
		r.v[i] = r.v[i]*c.Beta2 + (1-c.Beta2)*g[i]*g[i]
		r.p[i] -= lr / bc1 * r.m[i] / (math.Sqrt(r.v[i])/math.Sqrt(bc2) + c.Eps)
	}
	return norm
}

// setGrad makes p's gradient equal g (rounded to p's dtype) by backpropagating Σ p·g,
// in float64 for a float64 p and in float32 otherwise.
func setGrad(t *testing.T, p *ts.Tensor, g []float64) {
	t.Helper()
	dt := computeType(p)
	c := tensorOf(t, g, p.MustSize(), dt)
	pf := torch.Must(p.Totype(dt, false))
	prod := torch.Must(pf.Mul(c, true))
	loss := torch.Must(prod.Sum(dt, true))
	torch.Check(loss.Backward())
	torch.Drop(c, loss)
}

func TestAdamWMatchesPyTorchFormula(t *testing.T) {
	checkLeaks(t)
	p0 := []float64{0.5, -1.0, 2.0}
	grads := [][]float64{{0.6, -0.8, 0}, {-0.1, 0.4, 2.0}}
	base := AdamWConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	withWarmup, withClip := base, base
	withWarmup.WarmupSteps = 2
	withClip.MaxGradNorm = 0.5
	tests := []struct {
		name string
		cfg  AdamWConfig
		lrs  []float64 // the learning rate of each step, worked out by hand
	}{
		{"constant", base, []float64{0.1, 0.1}},
		{"warm-up 2", withWarmup, []float64{0, 0.05}},
		{"clip 0.5", withClip, []float64{0.1, 0.1}},
	}
	for _, dt := range []struct {
		name string
		dt   gotch.DType
		tol  float64
	}{{"float64", gotch.Double, 1e-14}, {"float32", gotch.Float, 1e-6}} {
		for _, tt := range tests {
			t.Run(dt.name+"/"+tt.name, func(t *testing.T) {
				x := tensorOf(t, p0, []int64{3}, dt.dt)
				p := torch.Must(x.SetRequiresGrad(true, true))
				defer p.MustDrop()
				opt, err := NewAdamW([]Param{{"w", p}}, tt.cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer opt.Drop()
				ref := refAdamW{p: slices.Clone(p0), m: make([]float64, 3), v: make([]float64, 3)}
				for k, g := range grads {
					torch.Check(opt.ZeroGrad())
					setGrad(t, p, g)
					st, err := opt.Step()
					if err != nil {
						t.Fatal(err)
					}
					norm := ref.update(g, tt.cfg, tt.lrs[k])
					if !near(st.GradNorm, norm, 1e-6) || st.LR != tt.lrs[k] {
						t.Errorf("step %d: grad_norm %v lr %v, want %v %v", k+1, st.GradNorm, st.LR, norm, tt.lrs[k])
					}
					got := torch.Values(p)
					for i := range got {
						if !near(got[i], ref.p[i], dt.tol) {
							t.Errorf("step %d: θ = %v, want %v", k+1, got, ref.p)
							break
						}
					}
				}
				if opt.Steps() != 2 {
					t.Errorf("Steps() = %d, want 2", opt.Steps())
				}
			})
		}
	}
}

// TestAdamWFirstStepByHand: at step 1 the bias-corrected update is lr·g/(|g| + ε), about
// lr·sign(g), after decoupled decay θ·(1 − lr·λ).
func TestAdamWFirstStepByHand(t *testing.T) {
	checkLeaks(t)
	x := tensorOf(t, []float64{0.5, -1.0, 2.0}, []int64{3}, gotch.Double)
	p := torch.Must(x.SetRequiresGrad(true, true))
	defer p.MustDrop()
	opt, err := NewAdamW([]Param{{"w", p}}, AdamWConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()
	setGrad(t, p, []float64{0.6, -0.8, 0})
	if _, err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	want := []float64{0.4995 - 0.1, -0.999 + 0.1, 1.998}
	got := torch.Values(p)
	for i := range want {
		if !near(got[i], want[i], 1e-7) {
			t.Errorf("θ after one step = %v, want %v", got, want)
			break
		}
	}
}

// TestAdvantageSignMovesProbability: one AdamW step on the PPO loss of one token raises
// that token's probability when its advantage is positive and lowers it when negative.
func TestAdvantageSignMovesProbability(t *testing.T) {
	checkLeaks(t)
	for _, adv := range []float64{1, -1} {
		rng := rand.New(rand.NewPCG(3, 5))
		e := newEpisode([]int{1}, 3, 5, rng)
		l := newLinear(t, 5, 3, gotch.Float, rng)
		opt, err := NewAdamW([]Param{{"lm_head.weight", l.w}}, AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, MaxGradNorm: 1})
		if err != nil {
			t.Fatal(err)
		}
		logp := func() float64 {
			mb, done := e.micro(t, l, 0, 1, gotch.Float)
			defer done()
			return torch.Item(mb.Logp)
		}
		before := logp()
		e.old[0][0], e.ref[0][0], e.adv[0][0] = before, before, adv
		mb, done := e.micro(t, l, 0, 1, gotch.Float)
		loss, _, err := DefaultObjective.Loss(mb, 1)
		if err != nil {
			t.Fatal(err)
		}
		torch.Check(loss.Backward())
		torch.Drop(loss)
		done()
		if _, err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		after := logp()
		opt.Drop()
		l.w.MustDrop()
		if adv > 0 && !(after > before) || adv < 0 && !(after < before) {
			t.Errorf("advantage %v: log p(token) %v → %v after one step, want it to move with the advantage's sign", adv, before, after)
		}
	}
}

// trainee is a small two-parameter model, one float32 and one bfloat16 (kept with a
// float32 master), with a loss whose gradient depends on the parameters.
type trainee struct{ w, b *ts.Tensor }

func newTrainee(t *testing.T, w, b []float64) trainee {
	t.Helper()
	wt := tensorOf(t, w, []int64{2, 3}, gotch.Float)
	bt := tensorOf(t, b, []int64{3}, gotch.BFloat16)
	return trainee{w: torch.Must(wt.SetRequiresGrad(true, true)), b: torch.Must(bt.SetRequiresGrad(true, true))}
}

func (m trainee) params() []Param { return []Param{{"w", m.w}, {"b", m.b}} }

func (m trainee) drop() { torch.Drop(m.w, m.b) }

// backward accumulates the gradient of Σ w²·c + Σ b·w[0].
func (m trainee) backward(t *testing.T, c []float64) {
	t.Helper()
	ct := tensorOf(t, c, []int64{2, 3}, gotch.Float)
	sq := torch.Must(m.w.Square(false))
	a := torch.Must(sq.Mul(ct, true))
	s1 := torch.Must(a.Sum(gotch.Float, true))
	bf := torch.Must(m.b.Totype(gotch.Float, false))
	row := torch.Must(m.w.Narrow(0, 0, 1, false))
	ab := torch.Must(bf.Mul(row, true))
	row.MustDrop()
	s2 := torch.Must(ab.Sum(gotch.Float, true))
	loss := torch.Must(s1.Add(s2, true))
	s2.MustDrop()
	torch.Check(loss.Backward())
	torch.Drop(ct, loss)
}

var resumeCfg = AdamWConfig{LR: 0.05, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, WarmupSteps: 4, MaxGradNorm: 0.7}

var resumeGrads = [][]float64{{1, -2, 0.5, 3, 0.1, -1}, {-0.4, 2, 1, 0.3, -3, 2}, {0.7, 0.2, -1.5, 1, 1, -0.2}}

func (m trainee) run(t *testing.T, opt *AdamW, steps [][]float64) {
	t.Helper()
	for _, c := range steps {
		torch.Check(opt.ZeroGrad())
		m.backward(t, c)
		if _, err := opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot is every value the model and optimizer hold, for bit-exact comparison.
func snapshot(t *testing.T, m trainee, opt *AdamW) map[string][]float64 {
	t.Helper()
	st, err := opt.State()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float64{"param w": torch.Values(m.w), "param b": torch.Values(m.b)}
	for k, v := range st {
		out[k] = torch.Values(v)
		v.MustDrop()
	}
	return out
}

func TestStateResumeIsExact(t *testing.T) {
	checkLeaks(t)
	w0, b0 := []float64{0.3, -0.2, 0.9, 1.1, -0.7, 0.05}, []float64{0.5, -0.25, 1.5}

	whole := newTrainee(t, w0, b0)
	defer whole.drop()
	optWhole, err := NewAdamW(whole.params(), resumeCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer optWhole.Drop()
	whole.run(t, optWhole, resumeGrads)
	want := snapshot(t, whole, optWhole)

	// Two steps, then save the model and optimizer as a checkpoint would.
	first := newTrainee(t, w0, b0)
	defer first.drop()
	optFirst, err := NewAdamW(first.params(), resumeCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer optFirst.Drop()
	first.run(t, optFirst, resumeGrads[:2])
	saved, err := optFirst.State()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, v := range saved {
			v.MustDrop()
		}
	}()
	wSaved, bSaved := torch.Values(first.w), torch.Values(first.b)

	for _, load := range []bool{true, false} {
		resumed := newTrainee(t, wSaved, bSaved)
		opt, err := NewAdamW(resumed.params(), resumeCfg)
		if err != nil {
			t.Fatal(err)
		}
		if load {
			if err := opt.LoadState(saved); err != nil {
				t.Fatal(err)
			}
		}
		resumed.run(t, opt, resumeGrads[2:])
		got := snapshot(t, resumed, opt)
		opt.Drop()
		resumed.drop()
		same := len(got) == len(want)
		for k, v := range want {
			if !slices.Equal(got[k], v) {
				same = false
				if load {
					t.Errorf("resumed %s = %v, uninterrupted %v; want bit-identical", k, got[k], v)
				}
			}
		}
		if !load && same {
			t.Error("a fresh optimizer after two steps ends like the uninterrupted run; the comparison cannot detect a lost state")
		}
	}
	// 2 parameters, each with exp_avg, exp_avg_sq and step, b's master, the step count.
	if got := len(want); got != 10 {
		t.Errorf("snapshot has %d entries, want 10", got)
	}
}

func TestLoadStateRejects(t *testing.T) {
	checkLeaks(t)
	m := newTrainee(t, []float64{1, 2, 3, 4, 5, 6}, []float64{1, 2, 3})
	defer m.drop()
	opt, err := NewAdamW(m.params(), resumeCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()
	m.run(t, opt, resumeGrads[:1])
	before := snapshot(t, m, opt)

	tests := []struct {
		name string
		edit func(st map[string]*ts.Tensor)
	}{
		{"missing exp_avg", func(st map[string]*ts.Tensor) { st["w.exp_avg"].MustDrop(); delete(st, "w.exp_avg") }},
		{"missing master", func(st map[string]*ts.Tensor) { st["b.master"].MustDrop(); delete(st, "b.master") }},
		{"extra key", func(st map[string]*ts.Tensor) {
			st["c.exp_avg"] = torch.Must(ts.Zeros([]int64{3}, gotch.Float, gotch.CPU))
		}},
		{"wrong shape", func(st map[string]*ts.Tensor) {
			st["w.exp_avg_sq"].MustDrop()
			st["w.exp_avg_sq"] = torch.Must(ts.Zeros([]int64{3, 2}, gotch.Float, gotch.CPU))
		}},
		{"wrong dtype", func(st map[string]*ts.Tensor) {
			st["w.exp_avg"].MustDrop()
			st["w.exp_avg"] = torch.Must(ts.Zeros([]int64{2, 3}, gotch.Double, gotch.CPU))
		}},
		{"float step", func(st map[string]*ts.Tensor) {
			st["step"].MustDrop()
			st["step"] = torch.Must(ts.Zeros([]int64{1}, gotch.Float, gotch.CPU))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := opt.State()
			if err != nil {
				t.Fatal(err)
			}
			// Scribble on every tensor so a partial load would show.
			for _, v := range st {
				if v.DType() != gotch.Int64 {
					torch.InPlace(v, func() error { return v.Fill_(torch.Scalar(42)) })
				}
			}
			tt.edit(st)
			err = opt.LoadState(st)
			for _, v := range st {
				v.MustDrop()
			}
			if !errors.Is(err, ErrInput) {
				t.Fatalf("LoadState = %v, want ErrInput", err)
			}
			after := snapshot(t, m, opt)
			for k, v := range before {
				if !slices.Equal(after[k], v) {
					t.Errorf("%s changed by a rejected LoadState: %v → %v", k, v, after[k])
				}
			}
		})
	}
}

func TestStepRejectsNonFiniteGradient(t *testing.T) {
	checkLeaks(t)
	x := tensorOf(t, []float64{1, 2, 3}, []int64{3}, gotch.Float)
	p := torch.Must(x.SetRequiresGrad(true, true))
	defer p.MustDrop()
	opt, err := NewAdamW([]Param{{"w", p}}, DefaultAdamW)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()
	setGrad(t, p, []float64{1, math.NaN(), 0})
	if _, err := opt.Step(); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("Step with a NaN gradient = %v, want ErrNonFinite", err)
	}
	if got := torch.Values(p); !slices.Equal(got, []float64{1, 2, 3}) || opt.Steps() != 0 {
		t.Errorf("after a rejected step θ = %v, steps %d; want [1 2 3], 0", got, opt.Steps())
	}
}

// TestMasterWeightsAccumulate: updates of 1e-4 are below bfloat16's resolution at 1.0
// (2^-8), so a bfloat16 parameter updated in place would never move; with the float32
// master the updates accumulate and the parameter follows the master's rounding.
func TestMasterWeightsAccumulate(t *testing.T) {
	checkLeaks(t)
	x := tensorOf(t, []float64{1}, []int64{1}, gotch.BFloat16)
	p := torch.Must(x.SetRequiresGrad(true, true))
	defer p.MustDrop()
	opt, err := NewAdamW([]Param{{"w", p}}, AdamWConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()
	master := func() float64 {
		st, err := opt.State()
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			for _, v := range st {
				v.MustDrop()
			}
		}()
		return torch.Values(st["w.master"])[0]
	}
	step := func() {
		torch.Check(opt.ZeroGrad())
		setGrad(t, p, []float64{1})
		if _, err := opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if got, m := torch.Values(p)[0], master(); got != 1 || !(m < 1) {
		t.Fatalf("after one step θ = %v, master %v; want θ still 1 and the master below 1", got, m)
	}
	for range 29 {
		step()
	}
	got, m := torch.Values(p)[0], master()
	if want := float64(bf16(m)); got != want || !(got < 1) {
		t.Errorf("after 30 steps θ = %v, master %v; want θ = bf16(master) = %v < 1", got, m, want)
	}
}

// bf16 rounds x to bfloat16, to nearest even, and back.
func bf16(x float64) float32 {
	b := math.Float32bits(float32(x))
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

func TestNewAdamWRejects(t *testing.T) {
	checkLeaks(t)
	x := tensorOf(t, []float64{1}, []int64{1}, gotch.Float)
	i := tensorOf(t, []float64{1}, []int64{1}, gotch.Int64)
	defer torch.Drop(x, i)
	bad := DefaultAdamW
	bad.Beta2 = 1
	tests := []struct {
		name   string
		params []Param
		cfg    AdamWConfig
		class  error
	}{
		{"no params", nil, DefaultAdamW, ErrInput},
		{"no name", []Param{{"", x}}, DefaultAdamW, ErrInput},
		{"duplicate", []Param{{"w", x}, {"w", x}}, DefaultAdamW, ErrInput},
		{"integer", []Param{{"w", i}}, DefaultAdamW, ErrInput},
		{"beta2 1", []Param{{"w", x}}, bad, ErrConfig},
	}
	for _, tt := range tests {
		opt, err := NewAdamW(tt.params, tt.cfg)
		if !errors.Is(err, tt.class) {
			t.Errorf("NewAdamW(%s) = %v, want %v", tt.name, err, tt.class)
		}
		if opt != nil {
			opt.Drop()
		}
	}
}

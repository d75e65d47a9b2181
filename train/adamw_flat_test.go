package train

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata goldens from the current code")

// flatParams are the parameters of TestFlatMatchesPerTensor: one split across
// libtorch's two threads (77357 elements, above its 32768-element grain), sizes that
// fill no vector register, every dtype, and "late", which gets no gradient on the first
// step, so its step count lags and the flat step splits its group there.
var flatParams = []struct {
	name  string
	shape []int64
	dt    gotch.DType
}{
	{"big", []int64{301, 257}, gotch.Float},
	{"row", []int64{1000}, gotch.Float},
	{"late", []int64{33, 5}, gotch.Float},
	{"odd", []int64{7}, gotch.Float},
	{"half", []int64{64, 33}, gotch.BFloat16},
	{"half_small", []int64{5}, gotch.BFloat16},
	{"f16", []int64{9, 3}, gotch.Half},
	{"double", []int64{13}, gotch.Double},
}

// newFlatParams builds flatParams with values from a fixed seed, so two calls give
// equal parameters.
func newFlatParams(t *testing.T) []Param {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	var ps []Param
	for _, f := range flatParams {
		n := int64(1)
		for _, d := range f.shape {
			n *= d
		}
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64() * 0.1
		}
		x := tensorOf(t, v, f.shape, f.dt)
		ps = append(ps, Param{Name: f.name, T: torch.Must(x.SetRequiresGrad(true, true))})
	}
	return ps
}

// flatGrads draws two accumulated gradients per parameter and step, spread over six
// orders of magnitude; "late" gets none on step 0.
func flatGrads(steps int) [][][][]float64 {
	rng := rand.New(rand.NewPCG(3, 5))
	out := make([][][][]float64, steps)
	for k := range out {
		out[k] = make([][][]float64, len(flatParams))
		for i, f := range flatParams {
			if k == 0 && f.name == "late" {
				continue
			}
			n := int64(1)
			for _, d := range f.shape {
				n *= d
			}
			for range 2 {
				g := make([]float64, n)
				for j := range g {
					g[j] = rng.NormFloat64() * math.Pow(10, -4+5*rng.Float64())
				}
				out[k][i] = append(out[k][i], g)
			}
		}
	}
	return out
}

// bitsEqual reports whether a and b hold the same float64 bits (−0 differs from +0).
func bitsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// gradsOf is each parameter's gradient as host values, nil when it has none.
func gradsOf(ps []Param) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		g := torch.Must(p.T.Grad(false))
		if defined(g) {
			out[i] = torch.Values(g)
		}
		g.MustDrop()
	}
	return out
}

// TestFlatMatchesPerTensor runs the flat AdamW and the per-tensor one it replaced on
// equal parameters and gradients: every step's statistics, weights, state and (clipped)
// gradients must agree bit for bit, with the default chunk and with chunks that cut
// through parameters, the chunks updated by one worker or by three (torch.Parallel,
// one per thread the optimizer is built at).
func TestFlatMatchesPerTensor(t *testing.T) {
	checkLeaks(t)
	clip := AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, MaxGradNorm: 1}
	warm := AdamWConfig{LR: 0.05, Beta1: 0.8, Beta2: 0.95, Eps: 1e-6, WeightDecay: 0.1, WarmupSteps: 2}
	grads := flatGrads(4)
	for _, cfg := range []struct {
		name string
		c    AdamWConfig
	}{{"clip", clip}, {"warm-up no clip", warm}} {
		for _, chunk := range []int64{stepChunk, 1000, 37} {
			for _, threads := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/chunk %d/threads %d", cfg.name, chunk, threads), func(t *testing.T) {
					defer func(c int64) { stepChunk = c }(stepChunk)
					stepChunk = chunk
					defer torch.SetNumThreads(torch.NumThreads())
					torch.Check(torch.SetNumThreads(threads))
					compareFlat(t, cfg.c, grads)
				})
			}
		}
	}
}

func compareFlat(t *testing.T, cfg AdamWConfig, grads [][][][]float64) {
	t.Helper()
	pa, pb := newFlatParams(t), newFlatParams(t)
	defer func() {
		for i := range pa {
			torch.Drop(pa[i].T, pb[i].T)
		}
	}()
	ref := newPerTensor(pa, cfg)
	defer ref.drop()
	opt, err := NewAdamW(pb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()
	for k, step := range grads {
		ref.zeroGrad()
		torch.Check(opt.ZeroGrad())
		for i, gs := range step {
			for _, g := range gs {
				setGrad(t, pa[i].T, g)
				setGrad(t, pb[i].T, g)
			}
		}
		want := ref.step()
		got, err := opt.Step()
		if err != nil {
			t.Fatal(err)
		}
		if math.Float64bits(got.GradNorm) != math.Float64bits(want.GradNorm) || got.LR != want.LR {
			t.Errorf("step %d: Step() = %+v, per-tensor %+v", k+1, got, want)
		}
		for i := range pa {
			if g, w := torch.Values(pb[i].T), torch.Values(pa[i].T); !bitsEqual(g, w) {
				t.Errorf("step %d: %s differs from the per-tensor update", k+1, pa[i].Name)
			}
		}
		gg, wg := gradsOf(pb), gradsOf(pa)
		for i := range gg {
			if (gg[i] == nil) != (wg[i] == nil) || !bitsEqual(gg[i], wg[i]) {
				t.Errorf("step %d: gradient of %s differs from the per-tensor one", k+1, pa[i].Name)
			}
		}
	}
	st, err := opt.State()
	if err != nil {
		t.Fatal(err)
	}
	want := ref.state()
	for k, v := range st {
		if got := torch.Values(v); !bitsEqual(got, want[k]) {
			t.Errorf("state %s differs from the per-tensor one", k)
		}
		v.MustDrop()
	}
	if len(st) != len(want) {
		t.Errorf("State() has %d entries, per-tensor %d", len(st), len(want))
	}
}

// TestFlatGradsAccumulateInPlace checks that after the first step each parameter's
// gradient is its view into the flat buffer and later backward passes accumulate into
// that view in place (nothing left for Step to copy in), and that a gradient replaced
// behind the optimizer's back is copied in; the weights follow the per-tensor AdamW
// throughout.
func TestFlatGradsAccumulateInPlace(t *testing.T) {
	checkLeaks(t)
	w0, b0 := []float64{0.3, -0.2, 0.9, 1.1, -0.7, 0.05}, []float64{0.5, -0.25, 1.5}
	m, twin := newTrainee(t, w0, b0), newTrainee(t, w0, b0)
	defer m.drop()
	defer twin.drop()
	opt, err := NewAdamW(m.params(), resumeCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()
	ref := newPerTensor(twin.params(), resumeCfg)
	defer ref.drop()
	backward := func(cs ...[]float64) {
		torch.Check(opt.ZeroGrad())
		ref.zeroGrad()
		for _, c := range cs {
			m.backward(t, c)
			twin.backward(t, c)
		}
	}
	step := func() {
		if _, err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		ref.step()
	}

	backward(resumeGrads[0])
	step()
	if opt.adopted != 2 {
		t.Fatalf("first step adopted %d gradients, want 2", opt.adopted)
	}
	backward(resumeGrads[1:]...)
	want := gradsOf(twin.params())
	for i, p := range opt.params {
		s := opt.slots[i]
		if _, same := torch.Of(p.T).GradIs(s.grad); !same {
			t.Errorf("after backward the gradient of %s is not its view into the flat buffer", p.Name)
		}
		g := opt.groups[s.group].grad.Narrow(0, s.off, s.numel)
		if got := torch.ToHost[float64](g); !bitsEqual(got, want[i]) {
			t.Errorf("flat buffer holds %v for %s, accumulated gradient %v", got, p.Name, want[i])
		}
		g.Free()
	}
	step()
	if opt.adopted != 2 {
		t.Errorf("adopted %d gradients in all, want still 2: backward did not accumulate in place", opt.adopted)
	}

	// A gradient set to None is recomputed by backward as a fresh tensor: Step copies it in.
	torch.Of(m.w).ClearGrad()
	torch.Of(twin.w).ClearGrad()
	backward(resumeGrads[0])
	step()
	if opt.adopted != 3 {
		t.Errorf("adopted %d gradients in all, want 3", opt.adopted)
	}
	for _, p := range [][2]*ts.Tensor{{m.w, twin.w}, {m.b, twin.b}} {
		if g, w := torch.Values(p[0]), torch.Values(p[1]); !bitsEqual(g, w) {
			t.Errorf("weights %v, per-tensor AdamW %v", g, w)
		}
	}
}

// TestAdamWDropReleases checks that New, Step and Drop leave no tensor handle behind
// and that Drop takes the gradient buffer back from the parameters.
func TestAdamWDropReleases(t *testing.T) {
	checkLeaks(t)
	m := newTrainee(t, []float64{1, 2, 3, 4, 5, 6}, []float64{1, 2, 3})
	defer m.drop()
	base := liveTensors()
	opt, err := NewAdamW(m.params(), resumeCfg)
	if err != nil {
		t.Fatal(err)
	}
	m.run(t, opt, resumeGrads)
	opt.Drop()
	opt.Drop()
	if got := liveTensors(); got != base {
		t.Errorf("live tensors after New, Step, Drop = %d, want %d", got, base)
	}
	for _, p := range m.params() {
		g := torch.Must(p.T.Grad(false))
		if defined(g) {
			t.Errorf("%s keeps a gradient after Drop, want none (the buffer is freed)", p.Name)
		}
		g.MustDrop()
	}
}

// goldenOptimizer is an optimizer file written by the per-tensor AdamW of commit
// 195a7c0 (the trainee after two steps of resumeGrads); the flat AdamW must write the
// same bytes and continue from it bit for bit.
const goldenOptimizer = "testdata/optimizer_trainee.safetensors"

func TestOptimizerFileGolden(t *testing.T) {
	checkLeaks(t)
	w0, b0 := []float64{0.3, -0.2, 0.9, 1.1, -0.7, 0.05}, []float64{0.5, -0.25, 1.5}
	m := newTrainee(t, w0, b0)
	defer m.drop()
	opt, err := NewAdamW(m.params(), resumeCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()
	m.run(t, opt, resumeGrads[:2])
	path := filepath.Join(t.TempDir(), OptimizerFile)
	if *updateGolden {
		path = goldenOptimizer
	}
	if err := SaveOptimizer(path, opt); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(goldenOptimizer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("SaveOptimizer wrote %d bytes that differ from %s (%d bytes)", len(got), goldenOptimizer, len(want))
	}

	resumed := newTrainee(t, torch.Values(m.w), torch.Values(m.b))
	defer resumed.drop()
	again, err := NewAdamW(resumed.params(), resumeCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Drop()
	if err := LoadOptimizer(goldenOptimizer, again); err != nil {
		t.Fatal(err)
	}
	m.run(t, opt, resumeGrads[2:])
	resumed.run(t, again, resumeGrads[2:])
	for _, k := range []string{"param w", "param b"} {
		if g, w := snapshot(t, resumed, again)[k], snapshot(t, m, opt)[k]; !bitsEqual(g, w) {
			t.Errorf("%s after a step from the golden file = %v, uninterrupted %v", k, g, w)
		}
	}
}

// TestNewAdamWRejectsLayouts: the flat step updates each parameter through a row-major
// view of its storage, so a tensor listed twice or a non-contiguous one is refused.
func TestNewAdamWRejectsLayouts(t *testing.T) {
	checkLeaks(t)
	x := tensorOf(t, []float64{1, 2, 3, 4, 5, 6}, []int64{2, 3}, gotch.Float)
	defer x.MustDrop()
	alias := torch.Of(x).Alias().Wrap()
	tr := torch.Of(x).Transpose(0, 1).Wrap()
	defer torch.Drop(alias, tr)
	for _, tt := range []struct {
		name   string
		params []Param
	}{
		{"one tensor under two names", []Param{{"embed", x}, {"head", alias}}},
		{"transposed", []Param{{"w", tr}}},
	} {
		opt, err := NewAdamW(tt.params, DefaultAdamW)
		if !errors.Is(err, ErrInput) {
			t.Errorf("NewAdamW(%s) = %v, want ErrInput", tt.name, err)
		}
		if opt != nil {
			opt.Drop()
		}
	}
}

// TestAdamWHalfKeepsNoGradientCopy: a bfloat16 model's optimizer holds float32 master
// weights and two float32 moments, 12 bytes a parameter, and two scratch buffers (the
// gradient norm's and the update's chunk per worker), but no float32 copy of the gradient, which
// would make it 16; and the gradient norm of a parameter larger than the norm's scratch,
// taken piece by piece, is the per-tensor AdamW's up to float32 rounding.
func TestAdamWHalfKeepsNoGradientCopy(t *testing.T) {
	checkLeaks(t)
	defer func(s, n int64) { stepChunk, normChunk = s, n }(stepChunk, normChunk)
	stepChunk, normChunk = 1000, 4096
	shapes := [][]int64{{100, 70}, {3000}, {5}} // 7000 elements: two norm pieces
	numel := func(shape []int64) int64 {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		return n
	}
	newParams := func() []Param {
		rng := rand.New(rand.NewPCG(1, 2))
		var ps []Param
		for i, sh := range shapes {
			v := make([]float64, numel(sh))
			for j := range v {
				v[j] = rng.NormFloat64() * 0.1
			}
			x := tensorOf(t, v, sh, gotch.BFloat16)
			ps = append(ps, Param{Name: fmt.Sprintf("p%d", i), T: torch.Must(x.SetRequiresGrad(true, true))})
		}
		return ps
	}
	pa, pb := newParams(), newParams()
	defer func() {
		for i := range pa {
			torch.Drop(pa[i].T, pb[i].T)
		}
	}()
	cfg := AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, MaxGradNorm: 1}
	ref := newPerTensor(pa, cfg)
	defer ref.drop()
	opt, err := NewAdamW(pb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Drop()

	rng := rand.New(rand.NewPCG(3, 4))
	for k := range 2 {
		ref.zeroGrad()
		torch.Check(opt.ZeroGrad())
		for i, sh := range shapes {
			g := make([]float64, numel(sh))
			for j := range g {
				g[j] = rng.NormFloat64()
			}
			setGrad(t, pa[i].T, g)
			setGrad(t, pb[i].T, g)
		}
		want := ref.step()
		got, err := opt.Step()
		if err != nil {
			t.Fatal(err)
		}
		if !near(got.GradNorm, want.GradNorm, 1e-6) {
			t.Errorf("step %d: grad norm %v, per-tensor %v", k+1, got.GradNorm, want.GradNorm)
		}
		for i := range pa {
			g, w := torch.Values(pb[i].T), torch.Values(pa[i].T)
			for j := range w {
				if !near(g[j], w[j], 1e-2) {
					t.Fatalf("step %d: %s[%d] = %v, per-tensor %v", k+1, pa[i].Name, j, g[j], w[j])
				}
			}
		}
	}

	var padded int64
	for _, sh := range shapes {
		padded += (numel(sh) + align - 1) / align * align
	}
	got := optimizerBytes(opt)
	want := map[gotch.DType]int64{
		gotch.Float:    12*padded + 4*(normChunk+int64(opt.groups[0].workers)*stepChunk),
		gotch.BFloat16: 2 * padded, // the gradient buffer
	}
	if len(got) != len(want) || got[gotch.Float] != want[gotch.Float] || got[gotch.BFloat16] != want[gotch.BFloat16] {
		t.Errorf("optimizer buffers hold %v bytes by dtype, want %v (%d parameters, padded)", got, want, padded)
	}
}

// optimizerBytes is the memory of o's buffers by dtype: every buffer its groups own
// and free (moments, master weights, gradients, scratch).
func optimizerBytes(o *AdamW) map[gotch.DType]int64 {
	out := map[gotch.DType]int64{}
	for _, g := range o.groups {
		for _, x := range g.buffers() {
			n := int64(1)
			for _, d := range x.Size() {
				n *= d
			}
			out[x.DType()] += n * int64(x.DType().Size())
		}
	}
	return out
}

package train

import (
	"errors"
	"math"
	"testing"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/ppo"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// A tiny fixed mini-batch whose tokens hit every branch of the clipped, dual-clipped
// surrogate and the ±20 ratio clamp. Padding holds junk that must not count.
var (
	fixLogp = [][]float64{
		{-1.0, -0.5, -2.0, -0.1},
		{-1.2, 3.0},
		{-0.3, -4.0, -0.7},
		{-0.2},
	}
	fixOld = [][]float64{
		{-1.0, -0.9, -1.5, -0.4}, // ρ = 1, e^0.4, e^-0.5, e^0.3
		{-1.0, -25.0},            // ρ = e^-0.2, clamped e^20
		{-0.9, -1.0, -0.2},       // ρ = e^0.6, e^-3, e^-0.5
		{-0.5},                   // ρ = e^0.3, alone in its sequence
	}
	fixAdv = [][]float64{
		{1.0, 1.0, 1.0, -0.5},
		{-2.0, -1.0},
		{-1.0, 0.7, -1.5},
		{0.3},
	}
)

const fixWidth = 4

func TestPolicyLossMatchesReference(t *testing.T) {
	checkLeaks(t)
	for _, dt := range []struct {
		name string
		dt   gotch.DType
		tol  float64
	}{{"float64", gotch.Double, 1e-12}, {"float32", gotch.Float, 2e-6}} {
		for _, mode := range []Agg{ppo.AggTokenMean, ppo.AggSeqMeanTokenMean, ppo.AggSeqMeanTokenSum} {
			t.Run(dt.name+"/"+string(mode), func(t *testing.T) {
				lp, old, adv := fixLogp, fixOld, fixAdv
				if dt.dt == gotch.Float {
					lp, old, adv = round32(lp), round32(old), round32(adv)
				}
				want, err := ppo.BatchPolicyLoss(adv, lp, old, ppo.DefaultClip, mode)
				if err != nil {
					t.Fatal(err)
				}
				div, err := Divisor(mode, lengths(lp))
				if err != nil {
					t.Fatal(err)
				}
				shape := []int64{int64(len(lp)), fixWidth}
				lpData, mask := padded(lp, fixWidth, -7)
				oldData, _ := padded(old, fixWidth, 3)
				advData, _ := padded(adv, fixWidth, 9)
				tlp := tensorOf(t, lpData, shape, dt.dt)
				told := tensorOf(t, oldData, shape, dt.dt)
				tadv := tensorOf(t, advData, shape, dt.dt)
				tmask := tensorOf(t, mask, shape, gotch.Float)
				defer torch.Drop(tlp, told, tadv, tmask)

				loss, got, err := PolicyLoss(tlp, told, tadv, tmask, ppo.DefaultClip, mode, div)
				if err != nil {
					t.Fatal(err)
				}
				defer loss.MustDrop()
				if v := torch.Item(loss); v != got.Loss {
					t.Errorf("loss tensor = %v, stats pg_loss = %v; want equal", v, got.Loss)
				}
				for _, c := range []struct {
					name      string
					got, want float64
				}{
					{"pg_loss", got.Loss, want.Loss},
					{"pg_clipfrac", got.ClipFrac, want.ClipFrac},
					{"pg_clipfrac_lower", got.ClipFracLow, want.ClipFracLow},
					{"ppo_kl", got.PPOKL, want.PPOKL},
				} {
					if !near(c.got, c.want, dt.tol) {
						t.Errorf("%s = %.15g, want %.15g", c.name, c.got, c.want)
					}
				}
				if got.Tokens != 10 {
					t.Errorf("tokens = %d, want 10", got.Tokens)
				}
				// The fixture must exercise both events, or the fractions test nothing.
				if want.ClipFrac == 0 || want.ClipFracLow == 0 {
					t.Fatalf("fixture has clipfrac %v, clipfrac_lower %v; want both > 0", want.ClipFrac, want.ClipFracLow)
				}
			})
		}
	}
}

// TestPolicyLossHandNumbers pins two tokens to numbers worked by hand: A = 1 with
// ρ = 1.5 loses −1.2 (clipped at 1 + ε), A = −1 with ρ = 5 loses 3 (dual clip c·|A|).
func TestPolicyLossHandNumbers(t *testing.T) {
	checkLeaks(t)
	lp := tensorOf(t, []float64{math.Log(1.5), math.Log(5)}, []int64{1, 2}, gotch.Double)
	old := tensorOf(t, []float64{0, 0}, []int64{1, 2}, gotch.Double)
	adv := tensorOf(t, []float64{1, -1}, []int64{1, 2}, gotch.Double)
	mask := tensorOf(t, []float64{1, 1}, []int64{1, 2}, gotch.Double)
	defer torch.Drop(lp, old, adv, mask)
	loss, st, err := PolicyLoss(lp, old, adv, mask, ppo.DefaultClip, ppo.AggSeqMeanTokenSum, 1)
	if err != nil {
		t.Fatal(err)
	}
	loss.MustDrop()
	if want := -1.2 + 3; !near(st.Loss, want, 1e-12) {
		t.Errorf("pg_loss = %v, want %v", st.Loss, want)
	}
	if st.ClipFrac != 0.5 || st.ClipFracLow != 0.5 {
		t.Errorf("clipfrac = %v, clipfrac_lower = %v; want 0.5, 0.5", st.ClipFrac, st.ClipFracLow)
	}
	if want := -(math.Log(1.5) + math.Log(5)) / 2; !near(st.PPOKL, want, 1e-12) {
		t.Errorf("ppo_kl = %v, want %v", st.PPOKL, want)
	}
}

func TestKLMatchesReference(t *testing.T) {
	checkLeaks(t)
	pairs := [][2]float64{{-1.0, -1.0}, {-0.5, -1.5}, {-2.0, -0.25}, {-30, 0}, {0, -30}, {-3, -14}}
	for _, kind := range []KL{ppo.KLK1, ppo.KLK2, ppo.KLK3} {
		for _, p := range pairs {
			want := kind.Of(p[0], p[1])
			lp := tensorOf(t, []float64{p[0]}, []int64{1, 1}, gotch.Double)
			ref := tensorOf(t, []float64{p[1]}, []int64{1, 1}, gotch.Double)
			mask := tensorOf(t, []float64{1}, []int64{1, 1}, gotch.Double)
			kl, got, err := KLPenalty(lp, ref, mask, kind, ppo.AggTokenMean, 1)
			if err != nil {
				t.Fatal(err)
			}
			torch.Drop(lp, ref, mask, kl)
			if !near(got, want, 1e-12) {
				t.Errorf("KLPenalty(%s, logp %v, ref %v) = %.15g, want %.15g", kind, p[0], p[1], got, want)
			}
		}
	}
	// The k3 clamps must have been reached, or the table tests less than it says.
	if got := ppo.KLK3.Of(-30, 0); got != ppo.KLClamp {
		t.Fatalf("k3(-30, 0) = %v, want the clamp %v", got, ppo.KLClamp)
	}
}

func TestKLZeroWhenEqual(t *testing.T) {
	checkLeaks(t)
	data := []float64{-0.3, -2.5, -0.01, -7, -1.1, -4.2}
	for _, kind := range []KL{ppo.KLK1, ppo.KLK2, ppo.KLK3} {
		t.Run(string(kind), func(t *testing.T) {
			x := tensorOf(t, data, []int64{2, 3}, gotch.Float)
			lp := torch.Must(x.SetRequiresGrad(true, true))
			ref := clone(lp)
			mask := tensorOf(t, []float64{1, 1, 0, 1, 1, 1}, []int64{2, 3}, gotch.Float)
			defer torch.Drop(lp, ref, mask)
			kl, got, err := KLPenalty(lp, ref, mask, kind, ppo.AggTokenMean, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer kl.MustDrop()
			if got != 0 {
				t.Errorf("KL of a policy to itself = %v, want exactly 0", got)
			}
			torch.Check(kl.Backward())
			g := torch.Must(lp.Grad(false))
			defer g.MustDrop()
			if kind == ppo.KLK1 {
				return // k1's gradient is 1/divisor per token
			}
			for i, v := range torch.Values(g) {
				if v != 0 {
					t.Errorf("d KL/d logp[%d] = %v, want exactly 0", i, v)
				}
			}
		})
	}
}

func TestEntropy(t *testing.T) {
	checkLeaks(t)
	// Row 0: uniform over 4 → log 4. Row 1: p = softmax(0, ln 3, 0, 0) = (1/6, 1/2, 1/6, 1/6)
	// → −Σ p log p. Row 2 is padding with huge logits that must not count.
	logits := tensorOf(t, []float64{
		0, 0, 0, 0,
		0, math.Log(3), 0, 0,
		90, -90, 0, 1,
	}, []int64{1, 3, 4}, gotch.Float)
	mask := tensorOf(t, []float64{1, 1, 0}, []int64{1, 3}, gotch.Float)
	defer torch.Drop(logits, mask)
	h, got, err := Entropy(logits, mask, ppo.AggTokenMean, 2)
	if err != nil {
		t.Fatal(err)
	}
	h.MustDrop()
	h1 := -(3*(1.0/6)*math.Log(1.0/6) + 0.5*math.Log(0.5))
	if want := (math.Log(4) + h1) / 2; !near(got, want, 1e-6) {
		t.Errorf("entropy = %v, want %v", got, want)
	}
}

func TestDivisor(t *testing.T) {
	tests := []struct {
		mode    Agg
		lengths []int
		want    float64
		err     error
	}{
		{ppo.AggTokenMean, []int{3, 0, 5}, 8, nil},
		{ppo.AggSeqMeanTokenSum, []int{3, 0, 5}, 3, nil},
		{ppo.AggSeqMeanTokenMean, []int{3, 1, 5}, 3, nil},
		{ppo.AggSeqMeanTokenMean, []int{3, 0, 5}, 0, ErrInput},
		{ppo.AggTokenMean, []int{0, 0}, 0, ErrInput},
		{ppo.AggTokenMean, nil, 0, ErrInput},
		{"mean", []int{1}, 0, ErrConfig},
	}
	for _, tt := range tests {
		got, err := Divisor(tt.mode, tt.lengths)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("Divisor(%s, %v) = %v, %v; want %v, %v", tt.mode, tt.lengths, got, err, tt.want, tt.err)
		}
	}
}

func TestPolicyLossBadInput(t *testing.T) {
	checkLeaks(t)
	a := tensorOf(t, []float64{0, 0, 0, 0}, []int64{2, 2}, gotch.Float)
	b := tensorOf(t, []float64{0, 0, 0}, []int64{1, 3}, gotch.Float)
	defer torch.Drop(a, b)
	tests := []struct {
		name  string
		x     *ts.Tensor
		clip  Clip
		mode  Agg
		div   float64
		class error
	}{
		{"shape mismatch", b, ppo.DefaultClip, ppo.AggTokenMean, 4, nil},
		{"divisor zero", a, ppo.DefaultClip, ppo.AggTokenMean, 0, ErrConfig},
		{"unknown mode", a, ppo.DefaultClip, "mean", 4, ErrConfig},
		{"dual clip c <= 1", a, Clip{Low: 0.2, High: 0.2, DualC: 1}, ppo.AggTokenMean, 4, ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loss, _, err := PolicyLoss(a, a, tt.x, a, tt.clip, tt.mode, tt.div)
			if err == nil {
				loss.MustDrop()
				t.Fatal("PolicyLoss = nil error, want error")
			}
			if tt.class != nil && !errors.Is(err, tt.class) {
				t.Errorf("PolicyLoss error %q, want class %v", err, tt.class)
			}
		})
	}
}

package ppo

import (
	"errors"
	"math"
	"testing"
)

const ppoTol = 1e-12

func TestRatio(t *testing.T) {
	tests := []struct {
		name          string
		logp, logpOld float64
		want          float64
	}{
		{"equal", -1.3, -1.3, 1},
		{"double", math.Log(0.5), math.Log(0.25), 2},
		{"clamped high", 5, -25, math.Exp(20)},
		{"clamped low", -40, 0, math.Exp(-20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ratio(tt.logp, tt.logpOld); math.Abs(got-tt.want) > ppoTol*tt.want {
				t.Errorf("Ratio(%v, %v) = %v, want %v", tt.logp, tt.logpOld, got, tt.want)
			}
		})
	}
}

func TestPolicyLoss(t *testing.T) {
	// Each case gives the ratio; logpOld is 0 so logp = log ρ. ε = 0.2, c = 3.
	tests := []struct {
		name        string
		adv, ratio  float64
		want        float64
		clipped     bool
		dualClipped bool
	}{
		// A > 0, ρ above 1+ε: max(−1.5, −1.2) = −1.2, the clipped branch.
		{"positive above range", 1, 1.5, -1.2, true, false},
		// A > 0, ρ below 1−ε: max(−0.5, −0.8) = −0.5, unclipped (no incentive to go lower).
		{"positive below range", 1, 0.5, -0.5, false, false},
		// A > 0 inside the range: −A·ρ.
		{"positive inside", 2, 1.1, -2.2, false, false},
		// A < 0, ρ above 1+ε: max(1.5, 1.2) = 1.5 < c·|A| = 3.
		{"negative above range", -1, 1.5, 1.5, false, false},
		// A < 0, ρ = 5: L_clip = 5, dual clip caps at −A·c = 3.
		{"negative dual clip", -1, 5, 3, false, true},
		// A < 0, ρ below 1−ε: max(0.5, 0.8) = 0.8, the clipped branch.
		{"negative below range", -1, 0.5, 0.8, true, false},
		{"zero advantage", 0, 1.7, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PolicyLoss(tt.adv, math.Log(tt.ratio), 0, DefaultClip)
			if math.Abs(got.Loss-tt.want) > ppoTol || got.Clipped != tt.clipped || got.DualClipped != tt.dualClipped {
				t.Errorf("PolicyLoss(A=%v, ρ=%v) = %+v, want loss %v clipped %v dual %v",
					tt.adv, tt.ratio, got, tt.want, tt.clipped, tt.dualClipped)
			}
			if math.Abs(got.NegKL-math.Log(tt.ratio)) > ppoTol {
				t.Errorf("PolicyLoss(ρ=%v).NegKL = %v, want %v", tt.ratio, got.NegKL, math.Log(tt.ratio))
			}
		})
	}
	// Asymmetric clip (clip-higher): ε_low 0.2, ε_high 0.28.
	got := PolicyLoss(1, math.Log(1.5), 0, Clip{Low: 0.2, High: 0.28, DualC: 3})
	if math.Abs(got.Loss+1.28) > ppoTol || !got.Clipped {
		t.Errorf("PolicyLoss(clip-higher) = %+v, want loss −1.28 clipped", got)
	}
	// A log-ratio of 25 is clamped to 20 before exp.
	got = PolicyLoss(2, 25, 0, DefaultClip)
	if got.NegKL != 20 || math.Abs(got.Loss+2.4) > ppoTol || !got.Clipped {
		t.Errorf("PolicyLoss(log-ratio 25) = %+v, want NegKL 20 loss −2.4 clipped", got)
	}
}

func TestKL(t *testing.T) {
	tests := []struct {
		name          string
		k             KL
		logp, logpRef float64
		want          float64
	}{
		{"k1", KLK1, -1, -2, 1},
		{"k1 negative", KLK1, -2, -1, -1},
		{"k2", KLK2, -1, -2, 0.5},
		{"k2 symmetric", KLK2, -2, -1, 0.5},
		{"k3 equal", KLK3, -0.7, -0.7, 0},
		// d = ref − logp = −1: e^−1 + 1 − 1 = e^−1.
		{"k3 d -1", KLK3, -1, -2, math.Exp(-1)},
		// d = 1: e − 2.
		{"k3 d 1", KLK3, -2, -1, math.E - 2},
		// d = −5: e^−5 + 4.
		{"k3 d -5", KLK3, 0, -5, math.Exp(-5) + 4},
		// d = 5: e^5 − 6 ≈ 142.4, clamped to 10.
		{"k3 clamp", KLK3, -5, 0, 10},
		// d = −30 clamps to −20: e^−20 + 19, clamped to 10.
		{"k3 d clamp low", KLK3, 0, -30, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.k.Of(tt.logp, tt.logpRef); math.Abs(got-tt.want) > ppoTol {
				t.Errorf("%s.Of(%v, %v) = %v, want %v", tt.k, tt.logp, tt.logpRef, got, tt.want)
			}
		})
	}
	for s, want := range map[string]KL{"k1": KLK1, "kl": KLK1, "k2": KLK2, "mse": KLK2, "k3": KLK3, "low_var_kl": KLK3} {
		if got, err := ParseKL(s); err != nil || got != want {
			t.Errorf("ParseKL(%q) = %q, %v, want %q", s, got, err, want)
		}
	}
	if _, err := ParseKL("abs"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseKL(abs) error = %v, want ErrConfig", err)
	}
}

func TestAggregate(t *testing.T) {
	seqs := [][]float64{{1, 2, 3}, {4}}
	tests := []struct {
		mode Agg
		want float64
	}{
		{AggTokenMean, 10.0 / 4}, // every token weighs the same
		{AggSeqMeanTokenMean, 3}, // (2 + 4) / 2
		{AggSeqMeanTokenSum, 5},  // (6 + 4) / 2
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			got, err := Aggregate(tt.mode, seqs)
			if err != nil || got != tt.want {
				t.Errorf("Aggregate(%s) = %v, %v, want %v", tt.mode, got, err, tt.want)
			}
			if p, err := ParseAgg(string(tt.mode)); err != nil || p != tt.mode {
				t.Errorf("ParseAgg(%q) = %q, %v", tt.mode, p, err)
			}
		})
	}
	// Gradient accumulation: token-mean over the mini-batch equals the sum of micro-batch
	// sums divided by the mini-batch's token count, not the mean of micro-batch means.
	whole, _ := Aggregate(AggTokenMean, seqs)
	a, _ := Aggregate(AggTokenMean, seqs[:1])
	b, _ := Aggregate(AggTokenMean, seqs[1:])
	if accumulated := (a*3 + b*1) / 4; accumulated != whole {
		t.Errorf("accumulated token-mean = %v, want %v", accumulated, whole)
	}
	if naive := (a + b) / 2; naive == whole {
		t.Errorf("mean of micro-batch means %v equals token-mean %v; the case does not tell them apart", naive, whole)
	}

	bad := []struct {
		name  string
		mode  Agg
		seqs  [][]float64
		class error
	}{
		{"no sequences", AggTokenMean, nil, ErrInput},
		{"no tokens", AggTokenMean, [][]float64{{}, {}}, ErrInput},
		{"empty sequence", AggSeqMeanTokenMean, [][]float64{{1}, {}}, ErrInput},
		{"unknown mode", "seq-sum", seqs, ErrConfig},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Aggregate(tt.mode, tt.seqs); !errors.Is(err, tt.class) {
				t.Errorf("Aggregate = %v, %v, want %v", got, err, tt.class)
			}
		})
	}
	if got, err := Aggregate(AggSeqMeanTokenSum, [][]float64{{1}, {}}); err != nil || got != 0.5 {
		t.Errorf("Aggregate(seq-mean-token-sum, with empty sequence) = %v, %v, want 0.5", got, err)
	}
	if _, err := ParseAgg("mean"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseAgg(mean) error = %v, want ErrConfig", err)
	}
}

func TestPolicy(t *testing.T) {
	// Token ratios 1.5, 1 (sequence 0, A = 1) and 5 (sequence 1, A = −1):
	// losses −1.2 (clipped), −1, 3 (dual clipped).
	adv := [][]float64{{1, 1}, {-1}}
	logp := [][]float64{{math.Log(1.5), -0.3}, {math.Log(5)}}
	old := [][]float64{{0, -0.3}, {0}}
	got, err := BatchPolicyLoss(adv, logp, old, DefaultClip, AggTokenMean)
	if err != nil {
		t.Fatal(err)
	}
	want := PolicyStats{
		Loss:        (-1.2 - 1 + 3) / 3,
		ClipFrac:    1.0 / 3,
		ClipFracLow: 1.0 / 3,
		PPOKL:       -(math.Log(1.5) + math.Log(5)) / 3,
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"pg_loss", got.Loss, want.Loss}, {"pg_clipfrac", got.ClipFrac, want.ClipFrac},
		{"pg_clipfrac_lower", got.ClipFracLow, want.ClipFracLow}, {"ppo_kl", got.PPOKL, want.PPOKL}} {
		if math.Abs(c.got-c.want) > ppoTol {
			t.Errorf("Policy %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// seq-mean-token-mean: ((−1.2 − 1)/2 + 3)/2.
	got, err = BatchPolicyLoss(adv, logp, old, DefaultClip, AggSeqMeanTokenMean)
	if err != nil || math.Abs(got.Loss-(-1.1+3)/2) > ppoTol || math.Abs(got.ClipFrac-1.0/3) > ppoTol {
		t.Errorf("Policy(seq-mean-token-mean) = %+v, %v, want loss %v clipfrac 1/3", got, err, (-1.1+3)/2)
	}
	if _, err := BatchPolicyLoss(adv, logp[:1], old, DefaultClip, AggTokenMean); !errors.Is(err, ErrInput) {
		t.Errorf("Policy(ragged) error = %v, want ErrInput", err)
	}
	if _, err := BatchPolicyLoss(adv, [][]float64{{0}, {0}}, old, DefaultClip, AggTokenMean); !errors.Is(err, ErrInput) {
		t.Errorf("Policy(short sequence) error = %v, want ErrInput", err)
	}
}

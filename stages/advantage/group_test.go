package advantage

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGRPO(t *testing.T) {
	// 7 ones and a zero: mean 7/8; squared deviations 7·(1/8)² + (7/8)² = 7/8; unbiased
	// variance (7/8)/7 = 1/8, std = √(1/8) = 0.35355339059327373.
	std78 := math.Sqrt(0.125) + 1e-6
	seven := []float64{1, 1, 1, 0, 1, 1, 1, 1}
	one := 1.0 // a variable, so the quotient is rounded as at run time, not as a constant
	tests := []struct {
		name      string
		rewards   []float64
		noStdNorm bool
		want      []float64
		wantZero  bool
	}{
		{
			name: "7 vs 1", rewards: seven,
			want: []float64{0.125 / std78, 0.125 / std78, 0.125 / std78, -0.875 / std78,
				0.125 / std78, 0.125 / std78, 0.125 / std78, 0.125 / std78},
		},
		{name: "7 vs 1 no std norm", rewards: seven, noStdNorm: true,
			want: []float64{0.125, 0.125, 0.125, -0.875, 0.125, 0.125, 0.125, 0.125}},
		// mean 1/2, std √(1/2).
		{name: "one of two", rewards: []float64{0, 1},
			want: []float64{-0.5 / (math.Sqrt(0.5) + 1e-6), 0.5 / (math.Sqrt(0.5) + 1e-6)}},
		{name: "all ones", rewards: []float64{1, 1, 1, 1}, want: []float64{0, 0, 0, 0}, wantZero: true},
		{name: "all zeros", rewards: []float64{0, 0, 0}, want: []float64{0, 0, 0}, wantZero: true},
		{name: "all thirds no std norm", rewards: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, noStdNorm: true,
			want: []float64{0, 0, 0}, wantZero: true},
		{name: "group of one", rewards: []float64{1}, want: []float64{(1 - 0) / (one + 1e-6)}}, // mean 0, std 1
		{name: "group of one no std norm", rewards: []float64{0.5}, noStdNorm: true, want: []float64{0.5}},
		{name: "empty", rewards: nil, want: []float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, zero := GRPO(tt.rewards, tt.noStdNorm)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GRPO(%v, %v) (-want +got):\n%s", tt.rewards, tt.noStdNorm, diff)
			}
			if zero != tt.wantZero {
				t.Errorf("GRPO(%v) zeroSpread = %v, want %v", tt.rewards, zero, tt.wantZero)
			}
		})
	}
	// The same numbers written out, so a change in the formula cannot hide in shared code.
	got, _ := GRPO(seven, false)
	if math.Abs(got[0]-0.35355239059610216) > 1e-15 || math.Abs(got[3]+2.474866734172715) > 1e-15 {
		t.Errorf("GRPO(7 vs 1) = %v, %v, want 0.35355239059610216, -2.474866734172715", got[0], got[3])
	}
}

func TestMemoryAdvantage(t *testing.T) {
	// mean 0.625, deviations ∓0.375, ∓0.125, squares sum to 0.3125, variance 0.3125/3.
	s := math.Sqrt(0.3125/3) + 1e-6
	tests := []struct {
		name    string
		rewards []float64
		want    []float64
		wantDeg bool
	}{
		{"spread", []float64{0.25, 0.5, 0.75, 1}, []float64{-0.375 / s, -0.125 / s, 0.125 / s, 0.375 / s}, false},
		{"single", []float64{0.7}, []float64{0}, true},
		{"none", nil, []float64{}, true},
		{"equal", []float64{0.1, 0.1, 0.1}, []float64{0, 0, 0}, true},
		{"negative", []float64{-0.5, 0.5}, []float64{-0.5 / (math.Sqrt(0.5) + 1e-6), 0.5 / (math.Sqrt(0.5) + 1e-6)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, deg := MemoryAdvantage(tt.rewards)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MemoryAdvantage(%v) (-want +got):\n%s", tt.rewards, diff)
			}
			if deg != tt.wantDeg {
				t.Errorf("MemoryAdvantage(%v) degenerate = %v, want %v", tt.rewards, deg, tt.wantDeg)
			}
		})
	}
}

func TestTokenAdvantages(t *testing.T) {
	const at, am = 0.75, -0.5
	for _, coef := range []float64{0, 1, 0.3} {
		got := TokenAdvantages(6, at, &Span{Start: 1, End: 4}, coef, am)
		in, out := float32(at+coef*am), float32(at)
		want := []float32{out, in, in, in, out, out}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("TokenAdvantages(coef %v) (-want +got):\n%s", coef, diff)
		}
		// Inside and outside the span differ by λ·A^M (up to the one float32 rounding).
		if d := float64(got[1]) - float64(got[0]); math.Abs(d-coef*am) > 1e-7 {
			t.Errorf("coef %v: inside − outside = %v, want %v", coef, d, coef*am)
		}
	}
	// Rounded once: float32(1/3 + 1/7) differs from float32(1/3) + float32(1/7) by one ulp.
	third, seventh := 1.0/3, 1.0/7
	if got := TokenAdvantages(1, third, &Span{0, 1}, 1, seventh); got[0] != float32(third+seventh) {
		t.Errorf("TokenAdvantages(1/3 + 1/7) = %v, want %v (one rounding)", got[0], float32(third+seventh))
	}
	if got := TokenAdvantages(3, 0.25, nil, 1, 5); !cmp.Equal(got, []float32{0.25, 0.25, 0.25}) {
		t.Errorf("TokenAdvantages(no mem) = %v, want all 0.25", got)
	}
	if got := TokenAdvantages(0, 1, nil, 1, 0); len(got) != 0 {
		t.Errorf("TokenAdvantages(0 tokens) = %v, want empty", got)
	}
}

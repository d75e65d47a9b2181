package sample

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func logits(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, v := range p {
		out[i] = float32(math.Log(v))
	}
	return out
}

func mustNew(t *testing.T, c Config) *Sampler {
	t.Helper()
	if c.MaxNewTokens == 0 {
		c.MaxNewTokens = 1
	}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGreedy(t *testing.T) {
	s := mustNew(t, Config{})
	l := []float32{1, 3, 3, 2}
	tok, lp := s.Pick(l, nil) // greedy must not touch the rng
	want := 3 - math.Log(math.Exp(1)+2*math.Exp(3)+math.Exp(2))
	if tok != 1 || math.Abs(lp-want) > 1e-12 {
		t.Errorf("Pick = %d, %g, want 1 (lowest id of the tie), %g", tok, lp, want)
	}
}

// TestFrequencies draws 200k tokens and compares frequencies with the tempered,
// truncated distribution. With a fixed seed the draw is deterministic; the 0.005
// tolerance is about 4 standard deviations of a frequency near 0.5.
func TestFrequencies(t *testing.T) {
	probs := []float64{0.5, 0.3, 0.15, 0.05}
	tests := []struct {
		name string
		cfg  Config
		want []float64
	}{
		{"plain", Config{Temperature: 1}, probs},
		{"temperature 2", Config{Temperature: 2}, normalise([]float64{math.Sqrt(.5), math.Sqrt(.3), math.Sqrt(.15), math.Sqrt(.05)})},
		{"top-k 2", Config{Temperature: 1, TopK: 2}, []float64{.5 / .8, .3 / .8, 0, 0}},
		{"top-p 0.8", Config{Temperature: 1, TopP: 0.8}, []float64{.5 / .8, .3 / .8, 0, 0}},
		{"top-p 0.81", Config{Temperature: 1, TopP: 0.81}, []float64{.5 / .95, .3 / .95, .15 / .95, 0}},
		{"top-k 3 then top-p 0.8", Config{Temperature: 1, TopK: 3, TopP: 0.8}, []float64{.5 / .8, .3 / .8, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, tt.cfg)
			rng := NewRNG(42)
			const n = 200000
			counts := make([]float64, len(probs))
			for range n {
				tok, _ := s.Pick(logits(probs...), rng)
				counts[tok]++
			}
			for i := range counts {
				if got := counts[i] / n; math.Abs(got-tt.want[i]) > 0.005 {
					t.Errorf("freq[%d] = %.4f, want %.4f", i, got, tt.want[i])
				}
			}
		})
	}
}

func normalise(p []float64) []float64 {
	s := 0.0
	for _, v := range p {
		s += v
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// TestLogProbIsTempered checks the returned log-prob is log softmax(logits/T) over
// the full vocabulary, not the truncated distribution.
func TestLogProbIsTempered(t *testing.T) {
	l := logits(0.5, 0.3, 0.15, 0.05)
	s := mustNew(t, Config{Temperature: 0.5, TopK: 1})
	tok, lp := s.Pick(l, NewRNG(1))
	sum := 0.0
	for _, v := range l {
		sum += math.Exp(float64(v) / 0.5)
	}
	want := float64(l[0])/0.5 - math.Log(sum)
	if tok != 0 || math.Abs(lp-want) > 1e-12 {
		t.Errorf("Pick = %d, %g, want 0, %g", tok, lp, want)
	}
}

// TestCandidatesExact compares the windowed top-k/top-p selection with a full sort
// on a wide-spread 5000-token vocabulary.
func TestCandidatesExact(t *testing.T) {
	rng := NewRNG(3)
	z := make([]float64, 5000)
	for i := range z {
		z[i] = rng.NormFloat64() * 6
	}
	z[17] = z[18] // a tie, broken by id
	zmax := slices.Max(z)
	lse := 0.0
	for _, v := range z {
		lse += math.Exp(v - zmax)
	}
	lse = zmax + math.Log(lse)
	order := make([]int, len(z))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case z[a] > z[b]:
			return -1
		case z[a] < z[b]:
			return 1
		}
		return 0
	})
	for _, c := range []Config{{TopK: 50}, {TopP: 0.9}, {TopP: 0.999}, {TopK: 1000, TopP: 0.95}} {
		want := order
		if c.TopK > 0 {
			want = want[:c.TopK]
		}
		if c.TopP > 0 {
			sum := 0.0
			for _, i := range want {
				sum += math.Exp(z[i] - zmax)
			}
			acc := 0.0
			for n, i := range want {
				acc += math.Exp(z[i]-zmax) / sum
				if acc >= c.TopP {
					want = want[:n+1]
					break
				}
			}
		}
		c.Temperature, c.MaxNewTokens = 1, 1
		s := mustNew(t, c)
		got := s.candidates(z, zmax, lse)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("candidates(%+v) (-want +got):\n%s", c, diff)
		}
	}
}

func TestSeeds(t *testing.T) {
	draw := func(seed uint64) []int {
		s := mustNew(t, Config{Temperature: 1})
		rng := NewRNG(seed)
		var out []int
		for range 50 {
			tok, _ := s.Pick(logits(0.25, 0.25, 0.25, 0.25), rng)
			out = append(out, tok)
		}
		return out
	}
	if diff := cmp.Diff(draw(9), draw(9)); diff != "" {
		t.Errorf("same seed differs (-want +got):\n%s", diff)
	}
	if slices.Equal(draw(9), draw(10)) {
		t.Error("seeds 9 and 10 drew identical sequences")
	}
}

func TestStopped(t *testing.T) {
	stops := [][]int64{{5, 6}, {9}}
	tests := []struct {
		seq  []int64
		want bool
	}{
		{[]int64{1, 5, 6}, true},
		{[]int64{5, 6, 1}, false},
		{[]int64{6}, false},
		{[]int64{9}, true},
		{nil, false},
	}
	for _, tt := range tests {
		if got := Stopped(tt.seq, stops); got != tt.want {
			t.Errorf("Stopped(%v) = %v, want %v", tt.seq, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{Temperature: -1, MaxNewTokens: 1},
		{TopK: -1, MaxNewTokens: 1},
		{TopP: 1.5, MaxNewTokens: 1},
		{MaxNewTokens: 0},
		{MaxNewTokens: 1, Stop: [][]int64{{}}},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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

// referencePick is Pick as first written: the candidates ordered by a comparison
// sort and every probability recomputed where it is used. Pick must match it
// exactly, token and log-probability, since tokens already generated by the RL
// pipeline must stay reproducible.
func referencePick(cfg Config, logits []float32, rng *rand.Rand) (int, float64) {
	t := cfg.Temperature
	greedy := t == 0
	if greedy {
		t = 1
	}
	z := make([]float64, len(logits))
	best := 0
	for i, l := range logits {
		z[i] = float64(l) / t
		if z[i] > z[best] {
			best = i
		}
	}
	lse := logSumExp(z, z[best])
	if greedy {
		return best, z[best] - lse
	}
	zmax := z[best]
	k, p := cfg.TopK, cfg.TopP
	if k >= len(z) {
		k = 0
	}
	if p >= 1 {
		p = 0
	}
	var cand []int
	if k == 0 && p == 0 {
		for i := range z {
			cand = append(cand, i)
		}
	} else {
		for delta := 8.0; ; delta *= 2 {
			cand = cand[:0]
			mass := 0.0
			for i, v := range z {
				if v >= zmax-delta {
					cand = append(cand, i)
					mass += math.Exp(v - lse)
				}
			}
			if (k > 0 && len(cand) >= k) || (k == 0 && mass >= p) || len(cand) == len(z) {
				break
			}
		}
		slices.SortFunc(cand, func(a, b int) int {
			switch {
			case z[a] > z[b]:
				return -1
			case z[a] < z[b]:
				return 1
			}
			return a - b
		})
		if k > 0 {
			cand = cand[:k]
		}
		if p > 0 {
			norm := lse
			if k > 0 {
				sum := 0.0
				for _, i := range cand {
					sum += math.Exp(z[i] - zmax)
				}
				norm = zmax + math.Log(sum)
			}
			acc := 0.0
			for n, i := range cand {
				acc += math.Exp(z[i] - norm)
				if acc >= p {
					cand = cand[:n+1]
					break
				}
			}
		}
	}
	total := 0.0
	for _, i := range cand {
		total += math.Exp(z[i] - lse)
	}
	u := rng.Float64() * total
	acc := 0.0
	for _, i := range cand {
		acc += math.Exp(z[i] - lse)
		if acc > u {
			return i, z[i] - lse
		}
	}
	last := cand[len(cand)-1]
	return last, z[last] - lse
}

// TestPickMatchesReference draws from many logit rows — near-uniform like an
// untrained model, peaked like a trained one, with ties, signed zeros and
// infinities — under every kind of truncation and compares Pick with
// referencePick draw by draw.
func TestPickMatchesReference(t *testing.T) {
	gen := rand.New(rand.NewPCG(1, 2))
	rows := map[string]func(n int) []float32{
		"uniform-ish": func(n int) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = float32(gen.NormFloat64() * 0.1)
			}
			return out
		},
		"peaked": func(n int) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = float32(gen.NormFloat64() * 4)
			}
			return out
		},
		"ties and zeros": func(n int) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = float32(gen.IntN(7)-3) * 0.5
				if gen.IntN(5) == 0 {
					out[i] = float32(math.Copysign(0, -1))
				}
			}
			return out
		},
		"clusters": func(n int) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = float32(gen.NormFloat64() * 1e-3)
				if gen.IntN(50) == 0 {
					out[i] = float32(gen.NormFloat64() * 30)
				}
			}
			return out
		},
		"infinities": func(n int) []float32 {
			out := make([]float32, n)
			for i := range out {
				out[i] = float32(gen.NormFloat64())
				if gen.IntN(9) == 0 {
					out[i] = float32(math.Inf(-1))
				}
			}
			return out
		},
	}
	cfgs := []Config{
		{Temperature: 1}, {Temperature: 0.7}, {Temperature: 1, TopP: 0.9}, {Temperature: 1.3, TopP: 0.5},
		{Temperature: 1, TopK: 20}, {Temperature: 0.5, TopK: 1}, {Temperature: 1, TopK: 50, TopP: 0.8},
		{Temperature: 2, TopK: 5000, TopP: 0.99}, {Temperature: 1e-3, TopP: 0.95},
		// Temperatures that push z outside float32's range, so the radix keys tie
		// values that differ.
		{Temperature: 1e-38, TopP: 0.9}, {Temperature: 1e40, TopK: 30}, {Temperature: 1e44, TopP: 0.5},
	}
	for name, row := range rows {
		for _, cfg := range cfgs {
			cfg.MaxNewTokens = 1
			s := mustNew(t, cfg)
			got, want := NewRNG(7), NewRNG(7)
			for r := range 30 {
				l := row(1 + gen.IntN(3000))
				gt, gl := s.Pick(l, got)
				wt, wl := referencePick(cfg, l, want)
				if gt != wt || math.Float64bits(gl) != math.Float64bits(wl) {
					t.Fatalf("%s %+v row %d: Pick = %d, %v, want %d, %v", name, cfg, r, gt, gl, wt, wl)
				}
			}
		}
	}
}

// BenchmarkPickTopP samples from a near-uniform 4096-token row at T=1, top-p 0.9,
// the worst case of the tiny model's decode (almost every token is a candidate).
func BenchmarkPickTopP(b *testing.B) {
	benchPick(b, Config{Temperature: 1, TopP: 0.9, MaxNewTokens: 1})
}

// BenchmarkPickWhole samples from the same row at T=0.5 without truncation, as the
// demo's rollouts do.
func BenchmarkPickWhole(b *testing.B) { benchPick(b, Config{Temperature: 0.5, MaxNewTokens: 1}) }

func benchPick(b *testing.B, cfg Config) {
	gen := rand.New(rand.NewPCG(1, 2))
	l := make([]float32, 4096)
	for i := range l {
		l[i] = float32(gen.NormFloat64() * 0.1)
	}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := NewRNG(1)
	for b.Loop() {
		s.Pick(l, rng)
	}
}

// TestPickNaN checks that a NaN logit panics with its index, where the windowed
// top-p search used to loop forever.
func TestPickNaN(t *testing.T) {
	for _, pos := range []int{0, 3} {
		l := logits(0.25, 0.25, 0.25, 0.25)
		l[pos] = float32(math.NaN())
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), fmt.Sprintf("logit %d of 4 is NaN", pos)) {
					t.Errorf("Pick with NaN at %d: recovered %v, want a panic naming the logit", pos, r)
				}
			}()
			mustNew(t, Config{Temperature: 1, TopP: 0.9}).Pick(l, NewRNG(1))
		}()
	}
}

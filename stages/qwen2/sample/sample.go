// Package sample draws tokens from logits on the host: temperature, top-k, top-p
// (nucleus) and greedy decoding, per-sequence seeded random streams and stop
// sequences. It is pure Go so the decode loop's choices are testable without
// libtorch and identical on every device.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// ErrConfig marks invalid sampling settings.
var ErrConfig = errors.New("invalid sampling config")

// Config is the sampling configuration of one generation call.
type Config struct {
	// Temperature divides the logits; 0 means greedy (argmax, lowest id on ties).
	Temperature float64 `json:"temperature"`
	// TopK keeps the k most likely tokens; 0 keeps all.
	TopK int `json:"top_k"`
	// TopP keeps the smallest most-likely set whose probability reaches TopP,
	// applied after TopK as HF's warpers do; 0 or 1 keeps all.
	TopP float64 `json:"top_p"`
	// MaxNewTokens bounds the generated tokens per sequence.
	MaxNewTokens int `json:"max_new_tokens"`
	// Stop ends a sequence right after it emits any of these token-id sequences
	// (for example the ids of "</search>" and "</answer>", or an end-of-text id).
	Stop [][]int64 `json:"stop"`
}

// Validate checks the ranges of every field.
func (c Config) Validate() error {
	switch {
	case c.Temperature < 0 || math.IsNaN(c.Temperature):
		return fmt.Errorf("temperature %g, want >= 0: %w", c.Temperature, ErrConfig)
	case c.TopK < 0:
		return fmt.Errorf("top_k %d, want >= 0: %w", c.TopK, ErrConfig)
	case c.TopP < 0 || c.TopP > 1 || math.IsNaN(c.TopP):
		return fmt.Errorf("top_p %g, want in [0, 1]: %w", c.TopP, ErrConfig)
	case c.MaxNewTokens < 1:
		return fmt.Errorf("max_new_tokens %d, want >= 1: %w", c.MaxNewTokens, ErrConfig)
	}
	for i, s := range c.Stop {
		if len(s) == 0 {
			return fmt.Errorf("stop sequence %d is empty: %w", i, ErrConfig)
		}
	}
	return nil
}

// NewRNG is the random stream of one sequence. PCG's output is fixed by its
// specification, so a seed gives the same draws on every platform and Go release.
func NewRNG(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x6d656d706f)) // stream constant: "mempo"
}

// Stopped reports whether seq ends with one of the stop sequences.
func Stopped(seq []int64, stops [][]int64) bool {
	for _, s := range stops {
		if len(seq) >= len(s) && slices.Equal(seq[len(seq)-len(s):], s) {
			return true
		}
	}
	return false
}

// Sampler picks tokens; it keeps scratch buffers between calls and is not safe for
// concurrent use.
type Sampler struct {
	cfg  Config
	z    []float64
	cand []int
}

// New returns a sampler for cfg.
func New(cfg Config) (*Sampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{cfg: cfg}, nil
}

// Pick chooses a token from logits using rng (one draw per call unless greedy) and
// returns it with its log-probability under the tempered full distribution,
// log softmax(logits/T)[token] (T = 1 when greedy), before top-k/top-p truncation:
// the quantity PPO's importance ratio compares against.
func (s *Sampler) Pick(logits []float32, rng *rand.Rand) (int, float64) {
	t := s.cfg.Temperature
	greedy := t == 0
	if greedy {
		t = 1
	}
	z := s.z[:0]
	best := 0
	for i, l := range logits {
		v := float64(l) / t
		z = append(z, v)
		if v > z[best] {
			best = i
		}
	}
	s.z = z
	lse := logSumExp(z, z[best])
	if greedy {
		return best, z[best] - lse
	}
	cand := s.candidates(z, z[best], lse)
	// Inverse-CDF draw over the candidates in their fixed order.
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

// candidates lists the tokens that survive top-k then top-p, most likely first
// (ties by lower id); without truncation, all ids in id order. zmax is max(z). The
// slice is reused by the next call.
func (s *Sampler) candidates(z []float64, zmax, lse float64) []int {
	k, p := s.cfg.TopK, s.cfg.TopP
	if k >= len(z) {
		k = 0
	}
	if p >= 1 {
		p = 0
	}
	cand := s.cand[:0]
	if k == 0 && p == 0 {
		for i := range z {
			cand = append(cand, i)
		}
		s.cand = cand
		return cand
	}
	// Sorting a 150k vocabulary per token would dominate decoding. The top-k set and
	// the nucleus are prefixes of the sorted order, so sort only the tokens within
	// delta of the maximum, widening delta until that prefix is long enough (k
	// tokens, or p of the mass). Exact, not an approximation.
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
		// Mass is renormalised over the top-k survivors, as HF's TopPLogitsWarper
		// sees them; without top-k, over the whole vocabulary.
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
	s.cand = cand
	return cand
}

func logSumExp(z []float64, m float64) float64 {
	s := 0.0
	for _, v := range z {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

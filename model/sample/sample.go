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
	z    []float64 // tempered logits
	p    []float64 // p[i] = exp(z[i] - lse), set for the candidates of the last Pick
	cand []int
	// sortDesc scratch
	bucket []int32
	start  []int32
	tmpI   []int
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
// the quantity PPO's importance ratio compares against. A NaN logit panics: it
// has no place in the order of candidates (the windowed search below would never
// end), and it means the model has diverged.
func (s *Sampler) Pick(logits []float32, rng *rand.Rand) (int, float64) {
	t := s.cfg.Temperature
	greedy := t == 0
	if greedy {
		t = 1
	}
	s.z = grow(s.z, len(logits))
	z := s.z
	best := 0
	for i, l := range logits {
		v := float64(l)
		if t != 1 {
			v /= t // x/1 is x: skipping it changes nothing
		}
		z[i] = v
		if v > z[best] {
			best = i
		} else if v != v {
			panic(fmt.Sprintf("sample: logit %d of %d is NaN", i, len(logits)))
		}
	}
	if !greedy && s.whole(len(z)) {
		return s.drawAll(z, z[best], rng)
	}
	lse := logSumExp(z, z[best])
	if greedy {
		return best, z[best] - lse
	}
	cand := s.candidates(z, z[best], lse)
	// Inverse-CDF draw over the candidates in their fixed order. Each probability is
	// exp(z[i] - lse), computed once in candidates: the same value whichever sum it
	// enters.
	p := s.p
	total := 0.0
	for _, i := range cand {
		total += p[i]
	}
	u := rng.Float64() * total
	acc := 0.0
	for _, i := range cand {
		acc += p[i]
		if acc > u {
			return i, z[i] - lse
		}
	}
	last := cand[len(cand)-1]
	return last, z[last] - lse
}

// whole reports whether neither top-k nor top-p truncates a vocabulary of n tokens.
func (s *Sampler) whole(n int) bool {
	return (s.cfg.TopK == 0 || s.cfg.TopK >= n) && (s.cfg.TopP == 0 || s.cfg.TopP >= 1)
}

// drawAll is Pick's draw over the whole vocabulary of tempered logits z (max zmax):
// one exponential per token serves both the normaliser (the same sum, in the same
// order, as logSumExp) and the inverse-CDF draw over the unnormalised weights, which
// picks what the normalised ones would up to rounding at a CDF boundary. Sampling
// without truncation spent most of its time in those exponentials, twice per token.
func (s *Sampler) drawAll(z []float64, zmax float64, rng *rand.Rand) (int, float64) {
	s.p = grow(s.p, len(z))
	total := 0.0
	for i, v := range z {
		e := math.Exp(v - zmax)
		s.p[i] = e
		total += e
	}
	lse := zmax + math.Log(total)
	u := rng.Float64() * total
	acc := 0.0
	for i, e := range s.p {
		acc += e
		if acc > u {
			return i, z[i] - lse
		}
	}
	return len(z) - 1, z[len(z)-1] - lse
}

// candidates lists the tokens that survive top-k then top-p (one of them truncates:
// see whole), most likely first (ties by lower id). zmax is max(z). It
// sets s.p[i] = exp(z[i] - lse) for every candidate. The slice is reused by the
// next call.
func (s *Sampler) candidates(z []float64, zmax, lse float64) []int {
	s.p = grow(s.p, len(z))
	k, p := s.cfg.TopK, s.cfg.TopP
	if k >= len(z) {
		k = 0
	}
	if p >= 1 {
		p = 0
	}
	cand := s.cand[:0]
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
				e := math.Exp(v - lse)
				s.p[i] = e
				mass += e
			}
		}
		if (k > 0 && len(cand) >= k) || (k == 0 && mass >= p) || len(cand) == len(z) {
			break
		}
	}
	cand = s.sortDesc(cand, z)
	if k > 0 {
		cand = cand[:k]
	}
	if p > 0 {
		// Mass is renormalised over the top-k survivors, as HF's TopPLogitsWarper
		// sees them; without top-k, over the whole vocabulary.
		acc := 0.0
		if k > 0 {
			sum := 0.0
			for _, i := range cand {
				sum += math.Exp(z[i] - zmax)
			}
			norm := zmax + math.Log(sum)
			for n, i := range cand {
				acc += math.Exp(z[i] - norm)
				if acc >= p {
					cand = cand[:n+1]
					break
				}
			}
		} else {
			for n, i := range cand {
				acc += s.p[i] // exp(z[i] - lse)
				if acc >= p {
					cand = cand[:n+1]
					break
				}
			}
		}
	}
	s.cand = cand
	return cand
}

// sortDesc orders cand, given in ascending id order, by z descending, equal values
// keeping ascending ids: the order of a comparison sort on (z desc, id asc). It
// spreads the candidates over len(cand) buckets by value — the bucket index is
// monotone in z, so buckets come out in order and ties share one — then sorts each
// bucket by insertion. On a 4k vocabulary of near-uniform logits this takes about
// 35 µs where the comparison sort took 250 µs, which had made sampling the largest
// CPU cost of a tiny-model decode step (BenchmarkPickTopP: 120 µs per token, was
// 500 µs). It may return a different backing array than cand's.
func (s *Sampler) sortDesc(cand []int, z []float64) []int {
	n := len(cand)
	if n < 2 {
		return cand
	}
	hi, lo := z[cand[0]], z[cand[0]]
	for _, i := range cand[1:] {
		if v := z[i]; v > hi {
			hi = v
		} else if v < lo {
			lo = v
		}
	}
	if hi == lo {
		return cand // one value: id order is the order
	}
	scale := float64(n-1) / (hi - lo)
	if math.IsInf(hi-lo, 0) || math.IsInf(scale, 0) || scale == 0 {
		return s.sortFunc(cand, z) // values too spread for float buckets
	}
	s.bucket = grow(s.bucket, n)
	s.start = grow(s.start, n+1)
	clear(s.start)
	for j, i := range cand {
		// (hi - z)·scale is monotone non-increasing in z under rounding, in [0, n-1].
		b := min(int32((hi-z[i])*scale), int32(n-1))
		s.bucket[j] = b
		s.start[b+1]++
	}
	for b := 1; b <= n; b++ {
		s.start[b] += s.start[b-1]
	}
	s.tmpI = grow(s.tmpI, n)
	out := s.tmpI
	for j, i := range cand {
		b := s.bucket[j]
		out[s.start[b]] = i
		s.start[b]++
	}
	// s.start[b] is now the end of bucket b, and the start of bucket b+1.
	prev := int32(0)
	for b := range n {
		end := s.start[b]
		if bk := out[prev:end]; len(bk) > 32 {
			s.sortFunc(bk, z) // a crowded bucket: values bunched between sparse ones
		} else {
			insertionSort(bk, z)
		}
		prev = end
	}
	// Keep both buffers owned by the sampler whichever one holds the result.
	s.cand, s.tmpI = out, cand
	return out
}

// before reports whether token a sorts before token b: higher z, or equal z and
// lower id.
func before(z []float64, a, b int) bool { return z[a] > z[b] || z[a] == z[b] && a < b }

func insertionSort(ids []int, z []float64) {
	for j := 1; j < len(ids); j++ {
		v := ids[j]
		k := j
		for k > 0 && before(z, v, ids[k-1]) {
			ids[k] = ids[k-1]
			k--
		}
		ids[k] = v
	}
}

// sortFunc is the comparison sort sortDesc replaces, for inputs it cannot bucket.
func (s *Sampler) sortFunc(ids []int, z []float64) []int {
	slices.SortFunc(ids, func(a, b int) int {
		switch {
		case z[a] > z[b]:
			return -1
		case z[a] < z[b]:
			return 1
		}
		return a - b
	})
	return ids
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func logSumExp(z []float64, m float64) float64 {
	s := 0.0
	for _, v := range z {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// Logprob is one token's log-probability.
type Logprob struct {
	ID      int
	Logprob float64
}

// TopLogprobs returns the k most likely tokens of logits with their log-probabilities
// under the distribution Pick reports the sampled token's under: log softmax(logits/T)
// over the whole vocabulary (T = 1 when temperature is 0), computed with Pick's
// arithmetic so that the sampled token, when listed, has the very value Pick gave it.
// The order is most likely first, equal values by lower id, so it is deterministic.
func TopLogprobs(logits []float32, temperature float64, k int) []Logprob {
	if k <= 0 {
		return nil // no pass over the vocabulary
	}
	z, lse := tempered(logits, temperature)
	return top(z, lse, k)
}

// Score returns token id's log-probability under TopLogprobs' distribution and the k
// most likely tokens: what a prompt token gets, which was not sampled.
func Score(logits []float32, temperature float64, id, k int) (float64, []Logprob) {
	z, lse := tempered(logits, temperature)
	return z[id] - lse, top(z, lse, k)
}

// tempered is logits/T as Pick computes them, and their log-sum-exp.
func tempered(logits []float32, temperature float64) (z []float64, lse float64) {
	t := temperature
	if t == 0 {
		t = 1
	}
	z = make([]float64, len(logits))
	zmax := math.Inf(-1)
	for i, l := range logits {
		v := float64(l)
		if t != 1 {
			v /= t // as Pick: x/1 is skipped
		}
		z[i] = v
		zmax = max(zmax, v)
	}
	return z, logSumExp(z, zmax)
}

// top is the k largest of z, most likely first, with z[i] - lse as log-probs.
func top(z []float64, lse float64, k int) []Logprob {
	k = min(k, len(z))
	if k <= 0 {
		return nil
	}
	// An insertion into the k best so far, scanned in id order: a token enters only
	// when strictly more likely than the k-th, so equal values keep the lower id first.
	best := make([]int, 0, k)
	for i := range z {
		if len(best) == k && !before(z, i, best[k-1]) {
			continue
		}
		if len(best) < k {
			best = append(best, i)
		}
		j := len(best) - 1
		for j > 0 && before(z, i, best[j-1]) {
			best[j] = best[j-1]
			j--
		}
		best[j] = i
	}
	out := make([]Logprob, len(best))
	for n, i := range best {
		out[n] = Logprob{ID: i, Logprob: z[i] - lse}
	}
	return out
}

package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTopLogprobs: the k most likely tokens, most likely first and equal values by
// lower id, with log softmax(logits/T) as their log-probs (T = 1 when greedy).
func TestTopLogprobs(t *testing.T) {
	l := logits(0.1, 0.4, 0.1, 0.4)
	got := TopLogprobs(l, 1, 3)
	want := []Logprob{{1, math.Log(0.4)}, {3, math.Log(0.4)}, {0, math.Log(0.1)}}
	if !cmp.Equal(got, want, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-6 })) {
		t.Errorf("TopLogprobs(k 3) = %v, want %v", got, want)
	}
	if got := TopLogprobs(l, 0, 2); got[0].ID != 1 || math.Abs(got[0].Logprob-math.Log(0.4)) > 1e-6 {
		t.Errorf("greedy TopLogprobs = %v, want token 1 at log 0.4 (T = 1)", got)
	}
	// At T = 0.5 the probabilities are p²/Σp²: 0.16/0.34 for the likeliest.
	if got := TopLogprobs(l, 0.5, 1); math.Abs(got[0].Logprob-math.Log(0.16/0.34)) > 1e-6 {
		t.Errorf("TopLogprobs(T 0.5) = %v, want log(0.16/0.34)", got)
	}
	if got := TopLogprobs(l, 1, 10); len(got) != 4 {
		t.Errorf("k 10 of 4 tokens gave %d, want all 4", len(got))
	}
	if got := TopLogprobs(l, 1, 0); got != nil {
		t.Errorf("k 0 gave %v, want none", got)
	}
}

// TestTopLogprobsMatchPick: over random logits and every kind of sampling, the
// sampled token's log-prob from Pick is bit-identical to its entry in TopLogprobs
// (the whole vocabulary listed) and to Score's, and the list is sorted as a full
// sort of the vocabulary orders it.
func TestTopLogprobsMatchPick(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cfg := range []Config{{Temperature: 0}, {Temperature: 1}, {Temperature: 0.7}, {Temperature: 1.3, TopK: 5}, {Temperature: 0.9, TopP: 0.8}} {
		cfg.MaxNewTokens = 1
		s := mustNew(t, cfg)
		for range 20 {
			l := make([]float32, 50)
			for i := range l {
				l[i] = float32(math.Round(rng.NormFloat64()*4) / 2) // ties happen
			}
			tok, lp := s.Pick(l, NewRNG(rng.Uint64()))
			all := TopLogprobs(l, cfg.Temperature, len(l))
			i := slices.IndexFunc(all, func(x Logprob) bool { return x.ID == tok })
			if all[i].Logprob != lp {
				t.Fatalf("%+v: Pick's log-prob %v, TopLogprobs' %v", cfg, lp, all[i].Logprob)
			}
			if v, _ := Score(l, cfg.Temperature, tok, 0); v != lp {
				t.Fatalf("%+v: Pick's log-prob %v, Score's %v", cfg, lp, v)
			}
			ids := make([]int, len(l))
			for i := range ids {
				ids[i] = i
			}
			slices.SortStableFunc(ids, func(a, b int) int { return -cmpFloat(l[a], l[b]) })
			for n, x := range all {
				if x.ID != ids[n] {
					t.Fatalf("%+v: rank %d is token %d, want %d", cfg, n, x.ID, ids[n])
				}
			}
		}
	}
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

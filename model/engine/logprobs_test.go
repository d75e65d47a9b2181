package engine

import (
	stdcmp "cmp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// TestEngineLogprobs: a sequence asking for the 5 most likely tokens per position
// and for its prompt's log-probs samples the tokens it samples without asking; the
// sampled token's log-prob equals its entry among the most likely to the bit; the
// lists are sorted; and the prompt's log-probs are those LogProbs scores for the
// prompt at the sequence's temperature (within 1e-5: other shapes).
func TestEngineLogprobs(t *testing.T) {
	m := newTestModel(t, testConfig(), qwen2.Options{})
	live := liveTensors()
	e, err := New(m, Config{MaxRows: 4, TokenBudget: 1 << 20, PrefixCache: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	cases := engineCases()
	asked := slices.Clone(cases)
	for i := range asked {
		asked[i].seq.TopLogprobs, asked[i].seq.PromptLogprobs = 5, true
	}
	plain, _, _ := runEngine(t, e, cases, nil)
	got, _, _ := runEngine(t, e, asked, nil)
	for i, c := range got {
		if diff := cmp.Diff(plain[i].Tokens, c.Tokens); diff != "" {
			t.Errorf("case %d: asking for log-probs changed the tokens (-plain +asked):\n%s", i, diff)
		}
		if len(c.Top) != len(c.Tokens) {
			t.Fatalf("case %d: %d lists of top tokens for %d tokens", i, len(c.Top), len(c.Tokens))
		}
		for j, top := range c.Top {
			if len(top) != 5 || !slices.IsSortedFunc(top, func(a, b sample.Logprob) int { return stdcmp.Compare(b.Logprob, a.Logprob) }) {
				t.Fatalf("case %d token %d: top %v, want 5 most likely first", i, j, top)
			}
			for _, x := range top {
				if int64(x.ID) == c.Tokens[j] && float32(x.Logprob) != c.LogProbs[j] {
					t.Errorf("case %d token %d: sampled log-prob %v, listed %v", i, j, c.LogProbs[j], x.Logprob)
				}
			}
			if float32(top[0].Logprob) < c.LogProbs[j] {
				t.Errorf("case %d token %d: sampled log-prob %v above the likeliest %v", i, j, c.LogProbs[j], top[0].Logprob)
			}
		}
		seq := asked[i].seq
		want, err := m.LogProbs([]qwen2.Pair{{Context: seq.Prompt[:1], Response: seq.Prompt[1:]}}, qwen2.ScoreConfig{Temperature: seq.Sampling.Temperature})
		if err != nil {
			t.Fatal(err)
		}
		if d := torchtest.MaxAbsDiff(want[0].LogProbs, c.PromptLogProbs); len(c.PromptLogProbs) != len(seq.Prompt)-1 || d > 1e-5 {
			t.Errorf("case %d: %d prompt log-probs, max |Δ| %g from LogProbs; want %d within 1e-5", i, len(c.PromptLogProbs), d, len(seq.Prompt)-1)
		}
		for j, top := range c.PromptTop {
			if len(top) != 5 || float32(top[0].Logprob) < c.PromptLogProbs[j] {
				t.Errorf("case %d prompt token %d: top %v, log-prob %v", i, j+1, top, c.PromptLogProbs[j])
			}
		}
	}
	e.Close()
	if n := liveTensors(); n != live {
		t.Errorf("live tensors %d after Close, want %d", n, live)
	}
}

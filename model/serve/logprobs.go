package serve

import (
	"math"
	"slices"
	"strings"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// Every log-prob the server returns, sampled token, alternative or prompt token, is
// log softmax(logits/T) over the whole vocabulary (T = 1 when greedy), before top-k
// and top-p: the distribution the sampler draws from, and the one a PPO ratio
// compares against. At T = 1 (or greedy) this is what vLLM returns by default (its
// raw_logprobs); at other temperatures vLLM's default returns the untempered ones.
// The alternatives come from the same arithmetic as the sampled token's, so that
// token's entry among them equals its token_logprobs value exactly.

// lpWriter appends tokens to the completions log-prob layout, text offsets running
// on from one call to the next (a stream's chunks).
type lpWriter struct {
	s     *Server
	asIDs bool
	k     int // alternatives per position
	off   int // text offset of the next token
}

func (s *Server) lpWriter(in CompletionRequest) *lpWriter {
	return &lpWriter{s: s, asIDs: in.AsIDs, k: *in.Logprobs}
}

func newLogprobs() *Logprobs {
	return &Logprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []TopLogprobs{}, TextOffset: []int{}}
}

// add appends token id with its log-prob v (nil: the prompt's first token, which has
// none) and the most likely tokens at its position: the first k, then id itself when
// it is not among them, as vLLM lists it.
func (w *lpWriter) add(lp *Logprobs, id int32, v *float32, top []sample.Logprob) {
	tok := w.s.tokenText(id, w.asIDs)
	lp.Tokens = append(lp.Tokens, tok)
	lp.TextOffset = append(lp.TextOffset, w.off)
	w.off += len(tok)
	var val *float64
	if v != nil {
		f := finite(*v)
		val = &f
	}
	lp.TokenLogprobs = append(lp.TokenLogprobs, val)
	if w.k == 0 || v == nil {
		lp.TopLogprobs = append(lp.TopLogprobs, nil)
		return
	}
	m := TopLogprobs{}
	listed := false
	for _, x := range top[:min(w.k, len(top))] {
		listed = listed || x.ID == int(id)
		m = addEntry(m, w.s.tokenText(int32(x.ID), w.asIDs), float32(x.Logprob))
	}
	if !listed {
		m = addEntry(m, tok, *v)
	}
	lp.TopLogprobs = append(lp.TopLogprobs, m)
}

// addEntry appends a token to an object of log-probs unless its text is already a
// key there (two ids may decode to the same replacement character): a JSON object
// holds a key once, the more likely entry first.
func addEntry(m TopLogprobs, tok string, v float32) TopLogprobs {
	if slices.ContainsFunc(m, func(e TokenLogprob) bool { return e.Token == tok }) {
		return m
	}
	return append(m, TokenLogprob{Token: tok, Logprob: finite(v)})
}

// finite widens a log-prob exactly; one that is not finite is written as -9999, as
// vLLM does, JSON having no infinity.
func finite(v float32) float64 {
	f := float64(v)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return -9999
	}
	return f
}

// tokenText is a token as logprobs lists it: its text, or "token_id:N" under
// return_tokens_as_token_ids.
func (s *Server) tokenText(id int32, asIDs bool) string {
	if asIDs {
		return TokenAsID(id)
	}
	return strings.ToValidUTF8(s.m.Tok.Decode([]int32{id}), "\uFFFD")
}

// logprobs is the log-prob layout of completion c of prompt: under echo the prompt's
// tokens first, then the generated ones.
func (s *Server) logprobs(in CompletionRequest, prompt []int64, c qwen2.Completion) *Logprobs {
	lp, w := newLogprobs(), s.lpWriter(in)
	if in.Echo {
		w.addPrompt(lp, prompt, c.PromptLogProbs, c.PromptTop)
	}
	w.addGenerated(lp, c, 0)
	return lp
}

// addPrompt appends prompt's tokens, lps[i] and top[i] the log-prob and the
// alternatives of token i+1 (the first token has none).
func (w *lpWriter) addPrompt(lp *Logprobs, prompt []int64, lps []float32, top [][]sample.Logprob) {
	for i, id := range prompt {
		if i == 0 || i > len(lps) {
			w.add(lp, int32(id), nil, nil)
			continue
		}
		w.add(lp, int32(id), &lps[i-1], at(top, i-1))
	}
}

// addGenerated appends c's generated tokens from the from-th on.
func (w *lpWriter) addGenerated(lp *Logprobs, c qwen2.Completion, from int) {
	for i := from; i < len(c.Tokens); i++ {
		w.add(lp, int32(c.Tokens[i]), &c.LogProbs[i], at(c.Top, i))
	}
}

// at is tops[i], or nil past its end (alternatives not asked for).
func at(tops [][]sample.Logprob, i int) []sample.Logprob {
	if i < len(tops) {
		return tops[i]
	}
	return nil
}

// chatLogprobs is the chat layout of lp: each token with its bytes and its k most
// likely alternatives (OpenAI lists exactly k; the sampled token is not added).
func chatLogprobs(lp *Logprobs, k int) *ChatLogprobs {
	out := &ChatLogprobs{Content: make([]ChatTokenLogprob, 0, len(lp.Tokens))}
	for i, tok := range lp.Tokens {
		e := ChatTokenLogprob{Token: tok, Logprob: *lp.TokenLogprobs[i], Bytes: tokenBytes(tok), TopLogprobs: []ChatTopLogprob{}}
		top := lp.TopLogprobs[i]
		for _, x := range top[:min(k, len(top))] {
			e.TopLogprobs = append(e.TopLogprobs, ChatTopLogprob{Token: x.Token, Logprob: x.Logprob, Bytes: tokenBytes(x.Token)})
		}
		out.Content = append(out.Content, e)
	}
	return out
}

func tokenBytes(tok string) []int {
	b := make([]int, len(tok))
	for k := range len(tok) {
		b[k] = int(tok[k])
	}
	return b
}

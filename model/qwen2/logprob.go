package qwen2

import (
	"fmt"
	"slices"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// Pair is one (context, response) sequence to score: log π(response | context).
type Pair struct {
	Context  []int64 // at least one token
	Response []int64
}

// Tokens widens token ids as datasets and tokenizers hold them (int32) to the model's
// int64.
func Tokens(ids []int32) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// ScoreConfig sets how log-probs are computed.
type ScoreConfig struct {
	// TokenBudget bounds rows × padded width of one forward pass; a pair longer than
	// the budget gets a batch of its own. 0 means 8192.
	TokenBudget int `json:"token_budget"`
	// Chunk is the number of response positions whose [chunk, vocab] logits exist at
	// once, so [tokens, vocab] is never materialised. 0 means 256.
	Chunk int `json:"chunk"`
	// Temperature divides the logits before the softmax, as verl does when scoring
	// rollouts sampled at that temperature. 0 means 1.
	Temperature float64 `json:"temperature"`
	// Entropy also returns the entropy of each position's distribution.
	Entropy bool `json:"entropy"`
	// ShareScored lets a tree pass (TreeLogProbTensor) share prefixes that reach into
	// the scored tokens: pairs group over their whole sequences instead of their
	// contexts. SFT with a context loss scores every token after a turn's first, so
	// only this shares its turns' system prompt. An update's samples, whose shared
	// contexts a trunk covers anyway, computed more slots with it: deeper trunks split
	// their groups.
	ShareScored bool `json:"share_scored,omitempty"`
}

func (c ScoreConfig) withDefaults() ScoreConfig {
	if c.TokenBudget <= 0 {
		c.TokenBudget = 8192
	}
	if c.Chunk <= 0 {
		c.Chunk = 256
	}
	if c.Temperature <= 0 {
		c.Temperature = 1
	}
	return c
}

// Scored holds per-response-token values of one Pair.
type Scored struct {
	LogProbs []float32
	Entropy  []float32 // nil unless ScoreConfig.Entropy
}

// LogProbs scores pairs without gradients, in batches formed to the token budget
// (longest first, so padding stays small); results are in input order.
func (m *Model) LogProbs(pairs []Pair, cfg ScoreConfig) (out []Scored, err error) {
	cfg = cfg.withDefaults()
	for i, p := range pairs {
		if err := m.checkPair(p); err != nil {
			return nil, fmt.Errorf("score: pair %d: %w", i, err)
		}
	}
	torch.DoNoGrad(func() { out, err = m.logProbs(pairs, cfg) })
	return out, err
}

// logProbs is LogProbs on the torch thread.
func (m *Model) logProbs(pairs []Pair, cfg ScoreConfig) ([]Scored, error) {
	out := make([]Scored, len(pairs))
	all := make([]int, len(pairs))
	for i := range all {
		all[i] = i
	}
	length := func(i int) int { return len(pairs[i].Context) + len(pairs[i].Response) }
	for _, batch := range BudgetBatches(all, length, cfg.TokenBudget) {
		sub := make([]Pair, len(batch))
		for j, i := range batch {
			sub[j] = pairs[i]
		}
		lp, ent, err := m.LogProbTensor(sub, cfg)
		if err != nil {
			return nil, fmt.Errorf("score: batch of pairs %v: %w", batch, err)
		}
		lpv := torch.ToHost[float32](torch.Of(lp))
		var entv []float32
		if ent != nil {
			entv = torch.ToHost[float32](torch.Of(ent))
		}
		torch.Drop(lp, ent)
		off := 0
		for _, i := range batch {
			n := len(pairs[i].Response)
			out[i].LogProbs = lpv[off : off+n : off+n]
			if entv != nil {
				out[i].Entropy = entv[off : off+n : off+n]
			}
			off += n
		}
	}
	return out, nil
}

// BudgetBatches splits idx into batches of at most budget rows × longest length,
// longest first with ties in idx order; an item longer than the budget gets a batch of
// its own, and budget 0 keeps idx whole. Log-prob scoring batches pairs with it, and
// the update forms micro-batches with it: the split changes only how a gradient is
// accumulated, never its value beyond float rounding.
func BudgetBatches(idx []int, length func(int) int, budget int) [][]int {
	order := slices.Clone(idx)
	if budget <= 0 {
		return [][]int{order}
	}
	slices.SortStableFunc(order, func(a, b int) int { return length(b) - length(a) })
	return SplitBudget(order, length, budget)
}

// SplitBudget cuts order, as it is, into consecutive batches of at most budget rows ×
// longest length; an item longer than the budget gets a batch of its own.
func SplitBudget(order []int, length func(int) int, budget int) [][]int {
	var out [][]int
	var cur []int
	width := 0
	for _, i := range order {
		w := max(width, length(i))
		if len(cur) > 0 && (len(cur)+1)*w > budget {
			out = append(out, cur)
			cur, w = nil, length(i)
		}
		cur = append(cur, i)
		width = w
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func (m *Model) checkPair(p Pair) error {
	if len(p.Context) == 0 {
		return fmt.Errorf("empty context: the first response token needs a token to condition on")
	}
	if n := len(p.Context) + len(p.Response); n > m.Config.MaxPositions {
		return fmt.Errorf("%d tokens exceed max_position_embeddings %d: shorten the sequence", n, m.Config.MaxPositions)
	}
	if err := m.Config.checkTokens(p.Context); err != nil {
		return fmt.Errorf("context: %w", err)
	}
	if err := m.Config.checkTokens(p.Response); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	return nil
}

// LogProbTensor runs one forward over pairs (packed into rows, see packRows; no
// budget) and returns log π(response token | prefix) for every response token, flattened pair by
// pair: [Σ len(Response)] float32, and the entropies alike when cfg.Entropy (else
// nil). Gradients flow when grad mode is on, for the PPO update.
//
// The log-probs are computed chunk by chunk (see chunkLogProbs). With gradients,
// autograd keeps each chunk's logits for the backward pass, so training memory still
// grows with tokens × vocab. The backward pass adds the head's and (on the CPU) the
// embedding's weight gradients into those weights' gradients in place, outside
// autograd's own accumulation (see Model.embed and Model.logits).
func (m *Model) LogProbTensor(pairs []Pair, cfg ScoreConfig) (lp, ent *ts.Tensor, err error) {
	cfg = cfg.withDefaults()
	b, at, target, err := m.packPairs(pairs)
	if err != nil {
		return nil, nil, err
	}
	defer torch.Catch(fmt.Sprintf("log-probs of %d pairs", len(pairs)), &err)
	n := int64(len(at))
	if n == 0 || len(pairs) == 0 {
		lp, ent = m.noScores(cfg)
		return lp, ent, nil
	}
	ids, pos, bias := b.inputs(m)
	h := m.hidden(ids, pos, bias, nil, nil)
	torch.Free(ids, pos, bias)
	lp, ent = m.scoreHidden(h, at, target, cfg)
	return lp, ent, nil
}

// scoreHidden is log π(target[i]) predicted at flat slot at[i] of the final hidden
// states h: [rows, width, hidden] (at least one), and the entropies when cfg.Entropy;
// it frees h.
func (m *Model) scoreHidden(h torch.Raw, at, target []int64, cfg ScoreConfig) (lp, ent *ts.Tensor) {
	n := int64(len(at))
	idx := torch.RawFromHost(at, []int64{n}, m.device)
	flat := h.Reshape(-1, int64(m.Config.HiddenSize))
	sel := flat.IndexSelect(0, idx)
	torch.Free(h, flat, idx)
	defer sel.Free()
	tgt := torch.RawFromHost(target, []int64{n, 1}, m.device)
	defer tgt.Free()
	l, e := m.chunkLogProbs(sel, tgt, cfg)
	lp = l.Wrap()
	if cfg.Entropy {
		ent = e.Wrap()
	}
	return lp, ent
}

// packPairs checks pairs and packs them into rows (packRows); at is the flat slot
// predicting each response token, target the token.
func (m *Model) packPairs(pairs []Pair) (b rowPack, at, target []int64, err error) {
	for i, p := range pairs {
		if err := m.checkPair(p); err != nil {
			return rowPack{}, nil, nil, fmt.Errorf("pair %d: %w", i, err)
		}
	}
	seqs := make([][]int64, len(pairs))
	for i, p := range pairs {
		seqs[i] = p.tokens()
	}
	b = packRows(seqs)
	for i, p := range pairs {
		for j, tok := range p.Response {
			at = append(at, int64(b.slot[i]+len(p.Context)-1+j))
			target = append(target, tok)
		}
	}
	return b, at, target, nil
}

// noScores is LogProbTensor's result for pairs without response tokens.
func (m *Model) noScores(cfg ScoreConfig) (lp, ent *ts.Tensor) {
	lp = torch.RawEmpty([]int64{0}, gotch.Float, m.device).Wrap()
	if cfg.Entropy {
		ent = torch.RawEmpty([]int64{0}, gotch.Float, m.device).Wrap()
	}
	return lp, ent
}

// chunkLogProbs maps hidden states sel: [n, hidden] and targets tgt: [n, 1] int64
// to log softmax(logits/T)[target]: [n] float32 and, when cfg.Entropy, each
// position's entropy: [n] float32 (else the zero Raw). Each chunk of cfg.Chunk
// positions gathers its target logit and subtracts a float32 logsumexp, so only
// [chunk, vocab] logits exist at a time in the forward pass.
func (m *Model) chunkLogProbs(sel, tgt torch.Raw, cfg ScoreConfig) (lp, ent torch.Raw) {
	n := sel.Size()[0]
	var lps, ents []torch.Raw
	for s := int64(0); s < n; s += int64(cfg.Chunk) {
		c := min(int64(cfg.Chunk), n-s)
		hc := sel.Narrow(0, s, c)
		logits := m.logits(hc) // [c, vocab] float32
		hc.Free()
		if cfg.Temperature != 1 {
			t := logits.DivScalar(cfg.Temperature)
			logits.Free()
			logits = t
		}
		lse := logits.LogsumexpLast() // [c]
		tc := tgt.Narrow(0, s, c)
		g := logits.Gather(1, tc)
		gs := g.Squeeze(1)
		lps = append(lps, gs.Sub(lse))
		torch.Free(tc, g, gs)
		if cfg.Entropy {
			// H = lse − Σ softmax·logits
			p := logits.SoftmaxLastFloat()
			pl := p.Mul(logits)
			sum := pl.SumLast()
			ents = append(ents, lse.Sub(sum))
			torch.Free(p, pl, sum)
		}
		torch.Free(lse, logits)
	}
	lp = catFree(lps)
	if cfg.Entropy {
		ent = catFree(ents)
	}
	return lp, ent
}

// catFree concatenates xs (at least one) along dim 0 and frees the parts.
func catFree(xs []torch.Raw) torch.Raw {
	if len(xs) == 1 {
		return xs[0]
	}
	defer torch.Free(xs...)
	return torch.RawCat(xs, 0)
}

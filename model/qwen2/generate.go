package qwen2

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
)

// Finish reasons of a completion.
const (
	FinishStop   = "stop"   // a stop sequence was emitted (it is included in Tokens)
	FinishLength = "length" // max_new_tokens or max_position_embeddings was reached
)

// Request is one sequence to continue.
type Request struct {
	Prompt []int64
	// Seed fixes the sequence's random stream: the same (Seed, Prompt, sampling
	// config) gives the same tokens whatever else is in the batch, up to the
	// floating-point caveat in Generate.
	Seed uint64
	// Past, when set, holds keys and values of an earlier completion of this
	// sequence: the slots of its tokens that begin Prompt are reused, and only the
	// rest of Prompt runs. Generate reads it; the caller still owns it.
	Past *Past
	// KeepPast asks for the completion's Past, for the sequence's next turn. Both
	// are Generate's: the continuous-batching engine (model/engine) refuses them.
	KeepPast bool
}

// Completion is the generated continuation of one Request.
type Completion struct {
	Tokens []int64
	// LogProbs[i] is log softmax(logits/T)[Tokens[i]] over the full vocabulary,
	// before top-k/top-p truncation (T = 1 when greedy); see sample.Sampler.Pick.
	LogProbs []float32
	// Top[i] are the most likely tokens at Tokens[i]'s position under the same
	// distribution, when an engine's sequence asked for them; Generate leaves it nil.
	Top [][]sample.Logprob
	// PromptLogProbs[i] is the log-prob of prompt token i+1 and PromptTop[i] the most
	// likely tokens there, when an engine's sequence asked (see PromptScore).
	PromptLogProbs []float32
	PromptTop      [][]sample.Logprob
	Finish         string
	// Past holds the keys and values of the prompt and of every token but the last,
	// when the request asked for it (KeepPast); the caller drops it.
	Past *Past
}

// Generate continues every request in one batch with a KV cache. Prompts of
// different lengths are right-padded and keep their own positions (see Batch); rows
// that finish are dropped from the cache. Tokens are drawn on the host from each
// row's float32 logits with that row's own random stream, one draw per token, rows
// spread over GOMAXPROCS goroutines. Each step feeds only the rows' newest tokens,
// through projections fused once per call (see fused). A request with a Past runs
// only the prompt tokens past it; its tokens and log-probs are those of the whole
// prompt up to the same floating-point caveat (the reused keys and values were
// computed in other batch shapes).
//
// Batch independence: a row's arithmetic is the same whatever its neighbours, but
// libtorch may pick different GEMM kernels for different batch shapes, so logits can
// differ in the last bits between batch compositions (TestBatchIndependence measures
// this on CPU). Because the token is an inverse-CDF draw, such a difference changes
// the token only when the uniform draw lands within that distance of a CDF boundary
// or two greedy logits tie to the last bit.
func (m *Model) Generate(reqs []Request, cfg sample.Config) (out []Completion, err error) {
	samp, err := sample.New(cfg)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	for i, r := range reqs {
		if len(r.Prompt) == 0 {
			return nil, fmt.Errorf("generate: request %d: empty prompt", i)
		}
		if len(r.Prompt) >= m.Config.MaxPositions {
			return nil, fmt.Errorf("generate: request %d: prompt of %d tokens leaves no room within max_position_embeddings %d: shorten the prompt", i, len(r.Prompt), m.Config.MaxPositions)
		}
		if err := m.Config.checkTokens(r.Prompt); err != nil {
			return nil, fmt.Errorf("generate: request %d: %w", i, err)
		}
	}
	defer func() { // after Catch has turned a libtorch panic into err
		if err != nil {
			for _, c := range out {
				c.Past.Drop()
			}
		}
	}()
	defer torch.Catch(fmt.Sprintf("generate: batch of %d", len(reqs)), &err)
	out = make([]Completion, len(reqs))
	// Without autograd, which the in-place ops of the forward pass rely on.
	torch.DoNoGrad(func() { m.generate(reqs, samp, cfg, out) })
	return out, nil
}

// generate decodes reqs into out on the torch thread, sampling with samp and, for
// rows past the first worker's, samplers of its own.
func (m *Model) generate(reqs []Request, samp *sample.Sampler, cfg sample.Config, out []Completion) {
	rngs := make([]*rand.Rand, len(reqs))
	for i, r := range reqs {
		rngs[i] = sample.NewRNG(r.Seed)
	}
	active := make([]int, len(reqs)) // active[row] = request index
	for i := range reqs {
		active[i] = i
	}
	// Rows are sampled in parallel, one sampler per worker: a row's draw depends only
	// on its logits and its own stream, so the split does not change any token.
	samps := make([]*sample.Sampler, min(runtime.GOMAXPROCS(0), len(reqs)))
	samps[0] = samp
	for i := 1; i < len(samps); i++ {
		samps[i], _ = sample.New(cfg)
	}
	picks := make([]pick, len(reqs))
	fs := m.fuse()
	defer freeFused(fs)
	cache, tokens, start, valid := m.prefill(reqs, cfg.MaxNewTokens, fs)
	defer cache.Drop()
	for len(active) > 0 {
		b := NewBatch(tokens, start, valid, cache.Len())
		valid = b.Valid
		logits := m.lastLogits(b, cache, fs)
		pickRows(samps, logits, m.Config.VocabSize, active, rngs, picks[:len(active)])
		var keep []int64
		for row, req := range active {
			c := &out[req]
			c.Tokens = append(c.Tokens, int64(picks[row].tok))
			c.LogProbs = append(c.LogProbs, float32(picks[row].lp))
			next := len(reqs[req].Prompt) + len(c.Tokens) - 1 // position of the new token
			switch {
			case sample.Stopped(c.Tokens, cfg.Stop):
				c.Finish = FinishStop
			case len(c.Tokens) >= cfg.MaxNewTokens || next+1 >= m.Config.MaxPositions:
				c.Finish = FinishLength
			default:
				keep = append(keep, int64(row))
				continue
			}
			if reqs[req].KeepPast {
				c.Past = m.keepPast(cache, row, valid[row], slices.Concat(reqs[req].Prompt, c.Tokens[:len(c.Tokens)-1]))
			}
		}
		if len(keep) == 0 {
			break
		}
		if len(keep) < len(active) {
			cache.Keep(keep)
		}
		nextActive := make([]int, len(keep))
		nextValid := make([][]bool, len(keep))
		tokens, start = make([][]int64, len(keep)), make([]int, len(keep))
		for j, row := range keep {
			req := active[row]
			c := out[req]
			nextActive[j] = req
			nextValid[j] = valid[row]
			tokens[j] = []int64{c.Tokens[len(c.Tokens)-1]}
			start[j] = len(reqs[req].Prompt) + len(c.Tokens) - 1
		}
		active, valid = nextActive, nextValid
	}
}

// prefill starts the decode of reqs from their Pasts (prefillPasts) when any carries
// one, from their shared prefixes (prefillTrunks) otherwise.
func (m *Model) prefill(reqs []Request, maxNew int, fs []fused) (cache *Cache, tokens [][]int64, start []int, valid [][]bool) {
	if hasPast(reqs) {
		return m.prefillPasts(reqs, maxNew)
	}
	return m.prefillTrunks(reqs, maxNew, fs)
}

// sharePrompts switches prefillTrunks' sharing; a variable so a benchmark can time the
// prefill without it.
var sharePrompts = true

// prefillTrunks starts the decode of reqs: it runs the prompts' shared prefixes
// (paddedTrunks) once each into a cache, copies each trunk's keys and values into the
// rows of the prompts that share it, and returns that cache, with room for maxNew
// tokens after the longest prompt, and the first batch's rows: each prompt's tokens
// after its trunk, their first position and the trunk slots the row holds. The
// samples of one prompt share all of it but the last token, and later turns of an
// agent share the system prompt and the question, so a shared token is computed once
// instead of once per row. Without shared prefixes the cache starts empty and the
// rows are the whole prompts.
func (m *Model) prefillTrunks(reqs []Request, maxNew int, fs []fused) (cache *Cache, tokens [][]int64, start []int, valid [][]bool) {
	tokens = make([][]int64, len(reqs))
	width := 0
	for i, r := range reqs {
		tokens[i] = r.Prompt
		width = max(width, len(r.Prompt))
	}
	start = make([]int, len(reqs))
	trunks, of := paddedTrunks(tokens)
	if len(trunks) == 0 || !sharePrompts {
		return m.NewCache(len(reqs), width+maxNew), tokens, start, nil
	}
	tb := NewBatch(trunks, make([]int, len(trunks)), nil, 0)
	tc := m.NewCache(len(trunks), tb.Width)
	defer tc.Drop()
	ids, pos, bias := m.inputs(tb)
	h := m.hidden(ids, pos, bias, tc, fs)
	torch.Free(ids, pos, bias, h)
	rows := make([]int64, len(reqs)) // a row without a trunk copies trunk 0's, all hidden
	valid = make([][]bool, len(reqs))
	rest := 0
	for i, t := range of {
		valid[i] = make([]bool, tb.Width)
		if t >= 0 {
			rows[i], start[i] = int64(t), len(trunks[t])
			copy(valid[i], tb.Valid[t])
			tokens[i] = tokens[i][start[i]:]
		}
		rest = max(rest, len(tokens[i]))
	}
	return tc.copyRows(rows, tb.Width, tb.Width+rest+maxNew), tokens, start, valid
}

// paddedTrunks groups prompts for a right-padded prefill, which computes the trunks'
// rows and then every prompt's row as wide as the widest rest: it cuts all trunks at
// one length c, the one of the fewest slots (trunks·c + prompts·widest rest), among the
// lengths neighbours in sorted order share and one less. Prompts longer than c whose
// first c tokens agree share a trunk of them; of[i] is prompt i's trunk, -1 for none.
// No trunks when sharing saves nothing. A deeper trunk that few prompts share (two
// samples that searched alike) would save a padded batch nothing while other rows
// stay wide; the prefix every sample of a prompt shares does.
func paddedTrunks(prompts [][]int64) (trunks [][]int64, of []int) {
	order, lcp := sortedPrefixes(prompts)
	widest := 0
	for _, p := range prompts {
		widest = max(widest, len(p))
	}
	best, cut := len(prompts)*widest, 0
	for _, v := range lcp {
		for _, c := range []int{v, v - 1} {
			if c <= 0 {
				continue
			}
			run, n := cutRuns(prompts, order, lcp, c)
			rest := 0
			for i, p := range prompts {
				if run[i] >= 0 {
					rest = max(rest, len(p)-c)
				} else {
					rest = max(rest, len(p))
				}
			}
			if slots := n*c + len(prompts)*rest; slots < best {
				best, cut = slots, c
			}
		}
	}
	if cut == 0 {
		return nil, slices.Repeat([]int{-1}, len(prompts))
	}
	of, n := cutRuns(prompts, order, lcp, cut)
	trunks = make([][]int64, n)
	for i, t := range of {
		if t >= 0 {
			trunks[t] = prompts[i][:cut]
		}
	}
	return trunks, of
}

// cutRuns numbers the groups of at least two prompts longer than c that share their
// first c tokens, in sorted order (order, lcp from sortedPrefixes): run[i] is prompt
// i's group, -1 for none, and n the number of groups.
func cutRuns(prompts [][]int64, order, lcp []int, c int) (run []int, n int) {
	run = slices.Repeat([]int{-1}, len(prompts))
	for lo := 0; lo < len(order); {
		hi := lo + 1 // order[lo:hi] share c tokens
		for hi < len(order) && lcp[hi-1] >= c {
			hi++
		}
		var members []int
		for _, i := range order[lo:hi] {
			if len(prompts[i]) > c {
				members = append(members, i)
			}
		}
		if len(members) >= 2 {
			for _, i := range members {
				run[i] = n
			}
			n++
		}
		lo = hi
	}
	return run, n
}

// pick is one sampled token and its log-probability.
type pick struct {
	tok int
	lp  float64
}

// pickRows samples row r of logits: [rows·vocab] with the stream of request
// active[r] into picks[r], rows split over the samplers' goroutines.
func pickRows(samps []*sample.Sampler, logits []float32, vocab int, active []int, rngs []*rand.Rand, picks []pick) {
	run := func(w, n int) {
		for r := w; r < len(active); r += n {
			tok, lp := samps[w].Pick(logits[r*vocab:(r+1)*vocab], rngs[active[r]])
			picks[r] = pick{tok: tok, lp: lp}
		}
	}
	n := min(len(samps), len(active))
	torch.Spread(n, func(w int) { run(w, n) })
}

// lastLogits runs b through the model (through fused projections fs when not nil)
// and returns the float32 logits of each row's last real token, [rows·vocab] on the
// host; only those rows go through the head.
func (m *Model) lastLogits(b Batch, cache *Cache, fs []fused) []float32 {
	return m.lastLogitsSeeing(b, cache, fs, nil)
}

// lastLogitsSeeing is lastLogits that first shows see, when set, the hidden states of
// every position, [rows, width, hidden]; see keeps none of them.
func (m *Model) lastLogitsSeeing(b Batch, cache *Cache, fs []fused, see func(h torch.Raw)) []float32 {
	ids, pos, bias := m.inputs(b)
	h := m.hidden(ids, pos, bias, cache, fs)
	torch.Free(ids, pos, bias)
	if see != nil {
		see(h)
	}
	if b.Width > 1 {
		last := make([]int64, b.Rows)
		for r := range b.Rows {
			n := 0
			for j := range b.Width {
				if b.Valid[r][b.Past+j] {
					n = j
				}
			}
			last[r] = int64(r*b.Width + n)
		}
		idx := torch.RawFromHost(last, []int64{int64(b.Rows)}, m.device)
		flat := h.Reshape(int64(b.Rows*b.Width), -1)
		sel := flat.IndexSelect(0, idx)
		torch.Free(h, flat, idx)
		h = sel
	}
	logits := m.logits(h) // [rows, vocab] or [rows, 1, vocab]
	h.Free()
	defer logits.Free()
	return torch.ToHost[float32](logits)
}

// scorePrompt reads a one-row prefill's hidden states h: [1, len(prompt), hidden] and
// returns the log-prob of each prompt token after the first under softmax(logits/T)
// (T = 1 when temp is 0), with the k most likely tokens at its position
// (sample.Score). The head runs on a chunk of positions at a time, so the prompt's
// [len, vocab] logits never exist at once.
func (m *Model) scorePrompt(h torch.Raw, prompt []int64, temp float64, k int) ([]float32, [][]sample.Logprob) {
	const chunk = 256
	n, vocab := len(prompt)-1, m.Config.VocabSize
	lps, tops := make([]float32, 0, n), make([][]sample.Logprob, 0, n)
	for c := 0; c < n; c += chunk {
		w := min(chunk, n-c)
		part := h.Narrow(1, int64(c), int64(w))
		logits := m.logits(part)
		host := torch.ToHost[float32](logits)
		torch.Free(part, logits)
		for i := range w {
			lp, top := sample.Score(host[i*vocab:(i+1)*vocab], temp, int(prompt[c+i+1]), k)
			lps = append(lps, float32(lp))
			tops = append(tops, top)
		}
	}
	return lps, tops
}

// Package engine decodes a changing set of sequences of a qwen2 model together
// (continuous batching): sequences join the running batch between decode steps and
// leave it as soon as they finish, each with its own sampling settings, seeded
// stream, stop rules and max_tokens. It is the policy server's (model/serve) decode
// engine. The engine owns admission (a row and KV-cache token budget), sampling,
// stop rules, cancellation and a store of finished sequences' keys and values for
// prompts that extend them; the model's side, prefill, packing rows into the running
// cache and the decode pass, is qwen2.Decoder's.
package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
)

// Errors of an Engine: an unusable Config, and a sequence it has no room for under
// its Config.
var (
	ErrConfig = errors.New("invalid engine config")
	ErrFull   = errors.New("engine full")
)

// Config bounds an Engine's running batch.
type Config struct {
	// MaxRows is the most sequences decoded together in one step.
	MaxRows int `json:"max_rows"`
	// TokenBudget bounds the running batch's KV cache, in token slots: rows × slots.
	// Rows share slot positions, so the cache has as many slots as its longest row
	// needs; a sequence joins only when, with it, every row's context plus its
	// remaining max_tokens still fits. A slot costs layers · 2 · kv_heads · head_dim
	// elements (57 KB for Qwen2.5-7B in bf16, 8 KB for the tiny preset in float32).
	TokenBudget int `json:"token_budget"`
	// PrefixCache is how many token slots of finished sequences' keys and values
	// the engine keeps, in host memory, for later prompts that begin with a
	// sequence's prompt and completion (a full-context agent's next turn) or with
	// its prompt (another sample): those prefill only the rest. 0 keeps none. A
	// reused prefix changes a sequence's logits only in the last bits, as the
	// batch's shape does.
	PrefixCache int `json:"prefix_cache"`
}

// DefaultConfig is 64 rows and 2¹⁹ token slots: 64 sequences of 8k tokens.
func DefaultConfig() Config {
	return Config{MaxRows: 64, TokenBudget: 1 << 19}
}

// Sequence is one request of an Engine, with its own sampling settings.
type Sequence struct {
	qwen2.Request
	Sampling sample.Config
	// StopWhen, when set, is also asked after every token whether the completion so
	// far ends the sequence, as a stop string matched on the decoded text does; it
	// finishes with FinishStop.
	StopWhen func(tokens []int64) bool
	// TopLogprobs asks for the k most likely tokens at every sampled position
	// (qwen2.Completion.Top), under the distribution of Completion.LogProbs.
	TopLogprobs int
	// PromptLogprobs asks for the log-prob of every prompt token after the first and
	// its TopLogprobs alternatives (qwen2.Completion.PromptLogProbs, PromptTop). Such a
	// prompt is prefilled whole, never from a stored prefix, whose logits are gone.
	PromptLogprobs bool
	// OnToken, when set, is told each token as it is sampled, before the sequence
	// finishes: a server streams them.
	OnToken func(t Token)
}

// Token is one sampled token as OnToken is told it: its id, log-prob and, when the
// sequence asked for them, the most likely tokens at its position.
type Token struct {
	ID      int64
	LogProb float32
	Top     []sample.Logprob
}

// Finished is a sequence's completion, named by the ID Add returned.
type Finished struct {
	ID int
	qwen2.Completion
}

// Engine decodes a changing set of sequences together (continuous batching):
// sequences join between decode steps and leave as soon as they finish, so a long
// completion never holds back the requests behind it. Add prefills a sequence on
// its own (qwen2.Decoder.Prefill: one forward over its prompt, exactly as
// qwen2.Generate runs a batch of one) and samples its first token; the next Step
// joins its keys and values to the running batch (Decoder.Join) and decodes one
// token for every row (Decoder.Step).
//
// Each sequence samples with its own settings and its own seeded stream, so rows
// of different temperatures, top-k, top-p, stop sequences and max_tokens share a
// step: a sequence's tokens and log-probs are those Generate gives it alone with the
// same seed, up to the floating-point caveat of Generate (a row's logits may differ
// in the last bits with the batch's shape; TestEngineMatchesGenerate checks
// identity of tokens and 1e-5 on log-probs while sequences join and leave around it).
//
// Lifecycle: New, then Fits, Add, Cancel and Step from one goroutine, and Close.
// Tensor work runs on the torch thread (torch.Do), one OS thread whose allocations
// come from one malloc arena, so a long-running server's RSS stays flat. The
// decoder fuses the model's projections while the engine holds any sequence and
// frees them when it empties, as Generate does per call.
type Engine struct {
	m   *qwen2.Model
	cfg Config
	// dec holds the running rows; rows[r] is its row r.
	dec     *qwen2.Decoder
	rows    []*sequence
	pending []*sequence // prefilled, joining at the next Step
	done    []Finished  // finished, reported by the next Step
	held    map[int]*sequence
	nextID  int
	// samps[w] are worker w's samplers, one per pick setting.
	samps []map[pickKey]*sample.Sampler
	// prefix stores finished sequences' keys and values (nil: PrefixCache 0).
	prefix *prefixes
}

// sequence is a sequence held by an Engine.
type sequence struct {
	id        int
	prompt    int     // prompt tokens
	ids       []int64 // the prompt, kept when the engine stores prefixes
	limit     int     // tokens it may generate: max_tokens, or fewer near max_position_embeddings
	stop      [][]int64
	stopWhen  func([]int64) bool
	onToken   func(Token)
	topK      int // Sequence.TopLogprobs
	key       pickKey
	rng       *rand.Rand
	out       qwen2.Completion
	row       *qwen2.Row // while pending: the prompt's keys and values
	cancelled bool
}

// pickKey is the part of a sample.Config that Sampler.Pick reads.
type pickKey struct {
	temp float64
	topK int
	topP float64
}

// New returns an empty engine over m.
func New(m *qwen2.Model, cfg Config) (*Engine, error) {
	if cfg.MaxRows < 1 || cfg.TokenBudget < 1 || cfg.PrefixCache < 0 {
		return nil, fmt.Errorf("engine: max_rows %d, token_budget %d, prefix_cache %d: want at least 1, 1 and 0: %w", cfg.MaxRows, cfg.TokenBudget, cfg.PrefixCache, ErrConfig)
	}
	e := &Engine{m: m, cfg: cfg, dec: m.NewDecoder(), held: map[int]*sequence{}}
	if cfg.PrefixCache > 0 {
		e.prefix = &prefixes{budget: cfg.PrefixCache}
	}
	return e, nil
}

// Len is the number of sequences held: running, joining, or finished and not yet
// returned by Step.
func (e *Engine) Len() int { return len(e.held) }

// remaining is how many more tokens a row may feed through the cache: one per
// token it has yet to sample after the last one.
func (s *sequence) remaining() int { return s.limit - len(s.out.Tokens) }

// cached is how many of a row's tokens the cache holds: the prompt and every
// generated token but the newest.
func (s *sequence) cached() int { return s.prompt + len(s.out.Tokens) - 1 }

// extent is the cache a batch of rows needs to run to its end: the widest row's
// cached tokens plus the most tokens any row may still feed.
func extent(rows ...[]*sequence) (width, room int) {
	for _, rs := range rows {
		for _, s := range rs {
			width, room = max(width, s.cached()), max(room, s.remaining())
		}
	}
	return width, room
}

// Fits reports whether s can join now: a sequence always fits an empty engine;
// otherwise the rows with it stay within MaxRows, and rows × (widest context + most
// remaining tokens) within TokenBudget, assuming s runs to its max_tokens.
func (e *Engine) Fits(s Sequence) bool {
	rows := len(e.rows) + len(e.pending)
	if rows == 0 {
		return true
	}
	if rows+1 > e.cfg.MaxRows {
		return false
	}
	width, room := extent(e.rows, e.pending)
	limit := min(s.Sampling.MaxNewTokens, e.m.Config.MaxPositions-len(s.Prompt))
	width, room = max(width, len(s.Prompt)), max(room, limit-1)
	return (rows+1)*(width+room) <= e.cfg.TokenBudget
}

// Slots reports the KV-cache token slots the running rows reserve (rows × the
// padded length they may reach, as Fits counts them) and the budget they share
// (Config.TokenBudget).
func (e *Engine) Slots() (used, total int) {
	rows := len(e.rows) + len(e.pending)
	if rows == 0 {
		return 0, e.cfg.TokenBudget
	}
	width, room := extent(e.rows, e.pending)
	return rows * (width + room), e.cfg.TokenBudget
}

// Add checks s, prefills its prompt and samples its first token; it returns the ID
// Step reports its completion under. A sequence that does not fit (see Fits) is
// refused with ErrFull.
func (e *Engine) Add(s Sequence) (id int, err error) {
	samp := pickKey{s.Sampling.Temperature, s.Sampling.TopK, s.Sampling.TopP}
	switch {
	case len(s.Prompt) == 0:
		return 0, errors.New("engine: empty prompt")
	case s.Past != nil || s.KeepPast:
		return 0, errors.New("engine: a request carrying keys and values between turns (Past, KeepPast) is Generate's, not an engine's")
	case len(s.Prompt) >= e.m.Config.MaxPositions:
		return 0, fmt.Errorf("engine: prompt of %d tokens leaves no room within max_position_embeddings %d: shorten the prompt", len(s.Prompt), e.m.Config.MaxPositions)
	case !e.Fits(s):
		return 0, fmt.Errorf("engine: a prompt of %d tokens with max_tokens %d beside %d rows: %w", len(s.Prompt), s.Sampling.MaxNewTokens, len(e.rows)+len(e.pending), ErrFull)
	}
	if err := s.Sampling.Validate(); err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	q := &sequence{id: e.nextID, prompt: len(s.Prompt), stop: s.Sampling.Stop, stopWhen: s.StopWhen, onToken: s.OnToken, topK: s.TopLogprobs, key: samp, rng: sample.NewRNG(s.Seed),
		limit: min(s.Sampling.MaxNewTokens, e.m.Config.MaxPositions-len(s.Prompt))}
	if e.prefix != nil {
		q.ids = s.Prompt
	}
	var past *qwen2.Past
	var reuse int
	var score *qwen2.PromptScore
	if s.PromptLogprobs {
		score = &qwen2.PromptScore{Temperature: samp.temp, Top: s.TopLogprobs}
	} else if e.prefix != nil {
		past, reuse = e.prefix.best(s.Prompt)
	}
	defer torch.Catch(fmt.Sprintf("engine: prefill of a prompt of %d tokens", len(s.Prompt)), &err)
	torch.DoNoGrad(func() { err = e.admit(q, s.Prompt, past, reuse, score) })
	if err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	e.held[q.id] = q
	e.nextID++
	return q.id, nil
}

// admit prefills q's prompt (from reuse tokens of past, when set; scoring it, when
// score is set) and samples its first token: q finishes there or waits to join.
func (e *Engine) admit(q *sequence, prompt []int64, past *qwen2.Past, reuse int, score *qwen2.PromptScore) error {
	row, logits, err := e.dec.Prefill(prompt, past, reuse, score)
	if err != nil {
		return err
	}
	if past != nil {
		e.prefix.use(past, reuse)
	}
	keep := false
	defer func() {
		if !keep {
			row.Drop()
		}
	}()
	if score != nil {
		q.out.PromptLogProbs, q.out.PromptTop = score.LogProbs, score.TopTokens
	}
	tok, lp := e.sampler(0, q.key).Pick(logits, q.rng)
	if !q.push(tok, lp, sample.TopLogprobs(logits, q.key.temp, q.topK)) {
		q.row, keep = row, true
		e.pending = append(e.pending, q)
		return nil
	}
	if e.prefix != nil {
		p, err := row.Past()
		if err != nil {
			return err
		}
		e.prefix.add(p)
	}
	e.done = append(e.done, Finished{ID: q.id, Completion: q.out})
	return nil
}

// push appends a sampled token, with the most likely tokens at its position when
// the sequence asked for them, and reports whether the sequence has finished, by
// Generate's rules.
func (s *sequence) push(tok int, lp float64, top []sample.Logprob) bool {
	c := &s.out
	c.Tokens = append(c.Tokens, int64(tok))
	c.LogProbs = append(c.LogProbs, float32(lp))
	if s.topK > 0 {
		c.Top = append(c.Top, top)
	}
	if s.onToken != nil {
		s.onToken(Token{ID: int64(tok), LogProb: float32(lp), Top: top})
	}
	switch {
	case sample.Stopped(c.Tokens, s.stop), s.stopWhen != nil && s.stopWhen(c.Tokens):
		c.Finish = qwen2.FinishStop
	case len(c.Tokens) >= s.limit:
		c.Finish = qwen2.FinishLength
	default:
		return false
	}
	return true
}

// Cancel drops sequence id; Step reports nothing for it. The rows it held are freed
// by the next Step.
func (e *Engine) Cancel(id int) {
	if s, ok := e.held[id]; ok {
		s.cancelled = true
		delete(e.held, id)
	}
	e.done = slices.DeleteFunc(e.done, func(f Finished) bool { return f.ID == id })
}

// Step admits the sequences added since the last step, decodes one token for every
// running row and returns the sequences that finished, including those that
// finished at their first token in Add. On an error every held sequence is
// dropped: the engine is empty and usable again.
func (e *Engine) Step() (done []Finished, err error) {
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	what := fmt.Sprintf("engine: step of %d rows and %d joining", len(e.rows), len(e.pending))
	defer torch.Catch(what, &err)
	torch.DoNoGrad(func() {
		err = e.step()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	done, e.done = e.done, nil
	for _, f := range done {
		delete(e.held, f.ID)
	}
	return done, nil
}

func (e *Engine) step() error {
	var live []int
	for r, s := range e.rows {
		if !s.cancelled {
			live = append(live, r)
		}
	}
	e.pending = slices.DeleteFunc(e.pending, func(s *sequence) bool {
		if s.cancelled {
			s.row.Drop()
		}
		return s.cancelled
	})
	switch {
	case len(e.pending) > 0:
		if err := e.join(live); err != nil {
			return err
		}
	case len(live) < len(e.rows):
		if err := e.keep(live); err != nil {
			return err
		}
	}
	if len(e.rows) == 0 {
		return nil
	}
	tokens := make([]int64, len(e.rows))
	for r, s := range e.rows {
		tokens[r] = s.out.Tokens[len(s.out.Tokens)-1]
	}
	logits, err := e.dec.Step(tokens)
	if err != nil {
		return err
	}
	picks := make([]pick, len(e.rows))
	e.pick(logits, picks)
	live = live[:0]
	for r, s := range e.rows {
		if !s.push(picks[r].tok, picks[r].lp, picks[r].top) {
			live = append(live, r)
			continue
		}
		if e.prefix != nil {
			p, err := e.dec.Past(r, slices.Concat(s.ids, s.out.Tokens[:len(s.out.Tokens)-1]))
			if err != nil {
				return err
			}
			e.prefix.add(p)
		}
		e.done = append(e.done, Finished{ID: s.id, Completion: s.out})
	}
	if len(live) < len(e.rows) {
		return e.keep(live)
	}
	return nil
}

// join packs the running rows live and the pending ones into the running batch, with
// room for all of them to run to their end.
func (e *Engine) join(live []int) error {
	var rows []*sequence
	var joining []*qwen2.Row
	for _, r := range live {
		rows = append(rows, e.rows[r])
	}
	for _, s := range e.pending {
		rows = append(rows, s)
		joining = append(joining, s.row)
		s.row = nil
	}
	e.rows, e.pending = rows, nil
	width, room := extent(rows)
	return e.dec.Join(live, joining, width+room)
}

// keep retains the running rows live, in order.
func (e *Engine) keep(live []int) error {
	rows := make([]*sequence, len(live))
	for j, r := range live {
		rows[j] = e.rows[r]
	}
	e.rows = rows
	return e.dec.Keep(live)
}

// pick is one sampled token, its log-probability and, when its row asked for them,
// the most likely tokens at its position.
type pick struct {
	tok int
	lp  float64
	top []sample.Logprob
}

// pick samples row r of logits: [rows·vocab] with row r's sampler and stream into
// picks[r], rows spread over GOMAXPROCS goroutines as in Generate.
func (e *Engine) pick(logits []float32, picks []pick) {
	vocab := e.m.Config.VocabSize
	n := min(runtime.GOMAXPROCS(0), len(e.rows))
	for len(e.samps) < n {
		e.samps = append(e.samps, map[pickKey]*sample.Sampler{})
	}
	for _, s := range e.rows { // create samplers here: workers only read the maps
		for w := range n {
			e.sampler(w, s.key)
		}
	}
	run := func(w int) {
		for r := w; r < len(e.rows); r += n {
			s := e.rows[r]
			row := logits[r*vocab : (r+1)*vocab]
			tok, lp := e.samps[w][s.key].Pick(row, s.rng)
			picks[r] = pick{tok: tok, lp: lp, top: sample.TopLogprobs(row, s.key.temp, s.topK)}
		}
	}
	torch.Spread(n, run)
}

// sampler is worker w's sampler for the pick settings k.
func (e *Engine) sampler(w int, k pickKey) *sample.Sampler {
	for len(e.samps) <= w {
		e.samps = append(e.samps, map[pickKey]*sample.Sampler{})
	}
	s, ok := e.samps[w][k]
	if !ok {
		// Settings already validated by Add; MaxNewTokens and Stop are not read by Pick.
		s, _ = sample.New(sample.Config{Temperature: k.temp, TopK: k.topK, TopP: k.topP, MaxNewTokens: 1})
		e.samps[w][k] = s
	}
	return s
}

// Close drops every held sequence and frees the engine's tensors; the engine stays
// usable.
func (e *Engine) Close() {
	for _, s := range e.pending {
		s.row.Drop()
	}
	e.dec.Close()
	e.rows, e.pending, e.done = nil, nil, nil
	clear(e.held)
	if e.prefix != nil {
		e.prefix.drop()
	}
}

// PrefixStats reports the reuse of stored prefixes (see Config.PrefixCache).
func (e *Engine) PrefixStats() PrefixStats {
	if e.prefix == nil {
		return PrefixStats{}
	}
	st := e.prefix.stats
	st.Held = e.prefix.held
	return st
}

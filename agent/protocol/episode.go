package protocol

import (
	"context"
	"errors"
	"fmt"
)

// ErrEpisode is the class of a driver call out of order (a programming error in the caller).
var ErrEpisode = errors.New("episode misuse")

// ErrConfig is the class of an unusable episode configuration.
var ErrConfig = errors.New("invalid episode config")

// Tokenizer is what the driver needs from a tokenizer. Encode must map the special tokens
// of the chat glue (e.g. <|im_start|>) to their ids, as HF tokenizers do by default.
type Tokenizer interface {
	Encode(text string) []int32
	Decoder
}

// Config is the episode configuration that goes into a rollout's cache key.
type Config struct {
	// Context is the context policy: mempo, mem1 or full.
	Context ContextPolicy `json:"context"`
	// MaxTurns bounds the turns of an episode (DESIGN.md §6 default 16).
	MaxTurns int `json:"max_turns"`
}

// DefaultConfig is mempo context and 16 turns.
func DefaultConfig() Config { return Config{Context: Mempo, MaxTurns: 16} }

// Validate checks the fields.
func (c Config) Validate() error {
	if _, err := ParseContextPolicy(string(c.Context)); err != nil {
		return err
	}
	if c.MaxTurns < 1 {
		return fmt.Errorf("--max-turns %d: want at least 1: %w", c.MaxTurns, ErrConfig)
	}
	return nil
}

// Finish says how a turn ended, as stored in the rollouts "finish" column.
type Finish string

const (
	// Stop: the response ended on a stop string (or was parsed complete).
	Stop Finish = "stop"
	// Length: generation hit its token limit and the response is not a complete turn.
	Length Finish = "length"
	// MaxTurns: the last allowed turn did not answer; the episode ends unanswered.
	MaxTurns Finish = "max_turns"
)

// Generation is one generated response.
type Generation struct {
	IDs       []int32
	Logprobs  []float32 // sampling log-probs, one per id; may be nil
	Truncated bool      // stopped by the token limit rather than a stop string
}

// Record is one turn as it happened: the exact context, the response and the observation.
type Record struct {
	Turn      int
	Context   Context
	Response  []int32
	Logprobs  []float32
	Truncated bool
	Parsed    Turn
	Finish    Finish
	// Observation is the environment's answer to this turn (search results or the
	// corrective message, plus the last-turn instruction where it applies); empty after an
	// answer or on the last turn. ObservationIDs is its encoding, made once.
	Observation    string
	ObservationIDs []int32
}

// Episode is one trajectory's state machine. Each turn: Context gives the ids to generate
// from; Step takes the response; a search turn then waits for Observe with the retrieved
// documents; Done ends the loop. The forced answer on the last turn is an instruction
// (Protocol.LastTurn) appended to the observation before it, as Search-R1-style systems
// do; generation is not constrained, so a last turn that does not answer ends the episode
// with finish max_turns and no answer (with MaxTurns 1 there is no earlier observation to
// carry the instruction). An Episode is not safe for concurrent use.
type Episode struct {
	p       *Protocol
	tok     Tokenizer
	cfg     Config
	prompt  []int32
	recs    []Record
	waiting bool
	done    bool
}

// NewEpisode renders and encodes the prompt for a question with k objectives, with chat
// (a checkpoint's chat template) or, when chat is nil, the description's chat glue.
func NewEpisode(p *Protocol, chat Chat, tok Tokenizer, cfg Config, question string, k int) (*Episode, error) {
	return NewEpisodeMessages(p, chat, tok, cfg, p.System, p.UserMessage(question, k))
}

// NewEpisodeMessages is NewEpisode for a question whose source wrote its own first
// messages (an imported chat prompt): system (none when empty) and user are rendered
// as they are, with chat or the description's chat glue, instead of the description's
// system message and user template.
func NewEpisodeMessages(p *Protocol, chat Chat, tok Tokenizer, cfg Config, system, user string) (*Episode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	text, err := p.render(chat, system, user)
	if err != nil {
		return nil, err
	}
	prompt := tok.Encode(text)
	if len(prompt) == 0 {
		return nil, fmt.Errorf("first context %.40q encodes to no tokens: %w", text, ErrEpisode)
	}
	return &Episode{p: p, tok: tok, cfg: cfg, prompt: prompt}, nil
}

// Prompt is the encoded first context.
func (e *Episode) Prompt() []int32 { return e.prompt }

// Done reports whether the episode has ended.
func (e *Episode) Done() bool { return e.done }

// Turn is the index of the next turn (0-based), or the number of turns once done.
func (e *Episode) Turn() int { return len(e.recs) }

// LastTurn reports whether the next turn is the last allowed one; a generator may use it
// to constrain decoding to an answer.
func (e *Episode) LastTurn() bool { return len(e.recs) == e.cfg.MaxTurns-1 }

// Records are the turns so far; the slice and its ids must not be modified.
func (e *Episode) Records() []Record { return e.recs }

// Context is what the policy sees at the next turn, built by the configured policy.
func (e *Episode) Context() (Context, error) {
	if e.done {
		return nil, fmt.Errorf("context after the episode ended at turn %d: %w", len(e.recs), ErrEpisode)
	}
	if e.waiting {
		return nil, fmt.Errorf("context before turn %d's observation: %w", len(e.recs)-1, ErrEpisode)
	}
	return build(e.cfg.Context, e.prompt, e.recs, len(e.recs)), nil
}

// Step records the response to the current context and advances the state.
func (e *Episode) Step(g Generation) error {
	ctx, err := e.Context()
	if err != nil {
		return err
	}
	if g.Logprobs != nil && len(g.Logprobs) != len(g.IDs) {
		return fmt.Errorf("turn %d: %d log-probs for %d ids: %w", len(e.recs), len(g.Logprobs), len(g.IDs), ErrEpisode)
	}
	t := len(e.recs)
	r := Record{
		Turn: t, Context: ctx, Response: g.IDs, Logprobs: g.Logprobs, Truncated: g.Truncated,
		Parsed: e.p.ParseTokens(Pieces(e.tok, g.IDs)), Finish: Stop,
	}
	if g.Truncated && r.Parsed.Kind == Invalid {
		r.Finish = Length
	}
	last := t == e.cfg.MaxTurns-1
	switch {
	case r.Parsed.Kind == Answer:
		e.done = true
	case last:
		// The budget is spent: a search is not executed, an invalid turn not corrected.
		r.Finish, e.done = MaxTurns, true
	case r.Parsed.Kind == Search:
		e.waiting = true
	default:
		e.observe(&r, e.p.Invalid)
	}
	e.recs = append(e.recs, r)
	return nil
}

// Query is the pending search query, if the episode waits for an observation.
func (e *Episode) Query() (string, bool) {
	if !e.waiting {
		return "", false
	}
	return e.recs[len(e.recs)-1].Parsed.Arg, true
}

// Observe delivers the documents retrieved for the pending query.
func (e *Episode) Observe(docs []Doc) error {
	if !e.waiting {
		return fmt.Errorf("observation at turn %d with no pending search: %w", len(e.recs), ErrEpisode)
	}
	e.observe(&e.recs[len(e.recs)-1], e.p.Observation(docs))
	e.waiting = false
	return nil
}

func (e *Episode) observe(r *Record, text string) {
	if r.Turn+1 == e.cfg.MaxTurns-1 {
		text += e.p.LastTurn
	}
	r.Observation = text
	r.ObservationIDs = e.tok.Encode(text)
	if r.ObservationIDs == nil {
		r.ObservationIDs = []int32{} // non-nil marks "observed", even if empty
	}
}

// Finish is how the episode ended: the last turn's finish; "" while running.
func (e *Episode) Finish() Finish {
	if !e.done {
		return ""
	}
	return e.recs[len(e.recs)-1].Finish
}

// Answer is the final answer text and whether the episode answered.
func (e *Episode) Answer() (string, bool) {
	if !e.done || len(e.recs) == 0 {
		return "", false
	}
	last := e.recs[len(e.recs)-1].Parsed
	if last.Kind != Answer {
		return "", false
	}
	return last.Arg, true
}

// TT is the total tokens over all calls: for each turn, context plus response.
func (e *Episode) TT() int {
	n := 0
	for _, r := range e.recs {
		n += r.Context.Len() + len(r.Response)
	}
	return n
}

// PT is the peak single-call size: the largest context plus response of any turn.
func (e *Episode) PT() int {
	n := 0
	for _, r := range e.recs {
		n = max(n, r.Context.Len()+len(r.Response))
	}
	return n
}

// Generator produces one response per context. The caller batches and samples.
type Generator interface {
	Generate(ctx context.Context, contexts [][]int32, eps []*Episode) ([]Generation, error)
}

// Retriever answers a batch of queries with the top documents of each.
type Retriever interface {
	Retrieve(ctx context.Context, queries []string) ([][]Doc, error)
}

// Advance runs one turn for every episode of the batch still running: one Generate call
// for all of them, then one Retrieve call for all pending searches. It reports whether
// any episode is still running.
func Advance(ctx context.Context, eps []*Episode, gen Generator, ret Retriever) (bool, error) {
	var active []*Episode
	var contexts [][]int32
	for i, e := range eps {
		if e.Done() {
			continue
		}
		c, err := e.Context()
		if err != nil {
			return false, fmt.Errorf("episode %d: %w", i, err)
		}
		active = append(active, e)
		contexts = append(contexts, c.IDs())
	}
	if len(active) == 0 {
		return false, nil
	}
	gens, err := gen.Generate(ctx, contexts, active)
	if err != nil {
		return false, fmt.Errorf("generate %d contexts: %w", len(contexts), err)
	}
	if len(gens) != len(active) {
		return false, fmt.Errorf("generator returned %d responses for %d contexts: %w", len(gens), len(active), ErrEpisode)
	}
	var searching []*Episode
	var queries []string
	for i, e := range active {
		if err := e.Step(gens[i]); err != nil {
			return false, err
		}
		if q, ok := e.Query(); ok {
			searching = append(searching, e)
			queries = append(queries, q)
		}
	}
	if len(queries) > 0 {
		docs, err := ret.Retrieve(ctx, queries)
		if err != nil {
			return false, fmt.Errorf("retrieve %d queries (first %q): %w", len(queries), queries[0], err)
		}
		if len(docs) != len(queries) {
			return false, fmt.Errorf("retriever returned %d results for %d queries: %w", len(docs), len(queries), ErrEpisode)
		}
		for i, e := range searching {
			if err := e.Observe(docs[i]); err != nil {
				return false, err
			}
		}
	}
	for _, e := range eps {
		if !e.Done() {
			return true, nil
		}
	}
	return false, nil
}

// Run advances the batch until every episode is done. It ends within MaxTurns rounds.
func Run(ctx context.Context, eps []*Episode, gen Generator, ret Retriever) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		more, err := Advance(ctx, eps, gen, ret)
		if err != nil || !more {
			return err
		}
	}
}

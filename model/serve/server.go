// Package serve answers an OpenAI-compatible subset of the completions API over a
// policy checkpoint (`mempo serve-policy`): POST /v1/completions with token-id
// prompts, per-request seeds, stop strings and the sampled tokens' log-probs in
// vLLM's layout, GET /v1/models and GET /health. It lets several rollout processes
// share one copy of the policy on one accelerator.
//
// Requests are batched continuously: one scheduler goroutine (Run) owns a decode
// engine (model/engine's Engine, beside this package) and, between any two decode
// steps, admits waiting requests in arrival order while the engine's limits allow
// (rows, and a token budget of the KV cache), and answers each request as soon as
// its row finishes, so a short completion never waits for a long one and a new
// request never waits for a batch to end. Rows of different sampling settings share
// a step. Every request samples from its own seeded stream, so what joins or leaves
// around it does not choose its tokens: they equal qwen2.Generate's for that request
// alone, up to the floating-point caveat stated there.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/mempo/mempo/internal/httpserve"
	"github.com/mempo/mempo/model/chat"
	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
)

// ErrConfig marks an unusable server config; messages name the flag.
var ErrConfig = errors.New("invalid serve config")

// Engine decodes a changing batch of sequences; *engine.Engine is one. Only the
// server's Run calls it, from one goroutine: Fits asks whether a sequence may join
// now, Add prefills it, Step decodes one token for every row and returns those that
// finished, and Cancel drops one. A Step error drops every sequence the engine held.
type Engine interface {
	Fits(s engine.Sequence) bool
	Add(s engine.Sequence) (int, error)
	Cancel(id int)
	Step() ([]engine.Finished, error)
}

// Tokenizer encodes stop strings and string prompts and decodes completions.
type Tokenizer interface {
	Encode(s string) []int32
	Decode(ids []int32) string
}

// Model is what the server serves: a decode engine with its limits set, its
// tokenizer, the name clients ask for and the model's bounds (every prompt id is
// checked against VocabSize and every prompt against MaxPositions before it reaches
// the engine).
type Model struct {
	Name   string
	Engine Engine
	Tok    Tokenizer
	// Chat renders /v1/chat/completions' messages: the checkpoint's chat template; nil
	// renders ChatML.
	Chat         *chat.Template
	MaxPositions int
	VocabSize    int
}

// Config bounds what the server accepts. The batch's own limits are the engine's
// (engine.Config).
type Config struct {
	// MaxTokens is the largest max_tokens accepted.
	MaxTokens int `json:"max_tokens"`
	// MaxStops and MaxStopBytes bound the stop strings of a request.
	MaxStops     int `json:"max_stops"`
	MaxStopBytes int `json:"max_stop_bytes"`
	// MaxBodyBytes bounds a request body; a larger one gets 413.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// MaxInflight is the most completions held at once, waiting or generating (a
	// request holds n per prompt), counted from when their request's body is read; a
	// request that finds too few free gets 503 with Retry-After. The bodies being read
	// share a budget of MaxInflight×MaxBodyBytes bytes.
	MaxInflight int `json:"max_inflight"`
	// Timeouts of a connection, in seconds: headers, whole request, answer (generation
	// included; a request still waiting when it passes is dropped) and keep-alive.
	ReadHeaderTimeoutS float64 `json:"read_header_timeout_s"`
	ReadTimeoutS       float64 `json:"read_timeout_s"`
	WriteTimeoutS      float64 `json:"write_timeout_s"`
	IdleTimeoutS       float64 `json:"idle_timeout_s"`
}

// DefaultConfig returns the server's defaults. A token-id prompt is about 6 bytes a
// token in JSON, so 4 MiB holds a 32k context with room to spare; 256 requests in
// flight is four rollout processes of 64 trajectories each.
func DefaultConfig() Config {
	return Config{
		MaxTokens: 8192, MaxStops: 16, MaxStopBytes: 256,
		MaxBodyBytes: 4 << 20, MaxInflight: 256,
		ReadHeaderTimeoutS: 10, ReadTimeoutS: 60, WriteTimeoutS: 1800, IdleTimeoutS: 120,
	}
}

// Validate names the first bad field by its flag.
func (c Config) Validate() error {
	for _, f := range []struct {
		flag string
		v    int64
	}{
		{"--max-tokens", int64(c.MaxTokens)},
		{"--max-stops", int64(c.MaxStops)}, {"--max-stop-bytes", int64(c.MaxStopBytes)},
		{"--max-body-bytes", c.MaxBodyBytes}, {"--max-inflight", int64(c.MaxInflight)},
	} {
		if f.v < 1 {
			return fmt.Errorf("%s %d: want at least 1: %w", f.flag, f.v, ErrConfig)
		}
	}
	if err := c.timeouts().Check(); err != nil {
		return fmt.Errorf("%w: %w", err, ErrConfig)
	}
	return nil
}

// timeouts are the connection timeouts of c.
func (c Config) timeouts() httpserve.Timeouts {
	return httpserve.Timeouts{ReadHeader: c.ReadHeaderTimeoutS, Read: c.ReadTimeoutS, Write: c.WriteTimeoutS, Idle: c.IdleTimeoutS}
}

// Server batches completion requests onto one model. Its lifecycle: New, then Run
// in one goroutine (the only caller of the engine) while Handler serves; requests
// held when Run returns get 503.
type Server struct {
	m     Model
	cfg   Config
	log   *slog.Logger
	queue chan *job
	// slots holds one token per completion request held, MaxInflight at most, taken
	// once its body is read.
	slots chan struct{}
	// bodies is the bytes of the bodies being read, MaxInflight×MaxBodyBytes at most.
	bodies  *httpserve.Budget
	metrics *metrics
	now     func() time.Time
}

// job is one request waiting for, or in, the running batch.
type job struct {
	ctx  context.Context
	seq  engine.Sequence
	done chan result // buffered: Run never waits for the handler
	// arrived is when its request was read; start is when the job joined the batch,
	// its prompt prefilled and its first token sampled.
	arrived, start time.Time
	// feed holds every sampled token of a streamed job (stream.go); nil otherwise.
	feed *feed
}

type result struct {
	c   qwen2.Completion
	err error
}

// errStopped answers the requests held when Run returns.
var errStopped = errors.New("server stopping")

// New returns a server of m under cfg, which must be valid.
func New(m Model, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m.Engine == nil || m.Tok == nil || m.MaxPositions < 2 || m.VocabSize < 1 {
		return nil, fmt.Errorf("serve: model %q lacks an engine, a tokenizer or its bounds: %w", m.Name, ErrConfig)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{m: m, cfg: cfg, log: log, queue: make(chan *job, cfg.MaxInflight),
		slots: make(chan struct{}, cfg.MaxInflight), bodies: httpserve.NewBudget(int64(cfg.MaxInflight) * cfg.MaxBodyBytes), metrics: newMetrics(),
		now: time.Now}, nil
}

// Run schedules queued requests onto the engine until ctx is done: between decode
// steps it drops the requests whose client left (or whose write timeout passed),
// admits waiting ones in arrival order while the engine has room, runs one step and
// answers the requests that finished. It blocks only while nothing is held.
func (s *Server) Run(ctx context.Context) {
	var waiting []*job // arrival order
	running := map[int]*job{}
	defer func() {
		for id, j := range running {
			s.m.Engine.Cancel(id)
			j.done <- result{err: errStopped}
		}
		for _, j := range waiting {
			j.done <- result{err: errStopped}
		}
	}()
	for {
		if len(waiting) == 0 && len(running) == 0 {
			select {
			case <-ctx.Done():
				return
			case j := <-s.queue:
				waiting = append(waiting, j)
			}
		}
	arrived:
		for {
			select {
			case j := <-s.queue:
				waiting = append(waiting, j)
			default:
				break arrived
			}
		}
		if ctx.Err() != nil {
			return
		}
		cancelled := false
		for id, j := range running {
			if err := j.ctx.Err(); err != nil { // the client left or its write timeout passed
				s.m.Engine.Cancel(id)
				delete(running, id)
				j.done <- result{err: err}
				cancelled = true
			}
		}
		for len(waiting) > 0 {
			j := waiting[0]
			if err := j.ctx.Err(); err != nil {
				waiting = waiting[1:]
				j.done <- result{err: err}
				continue
			}
			// In arrival order: a request the batch has no room for waits for rows to
			// finish, and those behind it wait too, so a long request is not starved.
			if !s.m.Engine.Fits(j.seq) {
				break
			}
			waiting = waiting[1:]
			id, err := s.m.Engine.Add(j.seq)
			if err != nil {
				s.log.Error("prefill failed", "prompt_tokens", len(j.seq.Prompt), "err", err)
				j.done <- result{err: err}
				continue
			}
			j.start = s.now()
			s.metrics.started(j)
			running[id] = j
		}
		if len(running) == 0 && !cancelled {
			continue
		}
		done, err := s.m.Engine.Step()
		if err != nil {
			s.log.Error("decode step failed", "requests", len(running), "err", err)
			for id, j := range running {
				delete(running, id)
				j.done <- result{err: err}
			}
			continue
		}
		for _, f := range done {
			j, ok := running[f.ID]
			if !ok {
				continue
			}
			delete(running, f.ID)
			end := s.now()
			s.log.Debug("request done", "prompt_tokens", len(j.seq.Prompt), "tokens", len(f.Tokens),
				"seconds", end.Sub(j.start).Seconds(), "running", len(running))
			s.metrics.finished(j, len(f.Tokens), end)
			j.done <- result{c: f.Completion}
		}
		s.metrics.batch(len(waiting), len(running), s.m.Engine)
	}
}

// Serve runs s's scheduler and answers HTTP on ln under cfg's timeouts until ctx is
// done, then stops accepting, lets in-flight requests finish for up to 10 s and
// returns nil. It returns an error only when serving itself fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	bctx, stop := context.WithCancel(context.Background())
	scheduler := make(chan struct{})
	go func() { s.Run(bctx); close(scheduler) }()
	defer func() { stop(); <-scheduler }()
	return httpserve.Serve(ctx, ln, s.Handler(), s.cfg.timeouts(), "policy server", s.log)
}

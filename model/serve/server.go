// Package serve answers an OpenAI-compatible subset of the completions API over a
// policy checkpoint (`mempo serve-policy`): POST /v1/completions with token-id
// prompts, per-request seeds, stop strings and the sampled tokens' log-probs in
// vLLM's layout, GET /v1/models and GET /health. It lets several rollout processes
// share one copy of the policy on one accelerator.
//
// Requests that arrive together are batched: the batcher takes the first waiting
// request, gathers up to MaxBatch within BatchWindowMS, and runs each group of equal
// sampling settings through the model's batched generator. Every request samples
// from its own seeded stream (qwen2.Generate), so batching does not choose tokens.
// A batch runs to completion before the next starts: requests arriving meanwhile
// wait for it (no continuous batching, where a request would join a running batch
// between decode steps).
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/mempo/mempo/internal/httpserve"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// ErrConfig marks an unusable server config; messages name the flag.
var ErrConfig = errors.New("invalid serve config")

// Generator continues a batch of requests; *qwen2.Model is one.
type Generator interface {
	Generate(reqs []qwen2.Request, cfg sample.Config) ([]qwen2.Completion, error)
}

// Tokenizer encodes stop strings and string prompts and decodes completions.
type Tokenizer interface {
	Encode(s string) []int32
	Decode(ids []int32) string
}

// Model is what the server serves: a generator, its tokenizer, the name clients ask
// for and the model's bounds (every prompt id is checked against VocabSize and every
// prompt against MaxPositions before it can fail a batch).
type Model struct {
	Name         string
	Gen          Generator
	Tok          Tokenizer
	MaxPositions int
	VocabSize    int
}

// Config bounds what the server accepts and how it batches.
type Config struct {
	// MaxBatch is the most requests of one generate call.
	MaxBatch int `json:"max_batch"`
	// BatchWindowMS is how long the batcher waits, after the first request of a batch,
	// for more to join it; 0 takes only those already waiting.
	BatchWindowMS float64 `json:"batch_window_ms"`
	// MaxTokens is the largest max_tokens accepted.
	MaxTokens int `json:"max_tokens"`
	// MaxStops and MaxStopBytes bound the stop strings of a request.
	MaxStops     int `json:"max_stops"`
	MaxStopBytes int `json:"max_stop_bytes"`
	// MaxBodyBytes bounds a request body; a larger one gets 413.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// MaxInflight is the most completion requests held at once, waiting or generating,
	// counted from before their body is read; one more gets 503 with Retry-After.
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
		MaxBatch: 64, BatchWindowMS: 5, MaxTokens: 8192, MaxStops: 16, MaxStopBytes: 256,
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
		{"--max-batch", int64(c.MaxBatch)}, {"--max-tokens", int64(c.MaxTokens)},
		{"--max-stops", int64(c.MaxStops)}, {"--max-stop-bytes", int64(c.MaxStopBytes)},
		{"--max-body-bytes", c.MaxBodyBytes}, {"--max-inflight", int64(c.MaxInflight)},
	} {
		if f.v < 1 {
			return fmt.Errorf("%s %d: want at least 1: %w", f.flag, f.v, ErrConfig)
		}
	}
	if !(c.BatchWindowMS >= 0) {
		return fmt.Errorf("--batch-window-ms %g: want 0 or more: %w", c.BatchWindowMS, ErrConfig)
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
// in one goroutine (the only caller of the generator) while Handler serves; requests
// queued when Run returns get 503.
type Server struct {
	m     Model
	cfg   Config
	log   *slog.Logger
	queue chan *job
	// slots holds one token per completion request held, MaxInflight at most.
	slots chan struct{}
	now   func() time.Time
}

// job is one request waiting for, or in, a batch.
type job struct {
	ctx  context.Context
	req  qwen2.Request
	cfg  sample.Config
	key  string // the sampling settings: only equal ones share a generate call
	done chan result
}

type result struct {
	c   qwen2.Completion
	err error
}

// New returns a server of m under cfg, which must be valid.
func New(m Model, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m.Gen == nil || m.Tok == nil || m.MaxPositions < 2 || m.VocabSize < 1 {
		return nil, fmt.Errorf("serve: model %q lacks a generator, a tokenizer or its bounds: %w", m.Name, ErrConfig)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{m: m, cfg: cfg, log: log, queue: make(chan *job, cfg.MaxInflight),
		slots: make(chan struct{}, cfg.MaxInflight), now: time.Now}, nil
}

// Run batches queued requests until ctx is done.
func (s *Server) Run(ctx context.Context) {
	for {
		var first *job
		select {
		case <-ctx.Done():
			return
		case first = <-s.queue:
		}
		s.generate(s.gather(ctx, first))
	}
}

// gather adds to first the requests that arrive within the batch window, MaxBatch
// in all.
func (s *Server) gather(ctx context.Context, first *job) []*job {
	batch := []*job{first}
	window := time.NewTimer(time.Duration(s.cfg.BatchWindowMS * float64(time.Millisecond)))
	defer window.Stop()
	for len(batch) < s.cfg.MaxBatch {
		select {
		case j := <-s.queue:
			batch = append(batch, j)
			continue
		default:
		}
		if s.cfg.BatchWindowMS == 0 {
			return batch
		}
		select {
		case j := <-s.queue:
			batch = append(batch, j)
		case <-window.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// generate runs the live jobs of batch, one generate call per group of equal
// sampling settings, in arrival order.
func (s *Server) generate(batch []*job) {
	var groups [][]*job
	index := map[string]int{}
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.done <- result{err: err} // the client left or its write timeout passed
			continue
		}
		g, ok := index[j.key]
		if !ok {
			g = len(groups)
			index[j.key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], j)
	}
	for _, g := range groups {
		reqs := make([]qwen2.Request, len(g))
		for i, j := range g {
			reqs[i] = j.req
		}
		start := s.now()
		comps, err := s.m.Gen.Generate(reqs, g[0].cfg)
		if err != nil {
			s.log.Error("generate failed", "requests", len(g), "err", err)
		}
		tokens := 0
		for i, j := range g {
			if err != nil {
				j.done <- result{err: err}
				continue
			}
			tokens += len(comps[i].Tokens)
			j.done <- result{c: comps[i]}
		}
		s.log.Debug("batch done", "requests", len(g), "tokens", tokens, "seconds", s.now().Sub(start).Seconds())
	}
}

// Serve runs s's batcher and answers HTTP on ln under cfg's timeouts until ctx is
// done, then stops accepting, lets in-flight requests finish for up to 10 s and
// returns nil. It returns an error only when serving itself fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	bctx, stop := context.WithCancel(context.Background())
	batcher := make(chan struct{})
	go func() { s.Run(bctx); close(batcher) }()
	defer func() { stop(); <-batcher }()
	return httpserve.Serve(ctx, ln, s.Handler(), s.cfg.timeouts(), "policy server", s.log)
}

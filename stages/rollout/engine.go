package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/internal/wait"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/serve"
)

// Engines: where the policy generates.
const (
	// EngineLocal loads the policy into this process (Config.Engine "").
	EngineLocal = "local"
	// EngineServer sends each turn to an OpenAI-compatible completions server
	// (`mempo serve-policy`, or vLLM) at Config.EngineURL.
	EngineServer = "server"
)

// ErrEngine marks a failed exchange with the completions server; messages name the URL.
var ErrEngine = errors.New("completions server failed")

// ParseEngine reads --engine: local (stored as "", so an in-process config keys as
// before the flag existed) or server.
func ParseEngine(s string) (string, error) {
	switch s {
	case EngineLocal, "":
		return "", nil
	case EngineServer:
		return EngineServer, nil
	}
	return "", fmt.Errorf("--engine %q: want local or server: %w", s, ErrConfig)
}

// EngineClient tunes the HTTP client of Config.EngineURL. It bounds time and
// retries, not results, so it is not keyed.
type EngineClient struct {
	// TimeoutS bounds one completion request, in seconds; a timeout is not retried.
	TimeoutS float64
	// Attempts is the tries per request: a connection error or a 503 is retried
	// with doubling backoff from 0.5 s, any other failure is not.
	Attempts int
}

// DefaultEngineClient allows a long turn on a busy server: 10 minutes, 5 tries.
func DefaultEngineClient() EngineClient { return EngineClient{TimeoutS: 600, Attempts: 5} }

// remote is the sampler over a completions server. Each request of a batch is one
// HTTP request (Concurrency at a time) with the context ids as the prompt and the
// request's seed; the server's batching decides nothing about the tokens.
type remote struct {
	base, model  string // base URL (no /v1) and the model name sent and checked
	client       *http.Client
	cfg          Config
	stops        []string
	maxPositions int
	concurrency  int
	attempts     int
	sleep        func(ctx context.Context, d time.Duration) error
}

// serverLoader opens the sampler of cfg.EngineURL: it reads the policy's
// max_position_embeddings (a context that fills it is recorded truncated without
// a request, as the in-process sampler does) and checks the server's model list.
func serverLoader(client EngineClient) loader {
	return func(cfg Config, policy string, _ *bpe.Tokenizer) (sampler, func(), error) {
		mc, err := qwen2.ReadConfig(filepath.Join(policy, qwen2.ConfigFile))
		if err != nil {
			return nil, nil, fmt.Errorf("--policy: %w", err)
		}
		r := newRemote(cfg, client, mc.MaxPositions)
		if err := r.open(context.Background()); err != nil {
			return nil, nil, err
		}
		return r, func() {}, nil
	}
}

func newRemote(cfg Config, client EngineClient, maxPositions int) *remote {
	base := strings.TrimRight(cfg.EngineURL, "/")
	base = strings.TrimSuffix(base, "/completions")
	base = strings.TrimSuffix(base, "/v1")
	return &remote{base: base, model: cfg.EngineModel,
		client: &http.Client{Timeout: time.Duration(client.TimeoutS * float64(time.Second))},
		cfg:    cfg, stops: stopStrings(cfg.Protocol), maxPositions: maxPositions,
		concurrency: max(cfg.EngineConcurrency, 1), attempts: max(client.Attempts, 1), sleep: wait.Sleep}
}

// open checks that the server answers and serves --engine-model; without it, the
// first model listed becomes the one requested.
func (r *remote) open(ctx context.Context) error {
	url := r.base + "/v1/models"
	var list serve.ModelList
	if err := r.call(ctx, http.MethodGet, url, nil, &list); err != nil {
		return fmt.Errorf("--engine-url: %w", err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	switch {
	case len(ids) == 0:
		return fmt.Errorf("--engine-url: GET %s lists no model: %w", url, ErrEngine)
	case r.model == "":
		r.model = ids[0]
	case !contains(ids, r.model):
		return fmt.Errorf("--engine-model %q: GET %s serves %s, not this model (start the server with this checkpoint or fix --engine-model): %w",
			r.model, url, strings.Join(ids, ", "), ErrEngine)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sample sends every request that fits the model's positions, Concurrency at a
// time, and fails on the first error, which cancels the rest.
func (r *remote) sample(ctx context.Context, reqs []request) ([]protocol.Generation, error) {
	out := make([]protocol.Generation, len(reqs))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		slots = make(chan struct{}, r.concurrency)
	)
	for i, q := range reqs {
		if len(q.Context) >= r.maxPositions {
			out[i] = protocol.Generation{IDs: []int32{}, Logprobs: []float32{}, Truncated: true}
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			g, err := r.complete(ctx, q)
			if err != nil {
				once.Do(func() {
					first = fmt.Errorf("uid %s sample %d turn %d: %w", q.UID, q.Sample, q.Turn, err)
					cancel()
				})
				return
			}
			out[i] = g
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// completionBody is what the client sends: OpenAI's fields plus the vLLM extras that
// make vLLM answer as this pipeline needs (ids, the stop text kept, special tokens
// rendered so tag stops match). The seed is the request's uint64 stream as int64,
// the range vLLM accepts.
type completionBody struct {
	Model                      string   `json:"model"`
	Prompt                     []int32  `json:"prompt"`
	MaxTokens                  int      `json:"max_tokens"`
	Temperature                float64  `json:"temperature"`
	TopP                       float64  `json:"top_p"`
	TopK                       int      `json:"top_k"`
	Seed                       int64    `json:"seed"`
	Stop                       []string `json:"stop"`
	Logprobs                   int      `json:"logprobs"`
	N                          int      `json:"n"`
	ReturnTokenIDs             bool     `json:"return_token_ids"`
	ReturnTokensAsTokenIDs     bool     `json:"return_tokens_as_token_ids"`
	IncludeStopStrInOutput     bool     `json:"include_stop_str_in_output"`
	SkipSpecialTokens          bool     `json:"skip_special_tokens"`
	SpacesBetweenSpecialTokens bool     `json:"spaces_between_special_tokens"`
}

// complete generates one request on the server.
func (r *remote) complete(ctx context.Context, q request) (protocol.Generation, error) {
	topK := r.cfg.TopK
	if topK == 0 {
		topK = -1
	}
	body, err := json.Marshal(completionBody{
		Model: r.model, Prompt: q.Context,
		// A turn ends at the model's last position, as in-process (vLLM refuses a
		// request that would pass it).
		MaxTokens:   min(r.cfg.MaxNewTokens, r.maxPositions-len(q.Context)),
		Temperature: r.cfg.Temperature, TopP: r.cfg.TopP, TopK: topK,
		Seed: int64(q.Seed), Stop: r.stops, Logprobs: 0, N: 1,
		ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true, IncludeStopStrInOutput: true,
	})
	if err != nil {
		return protocol.Generation{}, err
	}
	url := r.base + "/v1/completions"
	var resp serve.CompletionResponse
	if err := r.call(ctx, http.MethodPost, url, body, &resp); err != nil {
		return protocol.Generation{}, err
	}
	g, err := r.generation(resp)
	if err != nil {
		return protocol.Generation{}, fmt.Errorf("POST %s: %w", url, err)
	}
	return g, nil
}

// generation checks a completion and turns it into the in-process sampler's record.
func (r *remote) generation(resp serve.CompletionResponse) (protocol.Generation, error) {
	if resp.Model != r.model {
		return protocol.Generation{}, fmt.Errorf("answered by model %q, want %q (--engine-model): %w", resp.Model, r.model, ErrEngine)
	}
	if len(resp.Choices) != 1 {
		return protocol.Generation{}, fmt.Errorf("%d choices, want 1: %w", len(resp.Choices), ErrEngine)
	}
	c := resp.Choices[0]
	if c.Logprobs == nil {
		return protocol.Generation{}, fmt.Errorf("no logprobs in the choice (the rollout records sampling log-probs; the server must honour \"logprobs\": 0): %w", ErrEngine)
	}
	ids := c.TokenIDs
	if ids == nil {
		// vLLM before return_token_ids: "token_id:N" under return_tokens_as_token_ids.
		for i, t := range c.Logprobs.Tokens {
			id, ok := serve.ParseTokenAsID(t)
			if !ok {
				return protocol.Generation{}, fmt.Errorf("no token_ids and logprobs.tokens[%d] is %q, not \"token_id:N\" (the server must honour return_token_ids or return_tokens_as_token_ids): %w", i, t, ErrEngine)
			}
			ids = append(ids, id)
		}
		if ids == nil {
			ids = []int32{}
		}
	}
	if len(c.Logprobs.TokenLogprobs) != len(ids) {
		return protocol.Generation{}, fmt.Errorf("%d token ids, %d logprobs.token_logprobs: want one log-prob per token: %w", len(ids), len(c.Logprobs.TokenLogprobs), ErrEngine)
	}
	lps := make([]float32, len(ids))
	for i, v := range c.Logprobs.TokenLogprobs {
		if v == nil {
			return protocol.Generation{}, fmt.Errorf("logprobs.token_logprobs[%d] is null: %w", i, ErrEngine)
		}
		lps[i] = float32(*v)
	}
	var truncated bool
	switch c.FinishReason {
	case "stop":
	case "length":
		truncated = true
	default:
		return protocol.Generation{}, fmt.Errorf("finish_reason %q, want stop or length: %w", c.FinishReason, ErrEngine)
	}
	return protocol.Generation{IDs: ids, Logprobs: lps, Truncated: truncated}, nil
}

// call does one exchange, retrying connection errors and 503 with doubling backoff,
// and decodes a 200 answer into out.
func (r *remote) call(ctx context.Context, method, url string, body []byte, out any) error {
	backoff := 500 * time.Millisecond
	var err error
	for attempt := 1; ; attempt++ {
		var retry bool
		retry, err = r.once(ctx, method, url, body, out)
		if err == nil || !retry || attempt >= r.attempts || ctx.Err() != nil {
			if err != nil && retry {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			return err
		}
		if serr := r.sleep(ctx, backoff); serr != nil {
			return err
		}
		backoff *= 2
	}
}

// maxAnswerBytes bounds an answer: a completion of 8k tokens with log-probs is
// under 1 MiB.
const maxAnswerBytes = 64 << 20

// once does one exchange and says whether its failure may be retried.
func (r *remote) once(ctx context.Context, method, url string, body []byte, out any) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", method, url, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		var nerr net.Error
		timeout := errors.As(err, &nerr) && nerr.Timeout()
		if timeout {
			return false, fmt.Errorf("%s %s: no answer within %v (--engine-timeout): %w", method, url, r.client.Timeout, ErrEngine)
		}
		return ctx.Err() == nil, fmt.Errorf("%s %s: server unreachable (start it or fix --engine-url): %v: %w", method, url, err, ErrEngine)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("%s %s: reading the answer: %v: %w", method, url, err, ErrEngine)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode == http.StatusServiceUnavailable,
			fmt.Errorf("%s %s: %s: %s: %w", method, url, resp.Status, errorMessage(data), ErrEngine)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return false, fmt.Errorf("%s %s: answer is not the expected JSON: %v: %w", method, url, err, ErrEngine)
	}
	return false, nil
}

// errorMessage reads the message of an error body: OpenAI's {"error": {"message"}},
// vLLM's older {"message"}, or {"error": "…"}; otherwise the start of the body.
func errorMessage(data []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(data, &v) == nil {
		var body serve.ErrorBody
		var s string
		switch {
		case json.Unmarshal(v.Error, &body) == nil && body.Message != "":
			return body.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

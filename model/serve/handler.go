package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mempo/mempo/internal/httpserve"
	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// Handler serves POST /v1/completions and /v1/chat/completions, POST /tokenize and
// /detokenize (vLLM's, for a string prompt), GET /v1/models, GET /metrics (Prometheus;
// metrics.go) and GET /health. A refused
// request gets OpenAI's error body {"error": {"message", "type", "code"}} naming the
// limit and its flag: 413 for a body over MaxBodyBytes, 400 for a malformed request,
// a field out of range or a parameter the server does not implement, 404 for another model name, 408 for a body not received
// within the read timeout, and 503 with Retry-After when MaxInflight requests are
// already held (refused, not queued). /health and /v1/models are not counted.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, ModelList{Object: "list", Data: []ModelCard{{
			ID: s.m.Name, Object: "model", Created: s.now().Unix(), OwnedBy: "mempo", MaxModelLen: s.m.MaxPositions}}})
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

// refusal is a refused request: its status and the message its client gets.
type refusal struct {
	status int
	msg    string
}

func (e *refusal) Error() string { return e.msg }

func refuse(status int, format string, args ...any) *refusal {
	return &refusal{status: status, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) completions(w http.ResponseWriter, req *http.Request) {
	s.serveBody(w, req, func(body io.Reader) *refusal { return s.complete(w, req, body) })
}

// serveBody runs handle on req's body, under the body limit and the bodies' budget; a
// refusal gets its body finished (httpserve.FinishBody) and OpenAI's error layout.
func (s *Server) serveBody(w http.ResponseWriter, req *http.Request, handle func(body io.Reader) *refusal) {
	limited := http.MaxBytesReader(w, req.Body, s.cfg.MaxBodyBytes)
	body := s.bodies.Reader(limited)
	defer body.Release()
	e := handle(body)
	if e == nil {
		s.metrics.answered(req.URL.Path, http.StatusOK)
		return
	}
	s.metrics.answered(req.URL.Path, e.status)
	httpserve.FinishBody(w, req, limited, body.Counted(), s.cfg.MaxBodyBytes)
	s.log.Debug("rejected request", "status", e.status, "error", e.msg)
	typ := "BadRequestError"
	switch e.status {
	case http.StatusNotFound:
		typ = "NotFoundError"
	case http.StatusServiceUnavailable:
		typ = "ServiceUnavailableError"
	case http.StatusInternalServerError:
		typ = "InternalServerError"
	}
	writeJSON(w, e.status, ErrorResponse{Error: ErrorBody{Message: e.msg, Type: typ, Code: e.status}})
}

// bodyError is the refusal of a body that could not be read or decoded as a request of
// kind; want shows what one looks like.
func (s *Server) bodyError(w http.ResponseWriter, err error, kind, want string) *refusal {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, httpserve.ErrBusy):
		return s.busy(w)
	case errors.As(err, &tooBig):
		return refuse(http.StatusRequestEntityTooLarge, "body larger than %d bytes (--max-body-bytes)", s.cfg.MaxBodyBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refuse(http.StatusRequestTimeout, "body not received within %gs (--read-timeout)", s.cfg.ReadTimeoutS)
	}
	return refuse(http.StatusBadRequest, "body is not a %s request (%v); want %s", kind, err, want)
}

// checkModel refuses another model's name.
func (s *Server) checkModel(name string) *refusal {
	if name != "" && name != s.m.Name {
		return refuse(http.StatusNotFound, "the model `%s` does not exist; this server serves `%s`", name, s.m.Name)
	}
	return nil
}

// busy refuses a request that finds every slot held, or the bodies' budget spent.
func (s *Server) busy(w http.ResponseWriter) *refusal {
	w.Header().Set("Retry-After", "1")
	return refuse(http.StatusServiceUnavailable,
		"%d requests held, at most %d (--max-inflight); retry later", s.cfg.MaxInflight, s.cfg.MaxInflight)
}

// complete answers one completion request, or returns why it is refused.
func (s *Server) complete(w http.ResponseWriter, req *http.Request, body io.Reader) *refusal {
	if req.ContentLength > s.cfg.MaxBodyBytes {
		return refuse(http.StatusRequestEntityTooLarge, "body of %d bytes, larger than %d bytes (--max-body-bytes)",
			req.ContentLength, s.cfg.MaxBodyBytes)
	}
	// The body is read before a slot is taken, so that clients stalling mid-body hold
	// no slot, only the bytes they sent, within the bodies' budget.
	const want = `{"prompt": [token ids], "max_tokens": 16, ...}`
	var raw json.RawMessage
	if err := json.NewDecoder(body).Decode(&raw); err != nil {
		return s.bodyError(w, err, "completion", want)
	}
	if e := checkParams(raw, completionKeys); e != nil {
		return e
	}
	var in CompletionRequest
	if err := json.Unmarshal(raw, &in); err != nil {
		return s.bodyError(w, err, "completion", want)
	}
	resp, ok, e := s.generate(w, req, in, false)
	if ok {
		writeJSON(w, http.StatusOK, resp)
	}
	return e
}

// generate runs one completion request to its answer: n completions of each of its
// prompts; ok is false, with no refusal, when the client left.
func (s *Server) generate(w http.ResponseWriter, req *http.Request, in CompletionRequest, chat bool) (CompletionResponse, bool, *refusal) {
	if e := s.checkModel(in.Model); e != nil {
		return CompletionResponse{}, false, e
	}
	// Past the write timeout the answer can no longer be sent: the jobs are then
	// dropped, waiting or running.
	ctx, cancel := context.WithTimeout(req.Context(), httpserve.Seconds(s.cfg.WriteTimeoutS))
	defer cancel()
	jobs, e := s.jobs(ctx, in)
	if e != nil {
		return CompletionResponse{}, false, e
	}
	if len(jobs) > s.cfg.MaxInflight {
		return CompletionResponse{}, false, refuse(http.StatusBadRequest, "%d completions (n x prompts), at most %d (--max-inflight)", len(jobs), s.cfg.MaxInflight)
	}
	release, ok := s.take(len(jobs))
	if !ok {
		return CompletionResponse{}, false, s.busy(w)
	}
	defer release()
	for _, j := range jobs {
		s.queue <- j // room: the queue holds as many jobs as there are slots
	}
	if in.Stream {
		return CompletionResponse{}, false, s.stream(ctx, w, req, in, jobs, chat)
	}
	results := make([]qwen2.Completion, len(jobs))
	for i, j := range jobs {
		var r result
		select {
		case r = <-j.done:
		case <-ctx.Done():
			// The scheduler still sends to j.done (buffered) when it drops the job.
			if req.Context().Err() != nil {
				return CompletionResponse{}, false, nil // the client left
			}
			return CompletionResponse{}, false, refuse(http.StatusServiceUnavailable, "not generated within %gs (--write-timeout); retry later", s.cfg.WriteTimeoutS)
		}
		switch {
		case r.err == nil:
		case ctx.Err() != nil:
			return CompletionResponse{}, false, nil
		case errors.Is(r.err, errStopped):
			w.Header().Set("Retry-After", "1")
			return CompletionResponse{}, false, refuse(http.StatusServiceUnavailable, "the server is stopping; retry later")
		default:
			return CompletionResponse{}, false, refuse(http.StatusInternalServerError, "generate: %v", r.err)
		}
		results[i] = r.c
	}
	return s.response(in, jobs, results), true, nil
}

// take takes k slots, all or none; release gives them back.
func (s *Server) take(k int) (release func(), ok bool) {
	for i := range k {
		select {
		case s.slots <- struct{}{}:
		default:
			for range i {
				<-s.slots
			}
			return nil, false
		}
	}
	return func() {
		for range k {
			<-s.slots
		}
	}, true
}

// jobs checks a request against the model and the limits and turns it into its jobs:
// n per prompt, in prompt order. Completion i of a prompt samples with the request's
// seed plus i, so it is the completion an n = 1 request with that seed gives.
func (s *Server) jobs(ctx context.Context, in CompletionRequest) ([]*job, *refusal) {
	n := 1
	if in.N != nil {
		n = *in.N
	}
	switch {
	case n < 1:
		return nil, refuse(http.StatusBadRequest, "n %d: want 1 or more", n)
	case in.BestOf != nil && *in.BestOf != n:
		return nil, refuse(http.StatusBadRequest, "best_of %d is not supported; want it equal to n (%d), or leave it out", *in.BestOf, n)
	case in.Logprobs != nil && (*in.Logprobs < 0 || *in.Logprobs > MaxLogprobs):
		return nil, refuse(http.StatusBadRequest, "logprobs %d: want 0..%d", *in.Logprobs, MaxLogprobs)
	}
	prompts, e := s.prompts(in.Prompt)
	if e != nil {
		return nil, e
	}
	cfg := sample.Config{Temperature: 1, TopP: 1, MaxNewTokens: 16}
	if in.MaxTokens != nil {
		cfg.MaxNewTokens = *in.MaxTokens
	}
	if cfg.MaxNewTokens < 1 || cfg.MaxNewTokens > s.cfg.MaxTokens {
		return nil, refuse(http.StatusBadRequest, "max_tokens %d: want 1..%d (--max-tokens)", cfg.MaxNewTokens, s.cfg.MaxTokens)
	}
	if in.Temperature != nil {
		cfg.Temperature = *in.Temperature
	}
	if in.TopP != nil {
		cfg.TopP = *in.TopP
	}
	if in.TopK != nil && *in.TopK != -1 {
		cfg.TopK = *in.TopK
	}
	stops, e := s.stops(in.Stop)
	if e != nil {
		return nil, e
	}
	var texts []string
	cfg.Stop, texts = s.splitStops(stops)
	for _, id := range in.StopTokenIDs {
		if id < 0 || id >= int64(s.m.VocabSize) {
			return nil, refuse(http.StatusBadRequest, "stop_token_ids: id %d outside the vocabulary of %d", id, s.m.VocabSize)
		}
		cfg.Stop = append(cfg.Stop, []int64{id})
	}
	stopWhen := s.textStop(texts)
	if math.IsInf(cfg.Temperature, 0) {
		return nil, refuse(http.StatusBadRequest, "temperature %v: want a finite temperature >= 0", cfg.Temperature)
	}
	if err := cfg.Validate(); err != nil {
		return nil, refuse(http.StatusBadRequest, "%v", err)
	}
	seed := mrand.Uint64()
	if in.Seed != nil {
		var ok bool
		if seed, ok = parseSeed(string(*in.Seed)); !ok {
			return nil, refuse(http.StatusBadRequest, "seed %s: want an integer within 64 bits", *in.Seed)
		}
	}
	k := 0
	if in.Logprobs != nil {
		k = *in.Logprobs
	}
	var out []*job
	wake := make(chan struct{}, 1) // a streamed request's, shared by its jobs
	for _, p := range prompts {
		for i := range n {
			j := &job{ctx: ctx, seq: engine.Sequence{Request: qwen2.Request{Prompt: p, Seed: seed + uint64(i)}, Sampling: cfg, StopWhen: stopWhen,
				TopLogprobs: k, PromptLogprobs: in.Echo && in.Logprobs != nil},
				done: make(chan result, 1), arrived: s.now()}
			if in.Stream {
				j.feed = &feed{wake: wake}
				j.seq.OnToken = j.feed.add
			}
			out = append(out, j)
		}
	}
	return out, nil
}

// splitStops parts stop strings into those of one token, matched on it (as ids), and
// the others, matched on the text (textStop).
func (s *Server) splitStops(stops []string) (ids [][]int64, texts []string) {
	for _, st := range stops {
		if one := s.m.Tok.Encode(st); len(one) == 1 {
			ids = append(ids, qwen2.Tokens(one))
		} else {
			texts = append(texts, st)
		}
	}
	return ids, texts
}

// textStop is the test that ends a completion once its decoded text holds one of
// stops, the stop strings that are more than one token: vLLM matches stop strings on
// the text, so "born" stops "… was born …" whatever tokens spell it. A stop string
// of one token (the agent's tags) matches that token, as the in-process rollout's stops
// do, so a rollout through the server keeps the in-process rows. Only the last tokens
// are decoded each time: a stop string of b bytes spans at most b tokens (a few more
// for a multi-byte character cut at the window's start), and one that ended earlier
// would have stopped the completion then.
func (s *Server) textStop(stops []string) func([]int64) bool {
	if len(stops) == 0 {
		return nil
	}
	window := 0
	for _, st := range stops {
		window = max(window, len(st)+4)
	}
	return func(tokens []int64) bool {
		tail := tokens[max(0, len(tokens)-window):]
		ids := make([]int32, len(tail))
		for i, t := range tail {
			ids[i] = int32(t)
		}
		text := s.m.Tok.Decode(ids)
		for _, st := range stops {
			if strings.Contains(text, st) {
				return true
			}
		}
		return false
	}
}

// parseSeed reads a seed as int64 (reinterpreted as the uint64 stream, as clients
// bound by vLLM's signed range send it) or as uint64.
func parseSeed(s string) (uint64, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return uint64(n), true
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// prompts reads "prompt": a string or a list of token ids, or a list of either, each
// checked against the model.
func (s *Server) prompts(raw json.RawMessage) ([][]int64, *refusal) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, refuse(http.StatusBadRequest, `"prompt" is required: a string or a list of token ids, or a list of either`)
	}
	var one []int64
	var texts []string
	var lists [][]int64
	var prompts [][]int64
	switch {
	case raw[0] == '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, refuse(http.StatusBadRequest, `"prompt": %v`, err)
		}
		prompts = [][]int64{qwen2.Tokens(s.m.Tok.Encode(text))}
	case json.Unmarshal(raw, &one) == nil:
		prompts = [][]int64{one}
	case json.Unmarshal(raw, &texts) == nil:
		for _, t := range texts {
			prompts = append(prompts, qwen2.Tokens(s.m.Tok.Encode(t)))
		}
	case json.Unmarshal(raw, &lists) == nil:
		prompts = lists
	default:
		return nil, refuse(http.StatusBadRequest, `"prompt" is not a string or a list of token ids, or a list of either`)
	}
	if len(prompts) == 0 {
		return nil, refuse(http.StatusBadRequest, `"prompt" is an empty list`)
	}
	for i, ids := range prompts {
		if e := s.checkPrompt(ids); e != nil {
			if len(prompts) > 1 {
				e.msg = fmt.Sprintf("prompt %d: %s", i, e.msg)
			}
			return nil, e
		}
	}
	return prompts, nil
}

// checkPrompt checks one prompt's ids against the model.
func (s *Server) checkPrompt(ids []int64) *refusal {
	if len(ids) == 0 {
		return refuse(http.StatusBadRequest, `"prompt" is empty`)
	}
	if len(ids) >= s.m.MaxPositions {
		return refuse(http.StatusBadRequest, "prompt of %d tokens leaves no room for a completion within the model's %d positions (max_model_len)",
			len(ids), s.m.MaxPositions)
	}
	for i, id := range ids {
		if id < 0 || id >= int64(s.m.VocabSize) {
			return refuse(http.StatusBadRequest, "prompt token %d is id %d, outside the vocabulary of %d", i, id, s.m.VocabSize)
		}
	}
	return nil
}

// stops reads "stop": a string or a list of strings, within the limits.
func (s *Server) stops(raw json.RawMessage) ([]string, *refusal) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if raw[0] == '"' {
		list = make([]string, 1)
		if err := json.Unmarshal(raw, &list[0]); err != nil {
			return nil, refuse(http.StatusBadRequest, `"stop": %v`, err)
		}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, refuse(http.StatusBadRequest, `"stop" is not a string or a list of strings: %v`, err)
	}
	if len(list) > s.cfg.MaxStops {
		return nil, refuse(http.StatusBadRequest, "%d stop strings, at most %d (--max-stops)", len(list), s.cfg.MaxStops)
	}
	var out []string
	for i, st := range list {
		if len(st) > s.cfg.MaxStopBytes {
			return nil, refuse(http.StatusBadRequest, "stop string %d is %d bytes, at most %d (--max-stop-bytes)", i, len(st), s.cfg.MaxStopBytes)
		}
		if st != "" && len(s.m.Tok.Encode(st)) > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// response builds vLLM's answer: a choice per completion of the jobs, n a prompt in
// prompt order, and the usage, each prompt's tokens counted once.
func (s *Server) response(in CompletionRequest, jobs []*job, cs []qwen2.Completion) CompletionResponse {
	n := 1
	if in.N != nil {
		n = *in.N
	}
	r := CompletionResponse{ID: "cmpl-" + randomID(), Object: "text_completion", Created: s.now().Unix(), Model: s.m.Name}
	for i, c := range cs {
		choice := s.choice(in, jobs[i].seq.Prompt, c)
		choice.Index = i
		r.Choices = append(r.Choices, choice)
		r.Usage.CompletionTokens += len(c.Tokens)
		if i%n == 0 {
			r.Usage.PromptTokens += len(jobs[i].seq.Prompt)
		}
	}
	r.Usage.TotalTokens = r.Usage.PromptTokens + r.Usage.CompletionTokens
	return r
}

// choice is completion c of prompt in vLLM's layout. The text keeps the stop string
// (vLLM's include_stop_str_in_output): a rollout records the closing tag. Under echo
// the prompt's text comes first.
func (s *Server) choice(in CompletionRequest, prompt []int64, c qwen2.Completion) Choice {
	ids := make([]int32, len(c.Tokens))
	for i, t := range c.Tokens {
		ids[i] = int32(t)
	}
	text := strings.ToValidUTF8(s.m.Tok.Decode(ids), "\uFFFD")
	choice := Choice{Text: text, FinishReason: c.Finish, TokenIDs: ids}
	if c.Finish == qwen2.FinishStop {
		choice.StopReason, choice.Text = s.stopReason(in, c.Tokens, text)
	}
	if in.Echo {
		choice.Text = s.promptText(prompt) + choice.Text
	}
	if in.Logprobs != nil {
		choice.Logprobs = s.logprobs(in, prompt, c)
	}
	return choice
}

// promptText is a prompt's text as echo puts it before the completion's.
func (s *Server) promptText(prompt []int64) string {
	p := make([]int32, len(prompt))
	for i, t := range prompt {
		p[i] = int32(t)
	}
	return strings.ToValidUTF8(s.m.Tok.Decode(p), "\uFFFD")
}

// stopReason is what ended a stopped completion of tokens and text: a stop token id
// (vLLM reports it as the number), a one-token stop string, or a text stop, where the
// text then ends as vLLM's does, though the last token may run on (token_ids keep it
// whole).
func (s *Server) stopReason(in CompletionRequest, tokens []int64, text string) (any, string) {
	if last := tokens[len(tokens)-1]; slices.Contains(in.StopTokenIDs, last) {
		return last, text
	}
	stops, _ := s.stops(in.Stop)
	for _, st := range stops {
		one := s.m.Tok.Encode(st)
		if len(one) == 1 && sample.Stopped(tokens, [][]int64{qwen2.Tokens(one)}) {
			return st, text
		}
		if i := strings.Index(text, st); i >= 0 && len(one) != 1 {
			return st, text[:i+len(st)]
		}
	}
	return nil, text
}

func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // the status is sent; a write error here means the client left
}

package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// bytesTok is a tokenizer of one id per byte.
type bytesTok struct{}

func (bytesTok) Encode(s string) []int32 {
	ids := make([]int32, len(s))
	for i := range len(s) {
		ids[i] = int32(s[i])
	}
	return ids
}

func (bytesTok) Decode(ids []int32) string {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b)
}

// echo generates the prompt back, one token per step, stopping as Generate does; it
// records the size of each call and blocks on gate when set.
type echo struct {
	mu    sync.Mutex
	calls []int
	// gate, when set, holds every call until closed; entered hears of each call first.
	gate    chan struct{}
	entered chan struct{}
}

func (e *echo) Generate(reqs []qwen2.Request, cfg sample.Config) ([]qwen2.Completion, error) {
	if e.gate != nil {
		e.entered <- struct{}{}
		<-e.gate
	}
	e.mu.Lock()
	e.calls = append(e.calls, len(reqs))
	e.mu.Unlock()
	out := make([]qwen2.Completion, len(reqs))
	for i, r := range reqs {
		c := &out[i]
		for _, t := range r.Prompt {
			c.Tokens = append(c.Tokens, t)
			c.LogProbs = append(c.LogProbs, -float32(len(c.Tokens))/4)
			if sample.Stopped(c.Tokens, cfg.Stop) {
				c.Finish = qwen2.FinishStop
				break
			}
			if len(c.Tokens) == cfg.MaxNewTokens {
				c.Finish = qwen2.FinishLength
				break
			}
		}
		if c.Finish == "" {
			c.Finish = qwen2.FinishLength
		}
	}
	return out, nil
}

func newTestServer(t *testing.T, gen Generator, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(Model{Name: "tiny", Gen: gen, Tok: bytesTok{}, MaxPositions: 64, VocabSize: 256}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); cancel(); <-done })
	return s, ts
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("answer is not JSON: %v", err)
	}
	return resp.StatusCode, v
}

func TestCompletion(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	status, got := post(t, ts.URL, `{"model": "tiny", "prompt": [104, 105, 60, 47, 115, 62, 33], "max_tokens": 10,
		"stop": ["</s>"], "logprobs": 0, "seed": -3, "return_tokens_as_token_ids": true, "include_stop_str_in_output": true}`)
	if status != 200 {
		t.Fatalf("status %d: %v", status, got)
	}
	choice := got["choices"].([]any)[0].(map[string]any)
	want := map[string]any{
		"index": 0.0, "text": "hi</s>", "finish_reason": "stop", "stop_reason": "</s>",
		"token_ids": []any{104.0, 105.0, 60.0, 47.0, 115.0, 62.0},
		"logprobs": map[string]any{
			"tokens":         []any{"token_id:104", "token_id:105", "token_id:60", "token_id:47", "token_id:115", "token_id:62"},
			"token_logprobs": []any{-0.25, -0.5, -0.75, -1.0, -1.25, -1.5},
			"top_logprobs":   []any{nil, nil, nil, nil, nil, nil},
			"text_offset":    []any{0.0, 12.0, 24.0, 35.0, 46.0, 58.0},
		},
	}
	if diff := cmp.Diff(want, choice); diff != "" {
		t.Errorf("choice (-want +got):\n%s", diff)
	}
	if got["object"] != "text_completion" || got["model"] != "tiny" {
		t.Errorf("object %v, model %v; want text_completion, tiny", got["object"], got["model"])
	}
	if u := got["usage"].(map[string]any); u["prompt_tokens"] != 7.0 || u["completion_tokens"] != 6.0 {
		t.Errorf("usage %v, want 7 prompt and 6 completion tokens", u)
	}
	status, got = post(t, ts.URL, `{"prompt": "abcdef", "max_tokens": 3}`)
	choice = got["choices"].([]any)[0].(map[string]any)
	if status != 200 || choice["text"] != "abc" || choice["finish_reason"] != "length" || choice["logprobs"] != nil {
		t.Errorf("string prompt: status %d, choice %v; want text abc, finish length, no logprobs", status, choice)
	}
}

func TestRefusals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes, cfg.MaxTokens, cfg.MaxStops = 200, 32, 2
	_, ts := newTestServer(t, &echo{}, cfg)
	for _, c := range []struct {
		name, body, want string
		status           int
	}{
		{"too large", `{"prompt": [` + strings.Repeat("1,", 150) + `1]}`, "--max-body-bytes", 413},
		{"not JSON", `{"prompt": `, "not a completion request", 400},
		{"no prompt", `{"max_tokens": 3}`, `"prompt" is required`, 400},
		{"prompt too long", `{"prompt": [` + strings.Repeat("1,", 64) + `1]}`, "max_model_len", 400},
		{"id outside vocabulary", `{"prompt": [1, 256]}`, "outside the vocabulary", 400},
		{"max_tokens", `{"prompt": [1], "max_tokens": 33}`, "--max-tokens", 400},
		{"stops", `{"prompt": [1], "stop": ["a", "b", "c"]}`, "--max-stops", 400},
		{"top_p", `{"prompt": [1], "top_p": 1.5}`, "top_p", 400},
		{"n", `{"prompt": [1], "n": 2}`, "n 2", 400},
		{"stream", `{"prompt": [1], "stream": true}`, "stream", 400},
		{"seed", `{"prompt": [1], "seed": 1.5}`, "seed", 400},
		{"model", `{"model": "other", "prompt": [1]}`, "`other` does not exist", 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, got := post(t, ts.URL, c.body)
			e, _ := got["error"].(map[string]any)
			if msg, _ := e["message"].(string); status != c.status || !strings.Contains(msg, c.want) || e["code"] != float64(c.status) {
				t.Errorf("POST %s = %d %v, want %d with a message containing %q", c.body[:min(len(c.body), 40)], status, got, c.status, c.want)
			}
		})
	}
}

// TestBatching: requests waiting together share a generate call (up to MaxBatch),
// split by sampling settings, and one more than MaxInflight is refused with 503.
func TestBatching(t *testing.T) {
	gen := &echo{gate: make(chan struct{}), entered: make(chan struct{}, 8)}
	cfg := DefaultConfig()
	cfg.MaxBatch, cfg.BatchWindowMS, cfg.MaxInflight = 3, 0, 6
	s, ts := newTestServer(t, gen, cfg)
	var wg sync.WaitGroup
	// The first request holds the generator; five more queue behind it, in order.
	for i := range 6 {
		body := `{"prompt": [1, 2], "max_tokens": 2}`
		if i == 5 {
			body = `{"prompt": [1, 2], "max_tokens": 1}`
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, got := post(t, ts.URL, body); status != 200 {
				t.Errorf("status %d: %v", status, got)
			}
		}()
		if i == 0 {
			<-gen.entered
			continue
		}
		for len(s.queue) != i {
			runtime.Gosched()
		}
	}
	if status, got := post(t, ts.URL, `{"prompt": [1]}`); status != 503 {
		t.Errorf("request over --max-inflight = %d %v, want 503", status, got)
	}
	close(gen.gate)
	wg.Wait()
	if want := []int{1, 3, 1, 1}; !cmp.Equal(gen.calls, want) {
		t.Errorf("generate calls of %v requests, want %v (one, then three, then the rest split by max_tokens)", gen.calls, want)
	}
}

package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// spaceTok is bytesTok but a space and the byte after it are one token, 256 + the
// byte, so a word's tokens depend on what precedes it.
type spaceTok struct{}

func (spaceTok) Encode(s string) []int32 {
	var ids []int32
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' && i+1 < len(s) {
			ids = append(ids, 256+int32(s[i+1]))
			i++
			continue
		}
		ids = append(ids, int32(s[i]))
	}
	return ids
}

func (spaceTok) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		if id >= 256 {
			b = append(b, ' ', byte(id-256))
			continue
		}
		b = append(b, byte(id))
	}
	return string(b)
}

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

// echo is an engine that generates each prompt back, one token per step, stopping
// as engine.Engine does. It admits up to rows sequences (0: any), records the first
// prompt token of every row of every step and the IDs cancelled, and, when gate is
// set, holds each step until gate is closed, telling entered first.
type echo struct {
	rows    int
	gate    chan struct{}
	entered chan struct{}

	mu        sync.Mutex
	seqs      map[int]*echoSeq
	order     []int // IDs in admission order
	next      int
	steps     [][]int64
	cancelled []int
	added     []engine.Sequence // every sequence Add took, in order
}

type echoSeq struct {
	seq engine.Sequence
	out qwen2.Completion
}

func (e *echo) Fits(engine.Sequence) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rows == 0 || len(e.seqs) < e.rows
}

func (e *echo) Add(s engine.Sequence) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seqs == nil {
		e.seqs = map[int]*echoSeq{}
	}
	e.next++
	r := &echoSeq{seq: s}
	if s.PromptLogprobs {
		for i := range len(s.Prompt) - 1 {
			r.out.PromptLogProbs = append(r.out.PromptLogProbs, -float32(i+1)/8)
			r.out.PromptTop = append(r.out.PromptTop, echoTop(s.Prompt[i+1], -float64(i+1)/8, s.TopLogprobs))
		}
	}
	e.seqs[e.next] = r
	e.order = append(e.order, e.next)
	e.added = append(e.added, s)
	return e.next, nil
}

func (e *echo) Cancel(id int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.seqs, id)
	e.cancelled = append(e.cancelled, id)
}

func (e *echo) Step() ([]engine.Finished, error) {
	if e.gate != nil {
		select {
		case e.entered <- struct{}{}:
		default: // nobody is counting steps any more
		}
		<-e.gate
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var step []int64
	var done []engine.Finished
	var order []int
	for _, id := range e.order {
		r, ok := e.seqs[id]
		if !ok {
			continue
		}
		step = append(step, r.seq.Prompt[0])
		c, cfg := &r.out, r.seq.Sampling
		tok := r.seq.Prompt[len(c.Tokens)%len(r.seq.Prompt)]
		c.Tokens = append(c.Tokens, tok)
		c.LogProbs = append(c.LogProbs, -float32(len(c.Tokens))/4)
		var top []sample.Logprob
		if k := r.seq.TopLogprobs; k > 0 {
			top = echoTop(tok+1, float64(c.LogProbs[len(c.LogProbs)-1])+1, k)
			c.Top = append(c.Top, top)
		}
		if r.seq.OnToken != nil {
			r.seq.OnToken(engine.Token{ID: tok, LogProb: c.LogProbs[len(c.LogProbs)-1], Top: top})
		}
		switch {
		case sample.Stopped(c.Tokens, cfg.Stop), r.seq.StopWhen != nil && r.seq.StopWhen(c.Tokens):
			c.Finish = qwen2.FinishStop
		case len(c.Tokens) == cfg.MaxNewTokens:
			c.Finish = qwen2.FinishLength
		default:
			order = append(order, id)
			continue
		}
		done = append(done, engine.Finished{ID: id, Completion: *c})
		delete(e.seqs, id)
	}
	e.order = order
	e.steps = append(e.steps, step)
	return done, nil
}

// echoTop is k alternatives of the echo engine: id, id+1, … at log-probs lp, lp-1, ….
func echoTop(id int64, lp float64, k int) []sample.Logprob {
	var top []sample.Logprob
	for i := range k {
		top = append(top, sample.Logprob{ID: int(id) + i, Logprob: lp - float64(i)})
	}
	return top
}

func newTestServer(t *testing.T, eng Engine, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	return serveModel(t, Model{Name: "tiny", Engine: eng, Tok: bytesTok{}, MaxPositions: 64, VocabSize: 256}, cfg)
}

// serveModel runs a server of m under cfg until the test ends.
func serveModel(t *testing.T, m Model, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(m, cfg, nil)
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
	return postTo(t, url+"/v1/completions", body)
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

// TestStalledClientsHoldNoSlot: clients that send the headers and half of a
// completion body, then stall, more of them than there are slots, do not make
// well-formed requests answer 503 while they hold their connections.
func TestStalledClientsHoldNoSlot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInflight = 2
	s, ts := newTestServer(t, &echo{}, cfg)
	addr := strings.TrimPrefix(ts.URL, "http://")
	stalled, partial := 2*cfg.MaxInflight, `{"prompt": "ab`
	for range stalled {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
		if _, err := io.WriteString(c, head+partial); err != nil {
			t.Fatal(err)
		}
	}
	// Once as many stalled bodies as there are slots are read (the bodies' budget
	// counts them), a server that takes a slot before it reads the body's end holds
	// every slot.
	for deadline := time.Now().Add(time.Minute); s.bodies.Used() < int64(cfg.MaxInflight*len(partial)); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("stalled bodies not read within a minute: %d bytes read", s.bodies.Used())
		}
	}
	for i := range 3 {
		if status, got := post(t, ts.URL, `{"prompt": "abcdef", "max_tokens": 3}`); status != http.StatusOK {
			t.Errorf("request %d beside stalled bodies = %d %v, want 200", i, status, got)
		}
	}
}

// TestEarlyRefusalReadByWholeBodyClients: a client that writes its whole body before
// it reads (as Python's http.client does) reads the 400 the server answered at the
// body's first bad byte, rather than a broken pipe.
func TestEarlyRefusalReadByWholeBodyClients(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 32 << 20 // a body larger than loopback's socket buffers
	_, ts := newTestServer(t, &echo{}, cfg)
	body := `{"prompt": x` + strings.Repeat(" ", 15<<20) + `}`
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatalf("writing the whole body: %v (the server closed before the client could read its answer)", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "body is not a completion request") {
		t.Errorf("answer %d %.200q, want a 400 saying the body is not a completion request", resp.StatusCode, msg)
	}
}

// TestTextStops: a stop string of several tokens ends a completion where the decoded
// text holds it, whatever tokens spell it, and the text ends with it (the last token
// kept whole in token_ids); a one-token stop matches that token.
func TestTextStops(t *testing.T) {
	_, ts := serveModel(t, Model{Name: "tiny", Engine: &echo{}, Tok: spaceTok{}, MaxPositions: 64, VocabSize: 512}, DefaultConfig())
	// " born" in the prompt is the tokens " b", o, r, n; the stop "born" is b, o, r, n.
	status, got := post(t, ts.URL, `{"prompt": "he was born in", "max_tokens": 12, "stop": ["born"]}`)
	choice := got["choices"].([]any)[0].(map[string]any)
	if status != http.StatusOK || choice["text"] != "he was born" || choice["finish_reason"] != "stop" || choice["stop_reason"] != "born" {
		t.Errorf("stop born: %d %v, want the text to end at born, finished by it", status, choice)
	}
	status, got = post(t, ts.URL, `{"prompt": "abcabc", "max_tokens": 6, "stop": ["c"]}`)
	choice = got["choices"].([]any)[0].(map[string]any)
	if status != http.StatusOK || choice["text"] != "abc" || choice["stop_reason"] != "c" {
		t.Errorf("one-token stop c: %d %v, want abc", status, choice)
	}
}

// TestNAndPromptLists: n completions of each prompt of a list, in prompt order;
// completion i of a prompt is the n = 1 request's of seed + i, and each prompt's tokens
// count once in the usage.
func TestNAndPromptLists(t *testing.T) {
	e := &echo{}
	_, ts := newTestServer(t, e, DefaultConfig())
	status, got := post(t, ts.URL, `{"prompt": ["ab", "xyz"], "n": 2, "max_tokens": 2, "seed": 5}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, got)
	}
	var texts []any
	for i, c := range got["choices"].([]any) {
		c := c.(map[string]any)
		if c["index"] != float64(i) {
			t.Errorf("choice %d has index %v", i, c["index"])
		}
		texts = append(texts, c["text"])
	}
	if want := []any{"ab", "ab", "xy", "xy"}; !cmp.Equal(texts, want) {
		t.Errorf("texts %v, want %v", texts, want)
	}
	if u := got["usage"].(map[string]any); u["prompt_tokens"] != 5.0 || u["completion_tokens"] != 8.0 {
		t.Errorf("usage %v, want 5 prompt tokens (2 + 3, once each) and 8 completion tokens", u)
	}
	e.mu.Lock()
	seeds := map[string][]uint64{}
	for _, q := range e.added {
		seeds[string(rune(q.Prompt[0]))] = append(seeds[string(rune(q.Prompt[0]))], q.Seed)
	}
	e.mu.Unlock()
	if len(seeds) != 2 {
		t.Fatalf("the engine saw prompts %v, want a and x", seeds)
	}
	for p, got := range seeds {
		slices.Sort(got)
		if !cmp.Equal(got, []uint64{5, 6}) {
			t.Errorf("prompt %s sampled with seeds %v, want 5 and 6", p, got)
		}
	}
	status, got = post(t, ts.URL, `{"prompt": [[97], [98, 99]], "max_tokens": 1}`)
	if choices := got["choices"].([]any); status != http.StatusOK || len(choices) != 2 {
		t.Errorf("a list of token-id prompts: %d %v, want 2 choices", status, got)
	}
}

// TestUnsupportedParameters: a parameter the server does not implement is refused
// naming it, unless it is sent at the value where it changes nothing.
func TestUnsupportedParameters(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	for _, tt := range []struct{ extra, names string }{
		{`"frequency_penalty": 0.5`, "frequency_penalty"},
		{`"repetition_penalty": 1.2`, "repetition_penalty"},
		{`"logit_bias": {"5": 10}`, "logit_bias"},
		{`"guided_json": {"type": "object"}`, "guided_json"},
		{`"foo_bar": 1`, "foo_bar"},
	} {
		status, got := post(t, ts.URL, `{"prompt": "ab", "max_tokens": 2, `+tt.extra+`}`)
		msg, _ := got["error"].(map[string]any)["message"].(string)
		if status != http.StatusBadRequest || !strings.Contains(msg, tt.names) {
			t.Errorf("%s: %d %q, want 400 naming %s", tt.extra, status, msg, tt.names)
		}
	}
	neutral := `{"prompt": "ab", "max_tokens": 2, "frequency_penalty": 0, "presence_penalty": 0.0, "repetition_penalty": 1,
		"logit_bias": {}, "min_p": 0, "suffix": null, "user": "u"}`
	if status, got := post(t, ts.URL, neutral); status != http.StatusOK {
		t.Errorf("every unsupported parameter at its neutral value: %d %v, want 200", status, got)
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
		{"n", `{"prompt": [1], "n": 0}`, "n 0", 400},
		{"best_of", `{"prompt": [1], "n": 2, "best_of": 3}`, "best_of 3", 400},
		{"more completions than slots", `{"prompt": [[1], [2]], "n": 200}`, "--max-inflight", 400},
		{"logprobs", `{"prompt": [1], "logprobs": 21}`, "logprobs 21: want 0..20", 400},
		{"stop_token_ids", `{"prompt": [1], "stop_token_ids": [3, 256]}`, "stop_token_ids: id 256 outside", 400},
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

// TestContinuousBatching: requests join the running batch between steps, in
// arrival order, as rows finish (the engine here takes two rows), whatever their
// sampling settings, and one request more than MaxInflight is refused with 503.
func TestContinuousBatching(t *testing.T) {
	eng := &echo{rows: 2, gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	cfg := DefaultConfig()
	cfg.MaxInflight = 4
	s, ts := newTestServer(t, eng, cfg)
	// Prompts start with their request's letter; B samples at another temperature.
	bodies := []string{
		`{"prompt": "AAAA", "max_tokens": 4}`,
		`{"prompt": "BB", "max_tokens": 2, "temperature": 0.5, "top_k": 3}`,
		`{"prompt": "C", "max_tokens": 1}`,
		`{"prompt": "DD", "max_tokens": 2}`,
	}
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, got := post(t, ts.URL, body)
			if status != 200 {
				t.Errorf("%s: status %d: %v", body, status, got)
				return
			}
			choice := got["choices"].([]any)[0].(map[string]any)
			if want := strings.Repeat(string(rune('A'+i)), []int{4, 2, 1, 2}[i]); choice["text"] != want {
				t.Errorf("%s: text %v, want %s", body, choice["text"], want)
			}
		}()
		if i == 0 {
			<-eng.entered // A runs; the others queue behind its step
			continue
		}
		for len(s.queue) != i {
			runtime.Gosched()
		}
	}
	if status, got := post(t, ts.URL, `{"prompt": [1]}`); status != 503 {
		t.Errorf("request over --max-inflight = %d %v, want 503", status, got)
	}
	close(eng.gate)
	wg.Wait()
	eng.mu.Lock()
	defer eng.mu.Unlock()
	want := [][]int64{{'A'}, {'A', 'B'}, {'A', 'B'}, {'A', 'C'}, {'D'}, {'D'}}
	if diff := cmp.Diff(want, eng.steps); diff != "" {
		t.Errorf("rows of each step (-want +got):\n%s", diff)
	}
}

// TestClientLeft: a running request whose client leaves is cancelled in the engine
// at the next step and its row freed.
func TestClientLeft(t *testing.T) {
	eng := &echo{gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	s, ts := newTestServer(t, eng, DefaultConfig())
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt": "abc", "max_tokens": 3}`))
	failed := make(chan error)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	<-eng.entered
	cancel()
	if err := <-failed; err == nil {
		t.Errorf("request of a cancelled client succeeded")
	}
	for len(s.slots) != 0 { // the handler has returned: the job's context is done
		runtime.Gosched()
	}
	close(eng.gate)
	// The scheduler cancels the job after the step it is held in.
	for {
		eng.mu.Lock()
		n := len(eng.cancelled)
		eng.mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	if status, got := post(t, ts.URL, `{"prompt": "xy", "max_tokens": 2}`); status != 200 {
		t.Errorf("next request = %d %v, want 200", status, got)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if want := []int{1}; !cmp.Equal(eng.cancelled, want) {
		t.Errorf("cancelled IDs %v, want %v", eng.cancelled, want)
	}
}

// TestMetrics: GET /metrics, in Prometheus' text format, counts the requests by
// endpoint and code, the prompt and generated tokens, and observes each completion's
// time to first token and per-token time.
func TestMetrics(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	if status, got := post(t, ts.URL, `{"prompt": "abcd", "max_tokens": 3}`); status != http.StatusOK {
		t.Fatalf("completion: %d %v", status, got)
	}
	post(t, ts.URL, `{"prompt": "ab", "max_tokens": 3, "frequency_penalty": 1}`) // refused
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text := string(b)
	for _, want := range []string{
		`mempo_requests_total{code="200",endpoint="/v1/completions"} 1`,
		`mempo_requests_total{code="400",endpoint="/v1/completions"} 1`,
		"mempo_prompt_tokens_total 4",
		"mempo_generation_tokens_total 3",
		"mempo_time_to_first_token_seconds_count 1",
		"mempo_time_per_output_token_seconds_count 1",
		"mempo_num_requests_running 0",
		"mempo_num_requests_waiting 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, text)
		}
	}
}

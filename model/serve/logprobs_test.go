package serve

import (
	"bytes"
	stdcmp "cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
)

// tinyServer serves the tiny preset with random weights on the CPU, its engine
// decoding one row at a time: log-probs may differ in the last bits with the batch's
// shape, so only then do a request's choices, streamed or not, agree to the bit.
func tinyServer(t *testing.T) string {
	t.Helper()
	c, err := qwen2.Preset("tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := qwen2.New(c, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(7); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(m, engine.Config{MaxRows: 1, TokenBudget: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(); m.Drop() }) // after the server's cleanup: registered first
	_, ts := serveModel(t, Model{Name: "tiny", Engine: eng, Tok: bytesTok{}, MaxPositions: c.MaxPositions, VocabSize: c.VocabSize}, DefaultConfig())
	return ts.URL
}

// completeBody posts a completion body and decodes the answer.
func completeBody(t *testing.T, url, body string) CompletionResponse {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d, %v", body, resp.StatusCode, err)
	}
	return out
}

// TestTopLogprobsOfModel: on a real model, logprobs k lists the k most likely tokens
// at each position, most likely first, plus the sampled one when it is not among
// them, at exactly its token_logprobs value; asking for them changes no token or
// log-prob; echo puts the prompt's text and log-probs first (the first null).
func TestTopLogprobsOfModel(t *testing.T) {
	url := tinyServer(t)
	const req = `"prompt": "the cat sat", "max_tokens": 12, "temperature": 0.7, "seed": 5, "return_tokens_as_token_ids": true`
	plain := completeBody(t, url, `{`+req+`, "logprobs": 0}`).Choices[0]
	top := completeBody(t, url, `{`+req+`, "logprobs": 3}`).Choices[0]
	if !cmp.Equal(plain.TokenIDs, top.TokenIDs) || !cmp.Equal(plain.Logprobs.TokenLogprobs, top.Logprobs.TokenLogprobs) {
		t.Fatalf("logprobs 3 changed the completion: %v %v, want %v %v", top.TokenIDs, top.Logprobs.TokenLogprobs, plain.TokenIDs, plain.Logprobs.TokenLogprobs)
	}
	for i, m := range top.Logprobs.TopLogprobs {
		sampled := TokenAsID(top.TokenIDs[i])
		at := slices.IndexFunc(m, func(e TokenLogprob) bool { return e.Token == sampled })
		if n := len(m); at < 0 || n < 3 || n > 4 || n == 4 && at != 3 || m[at].Logprob != *top.Logprobs.TokenLogprobs[i] {
			t.Errorf("token %d (%s at %v): top_logprobs %v, want the 3 likeliest and the sampled one at its log-prob", i, sampled, *top.Logprobs.TokenLogprobs[i], m)
		}
		if !slices.IsSortedFunc(m[:3], func(a, b TokenLogprob) int { return stdcmp.Compare(b.Logprob, a.Logprob) }) {
			t.Errorf("token %d: top_logprobs %v not most likely first", i, m)
		}
	}
	if again := completeBody(t, url, `{`+req+`, "logprobs": 3}`).Choices[0]; !cmp.Equal(again.Logprobs, top.Logprobs) {
		t.Errorf("the same request gave other log-probs:\n%v", cmp.Diff(top.Logprobs, again.Logprobs))
	}

	echo := completeBody(t, url, `{`+req+`, "logprobs": 2, "echo": true}`).Choices[0]
	n := len("the cat sat")
	lp := echo.Logprobs
	if !strings.HasPrefix(echo.Text, "the cat sat") || len(lp.Tokens) != n+len(top.TokenIDs) || lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
		t.Fatalf("echo: text %q, %d tokens, first %v %v; want the prompt first, %d tokens, the first without log-probs", echo.Text, len(lp.Tokens), lp.TokenLogprobs[0], lp.TopLogprobs[0], n+len(top.TokenIDs))
	}
	if !cmp.Equal(lp.TokenLogprobs[n:], top.Logprobs.TokenLogprobs) || !cmp.Equal(echo.TokenIDs, top.TokenIDs) {
		t.Errorf("echo changed the completion's log-probs or tokens")
	}
	for i := 1; i < n; i++ {
		if v := *lp.TokenLogprobs[i]; v >= 0 || v < -20 || len(lp.TopLogprobs[i]) < 2 || lp.TopLogprobs[i][0].Logprob < v {
			t.Errorf("prompt token %d: log-prob %v, top %v; want a log-prob no more likely than the likeliest", i, v, lp.TopLogprobs[i])
		}
	}
}

// TestStopTokenIDs: generation stops at the first sampled id of stop_token_ids, which
// stop_reason reports as a number.
func TestStopTokenIDs(t *testing.T) {
	url := tinyServer(t)
	const req = `"prompt": [1, 2, 3], "max_tokens": 12, "temperature": 0, "logprobs": 0`
	whole := completeBody(t, url, `{`+req+`}`).Choices[0]
	stop := whole.TokenIDs[4]
	first := slices.Index(whole.TokenIDs, stop)
	body, _ := json.Marshal(map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 12, "temperature": 0, "stop_token_ids": []int32{stop, 255}})
	got := completeBody(t, url, string(body)).Choices[0]
	if !cmp.Equal(got.TokenIDs, whole.TokenIDs[:first+1]) || got.FinishReason != "stop" || got.StopReason != float64(stop) {
		t.Errorf("stop_token_ids [%d 255]: ids %v, finish %s, stop_reason %v; want %v, stop, %d", stop, got.TokenIDs, got.FinishReason, got.StopReason, whole.TokenIDs[:first+1], stop)
	}
}

// TestEchoLayout: echo with logprobs on the echo engine, whose values are known:
// the prompt's text and tokens first, its first token null, and each position's
// alternatives most likely first with the sampled or prompt token added when missing.
func TestEchoLayout(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "abc", "max_tokens": 2, "echo": true, "logprobs": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw struct {
		Choices []struct {
			Text     string          `json:"text"`
			Logprobs json.RawMessage `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	want := `{"tokens":["a","b","c","a","b"],"token_logprobs":[null,-0.125,-0.25,-0.25,-0.5],` +
		`"top_logprobs":[null,{"b":-0.125},{"c":-0.25},{"b":0.75,"a":-0.25},{"c":0.5,"b":-0.5}],"text_offset":[0,1,2,3,4]}`
	var got bytes.Buffer
	json.Compact(&got, raw.Choices[0].Logprobs)
	if raw.Choices[0].Text != "abcab" || got.String() != want {
		t.Errorf("echo: text %q, logprobs\n%s\nwant abcab and\n%s", raw.Choices[0].Text, got.String(), want)
	}
}

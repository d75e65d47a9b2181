package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// events posts body to url and reads the server-sent events of its answer: each
// "data:" payload, in order.
func events(t *testing.T, url, body string) []string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q: want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, data)
		}
	}
	return out
}

// TestStream: "stream": true answers with server-sent events whose text, put
// together, is the unstreamed answer's, the last chunk carrying the finish and stop
// reasons, then [DONE]; the chat endpoint streams the role, then content deltas.
func TestStream(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	const req = `"prompt": "hello there", "max_tokens": 9, "stop": ["the"], "seed": 1`
	_, whole := post(t, ts.URL, `{`+req+`}`)
	want := whole["choices"].([]any)[0].(map[string]any)
	evs := events(t, ts.URL+"/v1/completions", `{`+req+`, "stream": true}`)
	if len(evs) < 3 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events %q: want several chunks, then [DONE]", evs)
	}
	var text strings.Builder
	var last ChunkChoice
	for _, ev := range evs[:len(evs)-1] {
		var c CompletionChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Object != "text_completion" || len(c.Choices) != 1 {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		text.WriteString(c.Choices[0].Text)
		last = c.Choices[0]
	}
	if text.String() != want["text"] || last.FinishReason == nil || *last.FinishReason != want["finish_reason"] ||
		last.StopReason != "the" {
		t.Errorf("streamed %q finished %v (stop %v), want %q finished %v by the", text.String(), last.FinishReason, last.StopReason,
			want["text"], want["finish_reason"])
	}

	evs = events(t, ts.URL+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": true}`)
	var content strings.Builder
	for i, ev := range evs[:len(evs)-1] {
		var c ChatChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("chat chunk %q: %v", ev, err)
		}
		if i == 0 && c.Choices[0].Delta.Role != "assistant" {
			t.Errorf("first chat chunk %q: want the assistant's role", ev)
		}
		content.WriteString(c.Choices[0].Delta.Content)
	}
	if got := content.String(); got != "<|im_" {
		t.Errorf("streamed chat content %q, want the first 5 bytes of the rendered prompt, echoed", got)
	}
}

// TestStreamChoicesAndLogprobs: on a real model, a streamed request of two prompts,
// n 2 and logprobs 2, with a stop string matched on the text, gives each choice's
// chunks under its index; put together they are the unstreamed answer's text,
// log-probs (alternatives included) and finish reasons. The chat endpoint streams
// the same way, each choice's role first.
func TestStreamChoicesAndLogprobs(t *testing.T) {
	url := tinyServer(t)
	const req = `"prompt": ["the cat", "a dog"], "n": 2, "max_tokens": 10, "seed": 9, "logprobs": 2, "stop": ["ab"]`
	whole := completeBody(t, url, `{`+req+`}`)
	_, got := joinChunks(t, events(t, url+"/v1/completions", `{`+req+`, "stream": true}`), len(whole.Choices))
	for i, w := range whole.Choices {
		w.TokenIDs = nil
		if diff := cmp.Diff(w, got[i]); diff != "" {
			t.Errorf("choice %d (-unstreamed +streamed):\n%s", i, diff)
		}
	}

	const chat = `"messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 6, "seed": 4, "logprobs": true, "top_logprobs": 2`
	status, unstreamed := postTo(t, url+"/v1/chat/completions", `{`+chat+`}`)
	if status != http.StatusOK {
		t.Fatalf("chat: %d %v", status, unstreamed)
	}
	contents, logprobs := make([]string, 2), make([][]any, 2)
	roles := 0
	evs := events(t, url+"/v1/chat/completions", `{`+chat+`, "stream": true}`)
	for _, ev := range evs[:len(evs)-1] {
		var c map[string]any
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		ch := c["choices"].([]any)[0].(map[string]any)
		i := int(ch["index"].(float64))
		d := ch["delta"].(map[string]any)
		if d["role"] == "assistant" {
			roles++
		}
		if s, ok := d["content"].(string); ok {
			contents[i] += s
		}
		if lp, ok := ch["logprobs"].(map[string]any); ok {
			logprobs[i] = append(logprobs[i], lp["content"].([]any)...)
		}
	}
	for i, ch := range unstreamed["choices"].([]any) {
		ch := ch.(map[string]any)
		want := ch["logprobs"].(map[string]any)["content"].([]any)
		if contents[i] != ch["message"].(map[string]any)["content"] || !cmp.Equal(logprobs[i], want) || len(want[0].(map[string]any)["top_logprobs"].([]any)) != 2 {
			t.Errorf("chat choice %d streamed %q with log-probs %v; want %v and %v", i, contents[i], logprobs[i], ch["message"], want)
		}
	}
	if roles != 2 {
		t.Errorf("%d chunks with the assistant's role, want one per choice", roles)
	}
}

// joinChunks puts the completion chunks of evs (a stream's events, [DONE] last)
// together per choice, n choices: their text and log-probs appended, the finish
// and stop reasons of the last. first is each choice's first chunk.
func joinChunks(t *testing.T, evs []string, n int) (first []ChunkChoice, got []Choice) {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events %q: want chunks, then [DONE]", evs)
	}
	first, got = make([]ChunkChoice, n), make([]Choice, n)
	seen := make([]bool, n)
	for i := range got {
		got[i] = Choice{Index: i, Logprobs: newLogprobs()}
	}
	for _, ev := range evs[:len(evs)-1] {
		var c CompletionChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil || len(c.Choices) != 1 || c.Choices[0].Index >= n {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		ch, g := c.Choices[0], &got[c.Choices[0].Index]
		if !seen[ch.Index] {
			first[ch.Index], seen[ch.Index] = ch, true
		}
		g.Text += ch.Text
		if ch.Logprobs != nil {
			g.Logprobs.Tokens = append(g.Logprobs.Tokens, ch.Logprobs.Tokens...)
			g.Logprobs.TokenLogprobs = append(g.Logprobs.TokenLogprobs, ch.Logprobs.TokenLogprobs...)
			g.Logprobs.TopLogprobs = append(g.Logprobs.TopLogprobs, ch.Logprobs.TopLogprobs...)
			g.Logprobs.TextOffset = append(g.Logprobs.TextOffset, ch.Logprobs.TextOffset...)
		}
		if ch.FinishReason != nil {
			g.FinishReason, g.StopReason = *ch.FinishReason, ch.StopReason
		}
	}
	return first, got
}

// TestStreamEcho: on a real model, a streamed echo request, of two prompts with n 2,
// sends each choice's prompt first, as vLLM does: the first chunk of a choice starts
// with its prompt's text and, with logprobs, its prompt tokens' log-probs (the first
// null) before the generated ones'; put together, each choice's chunks are the
// unstreamed echo answer's text, log-probs, alternatives, text offsets and finish and
// stop reasons. Without logprobs the text alone is streamed the same way.
func TestStreamEcho(t *testing.T) {
	url := tinyServer(t)
	prompts := []string{"the cat", "the cat", "a dog", "a dog"} // by choice: n 2 per prompt, in prompt order
	for _, req := range []string{
		`"prompt": ["the cat", "a dog"], "n": 2, "max_tokens": 8, "seed": 5, "echo": true, "logprobs": 2`,
		`"prompt": ["the cat", "a dog"], "n": 2, "max_tokens": 10, "seed": 9, "echo": true, "logprobs": 0, "stop": ["ab"]`,
		`"prompt": ["the cat", "a dog"], "n": 2, "max_tokens": 8, "seed": 5, "echo": true, "stop": ["ab"]`,
	} {
		whole := completeBody(t, url, `{`+req+`}`)
		first, got := joinChunks(t, events(t, url+"/v1/completions", `{`+req+`, "stream": true}`), len(whole.Choices))
		logprobs := strings.Contains(req, "logprobs")
		for i, w := range whole.Choices {
			w.TokenIDs = nil
			if !logprobs {
				got[i].Logprobs = nil
			}
			if diff := cmp.Diff(w, got[i]); diff != "" {
				t.Errorf("%s: choice %d (-unstreamed +streamed):\n%s", req, i, diff)
			}
			f := first[i]
			if !strings.HasPrefix(f.Text, prompts[i]) {
				t.Errorf("%s: choice %d's first chunk %q: want the prompt %q first", req, i, f.Text, prompts[i])
			}
			if !logprobs {
				continue
			}
			// bytesTok: a token per byte. With a text stop the first generated token is
			// held for the next chunk (a stop may cut its text).
			if f.Logprobs == nil || len(f.Logprobs.Tokens) < len(prompts[i]) ||
				strings.Join(f.Logprobs.Tokens[:len(prompts[i])], "") != prompts[i] ||
				f.Logprobs.TokenLogprobs[0] != nil || f.Logprobs.TokenLogprobs[1] == nil {
				t.Errorf("%s: choice %d's first chunk %+v: want the prompt's %d tokens' log-probs first, the first null",
					req, i, f.Logprobs, len(prompts[i]))
			}
		}
	}
}

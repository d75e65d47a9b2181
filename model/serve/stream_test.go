package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
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

package serve

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/chat"
)

// TestChatCompletions: /v1/chat/completions renders the messages with the model's chat
// template (ChatML without one) and the assistant's header, generates as
// /v1/completions does, and answers in the chat layout; what it cannot do is refused
// naming it.
func TestChatCompletions(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	status, got := postTo(t, ts.URL+"/v1/chat/completions",
		`{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "logprobs": true}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, got)
	}
	prompt := bpe.ChatML([]bpe.Message{{Role: "user", Content: "hi"}}, true)
	choice := got["choices"].([]any)[0].(map[string]any)
	if got["object"] != "chat.completion" || !cmp.Equal(choice["message"], map[string]any{"role": "assistant", "content": prompt[:4]}) {
		t.Errorf("object %v, message %v; want chat.completion and the assistant's %q", got["object"], choice["message"], prompt[:4])
	}
	if u := got["usage"].(map[string]any); u["prompt_tokens"] != float64(len(prompt)) {
		t.Errorf("usage %v, want %d prompt tokens (the ChatML rendering)", u, len(prompt))
	}
	content := choice["logprobs"].(map[string]any)["content"].([]any)
	if first := content[0].(map[string]any); len(content) != 4 || first["token"] != "<" || first["logprob"] != -0.25 {
		t.Errorf("logprobs.content %v, want 4 entries, the first < at -0.25", content)
	}

	for _, tt := range []struct{ body, names string }{
		{`{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}`, "top_logprobs 2 needs"},
		{`{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21}`, "top_logprobs 21"},
		{`{"messages": [{"role": "user", "content": "hi"}], "presence_penalty": 1}`, "presence_penalty"},
		{`{"messages": [{"role": "user", "content": "hi"}], "tools": []}`, "tools"},
		{`{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}`, "image_url"},
		{`{"messages": []}`, "messages"},
	} {
		status, got := postTo(t, ts.URL+"/v1/chat/completions", tt.body)
		msg, _ := got["error"].(map[string]any)["message"].(string)
		if status != http.StatusBadRequest || !strings.Contains(msg, tt.names) {
			t.Errorf("%s: %d %q, want 400 naming %s", tt.body, status, msg, tt.names)
		}
	}
}

// TestChatTemplate: a model's own chat template renders the messages, text parts
// joined.
func TestChatTemplate(t *testing.T) {
	tmpl, err := chat.Parse(`{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, ts := serveModel(t, Model{Name: "tiny", Engine: &echo{}, Tok: bytesTok{}, Chat: tmpl, MaxPositions: 64, VocabSize: 256}, DefaultConfig())
	status, got := postTo(t, ts.URL+"/v1/chat/completions",
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}], "max_tokens": 12}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, got)
	}
	msg := got["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if want := "[system]s[user]hi>"[:12]; msg["content"] != want {
		t.Errorf("content %q, want %q (the template's rendering, echoed)", msg["content"], want)
	}
}

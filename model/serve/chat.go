package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/mempo/mempo/model/bpe"
)

// ChatRequest is the subset of OpenAI's POST /v1/chat/completions body the server
// reads: the messages, rendered with the checkpoint's chat template (Model.Chat, else
// ChatML) and the assistant's header, then generated as /v1/completions generates a
// string prompt.
type ChatRequest struct {
	Model    string        `json:"model,omitempty"`
	Messages []ChatMessage `json:"messages"`
	// MaxTokens and MaxCompletionTokens (OpenAI's newer name) bound the answer; the
	// latter wins when both are set.
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	TopK                *int            `json:"top_k,omitempty"`
	Seed                *json.Number    `json:"seed,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"`
	// Logprobs asks for the sampled tokens' log-probs, and TopLogprobs (with it) for
	// the k most likely tokens at each position.
	Logprobs     bool    `json:"logprobs,omitempty"`
	TopLogprobs  *int    `json:"top_logprobs,omitempty"`
	StopTokenIDs []int64 `json:"stop_token_ids,omitempty"`
	N            *int    `json:"n,omitempty"`
	Stream       bool    `json:"stream,omitempty"`
	AsIDs        bool    `json:"return_tokens_as_token_ids,omitempty"`
	TokenIDs     *bool   `json:"return_token_ids,omitempty"`
	// The vLLM extras a client sends; this server already answers as they ask.
	IncludeStop       *bool `json:"include_stop_str_in_output,omitempty"`
	SkipSpecialTokens *bool `json:"skip_special_tokens,omitempty"`
}

// ChatMessage is one message: its content a string, or a list of text parts.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text is the message's content as one string: a string, or its text parts joined.
func (m ChatMessage) text() (string, error) {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("a content part of type %q: only text parts are supported", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// ChatResponse is OpenAI's (and vLLM's) /v1/chat/completions answer.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "chat.completion"
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
	// PromptTokenIDs are the rendered prompt's ids, as vLLM's return_token_ids gives them.
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitempty"`
}

// ChatChoice is one answer; TokenIDs are its generated ids, as on /v1/completions.
type ChatChoice struct {
	Index        int            `json:"index"`
	Message      ChatMessageOut `json:"message"`
	Logprobs     *ChatLogprobs  `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
	StopReason   any            `json:"stop_reason"`
	TokenIDs     []int32        `json:"token_ids,omitempty"`
}

// ChatMessageOut is the assistant's message.
type ChatMessageOut struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatLogprobs is the chat layout of the sampled tokens' log-probs.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
}

// ChatTokenLogprob is one sampled token's log-prob and the most likely tokens at its
// position (empty unless top_logprobs asked for them).
type ChatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []ChatTopLogprob `json:"top_logprobs"`
}

// ChatTopLogprob is one of the most likely tokens at a position.
type ChatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chat answers POST /v1/chat/completions.
func (s *Server) chat(w http.ResponseWriter, req *http.Request) {
	s.serveBody(w, req, func(body io.Reader) *refusal {
		const want = `{"messages": [{"role": "user", "content": "…"}], "max_tokens": 16, ...}`
		var raw json.RawMessage
		if err := json.NewDecoder(body).Decode(&raw); err != nil {
			return s.bodyError(w, err, "chat completion", want)
		}
		if e := checkParams(raw, chatKeys); e != nil {
			return e
		}
		var in ChatRequest
		if err := json.Unmarshal(raw, &in); err != nil {
			return s.bodyError(w, err, "chat completion", want)
		}
		c, e := s.completionOf(in)
		if e != nil {
			return e
		}
		resp, ok, e := s.generate(w, req, c, true)
		if ok {
			writeJSON(w, http.StatusOK, s.chatResponse(resp, c))
		}
		return e
	})
}

// completionOf is the completion request a chat request asks for: its messages
// rendered into a string prompt.
func (s *Server) completionOf(in ChatRequest) (CompletionRequest, *refusal) {
	if len(in.Messages) == 0 {
		return CompletionRequest{}, refuse(http.StatusBadRequest, `"messages" is empty`)
	}
	k := 0
	if in.TopLogprobs != nil {
		k = *in.TopLogprobs
	}
	switch {
	case k < 0 || k > MaxLogprobs:
		return CompletionRequest{}, refuse(http.StatusBadRequest, "top_logprobs %d: want 0..%d", k, MaxLogprobs)
	case k > 0 && !in.Logprobs:
		return CompletionRequest{}, refuse(http.StatusBadRequest, "top_logprobs %d needs \"logprobs\": true", k)
	}
	msgs := make([]bpe.Message, len(in.Messages))
	for i, m := range in.Messages {
		text, err := m.text()
		if err != nil {
			return CompletionRequest{}, refuse(http.StatusBadRequest, "message %d: %v", i, err)
		}
		msgs[i] = bpe.Message{Role: m.Role, Content: text}
	}
	prompt := bpe.ChatML(msgs, true)
	if s.m.Chat != nil {
		var err error
		if prompt, err = s.m.Chat.Render(msgs, true); err != nil {
			return CompletionRequest{}, refuse(http.StatusBadRequest, "messages: %v", err)
		}
	}
	p, _ := json.Marshal(prompt)
	c := CompletionRequest{Model: in.Model, Prompt: p, MaxTokens: in.MaxTokens, Temperature: in.Temperature, TopP: in.TopP,
		TopK: in.TopK, Seed: in.Seed, Stop: in.Stop, StopTokenIDs: in.StopTokenIDs, N: in.N, Stream: in.Stream, AsIDs: in.AsIDs}
	if in.MaxCompletionTokens != nil {
		c.MaxTokens = in.MaxCompletionTokens
	}
	if in.Logprobs {
		c.Logprobs = &k
	}
	return c, nil
}

// chatResponse is a completion's answer to request in, in the chat layout.
func (s *Server) chatResponse(r CompletionResponse, in CompletionRequest) ChatResponse {
	out := ChatResponse{ID: "chatcmpl-" + strings.TrimPrefix(r.ID, "cmpl-"), Object: "chat.completion", Created: r.Created,
		Model: r.Model, Usage: r.Usage}
	for _, c := range r.Choices {
		cc := ChatChoice{Index: c.Index, Message: ChatMessageOut{Role: "assistant", Content: c.Text},
			FinishReason: c.FinishReason, StopReason: c.StopReason, TokenIDs: c.TokenIDs}
		if c.Logprobs != nil {
			cc.Logprobs = chatLogprobs(c.Logprobs, *in.Logprobs)
		}
		out.Choices = append(out.Choices, cc)
	}
	return out
}

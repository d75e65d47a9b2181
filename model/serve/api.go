package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// MaxLogprobs is the most alternatives a request may ask for at each position
// (logprobs, top_logprobs): vLLM's default --max-logprobs.
const MaxLogprobs = 20

// CompletionRequest is the subset of OpenAI's POST /v1/completions body the server
// reads. Fields vLLM adds (return_token_ids, include_stop_str_in_output,
// skip_special_tokens, …) are accepted: this server always returns the token ids and
// keeps the stop text in the output, which is what they ask vLLM for. Any other
// parameter is refused naming it unless sent at its neutral value (params.go).
type CompletionRequest struct {
	Model string `json:"model,omitempty"`
	// Prompt is a list of token ids, or a string the checkpoint's tokenizer encodes.
	Prompt      json.RawMessage `json:"prompt"`
	MaxTokens   *int            `json:"max_tokens,omitempty"`
	Temperature *float64        `json:"temperature,omitempty"`
	TopP        *float64        `json:"top_p,omitempty"`
	// TopK 0 or -1 keeps every token (vLLM's convention is -1).
	TopK *int `json:"top_k,omitempty"`
	// Seed is the request's random stream. vLLM bounds it to a signed 64-bit integer,
	// so clients send a uint64 stream reinterpreted as int64; both forms are accepted.
	Seed *json.Number `json:"seed,omitempty"`
	// Stop is one string or a list of strings.
	Stop json.RawMessage `json:"stop,omitempty"`
	// Logprobs k, when present, asks for the sampled tokens' log-probs and the k most
	// likely tokens at each position (0..MaxLogprobs).
	Logprobs *int `json:"logprobs,omitempty"`
	// Echo puts the prompt before the completion: its text, and, with Logprobs, its
	// tokens' log-probs (the first null).
	Echo bool `json:"echo,omitempty"`
	// StopTokenIDs (vLLM's) ends a completion when one of these ids is sampled.
	StopTokenIDs []int64 `json:"stop_token_ids,omitempty"`
	N            *int    `json:"n,omitempty"`
	Stream       bool    `json:"stream,omitempty"`
	BestOf       *int    `json:"best_of,omitempty"`
	AsIDs        bool    `json:"return_tokens_as_token_ids,omitempty"`
	TokenIDs     *bool   `json:"return_token_ids,omitempty"`
	// The vLLM extras a rollout client sends; recorded only so they round-trip.
	IncludeStop       *bool `json:"include_stop_str_in_output,omitempty"`
	SkipSpecialTokens *bool `json:"skip_special_tokens,omitempty"`
}

// CompletionResponse is vLLM's /v1/completions answer.
type CompletionResponse struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"` // "text_completion"
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   Usage    `json:"usage"`
}

// Choice is one completion. TokenIDs is the field vLLM (return_token_ids) and SGLang
// fill with the generated ids; this server always fills it.
type Choice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *Logprobs `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
	// StopReason is the stop string or, as vLLM reports it, the stop token id that
	// ended the completion, or null.
	StopReason any     `json:"stop_reason"`
	TokenIDs   []int32 `json:"token_ids,omitempty"`
}

// Logprobs is the legacy completions log-prob layout: one entry per token (the
// prompt's first under echo, then the generated ones). TopLogprobs[i] is null
// unless the request asked for k > 0 alternatives.
type Logprobs struct {
	Tokens        []string      `json:"tokens"`
	TokenLogprobs []*float64    `json:"token_logprobs"`
	TopLogprobs   []TopLogprobs `json:"top_logprobs"`
	TextOffset    []int         `json:"text_offset"`
}

// TopLogprobs is one position's {token: log-prob} object, most likely first (the
// order is kept both ways); nil is null.
type TopLogprobs []TokenLogprob

// TokenLogprob is one entry of TopLogprobs.
type TokenLogprob struct {
	Token   string
	Logprob float64
}

// MarshalJSON writes the object in order.
func (t TopLogprobs) MarshalJSON() ([]byte, error) {
	if t == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range t {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.Token)
		v, err := json.Marshal(e.Logprob)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object, or null, keeping the order of its keys.
func (t *TopLogprobs) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		*t = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("top_logprobs entry %.40s: want an object of log-probs", data)
	}
	out := TopLogprobs{}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		var v float64
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("top_logprobs[%q]: %w", key, err)
		}
		out = append(out, TokenLogprob{Token: key.(string), Logprob: v})
	}
	*t = out
	return nil
}

// Usage counts the tokens of a request.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ModelList is GET /v1/models.
type ModelList struct {
	Object string      `json:"object"` // "list"
	Data   []ModelCard `json:"data"`
}

// ModelCard describes the served model; MaxModelLen is vLLM's name for the context size.
type ModelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"` // "model"
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

// ErrorResponse is OpenAI's error body, as vLLM sends it.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the message of a refused request; Code is its HTTP status.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// TokenAsID is how vLLM writes a token in logprobs.tokens under
// return_tokens_as_token_ids: "token_id:123".
func TokenAsID(id int32) string { return "token_id:" + strconv.Itoa(int(id)) }

// ParseTokenAsID reads TokenAsID's form back.
func ParseTokenAsID(s string) (int32, bool) {
	rest, ok := strings.CutPrefix(s, "token_id:")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 32)
	return int32(n), err == nil
}

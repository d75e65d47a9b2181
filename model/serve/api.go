package serve

import (
	"encoding/json"
	"strconv"
	"strings"
)

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
	// Logprobs, when present (any value >= 0), asks for the sampled tokens' log-probs.
	Logprobs *int  `json:"logprobs,omitempty"`
	N        *int  `json:"n,omitempty"`
	Stream   bool  `json:"stream,omitempty"`
	Echo     bool  `json:"echo,omitempty"`
	BestOf   *int  `json:"best_of,omitempty"`
	AsIDs    bool  `json:"return_tokens_as_token_ids,omitempty"`
	TokenIDs *bool `json:"return_token_ids,omitempty"`
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
	// StopReason is the stop string that ended the completion, or null.
	StopReason *string `json:"stop_reason"`
	TokenIDs   []int32 `json:"token_ids,omitempty"`
}

// Logprobs is the legacy completions log-prob layout: one entry per generated token.
// TopLogprobs is null: the server computes the sampled token's log-prob only.
type Logprobs struct {
	Tokens        []string          `json:"tokens"`
	TokenLogprobs []*float64        `json:"token_logprobs"`
	TopLogprobs   []json.RawMessage `json:"top_logprobs"`
	TextOffset    []int             `json:"text_offset"`
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

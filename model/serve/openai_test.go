package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mempo/mempo/model/bpe"
)

// TestOpenAIGoClient drives the server with OpenAI's official Go client: models,
// completions with n and a list of prompts, chat, a streaming chat, tokens and a
// refused parameter, each read through the client's own types.
func TestOpenAIGoClient(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	ctx := context.Background()

	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "tiny" {
		t.Fatalf("Models.List = %+v, %v; want tiny", models, err)
	}

	c, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: "tiny",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"abcd", "xyz"}},
		MaxTokens: openai.Int(3), N: openai.Int(2), Seed: openai.Int(7)})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, ch := range c.Choices {
		texts = append(texts, ch.Text)
	}
	if got := strings.Join(texts, ","); got != "abc,abc,xyz,xyz" || c.Usage.PromptTokens != 7 || c.Usage.CompletionTokens != 12 {
		t.Errorf("completions: texts %s, usage %+v; want abc,abc,xyz,xyz with 7 prompt and 12 completion tokens", got, c.Usage)
	}

	params := openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens: openai.Int(5), Seed: openai.Int(1), Logprobs: openai.Bool(true)}
	chat, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	prompt := bpe.ChatML([]bpe.Message{{Role: "user", Content: "hi"}}, true)
	if len(chat.Choices) != 1 || chat.Choices[0].Message.Content != prompt[:5] || string(chat.Choices[0].Message.Role) != "assistant" ||
		len(chat.Choices[0].Logprobs.Content) != 5 {
		t.Errorf("chat: %+v; want the assistant's %q with 5 log-probs", chat.Choices, prompt[:5])
	}

	params.Logprobs = openai.Bool(false)
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != prompt[:5] || acc.Choices[0].FinishReason != "length" {
		t.Errorf("streaming chat accumulated %+v; want %q finished by length", acc.Choices, prompt[:5])
	}

	_, err = client.Completions.New(ctx, openai.CompletionNewParams{Model: "tiny",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("ab")}, FrequencyPenalty: openai.Float(0.5)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(apiErr.Message+apiErr.RawJSON(), "frequency_penalty") {
		t.Errorf("frequency_penalty 0.5 = %v; want a 400 naming it", err)
	}
}

// TestOpenAIGoClientOptions drives the tiny model through OpenAI's Go client with
// each option the server implements beyond the basics: logprobs with alternatives
// and echo, stop_token_ids (an extra field), streams of several choices with
// log-probs on both endpoints, echo among them, read through the client's types, and /tokenize and
// /detokenize through its raw Post.
func TestOpenAIGoClientOptions(t *testing.T) {
	url := tinyServer(t)
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	ctx := context.Background()
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String("the cat")}

	params := openai.CompletionNewParams{Model: "tiny", Prompt: prompt, MaxTokens: openai.Int(6), Seed: openai.Int(3), Logprobs: openai.Int(2)}
	// As ids: the tiny vocabulary's ids past 255 all decode to U+FFFD under bytesTok.
	asIDs := option.WithJSONSet("return_tokens_as_token_ids", true)
	c, err := client.Completions.New(ctx, params, asIDs)
	if err != nil {
		t.Fatal(err)
	}
	lp := c.Choices[0].Logprobs
	for i, m := range lp.TopLogprobs {
		if len(m) < 2 || m[lp.Tokens[i]] != lp.TokenLogprobs[i] {
			t.Errorf("token %d %q at %v: top_logprobs %v, want 2 or 3 with the token at its log-prob", i, lp.Tokens[i], lp.TokenLogprobs[i], m)
		}
	}
	params.Echo = openai.Bool(true)
	e, err := client.Completions.New(ctx, params, asIDs)
	if err != nil {
		t.Fatal(err)
	}
	if e.Choices[0].Text != "the cat"+c.Choices[0].Text || len(e.Choices[0].Logprobs.Tokens) != len("the cat")+len(lp.Tokens) {
		t.Errorf("echo: %q with %d tokens, want the prompt before %q", e.Choices[0].Text, len(e.Choices[0].Logprobs.Tokens), c.Choices[0].Text)
	}

	// Greedy: the third token is sampled whatever the seed; stopping on its id ends there.
	greedy := openai.CompletionNewParams{Model: "tiny", Prompt: prompt, MaxTokens: openai.Int(8), Temperature: openai.Float(0)}
	g, err := client.Completions.New(ctx, greedy)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	if err := json.Unmarshal([]byte(g.Choices[0].JSON.ExtraFields["token_ids"].Raw()), &ids); err != nil || len(ids) < 3 {
		t.Fatalf("token_ids %s: %v", g.Choices[0].JSON.ExtraFields["token_ids"].Raw(), err)
	}
	s, err := client.Completions.New(ctx, greedy, option.WithJSONSet("stop_token_ids", []int32{ids[2]}))
	if err != nil {
		t.Fatal(err)
	}
	stopped := s.Choices[0]
	if stopped.FinishReason != "stop" || stopped.JSON.ExtraFields["stop_reason"].Raw() != fmt.Sprint(ids[2]) || len(stopped.Text) > len(g.Choices[0].Text) {
		t.Errorf("stop_token_ids [%d]: %q finished %s by %s; want stop by %d", ids[2], stopped.Text, stopped.FinishReason, stopped.JSON.ExtraFields["stop_reason"].Raw(), ids[2])
	}

	params = openai.CompletionNewParams{Model: "tiny", Prompt: prompt, MaxTokens: openai.Int(6), Seed: openai.Int(3), Logprobs: openai.Int(1), N: openai.Int(2)}
	whole, err := client.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	stream := client.Completions.NewStreaming(ctx, params)
	texts, tokens := make([]string, 2), make([][]string, 2)
	for stream.Next() {
		ch := stream.Current().Choices[0]
		texts[ch.Index] += ch.Text
		tokens[ch.Index] = append(tokens[ch.Index], ch.Logprobs.Tokens...)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for i, w := range whole.Choices {
		if texts[i] != w.Text || !slices.Equal(tokens[i], w.Logprobs.Tokens) {
			t.Errorf("streamed completion %d: %q %q, want %q %q", i, texts[i], tokens[i], w.Text, w.Logprobs.Tokens)
		}
	}

	// Echo streamed: each choice's prompt first, its tokens' log-probs the first null.
	params.Echo = openai.Bool(true)
	whole, err = client.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	stream = client.Completions.NewStreaming(ctx, params)
	texts, tokens = make([]string, 2), make([][]string, 2)
	values := make([][]float64, 2)
	for stream.Next() {
		ch := stream.Current().Choices[0]
		if texts[ch.Index] == "" && (!strings.HasPrefix(ch.Text, "the cat") || ch.Logprobs.TokenLogprobs[0] != 0) {
			t.Errorf("echoed stream %d's first chunk %q with log-probs %v: want the prompt first, its first token's null", ch.Index, ch.Text, ch.Logprobs.TokenLogprobs)
		}
		texts[ch.Index] += ch.Text
		tokens[ch.Index] = append(tokens[ch.Index], ch.Logprobs.Tokens...)
		values[ch.Index] = append(values[ch.Index], ch.Logprobs.TokenLogprobs...)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for i, w := range whole.Choices {
		if texts[i] != w.Text || !slices.Equal(tokens[i], w.Logprobs.Tokens) || !slices.Equal(values[i], w.Logprobs.TokenLogprobs) {
			t.Errorf("echoed streamed completion %d: %q %q %v, want %q %q %v", i, texts[i], tokens[i], values[i], w.Text, w.Logprobs.Tokens, w.Logprobs.TokenLogprobs)
		}
	}

	chatParams := openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens: openai.Int(5), Seed: openai.Int(1), N: openai.Int(2), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3)}
	chat, err := client.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	if top := chat.Choices[1].Logprobs.Content[0].TopLogprobs; len(top) != 3 || top[0].Logprob < top[2].Logprob {
		t.Errorf("chat top_logprobs %+v, want the 3 likeliest", top)
	}
	cs := client.Chat.Completions.NewStreaming(ctx, chatParams)
	contents, logprobs := make([]string, 2), make([][]openai.ChatCompletionTokenLogprob, 2)
	for cs.Next() {
		ch := cs.Current().Choices[0]
		contents[ch.Index] += ch.Delta.Content
		logprobs[ch.Index] = append(logprobs[ch.Index], ch.Logprobs.Content...)
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	for i, w := range chat.Choices {
		if contents[i] != w.Message.Content || len(logprobs[i]) != len(w.Logprobs.Content) || logprobs[i][0].TopLogprobs[0].Token != w.Logprobs.Content[0].TopLogprobs[0].Token {
			t.Errorf("streamed chat %d: %q with %d log-probs, want %q with %d", i, contents[i], len(logprobs[i]), w.Message.Content, len(w.Logprobs.Content))
		}
	}

	var tok TokenizeResponse
	if err := client.Post(ctx, "tokenize", map[string]any{"prompt": "the cat"}, &tok, option.WithBaseURL(url+"/")); err != nil || tok.Count != 7 {
		t.Fatalf("tokenize: %+v, %v", tok, err)
	}
	var detok DetokenizeResponse
	if err := client.Post(ctx, "detokenize", map[string]any{"tokens": tok.Tokens}, &detok, option.WithBaseURL(url+"/")); err != nil || detok.Prompt != "the cat" {
		t.Errorf("detokenize: %+v, %v; want the cat", detok, err)
	}
}

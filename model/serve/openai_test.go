package serve

import (
	"context"
	"errors"
	"net/http"
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

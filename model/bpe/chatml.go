package bpe

import "strings"

// ChatML markers, special tokens in Qwen's vocabulary and in every tokenizer Train makes.
const (
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
	EndOfText = "<|endoftext|>"
)

// Message is one turn of a chat.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatML renders messages in the ChatML format Qwen models are trained on:
// "<|im_start|>role\ncontent<|im_end|>\n" per message, then "<|im_start|>assistant\n" when
// generate is set, so the model continues as the assistant. Unlike Qwen's Jinja chat
// templates it adds no default system message and no tool or thinking scaffolding.
func ChatML(messages []Message, generate bool) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString(ImStart)
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString(ImEnd)
		b.WriteByte('\n')
	}
	if generate {
		b.WriteString(ImStart)
		b.WriteString("assistant\n")
	}
	return b.String()
}

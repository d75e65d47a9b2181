// Package chat renders chat messages into a prompt with a checkpoint's own Jinja chat
// template, the chat_template of its tokenizer_config.json, as transformers'
// apply_chat_template does: the same template variables (messages,
// add_generation_prompt, tools, the special tokens by name) and HF's Jinja settings
// (trim_blocks, lstrip_blocks), through github.com/ardanlabs/jinja. It is pure Go.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ardanlabs/jinja"

	"github.com/mempo/mempo/model/bpe"
)

// ErrNoTemplate marks a checkpoint whose tokenizer_config.json names no chat template.
var ErrNoTemplate = errors.New("no chat template")

// Template is a compiled chat template with the special tokens it may name.
type Template struct {
	// Source is the template's Jinja text as tokenizer_config.json holds it.
	Source string
	tmpl   *jinja.Template
	vars   map[string]any // bos_token, eos_token, … as transformers passes them
}

// Load reads the chat template of the checkpoint or tokenizer directory dir from its
// tokenizer_config.json. A directory without the file, or a file without a template,
// is ErrNoTemplate; a template that does not compile is an error naming the file.
func Load(dir string) (*Template, error) {
	path := filepath.Join(dir, bpe.ConfigFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoTemplate)
	}
	if err != nil {
		return nil, err
	}
	t, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// config is what Load reads of tokenizer_config.json. A token is a string or an added
// token object with its content; the template is a string or a list of named
// templates, of which transformers uses "default".
type config struct {
	ChatTemplate            json.RawMessage   `json:"chat_template"`
	BOS                     json.RawMessage   `json:"bos_token"`
	EOS                     json.RawMessage   `json:"eos_token"`
	Pad                     json.RawMessage   `json:"pad_token"`
	Unk                     json.RawMessage   `json:"unk_token"`
	AdditionalSpecialTokens []json.RawMessage `json:"additional_special_tokens"`
}

// ParseConfig compiles the chat template of a tokenizer_config.json's contents.
func ParseConfig(data []byte) (*Template, error) {
	var c config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	src, err := templateSource(c.ChatTemplate)
	if err != nil {
		return nil, err
	}
	special := map[string]any{}
	for name, raw := range map[string]json.RawMessage{"bos_token": c.BOS, "eos_token": c.EOS, "pad_token": c.Pad, "unk_token": c.Unk} {
		if tok, ok := tokenContent(raw); ok {
			special[name] = tok
		}
	}
	var extra []any
	for _, raw := range c.AdditionalSpecialTokens {
		if tok, ok := tokenContent(raw); ok {
			extra = append(extra, tok)
		}
	}
	if extra != nil {
		special["additional_special_tokens"] = extra
	}
	return Parse(src, special)
}

// Parse compiles src with the special tokens the template may name (bos_token,
// eos_token, …).
func Parse(src string, special map[string]any) (*Template, error) {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{Source: src, tmpl: tmpl, vars: special}, nil
}

// templateSource is the Jinja text of a chat_template value.
func templateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ErrNoTemplate
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return "", ErrNoTemplate
		}
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template: want a string or a list of {name, template}: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" && n.Template != "" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("chat_template: no template named \"default\" among %d: %w", len(named), ErrNoTemplate)
}

// tokenContent is a special token's text: a string, or an added token's content.
func tokenContent(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var t struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &t) == nil && t.Content != "" {
		return t.Content, true
	}
	return "", false
}

// Render renders messages, with the assistant's header after them when generate is
// set (add_generation_prompt), as apply_chat_template(messages, tokenize=False)
// renders them without tools or documents.
func (t *Template) Render(messages []bpe.Message, generate bool) (string, error) {
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data := map[string]any{"messages": msgs, "add_generation_prompt": generate, "tools": nil, "documents": nil}
	for k, v := range t.vars {
		data[k] = v
	}
	out, err := t.tmpl.Render(data)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// Prompt renders a first context: the system message (none when empty), the user
// message and the assistant's header, as the agent protocol's Chat renders it.
func (t *Template) Prompt(system, user string) (string, error) {
	var msgs []bpe.Message
	if system != "" {
		msgs = append(msgs, bpe.Message{Role: "system", Content: system})
	}
	return t.Render(append(msgs, bpe.Message{Role: "user", Content: user}), true)
}

// The values of a stage's --chat-template.
const (
	// FromCheckpoint renders prompts with the checkpoint's own template; the default.
	FromCheckpoint = "checkpoint"
	// FromProtocol renders them with the protocol description's chat glue.
	FromProtocol = "protocol"
)

// CheckMode accepts the --chat-template values and "" (FromCheckpoint).
func CheckMode(mode string) error {
	switch mode {
	case "", FromCheckpoint, FromProtocol:
		return nil
	}
	return fmt.Errorf("%q: want %s or %s", mode, FromCheckpoint, FromProtocol)
}

// ForCheckpoint is the template a stage renders the checkpoint dir's prompts with under
// mode: dir's own for FromCheckpoint (or ""), nil for FromProtocol. A checkpoint without
// a template is nil too, with a warning on log (slog's default when nil): the caller's
// chat glue renders then.
func ForCheckpoint(dir, mode string, log *slog.Logger) (*Template, error) {
	if err := CheckMode(mode); err != nil {
		return nil, fmt.Errorf("--chat-template %w", err)
	}
	if mode == FromProtocol {
		return nil, nil
	}
	t, err := Load(dir)
	if errors.Is(err, ErrNoTemplate) {
		if log == nil {
			log = slog.Default()
		}
		log.Warn("the checkpoint has no chat template; prompts are rendered with the protocol's chat glue (ChatML by default)",
			"checkpoint", dir, "file", bpe.ConfigFile)
		return nil, nil
	}
	return t, err
}

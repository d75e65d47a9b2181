package bpe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// The files of an HF tokenizer directory besides tokenizer.json (format.TokenizerFile,
// declared with the checkpoint's other files). Without tokenizer_config.json
// transformers knows no eos, pad or chat template: it reports eos_token_id None (or
// falls back to id 0) and apply_chat_template fails.
const (
	ConfigFile        = "tokenizer_config.json"
	SpecialTokensFile = "special_tokens_map.json"
)

// CompanionFiles are the files SaveHF writes beside tokenizer.json, in the order it
// writes them; a checkpoint copies them with its tokenizer.
var CompanionFiles = []string{ConfigFile, SpecialTokensFile}

// ChatTemplate is ChatML as the Jinja template transformers' apply_chat_template runs:
// it renders exactly what ChatML renders, so apply_chat_template of a prompt's system and
// user messages with add_generation_prompt gives the ids the agent protocol's default
// chat glue gives. Unlike Qwen's templates it adds no default system message.
const ChatTemplate = "{% for message in messages %}" +
	"{{ '" + ImStart + "' + message['role'] + '\\n' + message['content'] + '" + ImEnd + "' + '\\n' }}" +
	"{% endfor %}" +
	"{% if add_generation_prompt %}{{ '" + ImStart + "assistant\\n' }}{% endif %}"

// HFConfig is what tokenizer_config.json states beyond tokenizer.json. Tokens are named
// by their content and must be special added tokens of the tokenizer; "" writes null.
type HFConfig struct {
	// EOS ends a generation; it is the token config.json's eos_token_id names.
	EOS string
	// BOS is the token config.json's bos_token_id names. The tokenizer never adds it:
	// Qwen2's post-processor adds no tokens.
	BOS string
	// Pad fills batches; Qwen uses <|endoftext|>.
	Pad string
	// ModelMaxLength is the model's max_position_embeddings.
	ModelMaxLength int
	// ChatTemplate is the Jinja chat template; "" means ChatTemplate.
	ChatTemplate string
}

// DefaultHFConfig is the set of Qwen2.5's instruct tokenizers, which the project's
// checkpoints follow: eos <|im_end|>, pad <|endoftext|>, bos <|endoftext|> (as
// config.json's bos_token_id) and the ChatML template.
func DefaultHFConfig(modelMaxLength int) HFConfig {
	return HFConfig{EOS: ImEnd, BOS: EndOfText, Pad: EndOfText, ModelMaxLength: modelMaxLength, ChatTemplate: ChatTemplate}
}

// hfToken is an added token as tokenizer_config.json and special_tokens_map.json
// write it.
type hfToken struct {
	Content    string `json:"content"`
	LStrip     bool   `json:"lstrip"`
	Normalized bool   `json:"normalized"`
	RStrip     bool   `json:"rstrip"`
	SingleWord bool   `json:"single_word"`
	Special    *bool  `json:"special,omitempty"`
}

// hfConfigFile is tokenizer_config.json, fields in the order transformers writes them.
type hfConfigFile struct {
	AddPrefixSpace            bool               `json:"add_prefix_space"`
	AddedTokensDecoder        map[string]hfToken `json:"added_tokens_decoder"`
	AdditionalSpecialTokens   []string           `json:"additional_special_tokens"`
	BOSToken                  *string            `json:"bos_token"`
	ChatTemplate              string             `json:"chat_template"`
	CleanUpTokenizationSpaces bool               `json:"clean_up_tokenization_spaces"`
	EOSToken                  *string            `json:"eos_token"`
	Errors                    string             `json:"errors"`
	ModelMaxLength            int                `json:"model_max_length"`
	PadToken                  *string            `json:"pad_token"`
	SplitSpecialTokens        bool               `json:"split_special_tokens"`
	TokenizerClass            string             `json:"tokenizer_class"`
	UnkToken                  *string            `json:"unk_token"`
}

// specialTokensMap is special_tokens_map.json.
type specialTokensMap struct {
	AdditionalSpecialTokens []string `json:"additional_special_tokens"`
	BOSToken                *hfToken `json:"bos_token,omitempty"`
	EOSToken                *hfToken `json:"eos_token,omitempty"`
	PadToken                *hfToken `json:"pad_token,omitempty"`
}

// SaveHF writes the complete HF tokenizer set into dir: tokenizer.json (as Save),
// tokenizer_config.json and special_tokens_map.json, each atomically. transformers'
// AutoTokenizer loads dir as Qwen2TokenizerFast with cfg's eos, pad and chat template.
func (t *Tokenizer) SaveHF(dir string, cfg HFConfig) error {
	if err := t.Save(filepath.Join(dir, format.TokenizerFile)); err != nil {
		return err
	}
	return t.SaveHFConfig(dir, cfg)
}

// SaveHFConfig writes tokenizer_config.json and special_tokens_map.json into dir, for
// a dir whose tokenizer.json is t. A token of cfg that is not a special added token of
// t is an error naming it: the files would name a token the model never saw.
func (t *Tokenizer) SaveHFConfig(dir string, cfg HFConfig) error {
	conf, smap, err := t.hfFiles(cfg)
	if err != nil {
		return fmt.Errorf("bpe: save %s: %w", filepath.Join(dir, ConfigFile), err)
	}
	for _, f := range []struct {
		name string
		v    any
	}{{ConfigFile, conf}, {SpecialTokensFile, smap}} {
		data, err := marshalHF(f.v)
		if err != nil {
			return fmt.Errorf("bpe: save %s: %w", filepath.Join(dir, f.name), err)
		}
		if err := renameio.WriteFile(filepath.Join(dir, f.name), data); err != nil {
			return fmt.Errorf("bpe: save: %w", err)
		}
	}
	return nil
}

// hfFiles builds both companion files of cfg.
func (t *Tokenizer) hfFiles(cfg HFConfig) (*hfConfigFile, *specialTokensMap, error) {
	named := map[string]bool{}
	for _, c := range []struct{ field, token string }{{"eos", cfg.EOS}, {"bos", cfg.BOS}, {"pad", cfg.Pad}} {
		if c.token == "" {
			continue
		}
		if _, ok := t.Special(c.token); !ok {
			return nil, nil, fmt.Errorf("%s token %q: not a special token of the tokenizer: %w", c.field, c.token, ErrConfig)
		}
		named[c.token] = true
	}
	if cfg.ModelMaxLength < 1 {
		return nil, nil, fmt.Errorf("model_max_length %d: want >= 1: %w", cfg.ModelMaxLength, ErrConfig)
	}
	if cfg.ChatTemplate == "" {
		cfg.ChatTemplate = ChatTemplate
	}
	decoder := make(map[string]hfToken, len(t.added))
	for _, a := range t.added {
		special := a.Special
		decoder[fmt.Sprint(a.ID)] = hfToken{Content: a.Content, LStrip: a.LStrip, Normalized: a.Normalized,
			RStrip: a.RStrip, SingleWord: a.SingleWord, Special: &special}
	}
	additional := []string{}
	for _, s := range t.SpecialTokens() {
		if !named[s] {
			additional = append(additional, s)
		}
	}
	conf := &hfConfigFile{
		AddedTokensDecoder:      decoder,
		AdditionalSpecialTokens: additional,
		BOSToken:                nullable(cfg.BOS),
		ChatTemplate:            cfg.ChatTemplate,
		EOSToken:                nullable(cfg.EOS),
		Errors:                  "replace",
		ModelMaxLength:          cfg.ModelMaxLength,
		PadToken:                nullable(cfg.Pad),
		TokenizerClass:          "Qwen2Tokenizer",
	}
	smap := &specialTokensMap{AdditionalSpecialTokens: slices.Clone(additional),
		BOSToken: t.mapToken(cfg.BOS), EOSToken: t.mapToken(cfg.EOS), PadToken: t.mapToken(cfg.Pad)}
	return conf, smap, nil
}

// mapToken is special_tokens_map.json's entry for the added token with content s.
func (t *Tokenizer) mapToken(s string) *hfToken {
	for _, a := range t.added {
		if s != "" && a.Content == s {
			return &hfToken{Content: a.Content, LStrip: a.LStrip, Normalized: a.Normalized, RStrip: a.RStrip, SingleWord: a.SingleWord}
		}
	}
	return nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// marshalHF writes v as indented JSON with markers such as "<|im_end|>" unescaped.
func marshalHF(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

package bpe

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
)

func TestSaveHF(t *testing.T) {
	tok, err := Train(slices.Values([]string{"who founded the company; where", "<mem>x</mem> answer"}), TrainConfig{VocabSize: 400})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tok.SaveHF(dir, DefaultHFConfig(4096)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, format.TokenizerFile)); err != nil {
		t.Errorf("Load(%s) = %v, want the saved tokenizer", format.TokenizerFile, err)
	}

	var conf struct {
		AddedTokensDecoder map[string]struct {
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens_decoder"`
		Additional     []string `json:"additional_special_tokens"`
		BOS            *string  `json:"bos_token"`
		EOS            *string  `json:"eos_token"`
		Pad            *string  `json:"pad_token"`
		Unk            *string  `json:"unk_token"`
		ChatTemplate   string   `json:"chat_template"`
		ModelMaxLength int      `json:"model_max_length"`
		TokenizerClass string   `json:"tokenizer_class"`
	}
	readJSON(t, filepath.Join(dir, ConfigFile), &conf)
	for _, c := range []struct {
		field string
		got   *string
		want  string
	}{{"eos_token", conf.EOS, ImEnd}, {"bos_token", conf.BOS, EndOfText}, {"pad_token", conf.Pad, EndOfText}} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("%s %s = %v, want %q", ConfigFile, c.field, c.got, c.want)
		}
	}
	if conf.Unk != nil {
		t.Errorf("%s unk_token = %q, want null: byte-level BPE has no unknown token", ConfigFile, *conf.Unk)
	}
	if conf.ModelMaxLength != 4096 || conf.TokenizerClass != "Qwen2Tokenizer" || conf.ChatTemplate != ChatTemplate {
		t.Errorf("%s: model_max_length %d, tokenizer_class %q, chat_template %q; want 4096, Qwen2Tokenizer, ChatTemplate",
			ConfigFile, conf.ModelMaxLength, conf.TokenizerClass, conf.ChatTemplate)
	}
	// Every added token is in added_tokens_decoder under its own id, special only when
	// it is a control token <|…|>: the agent's tags survive skip_special_tokens.
	for i, s := range DefaultSpecial() {
		id, ok := tok.ID(s)
		if !ok || int(id) != i {
			t.Fatalf("ID(%q) = %d, %v; want %d, true", s, id, ok, i)
		}
		control := strings.HasPrefix(s, "<|")
		got, ok := conf.AddedTokensDecoder[strconv.Itoa(int(id))]
		if !ok || got.Content != s || got.Special != control {
			t.Errorf("%s added_tokens_decoder[%d] = %+v, want %q with special %v", ConfigFile, id, got, s, control)
		}
	}
	wantAdditional := []string{ImStart}
	if !slices.Equal(conf.Additional, wantAdditional) {
		t.Errorf("%s additional_special_tokens = %q, want %q", ConfigFile, conf.Additional, wantAdditional)
	}
	// The template renders ChatML's markers and generation prompt (the Jinja itself is
	// run against transformers by build/ecosystem/check_tokenizer.py).
	for _, want := range []string{ImStart, ImEnd, "add_generation_prompt", ImStart + "assistant\\n"} {
		if !strings.Contains(conf.ChatTemplate, want) {
			t.Errorf("chat_template %q lacks %q", conf.ChatTemplate, want)
		}
	}

	var smap struct {
		Additional []string `json:"additional_special_tokens"`
		EOS        struct {
			Content string `json:"content"`
		} `json:"eos_token"`
		Pad struct {
			Content string `json:"content"`
		} `json:"pad_token"`
	}
	readJSON(t, filepath.Join(dir, SpecialTokensFile), &smap)
	if smap.EOS.Content != ImEnd || smap.Pad.Content != EndOfText || !slices.Equal(smap.Additional, wantAdditional) {
		t.Errorf("%s = %+v, want eos %q, pad %q, additional %q", SpecialTokensFile, smap, ImEnd, EndOfText, wantAdditional)
	}

	// The same tokenizer and config give the same bytes.
	again := t.TempDir()
	if err := tok.SaveHF(again, DefaultHFConfig(4096)); err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{format.TokenizerFile}, CompanionFiles...) {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(again, name))
		if string(a) != string(b) {
			t.Errorf("%s differs between two saves of the same tokenizer", name)
		}
	}
}

func TestSaveHFConfigErrors(t *testing.T) {
	tok, err := Train(slices.Values([]string{"abc abc"}), TrainConfig{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  HFConfig
	}{
		{"eos not special", HFConfig{EOS: "abc", ModelMaxLength: 8}},
		{"pad unknown", HFConfig{EOS: ImEnd, Pad: "<pad>", ModelMaxLength: 8}},
		{"no max length", HFConfig{EOS: ImEnd}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tok.SaveHFConfig(dir, tt.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("SaveHFConfig(%+v) = %v, want %v", tt.cfg, err, ErrConfig)
			}
			if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err == nil {
				t.Errorf("SaveHFConfig(%+v) failed but wrote %s", tt.cfg, ConfigFile)
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}

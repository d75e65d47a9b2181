package qwen2

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadConfigQwen25 reads the published Qwen2.5-0.5B config.json (testdata copy).
// 494,032,768 parameters is the count the model card reports (0.49B).
func TestReadConfigQwen25(t *testing.T) {
	c, err := ReadConfig("testdata/qwen2.5-0.5b-config.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.NumParams(), int64(494032768); got != want {
		t.Errorf("NumParams() = %d, want %d", got, want)
	}
	if c.HeadDim() != 64 || c.TorchDType != "bfloat16" || !c.TieEmbedding || *c.EOSTokenID != 151643 {
		t.Errorf("config = %+v", c)
	}
	p, err := Preset("qwen2.5-0.5b-shape", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.NumParams() != c.NumParams() {
		t.Errorf("preset params = %d, want %d", p.NumParams(), c.NumParams())
	}
}

func TestPresetTiny(t *testing.T) {
	c, err := Preset("tiny", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.NumParams(); n < 1e6 || n > 5e6 {
		t.Errorf("tiny has %d parameters, want 1M-5M", n)
	}
	if _, err := Preset("huge", 0); !errors.Is(err, ErrConfig) {
		t.Errorf("Preset(huge) = %v, want ErrConfig", err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	base, err := Preset("tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := base.Encode()
	tests := []struct {
		name   string
		mutate func(m map[string]any)
		want   string
	}{
		{"unknown architecture", func(m map[string]any) { m["architectures"] = []string{"LlamaForCausalLM"} }, "unknown architecture"},
		{"no architectures", func(m map[string]any) { delete(m, "architectures") }, "unknown architecture"},
		{"heads", func(m map[string]any) { m["num_key_value_heads"] = 3 }, "not a multiple of num_key_value_heads"},
		{"dtype", func(m map[string]any) { m["torch_dtype"] = "int8" }, `torch_dtype "int8"`},
		{"rope scaling", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "yarn"} }, "rope_scaling"},
		{"sliding window", func(m map[string]any) { m["use_sliding_window"] = true }, "sliding-window"},
		{"not json", nil, "not a JSON object"},
	}
	for _, k := range required {
		tests = append(tests, struct {
			name   string
			mutate func(m map[string]any)
			want   string
		}{"missing " + k, func(m map[string]any) { delete(m, k) }, `field "` + k + `" is missing`})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte("[")
			if tt.mutate != nil {
				var m map[string]any
				json.Unmarshal(data, &m)
				tt.mutate(m)
				in, _ = json.Marshal(m)
			}
			_, err := ParseConfig(in)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseConfig() = %v, want ErrConfig containing %q", err, tt.want)
			}
		})
	}
}

func TestCheckVocab(t *testing.T) {
	c, _ := Preset("tiny", 100)
	if err := c.CheckVocab(100); err != nil {
		t.Errorf("CheckVocab(100) = %v, want nil", err)
	}
	if err := c.CheckVocab(101); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "vocab mismatch") {
		t.Errorf("CheckVocab(101) = %v, want vocab mismatch", err)
	}
}

func TestConfigEncodeRoundTrip(t *testing.T) {
	c, _ := Preset("tiny", 300)
	eos := 7
	c.EOSTokenID = &eos
	data, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(c)
	b, _ := json.Marshal(got)
	if string(a) != string(b) {
		t.Errorf("ParseConfig(Encode(c)) = %s, want %s", b, a)
	}
}

// TestTokenizerPad resolves tokenizer_config.json's pad_token to an id the ways HF
// tokenizer sets name it, and refuses one the tokenizer or the model lacks.
func TestTokenizerPad(t *testing.T) {
	const tokenizerJSON = `{"added_tokens": [{"id": 90, "content": "<|endoftext|>", "special": true}],
		"model": {"type": "BPE", "vocab": {"a": 3, "<pad>": 12, "<big>": 200}}}`
	decoder := `"added_tokens_decoder": {"90": {"content": "<|endoftext|>", "special": true}, "91": {"content": "<|im_end|>"}}`
	tests := []struct {
		name      string
		config    string // tokenizer_config.json; "" writes none
		tokenizer string // tokenizer.json; "" writes none
		want      int    // -1: no pad
		err       string
	}{
		{"added_tokens_decoder", `{"pad_token": "<|endoftext|>", ` + decoder + `}`, "", 90, ""},
		{"token object", `{"pad_token": {"content": "<|endoftext|>", "lstrip": false}, ` + decoder + `}`, "", 90, ""},
		{"tokenizer.json added token", `{"pad_token": "<|endoftext|>"}`, tokenizerJSON, 90, ""},
		{"tokenizer.json vocabulary", `{"pad_token": "<pad>"}`, tokenizerJSON, 12, ""},
		{"null pad", `{"pad_token": null, ` + decoder + `}`, tokenizerJSON, -1, ""},
		{"no pad key", `{"eos_token": "<|im_end|>", ` + decoder + `}`, tokenizerJSON, -1, ""},
		{"no tokenizer_config.json", "", tokenizerJSON, -1, ""},
		{"unknown token", `{"pad_token": "<nope>"}`, tokenizerJSON, 0, `pad_token "<nope>" is no token of the tokenizer`},
		{"unknown without tokenizer.json", `{"pad_token": "<nope>"}`, "", 0, `pad_token "<nope>" is no token of the tokenizer`},
		{"beyond vocab_size", `{"pad_token": "<big>"}`, tokenizerJSON, 0, "id 200, model vocab_size is 97"},
		{"not JSON", `{"pad_token": `, "", 0, tokenizerConfigFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range map[string]string{tokenizerConfigFile: tt.config, "tokenizer.json": tt.tokenizer} {
				if body == "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := TokenizerPad(dir, 97)
			if tt.err != "" {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), tokenizerConfigFile) {
					t.Errorf("TokenizerPad = %v, %v; want ErrConfig naming %s and %q", got, err, tokenizerConfigFile, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("TokenizerPad = %v", err)
			}
			switch {
			case tt.want < 0 && got != nil:
				t.Errorf("TokenizerPad = %d, want none", *got)
			case tt.want >= 0 && (got == nil || *got != tt.want):
				t.Errorf("TokenizerPad = %v, want %d", got, tt.want)
			}
		})
	}
}
